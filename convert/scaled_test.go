package convert

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/testutil"
	"github.com/ckpt-go/ckpt/quant"
	"github.com/ckpt-go/ckpt/safetensors"
)

// deepSeekFolder writes a DeepSeek block-FP8 component: two quantized
// linear weights (one with partial edge blocks), a BF16 norm and lm_head.
func deepSeekFolder(t *testing.T, rng *rand.Rand) string {
	codes := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.UintN(256))
			if b[i]&0x7F == 0x7F { // no NaN codes
				b[i] = 0x10
			}
		}
		return b
	}
	scales := func(n int) []byte {
		b := make([]byte, 4*n)
		for i := 0; i < n; i++ {
			putF32(b[4*i:], float32(rng.Float64()*0.01+1e-4))
		}
		return b
	}
	dir := ckpttest.Dir(t, ckpttest.Weights{Tensors: []ckpttest.Tensor{
		{Name: "model.layers.0.mlp.down_proj.weight", DType: dtype.F8_E4M3, Shape: []int64{300, 200}, Data: codes(300 * 200)},
		{Name: "model.layers.0.mlp.down_proj.weight_scale_inv", DType: dtype.F32, Shape: []int64{3, 2}, Data: scales(6)},
		{Name: "model.layers.0.mlp.up_proj.weight", DType: dtype.F8_E4M3, Shape: []int64{128, 128}, Data: codes(128 * 128)},
		{Name: "model.layers.0.mlp.up_proj.weight_scale_inv", DType: dtype.F32, Shape: []int64{1, 1}, Data: scales(1)},
		randTensor(rng, "model.norm.weight", dtype.BF16, 128),
		randTensor(rng, "lm_head.weight", dtype.BF16, 16, 128),
	}})
	cfg := `{"model_type": "deepseek_v3", "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}}`
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestRunScaledSource(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	src := deepSeekFolder(t, rng)
	ms, err := ckpt.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	cs := contents(t, ms)
	scheme := cs.Scheme
	dequant := func(name string, to dtype.DType) []byte {
		w := scheme.Weight(name)
		data := storedBytes(t, cs, w.Data.Name)
		sc := storedBytes(t, cs, w.Scales[0].Name)
		n, _ := to.ByteLen(w.Shape[0] * w.Shape[1])
		out := make([]byte, n)
		if _, err := w.Dequantize(out, to, data, [][]byte{sc}, dtype.Options{}); err != nil {
			t.Fatal(err)
		}
		return out
	}

	// To BF16: every weight dequantized exactly as package quant does it,
	// scales gone, config.json without quantization.
	dst := filepath.Join(t.TempDir(), "bf16")
	rep := run(t, src, dst, Options{Policy: ckpt.Policy{Default: target(t, "bf16")}, ChunkBytes: 4096, Verify: true})
	f, err := safetensors.Open(filepath.Join(dst, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"model.layers.0.mlp.down_proj.weight", "model.layers.0.mlp.up_proj.weight"} {
		tt, err := f.Tensor(n)
		if err != nil || tt.DType() != dtype.BF16 {
			t.Fatalf("%s: %v %v", n, tt, err)
		}
		got, _ := tt.Bytes()
		if !bytes.Equal(got, dequant(n, dtype.BF16)) {
			t.Errorf("%s: not the bytes of quant's Dequantize", n)
		}
	}
	if f.Has("model.layers.0.mlp.down_proj.weight_scale_inv") || f.Metadata()["quantization_config"] != "" {
		t.Errorf("scales or config kept: %v %v", f.Names(), f.Metadata())
	}
	f.Close()
	if !slices.Contains(rep.Dropped, "model.layers.0.mlp.down_proj.weight_scale_inv") {
		t.Errorf("dropped %v", rep.Dropped)
	}
	b, _ := os.ReadFile(filepath.Join(dst, "config.json"))
	if strings.Contains(string(b), "quantization_config") || !strings.Contains(string(b), "deepseek_v3") {
		t.Errorf("config.json: %s", b)
	}
	for _, tr := range rep.Tensors {
		if strings.HasSuffix(tr.Name, "proj.weight") && (tr.Action != ActionDequantize || !tr.Narrowed || tr.MaxRelErr == 0 || tr.MaxRelErr > 1.0/256) {
			t.Errorf("report %+v", tr)
		}
	}

	// Kept as stored (the target is the element type): data, scales and
	// config as they are.
	dst2 := filepath.Join(t.TempDir(), "kept")
	run(t, src, dst2, Options{Policy: ckpt.Policy{Default: target(t, "F8_E4M3")}})
	srcF, _ := safetensors.Open(filepath.Join(src, "model.safetensors"))
	dstF, _ := safetensors.Open(filepath.Join(dst2, "model.safetensors"))
	for _, n := range srcF.Names() {
		a, _ := srcF.Tensor(n)
		bt, err := dstF.Tensor(n)
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		ab, _ := a.Bytes()
		bb, _ := bt.Bytes()
		if !bytes.Equal(ab, bb) {
			t.Errorf("kept: %s differs", n)
		}
	}
	srcF.Close()
	dstF.Close()
	b, _ = os.ReadFile(filepath.Join(dst2, "config.json"))
	if !strings.Contains(string(b), `"weight_block_size"`) {
		t.Errorf("kept config.json: %s", b)
	}

	// Requantized per channel as compressed-tensors E5M2 (a target other
	// than the element type), the rest cast to BF16.
	dst3 := filepath.Join(t.TempDir(), "ct")
	rep = run(t, src, dst3, Options{Policy: ckpt.Policy{Default: target(t, "bf16"), Rules: []ckpt.Rule{mustRule(t, "**.mlp.*.weight=F8_E5M2")}}, Scale: Scale{Granularity: quant.PerChannel}, Verify: true})
	var requant int
	for _, tr := range rep.Tensors {
		if tr.Action == ActionRequantize {
			requant++
		}
	}
	m, err := ckpt.Open(dst3)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := m.Plan()
	if requant != 2 || p.Components[0].Quant.Layout != "compressed-tensors-fp8" || p.Components[0].Quant.Weights != 2 {
		t.Errorf("requantized: %d, plan %+v", requant, p.Components[0].Quant)
	}
	m.Close()

	// Keeping some weights in DeepSeek's layout while quantizing others
	// anew cannot be declared: refused before anything is written.
	dst4 := filepath.Join(t.TempDir(), "mixed")
	_, err = Run(context.Background(), src, dst4, Options{Policy: ckpt.Policy{Default: target(t, "F8_E4M3"), Rules: []ckpt.Rule{mustRule(t, "**.up_proj.weight=F8_E5M2"), mustRule(t, "lm_head.weight=F8_E4M3")}}})
	if !errors.Is(err, ErrCast) {
		t.Errorf("mixed layouts: %v", err)
	}
	if _, err := os.Stat(dst4); err == nil {
		t.Errorf("mixed: %v written", testutil.Entries(t, dst4))
	}
}
