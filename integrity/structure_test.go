package integrity_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/integrity"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/shard"
)

const (
	index  = "model.safetensors.index.json"
	shard1 = "model-00001-of-00002.safetensors"
	shard2 = "model-00002-of-00002.safetensors"
)

// setTensors is the two-shard set of the structural fixtures: a in the
// first shard, b and c in the second; 16+16+8 = 40 bytes of data.
const setTensors = "a:F32[4] b:F32[4] c:BF16[2,2]"

// sharded writes the two-shard set (without checksums, as
// transformers writes it) and returns its folder.
func sharded(t *testing.T) string {
	t.Helper()
	return ckpttest.Dir(t, ckpttest.Weights{Shards: 2, Tensors: ckpttest.Tensors(t, setTensors)})
}

// TestStructure holds every structural check to its exact message, on a
// folder and on its index named directly (the same lines: files are named
// relative to the folder of the index).
func TestStructure(t *testing.T) {
	weightMap := map[string]string{"a": shard1, "b": shard2, "c": shard2}
	writeIndex := func(t *testing.T, dir string, wm map[string]string, total any) {
		t.Helper()
		if err := ckpttest.WriteIndex(filepath.Join(dir, index), wm, map[string]any{"total_size": total}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name   string
		damage func(t *testing.T, dir string)
		kinds  []integrity.Kind
		lines  []string
	}{
		{"intact", func(*testing.T, string) {}, nil, []string{}},
		{"a tensor the index names that no shard holds", func(t *testing.T, dir string) {
			writeIndex(t, dir, withEntry(weightMap, "x", shard1), 40)
		}, []integrity.Kind{integrity.TensorMissingFromShard}, []string{
			`model.safetensors.index.json: tensor "x": the index maps it to model-00001-of-00002.safetensors, whose header does not have it; no shard of the index holds it`,
		}},
		{"the index names the wrong shard", func(t *testing.T, dir string) {
			writeIndex(t, dir, withEntry(weightMap, "b", shard1), 40)
		}, []integrity.Kind{integrity.TensorMissingFromShard}, []string{
			`model.safetensors.index.json: tensor "b": the index maps it to model-00001-of-00002.safetensors, whose header does not have it; it is in model-00002-of-00002.safetensors (the index names the wrong shard)`,
		}},
		{"a shard holding a tensor the index does not name", func(t *testing.T, dir string) {
			writeIndex(t, dir, withEntry(weightMap, "c", ""), 40)
		}, []integrity.Kind{integrity.UnmappedTensor, integrity.TotalSizeMismatch}, []string{
			`model-00002-of-00002.safetensors: tensor "c": held by the shard, but the index model.safetensors.index.json does not name it`,
			`model.safetensors.index.json: metadata.total_size is 40, but the tensors the index names hold 32 bytes`,
		}},
		{"two shards claiming one tensor", func(t *testing.T, dir string) {
			if err := ckpttest.WriteFile(filepath.Join(dir, shard2), ckpttest.Tensors(t, "a:F32[4] b:F32[4] c:BF16[2,2]"), nil); err != nil {
				t.Fatal(err)
			}
		}, []integrity.Kind{integrity.DuplicateTensor}, []string{
			`model-00002-of-00002.safetensors: tensor "a": also held by model-00001-of-00002.safetensors, the shard the index model.safetensors.index.json maps it to`,
		}},
		{"total_size against the tensors' bytes", func(t *testing.T, dir string) {
			writeIndex(t, dir, weightMap, 4096)
		}, []integrity.Kind{integrity.TotalSizeMismatch}, []string{
			`model.safetensors.index.json: metadata.total_size is 4096, but the tensors the index names hold 40 bytes`,
		}},
		{"a shard file that is missing", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, shard2)); err != nil {
				t.Fatal(err)
			}
		}, []integrity.Kind{integrity.MissingShard}, []string{
			`model.safetensors.index.json: names shard model-00002-of-00002.safetensors, which is missing`,
		}},
		{"a truncated shard", func(t *testing.T, dir string) {
			truncate(t, filepath.Join(dir, shard2), -3)
		}, []integrity.Kind{integrity.Truncated}, []string{
			`model-00002-of-00002.safetensors: tensor "c": truncated: the file ends at byte 149, inside the tensor's bytes 144 to 152 (the header needs 152 bytes)`,
		}},
		{"a shard cut before its last tensors", func(t *testing.T, dir string) {
			truncate(t, filepath.Join(dir, shard2), 133)
		}, []integrity.Kind{integrity.Truncated, integrity.Truncated}, []string{
			`model-00002-of-00002.safetensors: tensor "b": truncated: the file ends at byte 133, inside the tensor's bytes 128 to 144 (the header needs 152 bytes)`,
			`model-00002-of-00002.safetensors: tensor "c": truncated: the file ends at byte 133, before the tensor's bytes 144 to 152 (the header needs 152 bytes)`,
		}},
		{"a shard cut inside its header", func(t *testing.T, dir string) {
			truncate(t, filepath.Join(dir, shard2), 50)
		}, []integrity.Kind{integrity.Truncated}, []string{
			`model-00002-of-00002.safetensors: truncated: 50 bytes, but the header length field says the header alone ends at byte 128`,
		}},
		{"a shard cut inside its length field", func(t *testing.T, dir string) {
			truncate(t, filepath.Join(dir, shard2), 5)
		}, []integrity.Kind{integrity.Truncated}, []string{
			`model-00002-of-00002.safetensors: truncated: 5 bytes, shorter than the 8-byte header length`,
		}},
		{"trailing bytes", func(t *testing.T, dir string) {
			appendBytes(t, filepath.Join(dir, shard1), []byte("extra"))
		}, []integrity.Kind{integrity.TrailingBytes}, []string{
			`model-00001-of-00002.safetensors: 5 trailing bytes: the data end at byte 80, the file at 85`,
		}},
		{"a header that does not parse", func(t *testing.T, dir string) {
			flip(t, filepath.Join(dir, shard1), 8) // '{' -> 'z'
		}, []integrity.Kind{integrity.InvalidHeader}, []string{
			`model-00001-of-00002.safetensors: invalid header: unexpected character 'z' at byte 0`,
		}},
		{"a flipped bit in the header's padding", func(t *testing.T, dir string) {
			path := filepath.Join(dir, shard1)
			h, err := safetensors.ReadHeaderFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if raw, _ := os.ReadFile(path); raw[h.DataOffset-1] != ' ' {
				t.Fatalf("no padding: %q", raw[:h.DataOffset])
			}
			flip(t, path, h.DataOffset-1) // the last space of the padding: '!'
		}, []integrity.Kind{integrity.InvalidHeader}, []string{
			`model-00001-of-00002.safetensors: invalid header: trailing characters after the header object at byte 55`,
		}},
		{"an index that does not parse", func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, index), []byte(`{"weight_map": {"a": 1}}`), 0o644); err != nil {
				t.Fatal(err)
			}
		}, []integrity.Kind{integrity.InvalidIndex}, []string{
			`model.safetensors.index.json: invalid index: invalid_index: tensor "a": invalid weight_map: shard is the number 1, not a string`,
		}},
		{"an index naming a shard outside the folder", func(t *testing.T, dir string) {
			writeIndex(t, dir, withEntry(weightMap, "a", "../"+shard1), 40)
		}, []integrity.Kind{integrity.InsecurePath}, []string{
			`model.safetensors.index.json: invalid index: insecure_path: shard "../model-00001-of-00002.safetensors": tensor "a": shard name is a path, not a bare file name`,
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := sharded(t)
			c.damage(t, dir)
			for _, loc := range []string{dir, filepath.Join(dir, index)} {
				rep := verify(t, loc)
				wantProblems(t, rep, c.kinds, c.lines...)
				if !rep.OK() {
					err := rep.Err()
					if !hasKind(err, c.kinds[0]) || errors.Is(err, safetensors.ErrChecksum) {
						t.Errorf("Err() = %v: holds no %v problem, or matches ErrChecksum", err, c.kinds[0])
					}
					// The conditions shared with the loaders' packages.
					for k, cond := range map[integrity.Kind]error{integrity.InsecurePath: shard.ErrInsecurePath, integrity.MissingShard: shard.ErrMissingShard} {
						if hasKind(err, k) != errors.Is(err, cond) {
							t.Errorf("Err() = %v: errors.Is(%v) is %v", err, cond, errors.Is(err, cond))
						}
					}
				}
			}
		})
	}
}

// truncate cuts the file at path to size bytes (a negative size: that
// many bytes fewer).
func truncate(t *testing.T, path string, size int64) {
	t.Helper()
	if size < 0 {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		size += st.Size()
	}
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
}

func appendBytes(t *testing.T, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestChecksumMismatch: every damaged tensor is named, with its bytes and
// both CRCs, as a *safetensors.ChecksumError; the others verify.
func TestChecksumMismatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "model.safetensors")
	save(t, path, data(t, "a:F32[4] b:F32[8] c:BF16[4] d:F32[0]"), map[string]string{"format": "pt"})
	rep := verify(t, path)
	wantOK(t, rep)
	if rep.Tensors != 4 || rep.VerifiedTensors != 4 || rep.VerifiedBytes != 16+32+8 || rep.UncheckedTensors != 0 {
		t.Errorf("report %+v", rep)
	}
	ab, ae := tensorOffset(t, path, "a")
	bb, be := tensorOffset(t, path, "b")
	flip(t, path, ab+3)
	flip(t, path, be-1)
	rep = verify(t, path)
	h, err := safetensors.ReadHeaderFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sums, _ := h.Checksums()
	wantProblems(t, rep, []integrity.Kind{integrity.ChecksumMismatch, integrity.ChecksumMismatch},
		`model.safetensors: tensor "a": checksum mismatch in bytes `+itoa(ab)+` to `+itoa(ae)+`: the header says crc32c `+safetensors.FormatChecksum(sums["a"])+`, the data have `+crcOf(t, path, ab, ae),
		`model.safetensors: tensor "b": checksum mismatch in bytes `+itoa(bb)+` to `+itoa(be)+`: the header says crc32c `+safetensors.FormatChecksum(sums["b"])+`, the data have `+crcOf(t, path, bb, be),
	)
	for _, p := range rep.Problems {
		var ce *safetensors.ChecksumError
		if !errors.Is(p, safetensors.ErrChecksum) || !errors.As(p, &ce) || ce.Tensor != p.Tensor || ce.Begin != p.Range.Begin || ce.End != p.Range.End {
			t.Errorf("problem %v: not a ChecksumError of its tensor and range: %+v", p, ce)
		}
	}
	if rep.VerifiedTensors != 4 {
		t.Errorf("verified %d tensors, want 4", rep.VerifiedTensors)
	}
	if err := rep.Err(); !errors.Is(err, safetensors.ErrChecksum) || !hasKind(err, integrity.ChecksumMismatch) {
		t.Errorf("Err() = %v, want ErrChecksum", err)
	}
}

func itoa(n int64) string { return formatInt(n) }

// crcOf returns the CRC-32C of bytes b to e of the file, formatted.
func crcOf(t *testing.T, path string, b, e int64) string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return safetensors.FormatChecksum(safetensors.Checksum(raw[b:e]))
}

// TestLargeTensorPieces: a tensor checked in several pieces (each read in
// several parts) is verified from their combined CRCs; a flip in any piece
// is found.
func TestLargeTensorPieces(t *testing.T) {
	path := filepath.Join(t.TempDir(), "model.safetensors")
	big := make([]byte, 9<<20+12)
	for i := range big {
		big[i] = byte(i * 31 >> 3)
	}
	save(t, path, []safetensors.TensorData{
		{Name: "big", DType: dtype.U8, Shape: []int64{int64(len(big))}, Data: big},
		{Name: "small", DType: dtype.U8, Shape: []int64{3}, Data: []byte{1, 2, 3}},
	}, nil)
	pieces := []integrity.Option{integrity.WithPieces(4<<20, 1<<20), integrity.WithPieces(1<<20, 300<<10), integrity.WithPieces(3<<20+1, 1<<20)}
	for _, workers := range []int{1, 3} {
		wantOK(t, verify(t, path, integrity.WithWorkers(workers)))
		for _, p := range pieces {
			wantOK(t, verify(t, path, integrity.WithWorkers(workers), p))
		}
	}
	b, _ := tensorOffset(t, path, "big")
	for _, off := range []int64{0, 1<<20 - 1, 1 << 20, 4<<20 - 1, 4 << 20, 9<<20 + 11} {
		flip(t, path, b+off)
		for _, p := range pieces {
			rep := verify(t, path, integrity.WithWorkers(2), p)
			if len(rep.Problems) != 1 || rep.Problems[0].Tensor != "big" || rep.Problems[0].Kind != integrity.ChecksumMismatch {
				t.Errorf("flip at %d: %v", off, messages(rep))
			}
		}
		flip(t, path, b+off)
	}
}

// TestDamagedChecksums: a header whose checksums do not name every
// tensor, or whose value is malformed, is one problem naming the file.
func TestDamagedChecksums(t *testing.T) {
	dir := t.TempDir()
	tensors := ckpttest.Tensors(t, "a:F32[4] b:F32[4]")
	for _, c := range []struct {
		md   map[string]string
		line string
	}{
		{map[string]string{safetensors.ChecksumPrefix + "a": "00000000"},
			`model.safetensors: damaged checksums in the header: no checksum for "b"; no ckpt.header.crc32c`},
		{map[string]string{safetensors.ChecksumPrefix + "a": "00000000", safetensors.ChecksumPrefix + "b": "0000000G"},
			`model.safetensors: damaged checksums in the header: ckpt.crc32c.b: "0000000G" is not 8 lowercase hex digits; no ckpt.header.crc32c`},
		{map[string]string{safetensors.ChecksumPrefix + "a": "00000000", safetensors.ChecksumPrefix + "b": "00000000", safetensors.ChecksumPrefix + "x": "00000000"},
			`model.safetensors: damaged checksums in the header: ckpt.crc32c.x names no tensor of the file; no ckpt.header.crc32c`},
	} {
		path := filepath.Join(dir, "model.safetensors")
		if err := ckpttest.WriteFile(path, tensors, c.md); err != nil {
			t.Fatal(err)
		}
		rep := verify(t, path)
		wantProblems(t, rep, []integrity.Kind{integrity.DamagedChecksums}, c.line)
		if !errors.Is(rep.Problems[0], safetensors.ErrChecksum) {
			t.Errorf("%v does not match safetensors.ErrChecksum", rep.Problems[0])
		}
		if rep.UncheckedTensors != 2 {
			t.Errorf("unchecked %d, want 2", rep.UncheckedTensors)
		}
	}
}

// TestWithoutChecksums: a file without checksums has its structure
// checked and its tensors counted; RequireChecksums makes it a problem.
func TestWithoutChecksums(t *testing.T) {
	dir := sharded(t)
	rep := verify(t, dir)
	wantOK(t, rep)
	if rep.Tensors != 3 || rep.UncheckedTensors != 3 || rep.VerifiedTensors != 0 || len(rep.Files) != 3 {
		t.Errorf("report %+v", rep)
	}
	if got, want := rep.Summary(), "3 files, 3 tensors, 0 B verified by checksum (0 tensors), 3 tensors without checksums"; got != want {
		t.Errorf("summary %q, want %q", got, want)
	}
	rep = verify(t, dir, integrity.RequireChecksums())
	wantProblems(t, rep, []integrity.Kind{integrity.NoChecksums, integrity.NoChecksums},
		`model-00001-of-00002.safetensors: no checksums for its 1 tensor`,
		`model-00002-of-00002.safetensors: no checksums for its 2 tensors`)
}

// TestFolders: a folder is verified whole, every variant and layout; a
// pipeline, every component listed; what is not there is named.
func TestFolders(t *testing.T) {
	tensors := ckpttest.Tensors(t, "a:F32[4] b:BF16[4]")
	dir := ckpttest.Dir(t,
		ckpttest.Weights{Tensors: tensors},
		ckpttest.Weights{Variant: "fp16", Shards: 2, Tensors: tensors},
		ckpttest.Weights{Variant: "bf16", Shards: 2, Layout: ckpttest.Legacy, Tensors: tensors},
	)
	rep := verify(t, dir)
	wantOK(t, rep)
	if len(rep.Files) != 7 || rep.Tensors != 6 {
		t.Errorf("files %+v, %d tensors", rep.Files, rep.Tensors)
	}
	truncate(t, filepath.Join(dir, "model-00002-of-00002.bf16.safetensors"), -1)
	wantProblems(t, verify(t, dir), []integrity.Kind{integrity.Truncated},
		`model-00002-of-00002.bf16.safetensors: tensor "b": truncated: the file ends at byte 71, inside the tensor's bytes 64 to 72 (the header needs 72 bytes)`)

	// A shard no index names is verified on its own, with a note.
	if err := os.Remove(filepath.Join(dir, "model.safetensors.index.fp16.json")); err != nil {
		t.Fatal(err)
	}
	rep = verify(t, dir)
	if len(rep.Problems) != 1 || len(rep.Notes) != 2 ||
		rep.Notes[0] != "model.fp16-00001-of-00002.safetensors: named like a shard, but no index in its folder names it: verified as a file of its own" {
		t.Errorf("shards without their index: %v, notes %q", messages(rep), rep.Notes)
	}

	// A folder without weights.
	empty := t.TempDir()
	wantProblems(t, verify(t, empty), []integrity.Kind{integrity.NoWeights}, `.: no safetensors or PyTorch weights file or index to verify`)

	// A pipeline: components of every variant, checked; a missing one.
	root := ckpttest.NewPipeline(t, ckpttest.Pipeline{Components: []ckpttest.Component{
		{Name: "text_encoder", Library: "transformers", Weights: []ckpttest.Weights{{Tensors: tensors}}},
		{Name: "unet", Weights: []ckpttest.Weights{
			{Prefix: ckpttest.DiffusersPrefix, Shards: 2, Tensors: tensors},
			{Prefix: ckpttest.DiffusersPrefix, Variant: "fp16", Tensors: tensors},
		}},
		{Name: "tokenizer", Files: map[string]string{"vocab.json": "{}"}},
	}})
	rep = verify(t, root)
	wantOK(t, rep)
	if len(rep.Files) != 6 || rep.Tensors != 6 {
		t.Errorf("pipeline: files %+v, %d tensors", rep.Files, rep.Tensors)
	}
	flip(t, filepath.Join(root, "unet", "diffusion_pytorch_model.fp16.safetensors"), 8)
	if err := os.RemoveAll(filepath.Join(root, "text_encoder")); err != nil {
		t.Fatal(err)
	}
	wantProblems(t, verify(t, root), []integrity.Kind{integrity.MissingComponent, integrity.InvalidHeader},
		`text_encoder: listed in model_index.json but there is no such folder`,
		`unet/diffusion_pytorch_model.fp16.safetensors: invalid header: unexpected character 'z' at byte 0`)
	if err := os.WriteFile(filepath.Join(root, "model_index.json"), []byte("[1"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantProblems(t, verify(t, root), []integrity.Kind{integrity.InvalidModelIndex},
		`model_index.json: cannot list the components: model index invalid: unexpected end of JSON input`)
}

// TestPiecesAcrossTensors: pieces that cover several small tensors (and
// empty ones) give each its part; a flip in any tensor names that tensor
// alone, whatever the piece and read sizes.
func TestPiecesAcrossTensors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "model.safetensors")
	save(t, path, data(t, "a:F32[5] b:U8[3] e:F32[0] c:BF16[7] d:U8[1] f:F16[0] g:F32[9] h:U8[13]"), nil)
	h, err := safetensors.ReadHeaderFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sizes := [][2]int64{{1, 1}, {7, 3}, {16, 16}, {50, 7}, {1 << 20, 1 << 20}}
	for _, ps := range sizes {
		wantOK(t, verify(t, path, integrity.WithPieces(ps[0], ps[1])))
	}
	for _, ti := range h.Tensors {
		for _, off := range []int64{ti.Begin, ti.End - 1} {
			if ti.End == ti.Begin {
				continue
			}
			flip(t, path, h.DataOffset+off)
			for _, ps := range sizes {
				rep := verify(t, path, integrity.WithPieces(ps[0], ps[1]))
				if len(rep.Problems) != 1 || rep.Problems[0].Tensor != ti.Name || rep.VerifiedTensors != 8 {
					t.Errorf("flip in %s at %d, pieces %v: %v (%d verified)", ti.Name, off, ps, messages(rep), rep.VerifiedTensors)
				}
			}
			flip(t, path, h.DataOffset+off)
		}
	}
}

// TestTruncatedWithChecksums: the tensors a cut file still holds whole are
// verified; the cut ones are named as truncated, not as mismatches.
func TestTruncatedWithChecksums(t *testing.T) {
	path := filepath.Join(t.TempDir(), "model.safetensors")
	save(t, path, data(t, "a:U8[40] b:U8[40] c:U8[40]"), nil)
	b, e := tensorOffset(t, path, "b")
	truncate(t, path, b+5)
	for _, ps := range [][2]int64{{1 << 20, 1 << 20}, {16, 3}} {
		rep := verify(t, path, integrity.WithPieces(ps[0], ps[1]))
		wantProblems(t, rep, []integrity.Kind{integrity.Truncated, integrity.Truncated},
			fmt.Sprintf(`model.safetensors: tensor "b": truncated: the file ends at byte %d, inside the tensor's bytes %d to %d (the header needs %d bytes)`, b+5, b, e, e+40),
			fmt.Sprintf(`model.safetensors: tensor "c": truncated: the file ends at byte %d, before the tensor's bytes %d to %d (the header needs %d bytes)`, b+5, e, e+40, e+40))
		if rep.VerifiedTensors != 1 || rep.VerifiedBytes != 40 {
			t.Errorf("pieces %v: verified %d tensors, %d bytes; want a alone", ps, rep.VerifiedTensors, rep.VerifiedBytes)
		}
	}
}
