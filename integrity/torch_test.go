package integrity_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/integrity"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/torch"
)

const (
	tindex  = "pytorch_model.bin.index.json"
	tshard1 = "pytorch_model-00001-of-00002.bin"
	tshard2 = "pytorch_model-00002-of-00002.bin"
)

// torchSharded writes setTensors as a two-shard set of PyTorch weights
// (a in the first shard, b and c in the second) and returns its folder.
func torchSharded(t *testing.T) string {
	t.Helper()
	return ckpttest.Dir(t, ckpttest.Weights{PyTorch: true, Shards: 2, Tensors: ckpttest.Tensors(t, setTensors)})
}

// torchViews writes pytorch_model.bin with views: "w" alone in storage
// 0; "x" and its transpose "xt" in storage 1; "tied", a tie of "w"; "e",
// an empty tensor. It returns the path.
func torchViews(t *testing.T) string {
	t.Helper()
	views := []ckpttest.TorchTensor{
		{Name: "w", Storage: "0", Shape: []int64{4}, Stride: []int64{1}},
		{Name: "x", Storage: "1", Shape: []int64{2, 3}, Stride: []int64{3, 1}},
		{Name: "xt", Storage: "1", Shape: []int64{3, 2}, Stride: []int64{1, 3}},
		{Name: "tied", Storage: "0", Shape: []int64{4}, Stride: []int64{1}},
		{Name: "e", Storage: "2", Shape: []int64{0, 4}, Stride: []int64{4, 1}},
	}
	st := map[string]ckpttest.TorchStorage{
		"0": {DType: dtype.F32, Data: make([]byte, 16)},
		"1": {DType: dtype.F32, Data: []byte("abcdefghijklmnopqrstuvwx")},
		"2": {DType: dtype.F32},
	}
	for i := range st["0"].Data {
		st["0"].Data[i] = byte(i * 7)
	}
	p := filepath.Join(t.TempDir(), "pytorch_model.bin")
	if err := ckpttest.WriteTorch(p, views, st); err != nil {
		t.Fatal(err)
	}
	return p
}

// storageRanges returns, for each tensor of a PyTorch file whose view
// starts its storage, where the storage's record lies, and the names that
// view each storage.
func storageRanges(t *testing.T, path string) (map[string]integrity.Range, map[string][]string) {
	t.Helper()
	c, err := torch.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ranges, viewers := map[string]integrity.Range{}, map[string][]string{}
	names := c.Names()
	for a := range c.Aliases() {
		names = append(names, a)
	}
	for _, n := range names {
		tn, _ := c.Tensor(n)
		viewers[tn.Storage()] = append(viewers[tn.Storage()], n)
		if tn.StorageOffset() == 0 && tn.Contiguous() && tn.ByteLen() > 0 {
			r := integrity.Range{Begin: tn.Offset(), End: tn.Offset() + tn.ByteLen()}
			if old, ok := ranges[tn.Storage()]; !ok || r.End > old.End {
				ranges[tn.Storage()] = r
			}
		}
	}
	for k := range viewers {
		slices.Sort(viewers[k])
	}
	return ranges, viewers
}

// readsBack reports whether every tensor of the PyTorch file at path
// opens and reads as want.
func readsBack(path string, want map[string][]byte) bool {
	c, err := torch.Open(path)
	if err != nil {
		return false
	}
	defer c.Close()
	for n, tn := range c.Tensors() {
		b, err := tn.Bytes()
		if err != nil || string(b) != string(want[n]) {
			return false
		}
	}
	return c.Len() == len(want)
}

func contentsOf(t *testing.T, path string) map[string][]byte {
	t.Helper()
	c, err := torch.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	out := map[string][]byte{}
	for n, tn := range c.Tensors() {
		b, err := tn.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		out[n] = b
	}
	return out
}

// TestTorchFile: a sound PyTorch file, named directly, in its folder and
// through an fs.FS, verifies clean; its tensors count as verified by the
// archive's CRC-32, not by checksum; RequireChecksums finds none.
func TestTorchFile(t *testing.T) {
	p := torchViews(t)
	for _, loc := range []string{p, filepath.Dir(p)} {
		rep := verify(t, loc)
		wantOK(t, rep)
		if rep.Tensors != 4 || rep.ArchiveTensors != 4 || rep.ArchiveBytes == 0 || rep.VerifiedTensors != 0 || rep.UncheckedTensors != 0 ||
			len(rep.Files) != 1 || rep.Files[0].Kind != "pytorch" || rep.Files[0].Tensors != 4 || rep.Files[0].Name != "pytorch_model.bin" {
			t.Errorf("%s: report %+v %+v", loc, rep, rep.Files)
		}
		if s := rep.Summary(); !strings.Contains(s, "4 PyTorch tensors verified by the archive's CRC-32") {
			t.Errorf("summary %q", s)
		}
	}
	wantProblems(t, verify(t, p, integrity.RequireChecksums()), []integrity.Kind{integrity.NoChecksums},
		`pytorch_model.bin: a PyTorch checkpoint: no checksums for its 4 tensors (only its archive's CRC-32 per record)`)

	b, _ := os.ReadFile(p)
	fsys := fstest.MapFS{"m/pytorch_model.bin": &fstest.MapFile{Data: b, Mode: 0o644}}
	for _, l := range []string{"m", "m/pytorch_model.bin"} {
		wantOK(t, verify(t, l, integrity.WithFS(fsys)))
	}
	ranges, _ := storageRanges(t, p)
	fsys["m/pytorch_model.bin"].Data[ranges["1"].Begin+3] ^= 8
	rep := verify(t, "m", integrity.WithFS(fsys))
	if len(rep.Problems) != 2 || rep.Problems[0].Tensor != "x" || rep.Problems[1].Tensor != "xt" {
		t.Errorf("damaged through an fs.FS: %v", messages(rep))
	}
	// Files without ReadAt cannot be read from their end.
	rep = verify(t, "m", integrity.WithFS(plainFS{fsys}))
	if len(rep.Problems) != 1 || rep.Problems[0].Kind != integrity.IO {
		t.Errorf("without ReadAt: %v", messages(rep))
	}
}

// TestTorchDamage holds the problems of a damaged PyTorch file to their
// exact messages.
func TestTorchDamage(t *testing.T) {
	p := torchViews(t)
	ranges, _ := storageRanges(t, p)
	r := ranges["1"]
	flip(t, p, r.Begin+5)
	rep := verify(t, p)
	want := func(tensor, shared string) string {
		return `pytorch_model.bin: tensor "` + tensor + `": record archive/data/1, bytes ` + itoa(r.Begin) + ` to ` + itoa(r.End) +
			` (its storage, shared with "` + shared + `"): CRC-32 mismatch: the zip directory says `
	}
	if len(rep.Problems) != 2 || !strings.HasPrefix(rep.Problems[0].Message, want("x", "xt")) || !strings.HasPrefix(rep.Problems[1].Message, want("xt", "x")) {
		t.Fatalf("problems %v", messages(rep))
	}
	for _, pr := range rep.Problems {
		var re *torch.RecordError
		if pr.Kind != integrity.ChecksumMismatch || *pr.Range != r || !errors.Is(pr, safetensors.ErrChecksum) || !errors.As(pr, &re) || re.Record != "archive/data/1" {
			t.Errorf("problem %+v", pr)
		}
	}
	if rep.ArchiveTensors != 2 { // w (and its tie) and e
		t.Errorf("archive tensors %d", rep.ArchiveTensors)
	}

	// Cut: the zip directory at the end is gone.
	p = torchViews(t)
	truncate(t, p, 300)
	rep = verify(t, p)
	if len(rep.Problems) != 1 || rep.Problems[0].Kind != integrity.InvalidArchive ||
		!strings.HasPrefix(rep.Problems[0].Message, "pytorch_model.bin: invalid archive: not a readable zip archive") {
		t.Errorf("truncated: %v", messages(rep))
	}
	var te *torch.Error
	if !errors.As(rep.Problems[0], &te) {
		t.Errorf("truncated: %#v does not unwrap to a *torch.Error", rep.Problems[0].Err)
	}
}

// TestTorchCorruption flips one random bit of every byte of a PyTorch
// file and of a shard of a PyTorch set, in turn, and cuts them at random
// lengths:
// a flip inside a storage record is reported for every tensor that views
// it; any other change is reported, or leaves every tensor as it was
// (the bits no reader uses: time stamps, version fields); a cut file is
// always reported, naming the file. Nothing panics.
func TestTorchCorruption(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	type target struct {
		name, loc, file string // the file damaged, the location verified, the file as problems name it
	}
	single := torchViews(t)
	set := torchSharded(t)
	for _, tg := range []target{
		{single, single, "pytorch_model.bin"},
		{filepath.Join(set, tshard2), set, tshard2},
		{filepath.Join(set, tshard2), filepath.Join(set, tindex), tshard2},
	} {
		orig, err := os.ReadFile(tg.name)
		if err != nil {
			t.Fatal(err)
		}
		want := contentsOf(t, tg.name)
		ranges, viewers := storageRanges(t, tg.name)
		positions := rng.Perm(len(orig)) // every byte: local headers, records, data.pkl, the zip directory
		silent := 0
		for _, pos := range positions {
			b := slices.Clone(orig)
			b[pos] ^= 1 << rng.IntN(8)
			if err := os.WriteFile(tg.name, b, 0o644); err != nil {
				t.Fatal(err)
			}
			rep := verify(t, tg.loc)
			for key, r := range ranges {
				if int64(pos) < r.Begin || int64(pos) >= r.End {
					continue
				}
				var named []string
				for _, pr := range rep.Problems {
					if pr.Kind == integrity.ChecksumMismatch && pr.File == tg.file && pr.Range != nil && pr.Range.Begin <= r.Begin && pr.Range.End >= r.End {
						named = append(named, pr.Tensor)
					}
				}
				slices.Sort(named)
				if !slices.Equal(named, viewers[key]) {
					t.Errorf("%s: byte %d of storage %s flipped: tensors %v named, want %v: %v", tg.loc, pos, key, named, viewers[key], messages(rep))
				}
			}
			if rep.OK() {
				silent++
				if !readsBack(tg.name, want) {
					t.Errorf("%s: byte %d flipped: no problem, but the tensors read differently", tg.loc, pos)
				}
			}
			for _, pr := range rep.Problems {
				if !strings.HasPrefix(pr.Message, pr.File+": ") {
					t.Errorf("problem %q does not start with its file", pr.Message)
				}
			}
		}
		t.Logf("%s: %d of %d flips change nothing a reader uses", tg.loc, silent, len(positions))
		for range 40 {
			n := rng.IntN(len(orig))
			if err := os.WriteFile(tg.name, orig[:n], 0o644); err != nil {
				t.Fatal(err)
			}
			rep := verify(t, tg.loc)
			if !slices.ContainsFunc(rep.Problems, func(p *integrity.Problem) bool { return p.File == tg.file }) {
				t.Errorf("%s: cut at %d: %v", tg.loc, n, messages(rep))
			}
		}
		if err := os.WriteFile(tg.name, orig, 0o644); err != nil {
			t.Fatal(err)
		}
		wantOK(t, verify(t, tg.loc))
	}
}

// TestTorchStructure holds the structural checks of a PyTorch index to
// their exact messages, as TestStructure does for safetensors sets.
func TestTorchStructure(t *testing.T) {
	weightMap := map[string]string{"a": tshard1, "b": tshard2, "c": tshard2}
	writeIndex := func(t *testing.T, dir string, wm map[string]string) {
		t.Helper()
		if err := ckpttest.WriteIndex(filepath.Join(dir, tindex), wm, map[string]any{"total_size": 1}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name   string
		damage func(t *testing.T, dir string)
		kinds  []integrity.Kind
		lines  []string
	}{
		{"intact (total_size not checked)", func(t *testing.T, dir string) { writeIndex(t, dir, weightMap) }, nil, []string{}},
		{"a tensor the index names that no shard holds", func(t *testing.T, dir string) {
			writeIndex(t, dir, withEntry(weightMap, "x", tshard1))
		}, []integrity.Kind{integrity.TensorMissingFromShard}, []string{
			tindex + `: tensor "x": the index maps it to ` + tshard1 + `, which does not hold it; no shard of the index holds it`,
		}},
		{"the index names the wrong shard", func(t *testing.T, dir string) {
			writeIndex(t, dir, withEntry(weightMap, "b", tshard1))
		}, []integrity.Kind{integrity.TensorMissingFromShard}, []string{
			tindex + `: tensor "b": the index maps it to ` + tshard1 + `, which does not hold it; it is in ` + tshard2 + ` (the index names the wrong shard)`,
		}},
		{"a shard holding a tensor the index does not name", func(t *testing.T, dir string) {
			writeIndex(t, dir, withEntry(weightMap, "c", ""))
		}, []integrity.Kind{integrity.UnmappedTensor}, []string{
			tshard2 + `: tensor "c": held by the shard, but the index ` + tindex + ` does not name it`,
		}},
		{"two shards claiming one tensor", func(t *testing.T, dir string) {
			b, err := ckpttest.EncodeTorch(ckpttestTorch(t, "a:F32[4] b:F32[4]"))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, tshard1), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}, []integrity.Kind{integrity.DuplicateTensor}, []string{
			tshard1 + `: tensor "b": also held by ` + tshard2 + `, the shard the index ` + tindex + ` maps it to`,
		}},
		{"a missing shard", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, tshard2))
		}, []integrity.Kind{integrity.MissingShard}, []string{
			tindex + `: names shard ` + tshard2 + `, which is missing`,
		}},
		{"an index naming a shard by a path", func(t *testing.T, dir string) {
			writeIndex(t, dir, withEntry(weightMap, "a", "../"+tshard1))
		}, []integrity.Kind{integrity.InsecurePath}, []string{
			tindex + `: invalid index: tensor "a": shard "../` + tshard1 + `": the shard name is a path, not a bare file name`,
		}},
		{"an index that is not JSON", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, tindex), []byte("{"), 0o644)
		}, []integrity.Kind{integrity.InvalidIndex}, []string{
			tindex + `: invalid index: invalid JSON: EOF`,
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := torchSharded(t)
			c.damage(t, dir)
			wantProblems(t, verify(t, dir), c.kinds, c.lines...)
			wantProblems(t, verify(t, filepath.Join(dir, tindex)), c.kinds, c.lines...)
		})
	}
}

// ckpttestTorch returns the arguments of EncodeTorch for spec.
func ckpttestTorch(t *testing.T, spec string) ([]ckpttest.TorchTensor, map[string]ckpttest.TorchStorage, bool) {
	t.Helper()
	views, st, err := ckpttest.TorchOf(ckpttest.Tensors(t, spec))
	if err != nil {
		t.Fatal(err)
	}
	return views, st, false
}

// TestTorchLayouts: PyTorch weights of a variant, a diffusers pipeline
// whose components hold PyTorch weights, and a hub cache snapshot of a
// PyTorch set (the .bin blobs hashed by SHA-256) verify; Checksum skips
// PyTorch files, rewriting nothing.
func TestTorchLayouts(t *testing.T) {
	tensors := ckpttest.Tensors(t, setTensors)
	dir := ckpttest.Dir(t,
		ckpttest.Weights{PyTorch: true, Variant: "fp16", Shards: 2, Tensors: tensors},
		ckpttest.Weights{PyTorch: true, Tensors: tensors},
		ckpttest.Weights{Tensors: tensors})
	rep := verify(t, dir)
	wantOK(t, rep)
	if rep.ArchiveTensors != 6 || rep.UncheckedTensors != 3 || len(rep.Files) != 5 {
		t.Errorf("variant folder: %+v %+v", rep, rep.Files)
	}

	root := ckpttest.NewPipeline(t, ckpttest.Pipeline{Components: []ckpttest.Component{
		{Name: "unet", Weights: []ckpttest.Weights{{PyTorch: true, Prefix: ckpttest.DiffusersPrefix, Tensors: tensors}}},
		{Name: "text_encoder", Library: "transformers", Weights: []ckpttest.Weights{{PyTorch: true, Shards: 2, Tensors: tensors}}},
	}})
	rep = verify(t, root)
	wantOK(t, rep)
	if rep.ArchiveTensors != 6 {
		t.Errorf("pipeline: %+v", rep)
	}
	flip(t, filepath.Join(root, "unet", "diffusion_pytorch_model.bin"), 200)
	if rep = verify(t, root); rep.OK() {
		t.Error("pipeline: a damaged component verifies")
	}

	set := torchSharded(t)
	snap, blobs := hubSnapshot(t, set)
	rep = verify(t, snap, integrity.FollowSymlinks())
	wantOK(t, rep)
	if rep.Blobs != 3 || rep.ArchiveTensors != 3 {
		t.Errorf("hub: %+v", rep)
	}
	for _, f := range rep.Files {
		if f.Kind == "pytorch" && f.Blob != "sha256:"+filepath.Base(blobs[f.Name]) {
			t.Errorf("hub: %+v", f)
		}
	}
	// A flipped bit in a record of a blob: the blob's hash and the
	// record's CRC-32 (summed by the hashing pass) both say so, the
	// record naming its tensor.
	ranges, viewers := storageRanges(t, blobs[tshard1])
	for storage, r := range ranges {
		flip(t, blobs[tshard1], r.Begin+1)
		rep = verify(t, snap, integrity.FollowSymlinks())
		kinds := map[integrity.Kind]int{}
		for _, pr := range rep.Problems {
			kinds[pr.Kind]++
			if pr.Kind == integrity.ChecksumMismatch && (pr.Tensor != viewers[storage][0] || *pr.Range != r) {
				t.Errorf("hub, record of %v damaged: %+v", viewers[storage], pr)
			}
		}
		if len(rep.Problems) != 2 || kinds[integrity.BlobMismatch] != 1 || kinds[integrity.ChecksumMismatch] != 1 {
			t.Errorf("hub, record of %v damaged: %v", viewers[storage], messages(rep))
		}
		flip(t, blobs[tshard1], r.Begin+1)
		break
	}

	before := map[string][]byte{}
	for _, n := range []string{tshard1, tshard2, tindex} {
		before[n], _ = os.ReadFile(filepath.Join(set, n))
	}
	cr, err := integrity.Checksum(context.Background(), set)
	if err != nil {
		t.Fatal(err)
	}
	if len(cr.Written) != 0 || len(cr.Skipped) != 2 || cr.Skipped[0].File != tshard1 || !strings.HasPrefix(cr.Skipped[0].Reason, "a PyTorch checkpoint: safetensors checksums cannot be written") {
		t.Errorf("Checksum: %+v", cr)
	}
	for n, b := range before {
		if after, _ := os.ReadFile(filepath.Join(set, n)); string(after) != string(b) {
			t.Errorf("Checksum rewrote %s", n)
		}
	}
}

// TestTorchFixtures verifies the checkpoints PyTorch wrote (shared
// fixtures): the sound ones clean, the refused ones as InvalidArchive
// naming why.
func TestTorchFixtures(t *testing.T) {
	dir := filepath.Join("..", "..", "shared", "fixtures", "torch")
	if _, err := os.Stat(dir); err != nil {
		t.Skip("no shared fixtures:", err)
	}
	for _, n := range []string{"mlp_f32.bin", "dtypes.pt", "tied_bf16.pt", "train_state.pt", "sharded", "sharded/pytorch_model.bin.index.json"} {
		rep := verify(t, filepath.Join(dir, n))
		wantOK(t, rep)
		if rep.ArchiveTensors == 0 {
			t.Errorf("%s: %+v", n, rep)
		}
	}
	for n, msg := range map[string]string{"legacy.bin": "legacy format", "evil.pt": `global "posix system"`} {
		rep := verify(t, filepath.Join(dir, n))
		if len(rep.Problems) != 1 || rep.Problems[0].Kind != integrity.InvalidArchive || !strings.Contains(rep.Problems[0].Message, msg) {
			t.Errorf("%s: %v", n, messages(rep))
		}
	}
}
