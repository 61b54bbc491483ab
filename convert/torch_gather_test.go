package convert

import (
	"bytes"
	"context"
	"encoding/binary"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/testutil"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/source"
)

// TestRunTorchTransposedReadsOnce converts a PyTorch file holding a
// transposed view ([256, 16384] F32, strides [1, 256]: each piece of a few
// rows spans the whole 16 MiB storage) to BF16 with four workers in
// pieces of 1 MiB, through a registered source whose files count the
// bytes read: the storage is read about once (≤ 1.1×; piece by piece it
// was read once per piece), and the output is the view converted.
func TestRunTorchTransposedReadsOnce(t *testing.T) {
	const r, c = 256, 16384
	vals := make([]byte, 4*r*c)
	for i := range r * c {
		binary.LittleEndian.PutUint32(vals[4*i:], math.Float32bits(float32(i%4099)*0.25))
	}
	dir := t.TempDir()
	if err := ckpttest.WriteTorch(filepath.Join(dir, "model.pt"), []ckpttest.TorchTensor{{Name: "w_t", Storage: "0", Shape: []int64{r, c}, Stride: []int64{1, r}}},
		map[string]ckpttest.TorchStorage{"0": {DType: dtype.F32, Data: vals}}); err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	source.Register("torchcount", func(_ context.Context, location string) (fs.FS, string, error) {
		return testutil.CountingFS{FS: os.DirFS(dir), N: &n}, strings.TrimPrefix(location, "torchcount://"), nil
	})
	out := filepath.Join(t.TempDir(), "w.safetensors")
	run(t, "torchcount://model.pt", out, Options{Policy: ckpt.Policy{Default: target(t, "bf16")}, Workers: 4, ChunkBytes: 1 << 20})
	if got := n.Load(); got > int64(len(vals))*11/10 {
		t.Errorf("read %d bytes of a %d-byte storage (%.1f×)", got, len(vals), float64(got)/float64(len(vals)))
	}
	// The view's elements in row-major order, converted.
	want := make([]byte, 4*r*c)
	for i := range int64(r) {
		for j := range int64(c) {
			copy(want[4*(i*c+j):], vals[4*(j*r+i):4*(j*r+i)+4])
		}
	}
	wb := make([]byte, 2*r*c)
	if _, err := dtype.Convert(wb, dtype.BF16, want, dtype.F32, dtype.Options{}); err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tn, err := f.Tensor("w_t")
	if err != nil {
		t.Fatal(err)
	}
	got, err := tn.Bytes()
	if err != nil || tn.DType() != dtype.BF16 || !bytes.Equal(got, wb) {
		t.Errorf("w_t: %s, %v; bytes equal %v", tn.DType(), err, bytes.Equal(got, wb))
	}
}
