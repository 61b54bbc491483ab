package convert

import (
	"bytes"
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/quant"
	"github.com/ckpt-go/ckpt/safetensors"
)

var fp8Weights = map[string][2]int64{
	"model.layers.0.mlp.up_proj.weight":   {256, 192},
	"model.layers.0.mlp.down_proj.weight": {300, 200}, // partial edge blocks
}

// fp8Source writes an F32 component and converts it with convert itself
// into FP8 with the given scales; it returns the FP8 folder.
func fp8Source(t *testing.T, opts Options) string {
	t.Helper()
	rng := rand.New(rand.NewPCG(41, 42))
	var ts []ckpttest.Tensor
	for _, n := range slices.Sorted(func(yield func(string) bool) {
		for n := range fp8Weights {
			if !yield(n) {
				return
			}
		}
	}) {
		s := fp8Weights[n]
		ts = append(ts, randTensor(rng, n, dtype.F32, s[0], s[1]))
	}
	ts = append(ts, randTensor(rng, "model.norm.weight", dtype.F32, 64), randTensor(rng, "lm_head.weight", dtype.F32, 16, 64))
	f32 := ckpttest.Dir(t, ckpttest.Weights{Tensors: ts})
	if err := os.WriteFile(filepath.Join(f32, "config.json"), []byte(`{"model_type": "llama", "torch_dtype": "float32"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "fp8")
	opts.Policy = ckpt.Policy{Default: target(t, "F8_E4M3")}
	run(t, f32, dst, opts)
	return dst
}

// dequantized returns the quantized weights of a folder, dequantized by
// package quant to float64, with their layout's scale tensor names.
func dequantized(t *testing.T, dir string) (map[string][]float64, map[string]string, quant.Layout) {
	t.Helper()
	m, err := ckpt.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	cs := contents(t, m)
	scheme := cs.Scheme
	vals, scales := map[string][]float64{}, map[string]string{}
	for _, w := range scheme.Weights {
		data := storedBytes(t, cs, w.Data.Name)
		var sb [][]byte
		for _, s := range w.Scales {
			sb = append(sb, storedBytes(t, cs, s.Name))
			scales[w.Name] = s.Name
		}
		out := make([]float64, w.Shape[0]*w.Shape[1])
		if _, err := w.Dequantize(dtype.Float64Bytes(out), dtype.F64, data, sb, dtype.Options{}); err != nil {
			t.Fatal(err)
		}
		vals[w.Name] = out
	}
	return vals, scales, scheme.Layout
}

func tensorBytes(t *testing.T, dir, name string) (safetensors.TensorInfo, []byte) {
	t.Helper()
	f, err := safetensors.Open(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tt, err := f.Tensor(name)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	b, _ := tt.Bytes()
	return safetensors.TensorInfo{DType: tt.DType(), Shape: tt.Shape()}, bytes.Clone(b)
}

func configOf(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// An FP8 source converted with other scales is requantized, never copied
// with its scales as stored.
func TestRunFP8Requantize(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  Options
	}{
		{"channel", Options{Scale: Scale{Granularity: quant.PerChannel}}},
		{"block128", Options{Scale: Scale{Granularity: quant.PerBlock}}},
		{"deepseek128", Options{ScaleFormat: DeepSeek}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := fp8Source(t, tc.src)
			before, _, layout := dequantized(t, src)
			dst := filepath.Join(t.TempDir(), "out")
			rep := run(t, src, dst, Options{Policy: ckpt.Policy{Default: target(t, "F8_E4M3")}, Scale: Scale{Granularity: quant.PerBlock, Block: 32}, Verify: true})
			after, scales, outLayout := dequantized(t, dst)
			if outLayout != layout {
				t.Errorf("layout %s, the source's %s (an unset ScaleFormat keeps it)", outLayout, layout)
			}
			for n, s := range fp8Weights {
				info, _ := tensorBytes(t, dst, scales[n])
				want := []int64{(s[0] + 31) / 32, (s[1] + 31) / 32}
				if !slices.Equal(info.Shape, want) || info.DType != dtype.F32 {
					t.Errorf("%s: scale %s %v, want F32 %v", n, info.DType, info.Shape, want)
				}
				var se, ss float64
				for i, a := range before[n] {
					se += (a - after[n][i]) * (a - after[n][i])
					ss += a * a
				}
				if rms := math.Sqrt(se / ss); rms > 0.04 || rms == 0 {
					t.Errorf("%s: rms relative error %g against the source's values", n, rms)
				}
			}
			var requant int
			for _, tr := range rep.Tensors {
				if tr.Action == ActionRequantize {
					requant++
					if tr.Scale != "block:32" || !tr.Narrowed || tr.RMSRelErr == 0 || tr.MaxAbsErr == 0 {
						t.Errorf("report %+v", tr)
					}
				}
			}
			if requant != 2 || rep.Summary.Quantized != 2 {
				t.Errorf("%d requantized (summary %d), want 2", requant, rep.Summary.Quantized)
			}
			if cfg := configOf(t, dst); !strings.Contains(cfg, "32") {
				t.Errorf("config.json does not declare 32×32 blocks: %s", cfg)
			}
		})
	}
}

// Relabelling between compressed-tensors block scales and DeepSeek's
// weight_scale_inv keeps every code and scale bit, and so every value.
func TestRunFP8Relabel(t *testing.T) {
	ct := fp8Source(t, Options{Scale: Scale{Granularity: quant.PerBlock}})
	ctVals, ctScales, ctLayout := dequantized(t, ct)
	if ctLayout != quant.CompressedTensorsFP8 {
		t.Fatalf("source layout %s", ctLayout)
	}
	check := func(from, to string, wantLayout quant.Layout, wantSuffix, wantConfig string, rep *Report) {
		t.Helper()
		vals, scales, layout := dequantized(t, to)
		if layout != wantLayout {
			t.Errorf("%s: layout %s, want %s", to, layout, wantLayout)
		}
		_, fromScales, _ := dequantized(t, from)
		for n := range fp8Weights {
			if scales[n] != n+wantSuffix {
				t.Errorf("%s: scale %q, want %q", n, scales[n], n+wantSuffix)
			}
			_, a := tensorBytes(t, from, n)
			_, b := tensorBytes(t, to, n)
			if !bytes.Equal(a, b) {
				t.Errorf("%s: codes differ", n)
			}
			_, sa := tensorBytes(t, from, fromScales[n])
			_, sb := tensorBytes(t, to, scales[n])
			if !bytes.Equal(sa, sb) {
				t.Errorf("%s: scale bits differ", n)
			}
			for i, v := range ctVals[n] {
				if math.Float64bits(v) != math.Float64bits(vals[n][i]) {
					t.Fatalf("%s[%d]: %g, the source's %g", n, i, vals[n][i], v)
				}
			}
		}
		if cfg := configOf(t, to); !strings.Contains(cfg, wantConfig) || !strings.Contains(cfg, `"model_type": "llama"`) {
			t.Errorf("config.json: %s", cfg)
		}
		var relabel int
		for _, tr := range rep.Tensors {
			switch tr.Action {
			case ActionRelabel:
				relabel++
				if tr.Narrowed || tr.ScaleTensor != tr.Name+wantSuffix {
					t.Errorf("report %+v", tr)
				}
			case ActionRequantize, ActionQuantize, ActionDequantize:
				t.Errorf("report %+v", tr)
			}
		}
		if relabel != 2 {
			t.Errorf("%d relabelled, want 2", relabel)
		}
	}
	ds := filepath.Join(t.TempDir(), "deepseek")
	rep := run(t, ct, ds, Options{Policy: ckpt.Policy{Default: target(t, "F8_E4M3")}, ScaleFormat: DeepSeek, Verify: true})
	check(ct, ds, quant.DeepSeekFP8Block, "_scale_inv", `"quant_method": "fp8"`, rep)
	if cfg := configOf(t, ds); !strings.Contains(cfg, `"weight_block_size": [`) || strings.Contains(cfg, "compressed-tensors") {
		t.Errorf("deepseek config.json: %s", cfg)
	}

	// And back, with no dtype target: the format alone asks for it.
	back := filepath.Join(t.TempDir(), "back")
	rep = run(t, ds, back, Options{ScaleFormat: CompressedTensors, Verify: true})
	check(ds, back, quant.CompressedTensorsFP8, "_scale", `"quant_method": "compressed-tensors"`, rep)
	for n := range fp8Weights {
		ia, a := tensorBytes(t, ct, ctScales[n])
		ib, b := tensorBytes(t, back, ctScales[n])
		if !bytes.Equal(a, b) || !slices.Equal(ia.Shape, ib.Shape) {
			t.Errorf("%s: the round trip changed the scales", n)
		}
	}

	// Nothing asked: copied as stored, and the report says so.
	kept := filepath.Join(t.TempDir(), "kept")
	rep = run(t, ds, kept, Options{Policy: ckpt.Policy{Default: target(t, "F8_E4M3")}})
	if _, _, l := dequantized(t, kept); l != quant.DeepSeekFP8Block || !slices.ContainsFunc(rep.Warnings, func(w string) bool { return strings.Contains(w, "copied with their scales as stored") }) {
		t.Errorf("kept: layout %s, warnings %q", l, rep.Warnings)
	}

	// A per-channel source asked for DeepSeek's layout: requantized into
	// 128×128 blocks, the only grid it stores.
	ch := fp8Source(t, Options{Scale: Scale{Granularity: quant.PerChannel}})
	out := filepath.Join(t.TempDir(), "ch-ds")
	rep = run(t, ch, out, Options{ScaleFormat: DeepSeek})
	if rep.Summary.Quantized != 2 {
		t.Errorf("per channel to deepseek: %d requantized", rep.Summary.Quantized)
	}

	// What the format cannot store is refused before anything is written.
	bad := filepath.Join(t.TempDir(), "bad")
	_, err := Run(context.Background(), ct, bad, Options{ScaleFormat: DeepSeek, Scale: Scale{Granularity: quant.PerChannel}})
	if !errors.Is(err, ErrOption) || !strings.Contains(err.Error(), "block scales only") {
		t.Errorf("deepseek per channel: %v", err)
	}
	if _, err := os.Stat(bad); err == nil {
		t.Errorf("%s written", bad)
	}
}
