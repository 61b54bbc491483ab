//go:build (linux && (amd64 || arm64)) || (linux && cgo)

package cuda

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/executor"
	"github.com/ckpt-go/ckpt/executor/cpu"
	"github.com/ckpt-go/ckpt/internal/testutil"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/torch"
)

// TestUploadTorchTransposedReadsOnce uploads a PyTorch file holding a
// transposed view ([256, 4096] F32, strides [1, 256]: each piece of a few
// rows spans the whole 4 MiB storage) through an fs.FS that counts the
// bytes read, with a 1 MiB staging ring and two readers, to the CPU
// executor and to the CUDA executor on the emulator: each reads the
// storage about once (≤ 1.1×), and uploads the loader's bytes.
func TestUploadTorchTransposedReadsOnce(t *testing.T) {
	const r, c = 256, 4096
	vals := make([]float32, r*c)
	for i := range vals {
		vals[i] = float32(i%1021) * 0.5
	}
	dir := t.TempDir()
	if err := ckpttest.WriteTorch(filepath.Join(dir, "model.pt"), []ckpttest.TorchTensor{{Name: "w_t", Storage: "0", Shape: []int64{r, c}, Stride: []int64{1, r}}},
		map[string]ckpttest.TorchStorage{"0": {DType: dtype.F32, Data: dtype.Float32Bytes(vals)}}); err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	m, err := ckpt.Open("model.pt", ckpt.WithFS(testutil.CountingFS{FS: os.DirFS(dir), N: &n}))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ws, err := m.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	want, _ := ws.Tensor("w_t")
	host, err := cpu.New()
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	gpu := onEmu(emuDevices[2], 1<<30)(t)
	for _, e := range []executor.Executor{host, gpu} {
		n.Store(0)
		um, err := e.UploadModel(ctx, m, executor.WithStaging(1<<20), executor.WithReaders(2))
		if err != nil {
			t.Fatalf("%s: %v", e.Info().Kind, err)
		}
		if got := n.Load(); got > 4*r*c*11/10 {
			t.Errorf("%s: read %d bytes of a %d-byte storage (%.1f×)", e.Info().Kind, got, 4*r*c, float64(got)/float64(4*r*c))
		}
		got, err := fromWeight(e, um, "w_t")
		if err != nil {
			t.Fatal(err)
		}
		if got.dt != dtype.F32 || !bytes.Equal(got.data, want.Bytes()) {
			t.Errorf("%s: w_t uploads as %s, bytes equal %v", e.Info().Kind, got.dt, bytes.Equal(got.data, want.Bytes()))
		}
		um.Close()
	}
}

// TestUploadTorchVerify: the CUDA upload of a PyTorch file (on the
// emulator) verifies its tensors against their storage records' CRC-32
// as the loader does: a bit flipped in the record of a tensor whose bytes
// are the record's fails it, naming the tensor and the record; one in the
// storage of a transposed view fails it only with VerifyAlways.
func TestUploadTorchVerify(t *testing.T) {
	vals := make([]float32, 32*128)
	for i := range vals {
		vals[i] = float32(i%1021) * 0.5
	}
	arc, err := ckpttest.EncodeTorch([]ckpttest.TorchTensor{
		{Name: "w", Storage: "0", Shape: []int64{32, 128}, Stride: []int64{128, 1}},
		{Name: "w_t", Storage: "1", Shape: []int64{128, 32}, Stride: []int64{1, 128}},
	}, map[string]ckpttest.TorchStorage{"0": {DType: dtype.F32, Data: dtype.Float32Bytes(vals)}, "1": {DType: dtype.F32, Data: dtype.Float32Bytes(vals)}}, false)
	if err != nil {
		t.Fatal(err)
	}
	gpu := onEmu(emuDevices[2], 1<<30)(t)
	upload := func(path string, opts ...ckpt.Option) error {
		m, err := ckpt.Open(path, opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		um, err := gpu.UploadModel(ctx, m)
		if err == nil {
			um.Close()
		} else if um != nil {
			t.Errorf("a failed upload handed out a model")
		}
		return err
	}
	always := ckpt.WithVerify(ckpt.VerifyAlways)
	clean := filepath.Join(t.TempDir(), "model.pt")
	os.WriteFile(clean, arc, 0o644)
	for _, opts := range [][]ckpt.Option{nil, {always}, {always, ckpt.WithDType(ckpt.To(dtype.BF16))}} {
		if err := upload(clean, opts...); err != nil {
			t.Fatalf("undamaged: %v", err)
		}
	}
	for _, name := range []string{"w", "w_t"} {
		tc, err := torch.NewReader(bytes.NewReader(arc), int64(len(arc)), "")
		if err != nil {
			t.Fatal(err)
		}
		tn, _ := tc.Tensor(name)
		rec, off, _ := tn.Record()
		b := bytes.Clone(arc)
		b[off+4097] ^= 0x10
		path := filepath.Join(t.TempDir(), "model.pt")
		os.WriteFile(path, b, 0o644)
		for _, v := range []ckpt.Verify{ckpt.VerifyPresent, ckpt.VerifyAlways, ckpt.VerifyNever} {
			err := upload(path, ckpt.WithVerify(v))
			fails := v == ckpt.VerifyAlways || v == ckpt.VerifyPresent && name == "w"
			var ce *safetensors.ChecksumError
			switch {
			case !fails && err != nil:
				t.Errorf("%s damaged, %s: %v", name, v, err)
			case fails && (!errors.Is(err, ckpt.ErrChecksum) || !errors.As(err, &ce) || ce.Tensor != name || ce.Record != rec):
				t.Errorf("%s damaged, %s: %v; want ErrChecksum naming %s and %s", name, v, err, name, rec)
			}
		}
	}
}
