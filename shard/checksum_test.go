package shard

import (
	"cmp"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/safetensors"
)

// checkSums checks that the safetensors file at path names a checksum for
// every tensor and that every tensor's bytes match it, and returns them.
func checkSums(t *testing.T, path string) map[string]uint32 {
	t.Helper()
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sums, err := f.Header().Checksums()
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(sums) != f.Len() || f.Len() == 0 {
		t.Fatalf("%s: %d checksums for %d tensors", path, len(sums), f.Len())
	}
	for name, tn := range f.Tensors() {
		if err := tn.Verify(); err != nil {
			t.Errorf("%s: %s: %v", path, name, err)
		}
		b, _ := tn.Bytes()
		if got := safetensors.Checksum(b); got != sums[name] {
			t.Errorf("%s: %s: header says %08x, bytes have %08x", path, name, sums[name], got)
		}
	}
	return sums
}

func TestWriteChecksums(t *testing.T) {
	ctx := context.Background()
	ts := []safetensors.TensorData{td("a", dtype.F32, 10), td("b", dtype.BF16, 10), td("c", dtype.F32, 10), td("big", dtype.F32, 50), td("d", dtype.I8, 3)}
	for _, stream := range []bool{false, true} {
		dir := t.TempDir()
		var res *WriteResult
		var err error
		if stream {
			specs := make([]safetensors.TensorSpec, len(ts))
			data := map[string][]byte{}
			for i, x := range ts {
				specs[i] = safetensors.TensorSpec{Name: x.Name, DType: x.DType, Shape: x.Shape}
				data[x.Name] = x.Data
			}
			// Written in small pieces: the checksums follow the bytes.
			res, err = WriteStream(ctx, dir, "model", "", specs, func(s safetensors.TensorSpec, w io.Writer) error {
				for b := data[s.Name]; len(b) > 0; b = b[min(3, len(b)):] {
					if _, err := w.Write(b[:min(3, len(b))]); err != nil {
						return err
					}
				}
				return nil
			}, map[string]string{"format": "pt"}, WithMaxShardSize(100))
		} else {
			res, err = Write(ctx, dir, "model", "", ts, map[string]string{"format": "pt"}, WithMaxShardSize(100))
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Files) < 3 {
			t.Fatalf("files %v", res.Files)
		}
		n := 0
		for _, f := range res.Files {
			n += len(checkSums(t, filepath.Join(dir, f)))
		}
		if n != len(ts) {
			t.Errorf("%d checksums for %d tensors", n, len(ts))
		}
	}

	// A single file too.
	dir := t.TempDir()
	res, err := Write(ctx, dir, "model", "fp8", ts[:2], nil)
	if err != nil {
		t.Fatal(err)
	}
	checkSums(t, filepath.Join(dir, res.Files[0]))

	// WithoutChecksums writes none.
	dir = t.TempDir()
	res, err = Write(ctx, dir, "model", "", ts, nil, WithMaxShardSize(100), WithWriteOptions(safetensors.WithoutChecksums()))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range res.Files {
		h, err := safetensors.ReadHeaderFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if sums, err := h.Checksums(); sums != nil || err != nil {
			t.Errorf("%s: checksums %v, %v with WithoutChecksums", f, sums, err)
		}
	}
}

// The metadata's checksum keys are claims about the tensors' data: each
// goes into its tensor's shard only and is checked against the bytes.
func TestWriteChecksumClaims(t *testing.T) {
	ctx := context.Background()
	ts := []safetensors.TensorData{td("a", dtype.F32, 10), td("b", dtype.F32, 10), td("c", dtype.F32, 30)}
	dir := t.TempDir()
	md := map[string]string{
		"format":                         "pt",
		safetensors.ChecksumPrefix + "c": safetensors.FormatChecksum(safetensors.Checksum(ts[2].Data)),
	}
	res, err := Write(ctx, dir, "model", "", ts, md, WithMaxShardSize(100))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Files) != 2 || res.WeightMap["c"] != res.Files[1] {
		t.Fatalf("result %+v", res)
	}
	for _, f := range res.Files {
		checkSums(t, filepath.Join(dir, f))
	}
	before := readFiles(t, dir)

	// A claim the data do not match: nothing changes.
	bad := map[string]string{safetensors.ChecksumPrefix + "b": "00000001"}
	_, err = Write(ctx, dir, "model", "", ts, bad, WithMaxShardSize(100))
	var ce *safetensors.ChecksumError
	if !errors.Is(err, ErrWrite) || !errors.Is(err, safetensors.ErrChecksum) || !errors.As(err, &ce) || ce.Tensor != "b" {
		t.Fatalf("wrong claim: %v", err)
	}
	if after := readFiles(t, dir); !equalFiles(before, after) {
		t.Errorf("a failed write changed the folder: %v, was %v", keys(after), keys(before))
	}

	// A claim for a tensor the set does not hold.
	_, err = Write(ctx, dir, "model", "", ts, map[string]string{safetensors.ChecksumPrefix + "zz": "00000001"})
	if !invalidTensor.Matches(err) {
		t.Fatalf("claim of no tensor: %v", err)
	}
}

func readFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range es {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err == nil {
			out[e.Name()] = string(b)
		}
	}
	return out
}

func equalFiles(a, b map[string]string) bool {
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

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TensorAt and ChecksummedAt find the tensor at a position of Names as
// Tensor and Checksummed find it by name: in a sharded set and a single
// file, with checksums and without, at one offset (empty tensors) too.
func TestTensorAtAgreesWithTensor(t *testing.T) {
	ctx := context.Background()
	ts := []safetensors.TensorData{td("a", dtype.F32, 10), td("z.empty", dtype.F32, 0), td("b", dtype.BF16, 10),
		td("a.empty", dtype.BF16, 0, 3), td("c", dtype.F32, 10), td("big", dtype.F32, 50), td("d", dtype.I8, 3)}
	for _, shardSize := range []int64{100, 1 << 20} {
		for _, sums := range []bool{true, false} {
			var opts []WriteOption
			if !sums {
				opts = append(opts, WithWriteOptions(safetensors.WithoutChecksums()))
			}
			dir := t.TempDir()
			res, err := Write(ctx, dir, "model", "", ts, nil, append(opts, WithMaxShardSize(shardSize))...)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, cmp.Or(res.Index, res.Files[0]))
			c := mustOpen(t, path)
			for i, name := range c.Names() {
				want, err := c.Tensor(name)
				if err != nil {
					t.Fatal(err)
				}
				got, err := c.TensorAt(i)
				if err != nil || got != want {
					t.Errorf("%s: TensorAt(%d) = %v, %v; Tensor(%s) = %v", path, i, got, err, name, want)
				}
				if c.ChecksummedAt(i) != sums || c.Checksummed(name) != sums {
					t.Errorf("%s: ChecksummedAt(%d) = %v, Checksummed(%s) = %v, want %v", path, i, c.ChecksummedAt(i), name, c.Checksummed(name), sums)
				}
			}
			c.Close()
			if _, err := c.TensorAt(0); !errors.Is(err, ErrClosed) {
				t.Errorf("TensorAt after Close: %v", err)
			}
		}
	}
}
