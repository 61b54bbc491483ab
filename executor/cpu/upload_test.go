package cpu

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/executor"
	"github.com/ckpt-go/ckpt/safetensors"
)

// deepseekDir writes a component with a DeepSeek block-FP8 weight [40, 70]
// (block 32×32: partial edge blocks), its F32 scale_inv, a BF16 bias and
// config.json.
func deepseekDir(t *testing.T) string {
	t.Helper()
	const out, in = 40, 70
	codes := make([]byte, out*in)
	for i := range codes {
		codes[i] = byte(i*13 + 1)
		if codes[i]&0x7f == 0x7f {
			codes[i] = 0x3a
		}
	}
	sc := make([]float32, 2*3)
	for i := range sc {
		sc[i] = float32(math.Ldexp(1+float64(i)/4, i-3))
	}
	dir := filepath.Join(t.TempDir(), "mlp")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	err := ckpttest.WriteFile(filepath.Join(dir, "model.safetensors"), []ckpttest.Tensor{
		{Name: "fc.weight", DType: dtype.F8_E4M3, Shape: []int64{out, in}, Data: codes},
		{Name: "fc.weight_scale_inv", DType: dtype.F32, Shape: []int64{2, 3}, Data: dtype.Float32Bytes(sc)},
		ckpttest.T("fc.bias", dtype.BF16, out),
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := `{"quantization_config":{"quant_method":"fp8","fmt":"e4m3","weight_block_size":[32,32]}}`
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func open(t *testing.T, dir string, opts ...ckpt.Option) *ckpt.Model {
	t.Helper()
	m, err := ckpt.Open(dir, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// A weight kept quantized uploads narrow with its scale and dequantizes
// exactly as the loader does; a plain tensor uploads as loaded.
func TestUploadTensor(t *testing.T) {
	dir := deepseekDir(t)
	e := newEx(t)
	m := open(t, dir)
	qt, err := m.LoadTensor(ctx, "fc.weight")
	if err != nil {
		t.Fatal(err)
	}
	w, err := e.Upload(ctx, qt)
	if err != nil {
		t.Fatal(err)
	}
	if !w.Quantized() || w.DType() != dtype.F8_E4M3 || w.Data.DType() != dtype.F8_E4M3 || len(w.Scales) != 1 ||
		w.Scales[0].Name() != "fc.weight_scale_inv" || w.Name() != "fc.weight" || w.Bytes() != 40*70+6*4 {
		t.Fatalf("uploaded %s %v %d scales, %d bytes", w.DType(), w.Shape(), len(w.Scales), w.Bytes())
	}
	mf := open(t, dir, ckpt.WithDType(ckpt.To(dtype.F32)))
	ft, err := mf.LoadTensor(ctx, "fc.weight")
	if err != nil {
		t.Fatal(err)
	}
	d, err := e.Dequantize(ctx, w, dtype.F32)
	if err != nil {
		t.Fatal(err)
	}
	raw := make([]byte, d.Bytes())
	_ = e.Download(ctx, d, raw)
	if !bytes.Equal(raw, ft.Bytes()) {
		t.Error("Dequantize differs from the loader's F32 dequantization")
	}
	bt, _ := m.LoadTensor(ctx, "fc.bias")
	b, err := e.Upload(ctx, bt)
	if err != nil || b.Quantized() || b.Data.DType() != dtype.BF16 {
		t.Fatalf("bias: %v", err)
	}
	x := upload(t, e, dtype.Float32Bytes(make([]float32, 70)), dtype.F32, "x", 1, 70)
	y, err := e.Linear(ctx, x, w, b.Data, dtype.F32)
	if err != nil {
		t.Fatal(err)
	}
	got := download(t, e, y)
	bv, _ := bt.Float32s()
	for i := range got {
		if got[i] != float64(bv[i]) {
			t.Fatalf("zero x: y[%d] = %v, bias %v", i, got[i], bv[i])
		}
	}
	if _, err := e.Upload(ctx, nil); !errors.Is(err, executor.ErrArgument) {
		t.Errorf("nil tensor: %v", err)
	}
}

func TestUploadModel(t *testing.T) {
	dir := deepseekDir(t)
	e := newEx(t)
	m := open(t, dir)
	var last ckpt.Progress
	calls := 0
	model, err := e.UploadModel(ctx, m, executor.WithProgress(func(p ckpt.Progress) { last = p; calls++ }))
	if err != nil {
		t.Fatal(err)
	}
	if model.Len() != 2 || calls != 2 || last.Done != last.Total || last.Total != 40*70+40*2 {
		t.Fatalf("%d weights, %d progress calls, last %+v", model.Len(), calls, last)
	}
	w, err := model.Weight("fc.weight")
	if err != nil || !w.Quantized() {
		t.Fatalf("fc.weight: %v", err)
	}
	if _, err := e.Dequantize(ctx, w, dtype.BF16); err != nil {
		t.Fatal(err)
	}
	if err := model.Close(); err != nil {
		t.Fatal(err)
	}
	if n, _ := e.Live(); n != 1 { // the BF16 output above
		t.Errorf("%d buffers live after Close", n)
	}
	if _, err := e.Dequantize(ctx, w, dtype.BF16); !errors.Is(err, executor.ErrClosed) || !strings.Contains(err.Error(), "buffer used after Free") {
		t.Errorf("weight of a closed model: %v", err)
	}
	// A device budget below the resident bytes refuses before reading.
	if _, err := e.UploadModel(ctx, m, executor.WithDeviceBudget(100)); !errors.Is(err, executor.ErrBudget) || !errors.Is(err, ckpt.ErrBudget) {
		t.Errorf("device budget: %v", err)
	}
	// The loader's own budget refusal is an ErrBudget that keeps the
	// loader's error.
	small := open(t, dir, ckpt.WithBudget(1000), ckpt.WithDType(ckpt.To(dtype.F32)))
	if _, err := e.UploadModel(ctx, small); !errors.Is(err, executor.ErrBudget) || !errors.Is(err, ckpt.ErrBudget) {
		t.Errorf("loader budget: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := e.UploadModel(cctx, m); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled: %v", err)
	}
	if _, err := e.UploadModel(ctx, nil); !errors.Is(err, executor.ErrArgument) {
		t.Errorf("nil model: %v", err)
	}
}

// A checksummed checkpoint with one bit flipped in a stored tensor's data
// is refused by UploadModel with ErrRead wrapping ckpt.ErrChecksum (no
// model), for the weight kept quantized and dequantized, its scales and
// the bias; the undamaged one uploads.
func TestUploadModelRefusesDamage(t *testing.T) {
	clean := deepseekDir(t)
	path := filepath.Join(clean, "model.safetensors")
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var ts []safetensors.TensorData
	for _, info := range f.Header().Tensors {
		st, _ := f.Tensor(info.Name)
		b := make([]byte, st.ByteLen())
		if err := st.ReadTo(b); err != nil {
			t.Fatal(err)
		}
		ts = append(ts, safetensors.TensorData{Name: info.Name, DType: info.DType, Shape: info.Shape, Data: b})
	}
	f.Close()
	if err := safetensors.Save(context.Background(), path, ts, nil); err != nil { // names checksums
		t.Fatal(err)
	}
	e, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for _, target := range []ckpt.Target{ckpt.AsStored, ckpt.To(dtype.F32)} {
		um, err := e.UploadModel(context.Background(), open(t, clean, ckpt.WithDType(target)))
		if err != nil {
			t.Fatalf("undamaged, %s: %v", target, err)
		}
		um.Close()
		h, err := safetensors.ReadHeaderFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, info := range h.Tensors {
			dir := filepath.Join(t.TempDir(), "mlp")
			if err := os.CopyFS(dir, os.DirFS(clean)); err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(filepath.Join(dir, "model.safetensors"))
			b[h.DataOffset+(info.Begin+info.End)/2] ^= 0x10
			os.WriteFile(filepath.Join(dir, "model.safetensors"), b, 0o644)
			um, err := e.UploadModel(context.Background(), open(t, dir, ckpt.WithDType(target)))
			var ce *safetensors.ChecksumError
			if um != nil || !errors.Is(err, executor.ErrRead) || !errors.Is(err, ckpt.ErrChecksum) || !errors.As(err, &ce) || ce.Tensor != info.Name {
				t.Errorf("%s damaged, %s: model %v, %v; want ErrRead, ErrChecksum naming the tensor", info.Name, target, um != nil, err)
			}
		}
	}
}
