package convert

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/testutil"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/shard"
)

// randTensor returns a tensor of normally distributed values of dtype dt
// (rounded from float32), with a few large and tiny ones.
func randTensor(rng *rand.Rand, name string, dt dtype.DType, shape ...int64) ckpttest.Tensor {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
		switch rng.IntN(50) {
		case 0:
			x[i] *= 1e4
		case 1:
			x[i] *= 1e-6
		}
	}
	b, _ := dt.ByteLen(n)
	data := make([]byte, b)
	if _, err := dtype.EncodeFloat32(data, dt, x, dtype.Options{Saturate: true}); err != nil {
		panic(err)
	}
	return ckpttest.Tensor{Name: name, DType: dt, Shape: shape, Data: data}
}

// llama returns a small transformers-style model's tensors.
func llama(rng *rand.Rand, dt dtype.DType) []ckpttest.Tensor {
	return []ckpttest.Tensor{
		randTensor(rng, "model.embed_tokens.weight", dt, 64, 32),
		randTensor(rng, "model.layers.0.input_layernorm.weight", dt, 32),
		randTensor(rng, "model.layers.0.self_attn.q_proj.weight", dt, 32, 32),
		randTensor(rng, "model.layers.0.self_attn.q_proj.bias", dt, 32),
		randTensor(rng, "model.layers.0.mlp.down_proj.weight", dt, 32, 300),
		randTensor(rng, "model.layers.0.mlp.up_proj.weight", dt, 300, 32),
		randTensor(rng, "model.norm.weight", dt, 32),
		randTensor(rng, "lm_head.weight", dt, 64, 32),
		ckpttest.T("model.position_ids", dtype.I64, 16),
	}
}

func run(t *testing.T, src, dst string, o Options) *Report {
	t.Helper()
	rep, err := Run(context.Background(), src, dst, o)
	if err != nil {
		t.Fatalf("Run(%s, %s): %v", src, dst, err)
	}
	return rep
}

func target(t *testing.T, s string) ckpt.Target {
	t.Helper()
	tg, err := ckpt.ParseTarget(s)
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

// readAll opens a checkpoint and returns every stored tensor's float64
// values (nil for non-float tensors), dtype and metadata.
func readAll(t *testing.T, path string) (map[string][]float64, map[string]safetensors.TensorInfo, map[string]string) {
	t.Helper()
	ck, err := shard.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	vals := map[string][]float64{}
	infos := map[string]safetensors.TensorInfo{}
	for name, st := range ck.Tensors() {
		infos[name] = st.Info()
		v, err := st.Float64s()
		if err != nil {
			t.Fatal(err)
		}
		vals[name] = v
	}
	return vals, infos, ck.Metadata()
}

func TestRunCastsEveryFloatTensor(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	src := ckpttest.File(t, llama(rng, dtype.F32)...)
	srcVals, _, _ := readAll(t, src)
	dst := filepath.Join(t.TempDir(), "model.safetensors")
	rep := run(t, src, dst, Options{Policy: ckpt.Policy{Default: target(t, "bf16")}, ChunkBytes: 4096, Workers: 3})
	vals, infos, meta := readAll(t, dst)
	for name, info := range infos {
		want := dtype.BF16
		if name == "model.position_ids" {
			want = dtype.I64
		}
		if info.DType != want {
			t.Errorf("%s: %s, want %s", name, info.DType, want)
		}
		for i, x := range srcVals[name] {
			y := float64(float32(x)) // F32 source
			var b [2]byte
			dtype.EncodeFloat64(b[:], dtype.BF16, []float64{y}, dtype.Options{})
			var back [1]float64
			dtype.DecodeFloat64(back[:], b[:], dtype.BF16)
			if want == dtype.BF16 && vals[name][i] != back[0] {
				t.Fatalf("%s[%d] = %g, want %g", name, i, vals[name][i], back[0])
			}
		}
	}
	if meta["format"] != "pt" || meta[MetaSource] != filepath.Base(src) || meta[MetaPolicy] != "--dtype BF16" {
		t.Errorf("metadata %v", meta)
	}
	if rep.Summary.Narrowed != 8 || rep.Summary.MaxRelErr <= 0 || rep.Summary.MaxRelErr > 1.0/256 || len(rep.Summary.Worst) == 0 {
		t.Errorf("summary %+v", rep.Summary)
	}
	for _, tr := range rep.Tensors {
		if tr.Name == "model.position_ids" && (tr.Action != ActionCopy || tr.Narrowed || !strings.Contains(tr.Rule, "integer")) {
			t.Errorf("integer tensor: %+v", tr)
		}
	}
}

// TestRunQuantizeLoadBack quantizes linear weights to FP8 at every
// granularity, in both scale formats, loads the output with the loader
// (Load to F32 dequantizes through package quant) and checks every value
// against its source within half a code step times its scale, and the
// reported errors against the ones measured here.
func TestRunQuantizeLoadBack(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	ts := llama(rng, dtype.BF16)
	src := ckpttest.File(t, ts...)
	srcVals, srcInfos, _ := readAll(t, src)
	for _, tc := range []struct {
		scale  string
		format ScaleFormat
		elem   string
	}{
		{"tensor", CompressedTensors, "F8_E4M3"},
		{"channel", CompressedTensors, "F8_E4M3"},
		{"block", CompressedTensors, "F8_E4M3"},
		{"block:16", CompressedTensors, "F8_E5M2"},
		{"block:128", DeepSeek, "F8_E4M3"},
		{"block:7", DeepSeek, "F8_E4M3"},
	} {
		name := tc.scale + "-" + tc.format.String() + "-" + tc.elem
		sc, err := ParseScale(tc.scale)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(t.TempDir(), "model.safetensors")
		rep := run(t, src, dst, Options{Policy: ckpt.Policy{Default: target(t, tc.elem)}, Scale: sc, ScaleFormat: tc.format, ChunkBytes: 4096, Verify: true})
		if !rep.Verified {
			t.Errorf("%s: not verified", name)
		}
		_, infos, meta := readAll(t, dst)
		elem := dtype.MustParse(tc.elem)
		quantized := []string{"model.layers.0.self_attn.q_proj.weight", "model.layers.0.mlp.down_proj.weight", "model.layers.0.mlp.up_proj.weight"}
		suffix := "_scale"
		if tc.format == DeepSeek {
			suffix = "_scale_inv"
		}
		for n, info := range infos {
			switch {
			case slices.Contains(quantized, n):
				if info.DType != elem {
					t.Errorf("%s: %s is %s", name, n, info.DType)
				}
				if _, ok := infos[n+suffix]; !ok {
					t.Errorf("%s: no %s%s", name, n, suffix)
				}
			case strings.HasSuffix(n, suffix):
			default:
				if info.DType != srcInfos[n].DType {
					t.Errorf("%s: %s changed to %s", name, n, info.DType)
				}
			}
		}
		var qc map[string]any
		if err := json.Unmarshal([]byte(meta["quantization_config"]), &qc); err != nil {
			t.Fatalf("%s: quantization_config %q: %v", name, meta["quantization_config"], err)
		}
		if tc.format == CompressedTensors {
			ign, _ := qc["ignore"].([]any)
			if qc["quant_method"] != "compressed-tensors" || !slices.Contains(ign, any("lm_head")) || len(ign) != 1 {
				t.Errorf("%s: config %v", name, qc)
			}
		} else if qc["quant_method"] != "fp8" || qc["fmt"] != "e4m3" {
			t.Errorf("%s: config %v", name, qc)
		}

		m, err := ckpt.Open(dst, ckpt.WithDType(ckpt.To(dtype.F32)))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		s := contents(t, m).Scheme
		w, err := m.Load(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, qn := range quantized {
			qw := s.Weight(qn)
			if qw == nil {
				t.Fatalf("%s: the loader does not see %s as quantized (%v)", name, qn, s.Layout)
			}
			lt, err := w.Tensor(qn)
			if err != nil || lt.Action() != ckpt.ActionDequantize {
				t.Fatalf("%s: %s: %v %v", name, qn, err, lt)
			}
			got, _ := lt.Float32s()
			scales := loadScales(t, dst, qw.Scales[0].Name)
			checkBound(t, name+" "+qn, srcVals[qn], got, scales, qw.Scales[0].Block, srcInfos[qn].Shape, elem)
			var tr *TensorReport
			for i := range rep.Tensors {
				if rep.Tensors[i].Name == qn {
					tr = &rep.Tensors[i]
				}
			}
			var maxAbs, maxY float64
			for i, x := range srcVals[qn] {
				maxAbs = max(maxAbs, math.Abs(x-float64(got[i])))
				maxY = max(maxY, math.Abs(float64(got[i])))
			}
			// The loader rounds q×scale to F32: within one F32 rounding
			// of the exact error reported.
			if tr == nil || tr.Action != ActionQuantize || math.Abs(tr.MaxAbsErr-maxAbs) > maxY*0x1p-24 {
				t.Errorf("%s: %s: report %+v, measured max abs error %g", name, qn, tr, maxAbs)
			}
		}
		w.Close()
		m.Close()
	}
}

func loadScales(t *testing.T, path, name string) []float32 {
	t.Helper()
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Tensor(name)
	if err != nil {
		t.Fatal(err)
	}
	v, err := st.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// checkBound checks |x − y| ≤ s·2^(max(floor(log2|x/s|), emin) − m − 1) + an
// F32 rounding of y: half a unit in the last place of the FP8 code (m
// mantissa bits, emin the smallest normal exponent) times the scale s.
func checkBound(t *testing.T, what string, x []float64, y []float32, scales []float32, block [2]int64, shape []int64, elem dtype.DType) {
	t.Helper()
	mbits, emin := 3, -6
	if elem == dtype.F8_E5M2 {
		mbits, emin = 2, -14
	}
	cols := shape[1]
	gridC := (cols + block[1] - 1) / block[1]
	for i := range x {
		r, c := int64(i)/cols, int64(i)%cols
		s := float64(scales[r/block[0]*gridC+c/block[1]])
		q := math.Abs(x[i]) / s
		e := emin
		if q > 0 {
			_, fe := math.Frexp(q)
			e = max(fe-1, emin)
		}
		bound := math.Ldexp(s, e-mbits-1) + math.Abs(float64(y[i]))*0x1p-24
		if d := math.Abs(x[i] - float64(y[i])); d > bound {
			t.Fatalf("%s: element %d: |%g − %g| = %g > %g (scale %g)", what, i, x[i], y[i], d, bound, s)
		}
	}
}

func TestRunOverflow(t *testing.T) {
	big := make([]byte, 4*4)
	for i, v := range []float32{1, 70000, -1e30, 3} {
		putF32(big[4*i:], v)
	}
	src := ckpttest.File(t, ckpttest.Tensor{Name: "act.scale", DType: dtype.F32, Shape: []int64{4}, Data: big})
	dir := t.TempDir()
	dst := filepath.Join(dir, "model.safetensors")
	rep := run(t, src, dst, Options{Policy: ckpt.Policy{Default: target(t, "f16")}})
	tr := rep.Tensors[0]
	if tr.Inf != 2 || tr.Overflow != 2 || !tr.Lossy() || rep.Summary.Inf != 2 || !slices.Contains(rep.Summary.Worst, "act.scale") {
		t.Errorf("report %+v / %+v", tr, rep.Summary)
	}
	before := testutil.Entries(t, dir)
	_, err := Run(context.Background(), src, filepath.Join(dir, "model.safetensors"), Options{Policy: ckpt.Policy{Default: target(t, "f16")}, FailOnOverflow: true})
	var ce *Error
	if !errors.As(err, &ce) || ce.Kind != ErrOverflow || ce.Tensor != "act.scale" {
		t.Fatalf("FailOnOverflow: %v", err)
	}
	if after := testutil.Entries(t, dir); !slices.Equal(before, after) {
		t.Errorf("folder changed: %v -> %v", before, after)
	}
	rep = run(t, src, dst, Options{Policy: ckpt.Policy{Default: target(t, "f16"), Saturate: true}})
	if tr := rep.Tensors[0]; tr.Inf != 0 || tr.Saturated != 2 || tr.Overflow != 2 {
		t.Errorf("saturate: %+v", tr)
	}
	// Saturated values still overflowed: FailOnOverflow refuses them too.
	if _, err := Run(context.Background(), src, dst, Options{Policy: ckpt.Policy{Default: target(t, "f16"), Saturate: true}, FailOnOverflow: true}); !errors.Is(err, ErrOverflow) {
		t.Errorf("saturate + FailOnOverflow: %v", err)
	}
}

func putF32(b []byte, v float32) {
	u := math.Float32bits(v)
	b[0], b[1], b[2], b[3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
}

func TestRunPlainUnscaledCast(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	src := ckpttest.File(t, llama(rng, dtype.F32)...)
	dst := filepath.Join(t.TempDir(), "model.safetensors")
	rep := run(t, src, dst, Options{Policy: ckpt.Policy{Default: target(t, "F8_E4M3"), Saturate: true}, Scale: Scale{Unscaled: true}})
	var found bool
	for _, w := range rep.Warnings {
		found = found || strings.Contains(w, "without scales")
	}
	if !found || rep.Summary.Underflow == 0 || rep.Summary.Saturated == 0 {
		t.Errorf("unscaled cast says nothing of what it loses: %v %+v", rep.Warnings, rep.Summary)
	}
	_, infos, meta := readAll(t, dst)
	if infos["model.layers.0.mlp.up_proj.weight"].DType != dtype.F8_E4M3 || infos["model.norm.weight"].DType != dtype.F32 || meta["quantization_config"] != "" {
		t.Errorf("infos %v meta %v", infos, meta)
	}
	if _, err := Run(context.Background(), src, dst, Options{Policy: ckpt.Policy{Default: target(t, "F4")}}); !errors.Is(err, ErrCast) {
		t.Errorf("scaled F4: %v", err)
	}
}

// TestRunHostileShapes: an empty weight whose header claims 2^40 rows is
// not given a scale per row (nothing is sized by the claim).
func TestRunHostileShapes(t *testing.T) {
	src := ckpttest.File(t,
		ckpttest.Tensor{Name: "w.weight", DType: dtype.F32, Shape: []int64{1 << 40, 0}, Data: []byte{}},
		ckpttest.Tensor{Name: "v.weight", DType: dtype.F32, Shape: []int64{0, 1 << 40}, Data: []byte{}},
		randTensor(rand.New(rand.NewPCG(1, 1)), "x.weight", dtype.F32, 8, 8))
	dst := filepath.Join(t.TempDir(), "model.safetensors")
	rep := run(t, src, dst, Options{Policy: ckpt.Policy{Default: target(t, "F8_E4M3")}, Scale: Scale{Granularity: 2}, Verify: true})
	_, infos, _ := readAll(t, dst)
	if infos["w.weight"].DType != dtype.F8_E4M3 || len(infos) != 4 || rep.Summary.Quantized != 1 {
		t.Errorf("infos %v, summary %+v", infos, rep.Summary)
	}
}
