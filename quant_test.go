package ckpt

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/quant"
)

// deepseekFolder writes a component with one DeepSeek block-FP8 weight of
// shape [130, 260] (partial edge blocks with B = 128), every FP8 code
// present, its F32 scale_inv, a plain bias, and config.json.
func deepseekFolder(t *testing.T, scaleShape []int64) (dir string, codes []byte, scales []float32) {
	t.Helper()
	const out, in = 130, 260
	codes = make([]byte, out*in)
	for i := range codes {
		codes[i] = byte(i * 7)
		if codes[i]&0x7f == 0x7f { // NaN codes: keep a few, not all
			if i%3 != 0 {
				codes[i] = 0x42
			}
		}
	}
	n := scaleShape[0] * scaleShape[1]
	scales = make([]float32, n)
	sb := make([]byte, 4*n)
	for i := range scales {
		scales[i] = float32(math.Ldexp(1+float64(i)/8, i%5-3))
		binary.LittleEndian.PutUint32(sb[4*i:], math.Float32bits(scales[i]))
	}
	dir = filepath.Join(t.TempDir(), "transformer")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	err := ckpttest.WriteFile(filepath.Join(dir, "model.safetensors"), []ckpttest.Tensor{
		{Name: "proj.weight", DType: dtype.F8_E4M3, Shape: []int64{out, in}, Data: codes},
		{Name: "proj.weight_scale_inv", DType: dtype.F32, Shape: scaleShape, Data: sb},
		ckpttest.T("proj.bias", dtype.BF16, out),
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := `{"model_type":"x","quantization_config":{"quant_method":"fp8","fmt":"e4m3","activation_scheme":"dynamic","weight_block_size":[128,128]}}`
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, codes, scales
}

// The loader dequantizes DeepSeek block FP8 to the value fp8 × scale_inv
// computed independently here (decode, multiply in float64, one rounding),
// or keeps it quantized with its scale attached.
func TestLoadDeepSeekBlockFP8(t *testing.T) {
	dir, codes, scales := deepseekFolder(t, []int64{2, 3})
	const in = 260
	vals := make([]float64, len(codes))
	if _, err := dtype.DecodeFloat64(vals, codes, dtype.F8_E4M3); err != nil {
		t.Fatal(err)
	}
	exact := make([]float64, len(codes))
	for i := range exact {
		r, c := i/in, i%in
		exact[i] = vals[i] * float64(scales[(r/128)*3+c/128])
	}
	for _, to := range []dtype.DType{dtype.F32, dtype.BF16, dtype.F16} {
		m := mustOpen(t, dir, WithDType(To(to)))
		p, err := m.Plan()
		if err != nil {
			t.Fatal(err)
		}
		if q := p.Components[0].Quant; q.Layout != "deepseek-fp8-block" || q.Weights != 1 || !strings.Contains(q.Source, "config.json") {
			t.Fatalf("plan quantization %+v", q)
		}
		w := mustLoad(t, m)
		if w.Len() != 2 {
			t.Fatalf("%d tensors: the scale must be consumed", w.Len())
		}
		tt, err := w.Tensor("proj.weight")
		if err != nil {
			t.Fatal(err)
		}
		if tt.DType != to || tt.Action() != ActionDequantize || tt.Layout != "deepseek-fp8-block" || tt.Stored != dtype.F8_E4M3 {
			t.Fatalf("%s: %s %s %s stored %s", to, tt.DType, tt.Action(), tt.Layout, tt.Stored)
		}
		wantB := make([]byte, len(tt.Bytes()))
		if _, err := dtype.EncodeFloat64(wantB, to, exact, dtype.Options{}); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(tt.Bytes(), wantB) {
			t.Errorf("%s: dequantized bytes differ from fp8 × scale_inv rounded once", to)
		}
	}
	// As stored: kept quantized, a view, with its scale attached.
	m := mustOpen(t, dir)
	w := mustLoad(t, m)
	tt, _ := w.Tensor("proj.weight")
	if tt.Action() != ActionQuantized || tt.DType != dtype.F8_E4M3 || tt.Location.Owned || len(tt.Scales) != 1 ||
		tt.Scales[0].Role != "scale_inv" || tt.Scales[0].Name != "proj.weight_scale_inv" || !bytes.Equal(tt.Bytes(), codes) {
		t.Fatalf("kept quantized: %s %s owned=%v scales=%d", tt.Action(), tt.DType, tt.Location.Owned, len(tt.Scales))
	}
	if _, err := tt.Float32s(); !errors.Is(err, ErrTarget) {
		t.Errorf("Float32s of a quantized weight: %v", err)
	}
	// With pread the quantized data and its scale are read into owned
	// memory, each its own buffer.
	mp := mustOpen(t, dir, WithReadStrategy("pread"))
	wp := mustLoad(t, mp)
	tp, _ := wp.Tensor("proj.weight")
	if tp.Action() != ActionQuantized || !tp.Location.Owned || !bytes.Equal(tp.Bytes(), codes) || !tp.Scales[0].Location.Owned ||
		!bytes.Equal(tp.Scales[0].Bytes(), tt.Scales[0].Bytes()) {
		t.Fatalf("pread kept quantized: %s owned=%v", tp.Action(), tp.Location.Owned)
	}
	// WithScaleTensors also lists the scale.
	m2 := mustOpen(t, dir, WithScaleTensors())
	if w := mustLoad(t, m2); w.Len() != 3 {
		t.Errorf("WithScaleTensors: %d tensors", w.Len())
	}
	// Loading into a caller's buffer gets the quantized data.
	buf := make([]byte, len(codes))
	if _, err := m.loadInto(context.Background(), "proj.weight", buf); err != nil || !bytes.Equal(buf, codes) {
		t.Errorf("loadInto quantized: %v", err)
	}
}

// A malformed scale is a typed error naming the tensor, at Open.
func TestLoadMalformedScale(t *testing.T) {
	dir, _, _ := deepseekFolder(t, []int64{2, 2}) // needs [2, 3]
	_, err := Open(dir, WithDType(To(dtype.BF16)))
	var qe *quant.Error
	if !errors.Is(err, ErrResolve) || !errors.Is(err, quant.ErrInvalidLayout) || !strings.Contains(err.Error(), ": quant: invalid_layout: ") || !strings.Contains(err.Error(), ": scale shape: ") || !errors.As(err, &qe) || qe.Tensor != "proj.weight_scale_inv" {
		t.Fatalf("Open = %v", err)
	}
	if !strings.Contains(err.Error(), "proj.weight_scale_inv") {
		t.Errorf("message does not name the tensor: %v", err)
	}
}

// MXFP4 (gpt-oss): P_blocks and P_scales become P of shape [..., G·32].
func TestLoadMXFP4(t *testing.T) {
	blocks := make([]byte, 2*3*16)
	for i := range blocks {
		blocks[i] = byte(i * 37)
	}
	sc := []byte{127, 128, 126, 120, 130, 255}
	path := ckpttest.File(t,
		ckpttest.Tensor{Name: "experts.down_proj_blocks", DType: dtype.U8, Shape: []int64{2, 3, 16}, Data: blocks},
		ckpttest.Tensor{Name: "experts.down_proj_scales", DType: dtype.U8, Shape: []int64{2, 3}, Data: sc},
	)
	m := mustOpen(t, path, WithDType(To(dtype.F32)))
	w := mustLoad(t, m)
	tt, err := w.Tensor("experts.down_proj")
	if err != nil {
		t.Fatal(err)
	}
	if tt.DType != dtype.F32 || len(tt.Shape) != 2 || tt.Shape[0] != 2 || tt.Shape[1] != 96 {
		t.Fatalf("%s %v", tt.DType, tt.Shape)
	}
	e2m1 := []float64{0, 0.5, 1, 1.5, 2, 3, 4, 6}
	got, _ := tt.Float32s()
	for i, g := range got {
		b := blocks[i/2]
		code := b & 0xf
		if i%2 == 1 {
			code = b >> 4
		}
		v := e2m1[code&7]
		if code&8 != 0 {
			v = -v
		}
		s := sc[i/32]
		var want float64
		if s == 255 {
			want = math.NaN()
		} else {
			want = v * math.Ldexp(1, int(s)-127)
		}
		if !(float64(g) == want && math.Signbit(float64(g)) == math.Signbit(want)) && !(math.IsNaN(want) && math.IsNaN(float64(g))) {
			t.Fatalf("element %d: %v, want %v", i, g, want)
		}
	}
	// Kept quantized: the packed bytes as F4 of the logical shape.
	m2 := mustOpen(t, path, WithDType(Quantized))
	w2 := mustLoad(t, m2)
	q, _ := w2.Tensor("experts.down_proj")
	if q.Action() != ActionQuantized || q.DType != dtype.F4 || !bytes.Equal(q.Bytes(), blocks) || len(q.Scales) != 1 {
		t.Fatalf("kept: %s %s %d scales", q.Action(), q.DType, len(q.Scales))
	}
}

// Tensors that look like scales without a layout are reported, not
// guessed.
func TestUnconsumedScalesReported(t *testing.T) {
	path := ckpttest.File(t, ckpttest.Tensors(t, "a.weight:BF16[4,4] a.weight_zero_point:I32[4] a.qweight:I32[4,4]")...)
	m := mustOpen(t, path, WithDType(To(dtype.F32)))
	p, err := m.Plan()
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Components[0].Quant.Unconsumed) == 0 || !strings.Contains(strings.Join(p.Warnings, "\n"), "look like scales") {
		t.Fatalf("unconsumed %v, warnings %v", p.Components[0].Quant.Unconsumed, p.Warnings)
	}
}

// A weight larger than one piece is dequantized in pieces of rows by
// several workers: the bytes equal one whole Dequantize.
func TestLoadDequantizeInPieces(t *testing.T) {
	const out, in = 2300, 600 // 5.3 MiB as F32: two pieces
	codes := make([]byte, out*in)
	for i := range codes {
		codes[i] = byte(i*11) & 0xf7 // no NaN codes
	}
	sb := make([]byte, 4*18*5)
	for i := 0; i < len(sb); i += 4 {
		binary.LittleEndian.PutUint32(sb[i:], math.Float32bits(float32(i+1)/64))
	}
	dir := filepath.Join(t.TempDir(), "m")
	os.Mkdir(dir, 0o755)
	if err := ckpttest.WriteFile(filepath.Join(dir, "model.safetensors"), []ckpttest.Tensor{
		{Name: "w.weight", DType: dtype.F8_E4M3, Shape: []int64{out, in}, Data: codes},
		{Name: "w.weight_scale_inv", DType: dtype.F32, Shape: []int64{18, 5}, Data: sb},
	}, nil); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"quantization_config":{"quant_method":"fp8","weight_block_size":[128,128]}}`), 0o644)
	m := mustOpen(t, dir, WithDType(To(dtype.F32)), WithWorkers(2))
	var pieces int
	m.cfg.progress = func(Progress) { pieces++ }
	w := mustLoad(t, m)
	tt, _ := w.Tensor("w.weight")
	if pieces < 2 {
		t.Fatalf("%d pieces", pieces)
	}
	q := m.comps[0].scheme.Weight("w.weight")
	want := make([]byte, out*in*4)
	if _, err := q.Dequantize(want, dtype.F32, codes, [][]byte{sb}, dtype.Options{}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(tt.Bytes(), want) {
		t.Fatal("pieces differ from a whole Dequantize")
	}
}
