package convert_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/convert"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/s3test"
	"github.com/ckpt-go/ckpt/internal/testutil"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/shard"
)

// verified checks that the safetensors file b (named name, for messages)
// names a checksum for every tensor and that every tensor's bytes match
// it; it returns the checksums and the metadata.
func verified(t *testing.T, name string, b []byte) (map[string]uint32, map[string]string) {
	t.Helper()
	f, err := safetensors.OpenBytes(b)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	sums, err := f.Header().Checksums()
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if len(sums) != f.Len() || f.Len() == 0 {
		t.Fatalf("%s: %d checksums for %d tensors", name, len(sums), f.Len())
	}
	for tn, tt := range f.Tensors() {
		if err := tt.Verify(); err != nil {
			t.Errorf("%s: %s: %v", name, tn, err)
		}
	}
	return sums, f.Metadata()
}

// verifiedDir checks every safetensors file of dir (verified) and returns
// their checksums by tensor, and the metadata by file.
func verifiedDir(t *testing.T, dir string) (map[string]uint32, map[string]map[string]string) {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	sums, metas := map[string]uint32{}, map[string]map[string]string{}
	for _, e := range es {
		if !strings.HasSuffix(e.Name(), ".safetensors") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		s, m := verified(t, e.Name(), b)
		for k, v := range s {
			sums[k] = v
		}
		metas[e.Name()] = m
	}
	if len(metas) == 0 {
		t.Fatalf("%s: no safetensors files", dir)
	}
	return sums, metas
}

// floats returns a tensor of normal values of dtype dt.
func floats(rng *rand.Rand, name string, dt dtype.DType, shape ...int64) safetensors.TensorData {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	b, _ := dt.ByteLen(n)
	data := make([]byte, b)
	if _, err := dtype.EncodeFloat32(data, dt, x, dtype.Options{Saturate: true}); err != nil {
		panic(err)
	}
	return safetensors.TensorData{Name: name, DType: dt, Shape: shape, Data: data}
}

// smallModel is a few tensors of a transformers-style model: linear
// weights (quantized by FP8 targets), a norm and an integer tensor.
func smallModel() []safetensors.TensorData {
	rng := rand.New(rand.NewPCG(5, 6))
	pos := make([]byte, 16*8)
	for i := range 16 {
		pos[i*8] = byte(i)
	}
	return []safetensors.TensorData{
		floats(rng, "model.layers.0.mlp.up_proj.weight", dtype.F32, 64, 48),
		floats(rng, "model.layers.0.mlp.down_proj.weight", dtype.F32, 48, 64),
		floats(rng, "model.norm.weight", dtype.F32, 48),
		{Name: "model.position_ids", DType: dtype.I64, Shape: []int64{16}, Data: pos},
	}
}

// corrupt flips one bit in the middle of tensor's stored bytes in the file
// at path, after its header (and its checksums) were written.
func corrupt(t *testing.T, path, tensor string) {
	t.Helper()
	h, err := safetensors.ReadHeaderFile(path)
	if err != nil {
		t.Fatal(err)
	}
	info, ok := h.Lookup(tensor)
	if !ok {
		t.Fatalf("%s: no tensor %s", path, tensor)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[h.DataOffset+(info.Begin+info.End)/2] ^= 0x10
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// snapshot returns every file under dir with its bytes.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.HasSuffix(p, ".lock") {
			b, _ := os.ReadFile(p)
			out[p] = string(b)
		}
		return nil
	})
	return out
}

// Run writes a checksum for every tensor it writes: copied tensors keep
// their source's (claims the writer checks), converted ones get fresh
// ones; the source's checksum keys are never carried over, and the
// provenance records each source file's CRC-32C.
func TestRunWritesChecksums(t *testing.T) {
	ts := smallModel()
	src := t.TempDir()
	res, err := shard.Write(context.Background(), src, "model", "", ts, map[string]string{"format": "pt"}, shard.WithMaxShardSize(13000))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Files) != 2 {
		t.Fatalf("source files %v", res.Files)
	}
	srcSums, _ := verifiedDir(t, src)
	digests := map[string]string{}
	for _, f := range res.Files {
		b, _ := os.ReadFile(filepath.Join(src, f))
		digests[f] = safetensors.FormatChecksum(safetensors.Checksum(b))
	}
	bf16 := convert.Options{Policy: ckpt.Policy{Default: mustTarget(t, "BF16")}}

	// To a folder, sharded as the source is.
	dst := filepath.Join(t.TempDir(), "out")
	rep, err := convert.Run(context.Background(), src, dst, bf16)
	if err != nil {
		t.Fatal(err)
	}
	sums, metas := verifiedDir(t, dst)
	if len(metas) != 2 || len(sums) != len(ts) {
		t.Fatalf("output %v, checksums %v", metas, sums)
	}
	if sums["model.position_ids"] != srcSums["model.position_ids"] {
		t.Errorf("a copied tensor's checksum %08x, the source's %08x", sums["model.position_ids"], srcSums["model.position_ids"])
	}
	if sums["model.norm.weight"] == srcSums["model.norm.weight"] {
		t.Error("a cast tensor kept its source's checksum")
	}
	for f, m := range metas {
		for sf, d := range digests {
			if got := m[convert.MetaSourceCRC32C+sf]; got != d {
				t.Errorf("%s: %s%s = %q, the source file's CRC-32C is %s", f, convert.MetaSourceCRC32C, sf, got, d)
			}
		}
	}
	if got := rep.Components[0].SourceCRC32C; len(got) != 2 || got[res.Files[0]] != digests[res.Files[0]] {
		t.Errorf("report's source digests %v, want %v", got, digests)
	}

	// A file to a single file, as stored: every checksum is the source's.
	srcFile := filepath.Join(t.TempDir(), "model.safetensors")
	if err := safetensors.Save(context.Background(), srcFile, ts, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	one := filepath.Join(t.TempDir(), "one.safetensors")
	if _, err := convert.Run(context.Background(), srcFile, one, convert.Options{}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(one)
	got, m := verified(t, one, b)
	for k, v := range srcSums {
		if got[k] != v {
			t.Errorf("%s copied: checksum %08x, the source's %08x", k, got[k], v)
		}
	}
	sb, _ := os.ReadFile(srcFile)
	if len(m) != 3+len(ts)+2 || m[convert.MetaSourceCRC32C+"model.safetensors"] != safetensors.FormatChecksum(safetensors.Checksum(sb)) {
		t.Errorf("metadata %v", m) // format, policy, source; the checksums, the header's; the digest
	}

	// A source without checksums: fresh ones, no digest. And an output
	// converted again carries no stale digest.
	plain := ckpttest.Dir(t, ckpttest.Weights{Tensors: []ckpttest.Tensor{{Name: "w", DType: dtype.F32, Shape: []int64{4}, Data: make([]byte, 16)}}})
	dst2 := filepath.Join(t.TempDir(), "plain")
	if _, err := convert.Run(context.Background(), plain, dst2, convert.Options{}); err != nil {
		t.Fatal(err)
	}
	_, metas = verifiedDir(t, dst2)
	for f, m := range metas {
		for k := range m {
			if strings.HasPrefix(k, convert.MetaSourceCRC32C) {
				t.Errorf("%s: %s from a source without checksums", f, k)
			}
		}
	}
	dst3 := filepath.Join(t.TempDir(), "again")
	if _, err := convert.Run(context.Background(), dst, dst3, convert.Options{}); err != nil {
		t.Fatal(err)
	}
	_, metas = verifiedDir(t, dst3)
	for f, m := range metas {
		n := 0
		for k := range m {
			if strings.HasPrefix(k, convert.MetaSourceCRC32C) {
				n++
				if !strings.HasPrefix(k, convert.MetaSourceCRC32C+"model-0000") {
					t.Errorf("%s: stale %s", f, k)
				}
			}
		}
		if n != 2 {
			t.Errorf("%s: %d digests", f, n)
		}
	}
}

func mustTarget(t *testing.T, s string) ckpt.Target {
	t.Helper()
	tg, err := ckpt.ParseTarget(s)
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

// A source tensor whose bytes changed after its header was written fails
// Run with ckpt.ErrChecksum naming the file and the tensor, whatever Run
// does with it, and nothing is committed; VerifyNever converts it anyway.
func TestRunSourceChecksumMismatch(t *testing.T) {
	ctx := context.Background()
	f32 := t.TempDir()
	if err := safetensors.Save(ctx, filepath.Join(f32, "model.safetensors"), smallModel(), map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	fp8 := filepath.Join(t.TempDir(), "fp8")
	if _, err := convert.Run(ctx, f32, fp8, convert.Options{Policy: ckpt.Policy{Default: mustTarget(t, "F8_E4M3")}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, src, tensor, target string
	}{
		{"copy", f32, "model.norm.weight", ""},
		{"cast", f32, "model.layers.0.mlp.up_proj.weight", "BF16"},
		{"quantize", f32, "model.layers.0.mlp.up_proj.weight", "F8_E5M2"},
		{"dequantize", fp8, "model.layers.0.mlp.down_proj.weight", "BF16"},
		{"dequantize scale", fp8, "model.layers.0.mlp.up_proj.weight_scale", "BF16"},
		{"copy fp8", fp8, "model.layers.0.mlp.up_proj.weight", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := filepath.Join(t.TempDir(), "src")
			if err := os.CopyFS(src, os.DirFS(tc.src)); err != nil {
				t.Fatal(err)
			}
			var o convert.Options
			if tc.target != "" {
				o.Policy.Default = mustTarget(t, tc.target)
			}
			dst := filepath.Join(t.TempDir(), "dst")
			if _, err := convert.Run(ctx, src, dst, o); err != nil {
				t.Fatal(err)
			}
			before := snapshot(t, dst)
			file := filepath.Join(src, "model.safetensors")
			corrupt(t, file, tc.tensor)

			o.Overwrite = true
			_, err := convert.Run(ctx, src, dst, o)
			var ce *safetensors.ChecksumError
			if !errors.Is(err, ckpt.ErrChecksum) || !errors.As(err, &ce) || ce.Tensor != tc.tensor || ce.File != file {
				t.Fatalf("Run of a damaged source: %v", err)
			}
			if msg := err.Error(); !strings.Contains(msg, file) || !strings.Contains(msg, tc.tensor) {
				t.Errorf("the message does not name the file and the tensor: %s", msg)
			}
			if after := snapshot(t, dst); !mapsEqual(before, after) {
				t.Errorf("the failed Run changed the output")
			}

			o.Policy.Verify = ckpt.VerifyNever
			if _, err := convert.Run(ctx, src, dst, o); err != nil {
				t.Fatalf("VerifyNever: %v", err)
			}
			verifiedDir(t, dst)
		})
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// VerifyAlways refuses a source without checksums, and every mode but
// VerifyNever one whose checksums are damaged, before anything is written;
// a PyTorch source is verified against its records' CRC-32.
func TestRunVerifyPolicy(t *testing.T) {
	ctx := context.Background()
	plain := ckpttest.Dir(t, ckpttest.Weights{Tensors: []ckpttest.Tensor{{Name: "w", DType: dtype.F32, Shape: []int64{4}, Data: make([]byte, 16)}}})
	dst := filepath.Join(t.TempDir(), "out")
	_, err := convert.Run(ctx, plain, dst, convert.Options{Policy: ckpt.Policy{Verify: ckpt.VerifyAlways}})
	if !errors.Is(err, ckpt.ErrChecksum) || !strings.Contains(err.Error(), "names no checksums") {
		t.Fatalf("VerifyAlways, no checksums: %v", err)
	}
	if _, err := os.Stat(dst); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("something was written: %v", err)
	}

	// Checksums for some tensors only: a damaged header.
	damaged := t.TempDir()
	w := ckpttest.Tensor{Name: "w", DType: dtype.F32, Shape: []int64{4}, Data: make([]byte, 16)}
	v := ckpttest.Tensor{Name: "v", DType: dtype.F32, Shape: []int64{4}, Data: make([]byte, 16)}
	md := map[string]string{safetensors.ChecksumPrefix + "w": safetensors.FormatChecksum(safetensors.Checksum(w.Data))}
	if err := ckpttest.WriteFile(filepath.Join(damaged, "model.safetensors"), []ckpttest.Tensor{w, v}, md); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []ckpt.Verify{ckpt.VerifyPresent, ckpt.VerifyAlways} {
		_, err := convert.Run(ctx, damaged, dst, convert.Options{Policy: ckpt.Policy{Verify: mode}})
		if !errors.Is(err, ckpt.ErrChecksum) {
			t.Errorf("%v, damaged checksums: %v", mode, err)
		}
	}
	if _, err := convert.Run(ctx, damaged, dst, convert.Options{Policy: ckpt.Policy{Verify: ckpt.VerifyNever}}); err != nil {
		t.Fatalf("VerifyNever, damaged checksums: %v", err)
	}
	verifiedDir(t, dst)

	// A PyTorch checkpoint names no checksum per tensor, but its archive a
	// CRC-32 per storage record, which every mode but VerifyNever checks:
	// VerifyAlways converts it (it refused it until PyTorch records were
	// verified; TestRunTorchVerify has the damaged cases). Its conversion
	// carries checksums.
	pt := filepath.Join(testutil.Fixtures(t, "torch", "cases.json"), "mlp_f32.bin")
	out := filepath.Join(t.TempDir(), "pt")
	if _, err := convert.Run(ctx, pt, out+"/", convert.Options{Policy: ckpt.Policy{Verify: ckpt.VerifyAlways}}); err != nil {
		t.Errorf("VerifyAlways, a PyTorch source: %v", err)
	}
	verifiedDir(t, out)
	if _, err := convert.Run(ctx, pt, out+"/", convert.Options{Overwrite: true}); err != nil {
		t.Fatal(err)
	}
	verifiedDir(t, out)
}

// Run to S3 writes checksums into every object; from S3, a damaged source
// object is refused.
func TestRunChecksumsS3(t *testing.T) {
	s := needS3(t)
	bucket := s.NewBucket(t)
	ctx := context.Background()
	src := t.TempDir()
	ts := smallModel()
	if _, err := shard.Write(ctx, src, "model", "", ts, nil, shard.WithMaxShardSize(13000)); err != nil {
		t.Fatal(err)
	}
	loc := "s3://" + bucket + "/out"
	rep, err := convert.Run(ctx, src, loc, convert.Options{Policy: ckpt.Policy{Default: mustTarget(t, "BF16")}})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range rep.Components[0].Files {
		sums, m := verified(t, f, getS3(t, s, bucket, "out/"+f))
		n += len(sums)
		if len(rep.Components[0].SourceCRC32C) != 2 || m[convert.MetaSourceCRC32C+"model-00001-of-00002.safetensors"] == "" {
			t.Errorf("%s: provenance %v", f, m)
		}
	}
	if n != len(ts) {
		t.Errorf("%d checksums for %d tensors", n, len(ts))
	}

	// A source on S3 with a flipped bit.
	one := filepath.Join(t.TempDir(), "model.safetensors")
	if err := safetensors.Save(ctx, one, ts, nil); err != nil {
		t.Fatal(err)
	}
	corrupt(t, one, "model.norm.weight")
	b, _ := os.ReadFile(one)
	s.Put(t, bucket, "src/model.safetensors", b)
	_, err = convert.Run(ctx, "s3://"+bucket+"/src/model.safetensors", filepath.Join(t.TempDir(), "x.safetensors"), convert.Options{})
	var ce *safetensors.ChecksumError
	if !errors.Is(err, ckpt.ErrChecksum) || !errors.As(err, &ce) || ce.Tensor != "model.norm.weight" {
		t.Fatalf("Run of a damaged S3 source: %v", err)
	}
}

// Save, SaveShard and Commit write a checksum for every tensor, to a
// folder and to S3; Commit's VerifyData checks every tensor against its
// header's and names the one that changed.
func TestSaveChecksums(t *testing.T) {
	ctx := context.Background()
	ts := allTensors(t, 1, 3)
	s := needS3(t)
	bucket := s.NewBucket(t)
	for _, dir := range []string{t.TempDir(), "s3://" + bucket + "/train"} {
		p, err := convert.Save(ctx, dir, ts, convert.SaveOptions{Step: 7, MaxShardSize: 300})
		if err != nil {
			t.Fatal(err)
		}
		res, err := p.Wait()
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Files) < 2 {
			t.Fatalf("files %v", res.Files)
		}
		n := 0
		for _, f := range res.Files {
			sums, _ := verified(t, f, readAt(t, s, bucket, res.Path, f))
			n += len(sums)
		}
		if n != len(ts) {
			t.Errorf("%s: %d checksums for %d tensors", dir, n, len(ts))
		}
	}

	// Checksum keys of the caller's metadata are claims about the tensors.
	for _, dir := range []string{t.TempDir(), "s3://" + bucket + "/claims"} {
		good := map[string]string{safetensors.ChecksumPrefix + ts[1].Name: safetensors.FormatChecksum(safetensors.Checksum(ts[1].Data))}
		p, err := convert.Save(ctx, dir, ts, convert.SaveOptions{Step: 1, Metadata: good, MaxShardSize: 300})
		if err == nil {
			_, err = p.Wait()
		}
		if err != nil {
			t.Errorf("%s: a true claim: %v", dir, err)
		}
		bad := map[string]string{safetensors.ChecksumPrefix + ts[1].Name: "00000000"}
		if p, err = convert.Save(ctx, dir, ts, convert.SaveOptions{Step: 2, Metadata: bad, MaxShardSize: 300}); err == nil {
			_, err = p.Wait()
		}
		if !errors.Is(err, ckpt.ErrChecksum) {
			t.Errorf("%s: a false claim: %v", dir, err)
		}
		none := map[string]string{safetensors.ChecksumPrefix + "nosuch": "00000000"}
		if _, err := convert.Save(ctx, dir, ts, convert.SaveOptions{Step: 3, Metadata: none}); !errors.Is(err, convert.ErrInvalid) || !strings.Contains(err.Error(), "metadata") {
			t.Errorf("%s: a claim for no tensor: %v", dir, err)
		}
	}

	for _, loc := range []string{t.TempDir(), "s3://" + bucket + "/multi"} {
		shards := saveRanks(t, loc, 1, 3)
		for _, r := range shards {
			verified(t, r.File, readAt(t, s, bucket, loc, r.File))
		}
		if _, err := convert.Commit(ctx, loc, convert.CommitOptions{VerifyData: true}); err != nil {
			t.Fatal(err)
		}
	}

	// A shard whose tensor changed after its rank wrote it: VerifyData
	// names the tensor; the size and header still match its marker.
	loc := t.TempDir()
	shards := saveRanks(t, loc, 2, 2)
	name := rankTensors(t, 2, 1)[0].Name
	corrupt(t, filepath.Join(loc, shards[1].File), name)
	_, err := convert.Commit(ctx, loc, convert.CommitOptions{VerifyData: true})
	var ce *safetensors.ChecksumError
	if !errors.Is(err, convert.ErrIncomplete) || !errors.Is(err, ckpt.ErrChecksum) || !errors.As(err, &ce) || ce.Tensor != name {
		t.Fatalf("Commit of a damaged shard: %v", err)
	}
	if _, err := os.Stat(filepath.Join(loc, "model.safetensors.index.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a damaged save was committed: %v", err)
	}
}

// readAt reads the file name of the checkpoint at loc, a folder or an
// s3:// location.
func readAt(t *testing.T, s *s3test.Server, bucket, loc, name string) []byte {
	t.Helper()
	if rest, ok := strings.CutPrefix(loc, "s3://"+bucket+"/"); ok {
		return getS3(t, s, bucket, path.Join(rest, name))
	}
	b, err := os.ReadFile(filepath.Join(loc, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
