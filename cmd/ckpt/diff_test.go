package main

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/testutil"
)

func f32s(v ...float32) []byte { return dtype.Float32Bytes(v) }

func i64s(v ...int64) []byte {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(x))
	}
	return b
}

// cast converts F32 values to dt.
func cast(t *testing.T, dt dtype.DType, v ...float32) []byte {
	t.Helper()
	n, _ := dt.ByteLen(int64(len(v)))
	out := make([]byte, n)
	if _, err := dtype.Convert(out, dt, f32s(v...), dtype.F32, dtype.Options{}); err != nil {
		t.Fatal(err)
	}
	return out
}

func file(t *testing.T, ts ...ckpttest.Tensor) string {
	t.Helper()
	return ckpttest.File(t, ts...)
}

func tn(name string, dt dtype.DType, data []byte, shape ...int64) ckpttest.Tensor {
	return ckpttest.Tensor{Name: name, DType: dt, Shape: shape, Data: data}
}

// diffJSON runs diff --json and decodes its report; wantCode -1 accepts
// 0 and 1.
func diffJSON(t *testing.T, wantCode int, args ...string) *diffReport {
	t.Helper()
	stdout, stderr, code := runCLI(t, append([]string{"diff", "--json"}, args...)...)
	if code != wantCode && (wantCode >= 0 || code == 2) {
		t.Fatalf("diff %v: exit %d, want %d\nstderr: %s\nstdout: %.3000s", args, code, wantCode, stderr, stdout)
	}
	var r diffReport
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("diff %v: not JSON: %v\n%s", args, err, stdout)
	}
	return &r
}

func TestDiffEqual(t *testing.T) {
	ts := []ckpttest.Tensor{
		tn("w", dtype.F32, f32s(1, -0, float32(math.Inf(1)), 3), 2, 2),
		ckpttest.T("fp8", dtype.F8_E4M3, 16, 8),
		ckpttest.T("fp4", dtype.F4, 6, 4),
		ckpttest.T("fp6", dtype.F6_E2M3, 8),
		ckpttest.T("ids", dtype.I64, 5),
		ckpttest.T("mask", dtype.BOOL, 7),
		ckpttest.T("z", dtype.C64, 3),
	}
	a, b := file(t, ts...), file(t, ts...)
	stdout, stderr, code := runCLI(t, "diff", a, b)
	if code != 0 || !strings.Contains(stdout, "7 tensors compared: 7 equal") || !strings.Contains(stdout, "no differences") {
		t.Fatalf("exit %d\n%s%s", code, stdout, stderr)
	}
	// -0 equals +0.
	c := file(t, append([]ckpttest.Tensor{tn("w", dtype.F32, f32s(1, 0, float32(math.Inf(1)), 3), 2, 2)}, ts[1:]...)...)
	diffJSON(t, 0, a, c)
}

// TestDiffAllclose checks the rule |a−b| <= atol + rtol·|b|, b being B's
// value, at its boundary and in both directions.
func TestDiffAllclose(t *testing.T) {
	one := file(t, tn("w", dtype.F32, f32s(1, 2), 2))
	oneHalf := file(t, tn("w", dtype.F32, f32s(1.5, 2), 2))
	r := diffJSON(t, 1, oneHalf, one)
	d := r.Tensors[0]
	if d.Status != "differs" || d.Differing != 1 || d.MaxAbs != 0.5 || d.MaxRel != 0.5 ||
		!slices.Equal(d.Worst, []int64{0}) || *d.WorstA != 1.5 || *d.WorstB != 1 {
		t.Errorf("1.5 vs 1: %+v", d)
	}
	diffJSON(t, 0, oneHalf, one, "--atol", "0.25", "--rtol", "0.25") // 0.5 <= 0.25 + 0.25·1
	diffJSON(t, 1, oneHalf, one, "--atol", "0.25", "--rtol", "0.2499")
	diffJSON(t, 0, oneHalf, one, "--atol", "0.5")
	// rtol scales B's value: 0.5 > 0.4·1, but 0.5 <= 0.4·1.5.
	diffJSON(t, 1, oneHalf, one, "--rtol", "0.4")
	diffJSON(t, 0, one, oneHalf, "--rtol", "0.4")
}

func TestDiffNaNAndInf(t *testing.T) {
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	withNaN := file(t, tn("w", dtype.F32, f32s(nan, 1, inf), 3))
	// NaN equals nothing by default, as NumPy's allclose: a file with a
	// NaN differs from itself.
	r := diffJSON(t, 1, withNaN, withNaN)
	if d := r.Tensors[0]; d.NaNMismatch != 1 || d.Differing != 1 || d.InfMismatch != 0 {
		t.Errorf("NaN vs NaN: %+v", d)
	}
	diffJSON(t, 0, withNaN, withNaN, "--equal-nan")
	// NaN vs a number differs even with --equal-nan; so does Inf vs a
	// number, whatever the tolerance.
	other := file(t, tn("w", dtype.F32, f32s(0, 1, 1e30), 3))
	r = diffJSON(t, 1, withNaN, other, "--equal-nan", "--atol", "1e38")
	if d := r.Tensors[0]; d.NaNMismatch != 1 || d.InfMismatch != 1 || d.Differing != 2 {
		t.Errorf("NaN, Inf vs numbers: %+v", d)
	}
	// Inf vs Inf is equal; bytes of different NaN encodings too, with
	// --equal-nan, across dtypes.
	bf := file(t, tn("w", dtype.BF16, cast(t, dtype.BF16, nan, 1, inf), 3))
	diffJSON(t, 0, withNaN, bf, "--equal-nan")
}

func TestDiffDTypes(t *testing.T) {
	f := file(t, tn("w", dtype.F32, f32s(1, 0.5, -2, 448), 4))
	bf := file(t, tn("w", dtype.BF16, cast(t, dtype.BF16, 1, 0.5, -2, 448), 4))
	fp8 := file(t, tn("w", dtype.F8_E4M3, cast(t, dtype.F8_E4M3, 1, 0.5, -2, 448), 4))
	for _, other := range []string{bf, fp8} {
		stdout, _, code := runCLI(t, "diff", f, other)
		if code != 0 || !strings.Contains(stdout, "1 tensors have different dtypes, not counted") {
			t.Errorf("same values, another dtype: exit %d\n%s", code, stdout)
		}
		r := diffJSON(t, 1, f, other, "--strict-dtype")
		if d := r.Tensors[0]; d.Status != "differs" || !slices.Equal(d.Reasons, []string{"dtype"}) || d.Differing != 0 {
			t.Errorf("--strict-dtype: %+v", d)
		}
	}
	// A value BF16 cannot hold.
	f2 := file(t, tn("w", dtype.F32, f32s(1, 0.5, -2, 449), 4))
	r := diffJSON(t, 1, f2, bf)
	if d := r.Tensors[0]; d.MaxAbs != 1 || !slices.Equal(d.Reasons, []string{"dtype", "values"}) {
		t.Errorf("449 vs BF16 448: %+v", d)
	}
}

// TestDiffInt64Exact: two I64 values 2^60 and 2^60+1 are the same float64,
// but differ.
func TestDiffInt64Exact(t *testing.T) {
	a := file(t, tn("step", dtype.I64, i64s(1<<60, math.MinInt64), 2))
	b := file(t, tn("step", dtype.I64, i64s(1<<60+1, math.MaxInt64), 2))
	r := diffJSON(t, 1, a, b)
	if d := r.Tensors[0]; d.Differing != 2 || d.MaxAbs != jsonFloat(math.Ldexp(1, 64)) || !slices.Equal(d.Worst, []int64{1}) {
		t.Errorf("I64: %+v", d)
	}
	// The worst element's |a−b| is exact too.
	c := file(t, tn("step", dtype.I64, i64s(1<<60), 1))
	d := file(t, tn("step", dtype.I64, i64s(1<<60+1), 1))
	if r := diffJSON(t, 1, c, d); *r.Tensors[0].WorstAbs != 1 {
		t.Errorf("2^60 vs 2^60+1: %+v", r.Tensors[0])
	}
	stdout, _, _ := runCLI(t, "diff", c, d)
	if want := "worst at [0]: 1.1529215e+18 vs 1.1529215e+18 (|a-b| 1 > 0 allowed)"; !strings.Contains(stdout, want) {
		t.Errorf("output lacks %q:\n%s", want, stdout)
	}
}

func TestDiffNamesAndShapes(t *testing.T) {
	a := file(t,
		ckpttest.T("same", dtype.F16, 4),
		ckpttest.T("only.a", dtype.F32, 2),
		ckpttest.T("shape", dtype.F32, 2, 3),
		tn("values", dtype.F32, f32s(1, 2, 3), 3),
		ckpttest.T("complex", dtype.C64, 2),
	)
	b := file(t,
		ckpttest.T("same", dtype.F16, 4),
		ckpttest.T("only.b", dtype.BF16, 5),
		ckpttest.T("shape", dtype.F32, 3, 2),
		tn("values", dtype.F32, f32s(1, 2, 4), 3),
		ckpttest.T("complex", dtype.F32, 2),
	)
	stdout, _, code := runCLI(t, "diff", a, b)
	if code != 1 {
		t.Fatalf("exit %d\n%s", code, stdout)
	}
	for _, want := range []string{
		"4 tensors compared: 1 equal, 1 with different values, 2 with different shapes; 1 only in A, 1 only in B",
		"5 tensors differ, the worst first:",
		"  only.a: only in A, F32[2]",
		"  only.b: only in B, BF16[5]",
		"  shape: F32[2,3] vs F32[3,2], shapes differ",
		"  complex: C64[2] vs F32[2], a complex and a real tensor",
		"  values: F32[3], 1 of 3 elements differ, max abs 1, max rel 0.25, worst at [2]: 3 vs 4",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	// The worst first: names and shapes, then values.
	if i, j := strings.Index(stdout, "shapes differ"), strings.Index(stdout, "elements differ"); i > j {
		t.Errorf("values listed before shapes:\n%s", stdout)
	}
	r := diffJSON(t, 1, a, b)
	if r.OnlyInA != 1 || r.OnlyInB != 1 || r.ShapeDiffers != 2 || r.ValuesDiffer != 1 || r.Equal != 1 || len(r.Worst) != 5 || r.Worst[4] != "values" {
		t.Errorf("report %+v", r)
	}
	stdout, _, _ = runCLI(t, "diff", a, b, "--top", "2")
	if !strings.Contains(stdout, "... and 3 more") {
		t.Errorf("--top 2:\n%s", stdout)
	}
}

func TestDiffJSONInfinity(t *testing.T) {
	a := file(t, tn("w", dtype.F32, f32s(1), 1))
	b := file(t, tn("w", dtype.F32, f32s(0), 1))
	stdout, _, code := runCLI(t, "diff", "--json", a, b)
	if code != 1 || !strings.Contains(stdout, `"max_rel": "inf"`) {
		t.Errorf("exit %d:\n%s", code, stdout)
	}
}

func TestDiffPipelines(t *testing.T) {
	p := func(vae []byte, extra ...ckpttest.Tensor) string {
		return ckpttest.NewPipeline(t, ckpttest.Pipeline{Components: []ckpttest.Component{
			{Name: "transformer", Weights: []ckpttest.Weights{{Prefix: "diffusion_pytorch_model", Shards: 2,
				Tensors: ckpttest.Tensors(t, "blocks.0.attn.weight:F32[64,32] shared.weight:F32[8]")}}},
			{Name: "vae", Weights: []ckpttest.Weights{{Prefix: "diffusion_pytorch_model",
				Tensors: append([]ckpttest.Tensor{tn("shared.weight", dtype.F32, vae, 2)}, extra...)}}},
		}})
	}
	a, b := p(f32s(1, 2)), p(f32s(1, 2.5))
	r := diffJSON(t, 1, a, b)
	if r.Compared != 3 || !slices.Equal(r.Worst, []string{"vae/shared.weight"}) {
		t.Errorf("pipelines: %+v", r)
	}
	diffJSON(t, 0, a, a)
	// A tensor only one component of B has is named and described.
	c := p(f32s(1, 2), ckpttest.T("extra.bias", dtype.BF16, 3, 2))
	r = diffJSON(t, 1, a, c)
	last := r.Tensors[len(r.Tensors)-1]
	if r.OnlyInB != 1 || last.Name != "vae/extra.bias" || last.Status != "only_in_b" || last.DTypeB != "BF16" || !slices.Equal(last.ShapeB, []int64{3, 2}) {
		t.Errorf("only in B: %+v", last)
	}
}

func TestDiffUsage(t *testing.T) {
	f := file(t, ckpttest.T("w", dtype.F32, 2))
	for _, args := range [][]string{
		{"diff", f},
		{"diff", f, f, "--atol", "-1"},
		{"diff", f, f, "--rtol", "NaN"},
		{"diff", f, f, "--top", "-1"},
	} {
		if _, _, code := runCLI(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	_, stderr, code := runCLI(t, "diff", f, filepath.Join(t.TempDir(), "missing.safetensors"))
	if code != 2 || !strings.Contains(stderr, "missing.safetensors") {
		t.Errorf("a missing B: exit %d, %s", code, stderr)
	}
}

// The child of TestDiffBoundedMemory: runs ckpt diff on the two files
// named in the environment.
func TestDiffMemoryChild(t *testing.T) {
	a, b := os.Getenv("CKPT_DIFF_A"), os.Getenv("CKPT_DIFF_B")
	if a == "" {
		t.Skip("run by TestDiffBoundedMemory")
	}
	if _, _, code := runCLI(t, "diff", a, b); code != 1 {
		t.Fatalf("exit %d", code)
	}
	testutil.PrintReport(testutil.ProcStatus("VmHWM"))
}

// TestDiffBoundedMemory compares two 128 MiB checkpoints in a child
// process and checks its peak resident memory: the compared pages of the
// mappings are dropped as the comparison passes them, so it stays far
// below the 256 MiB of the two files.
func TestDiffBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 256 MiB")
	}
	const n = 32 << 20 // F32 elements: 128 MiB
	dir := t.TempDir()
	data := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(float32(i%1000)))
	}
	a, b := filepath.Join(dir, "a.safetensors"), filepath.Join(dir, "b.safetensors")
	if err := ckpttest.WriteFile(a, []ckpttest.Tensor{tn("w", dtype.F32, data, n)}, nil); err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint32(data[4*(n-1):], math.Float32bits(-1))
	if err := ckpttest.WriteFile(b, []ckpttest.Tensor{tn("w", dtype.F32, data, n)}, nil); err != nil {
		t.Fatal(err)
	}
	data = nil
	// The child's own peak (VmHWM), not its rusage: after a vfork the
	// latter starts from this process's.
	var maxRSS int64
	if out := testutil.RunChild(t, "TestDiffMemoryChild", []string{"CKPT_DIFF_A=" + a, "CKPT_DIFF_B=" + b, "GOGC=100"}, &maxRSS); maxRSS < 0 {
		t.Skipf("no VmHWM: %s", out)
	}
	t.Logf("peak RSS of diff on two 128 MiB files: %.1f MiB", float64(maxRSS)/(1<<20))
	if maxRSS > 96<<20 {
		t.Errorf("peak RSS %d MiB, want under 96 MiB", maxRSS>>20)
	}
}

// TestDiffDequantized: the sample's FP8 transformer (DeepSeek blocks) as
// stored has scale tensors the F32 one lacks and FP8 codes for values;
// with --dtype F32 both load dequantized and compare value by value,
// within FP8's relative precision.
func TestDiffDequantized(t *testing.T) {
	a := filepath.Join("sample", "transformer", "diffusion_pytorch_model.safetensors.index.json")
	b := filepath.Join("sample", "transformer", "diffusion_pytorch_model.fp8.safetensors")
	r := diffJSON(t, 1, a, b)
	if r.OnlyInB == 0 {
		t.Errorf("as stored, the scales are B's only: %+v", r)
	}
	r = diffJSON(t, 1, a, b, "--dtype", "F32")
	if r.OnlyInA+r.OnlyInB != 0 || r.DTypeDiffers != 0 || r.ValuesDiffer == 0 {
		t.Errorf("--dtype F32: %+v", r)
	}
	// FP8 E4M3 rounds to 3 mantissa bits (a relative error of at most
	// 2^-4); the sample's block scales saturate a few outliers.
	code := 0
	if r = diffJSON(t, -1, a, b, "--dtype", "F32", "--rtol", "0.07"); r.Differ {
		code = 1
	}
	for _, d := range r.Tensors {
		if d.Differing*20 > d.Elements {
			t.Errorf("%s: %d of %d elements beyond FP8's precision (exit %d)", d.Name, d.Differing, d.Elements, code)
		}
	}
}

// breaks reports whether a and b break the rule |a−b| <= atol + rtol·|b|.
func breaks(a, b, atol, rtol float64) bool {
	return !(math.Abs(a-b) <= atol+rtol*math.Abs(b))
}

// TestDiffWorstBreaksRule: the element shown as the worst is the one that
// breaks the rule by the most (the largest |a−b| / (atol + rtol·|b|)),
// not the one of the largest |a−b|, which here is within its tolerance;
// that one is shown beside it.
func TestDiffWorstBreaksRule(t *testing.T) {
	// Under --rtol 0.07: [0,0] is off by 5 (5%, within), [0,2] by 0.001
	// (100%, 14.3 times its tolerance), [1,1] by 0.5 (25%, 3.6 times, but
	// the larger excess).
	a := file(t, tn("k_proj", dtype.F32, f32s(105, 1, 0.002, 5, 2.5, 0), 2, 3))
	b := file(t, tn("k_proj", dtype.F32, f32s(100, 1, 0.001, 5, 2, 0), 2, 3))
	stdout, stderr, code := runCLI(t, "diff", a, b, "--rtol", "0.07")
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", code, stdout, stderr)
	}
	for _, want := range []string{
		"k_proj: F32[2,3], 2 of 6 elements differ, max abs 5, max rel 1, worst at [0,2]: 0.00200000009 vs 0.00100000005 (|a-b| 0.001 > 7e-05 allowed, 14.3x)",
		", largest |a-b| at [0,0]: 105 vs 100 (within its tolerance)",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	r := diffJSON(t, 1, a, b, "--rtol", "0.07")
	d := r.Tensors[0]
	wa, wb := float64(float32(0.002)), float64(float32(0.001))
	if d.Status != "differs" || d.Differing != 2 || d.MaxAbs != 5 ||
		!slices.Equal(d.Worst, []int64{0, 2}) || float64(*d.WorstA) != wa || float64(*d.WorstB) != wb ||
		float64(*d.WorstRatio) != (wa-wb)/(0.07*wb) ||
		!slices.Equal(d.MaxAbsIndex, []int64{0, 0}) || *d.MaxAbsA != 105 || *d.MaxAbsB != 100 {
		t.Errorf("--json: %+v", d)
	}
	if !breaks(float64(*d.WorstA), float64(*d.WorstB), 0, 0.07) {
		t.Errorf("worst %v vs %v is within the rule", *d.WorstA, *d.WorstB)
	}
	// With --atol 0.01 only [1,1] breaks the rule.
	r = diffJSON(t, 1, a, b, "--rtol", "0.07", "--atol", "0.01")
	if d := r.Tensors[0]; d.Differing != 1 || !slices.Equal(d.Worst, []int64{1, 1}) || *d.WorstA != 2.5 || *d.WorstB != 2 ||
		!slices.Equal(d.MaxAbsIndex, []int64{0, 0}) {
		t.Errorf("--atol 0.01: %+v", d)
	}
	// Both tolerances 0: every difference breaks the rule infinitely; the
	// largest excess, |a−b| itself, decides.
	stdout, _, _ = runCLI(t, "diff", a, b)
	if want := "3 of 6 elements differ, max abs 5, max rel 1, worst at [0,0]: 105 vs 100 (|a-b| 5 > 0 allowed)\n"; !strings.Contains(stdout, want) {
		t.Errorf("output lacks %q:\n%s", want, stdout)
	}
	// Within --atol 0.5 --rtol 0.07, nothing breaks the rule: exit 0, no
	// worst element, the largest error still located.
	stdout, _, code = runCLI(t, "diff", a, b, "--rtol", "0.07", "--atol", "0.5")
	if code != 0 || !strings.Contains(stdout, "no differences") {
		t.Errorf("within tolerance: exit %d\n%s", code, stdout)
	}
	r = diffJSON(t, 0, a, b, "--rtol", "0.07", "--atol", "0.5")
	if d := r.Tensors[0]; r.Differ || d.Status != "equal" || d.Differing != 0 || d.Worst != nil || d.WorstA != nil ||
		d.MaxAbs != 5 || !slices.Equal(d.MaxAbsIndex, []int64{0, 0}) {
		t.Errorf("within tolerance: %+v", d)
	}
}

// TestDiffWorstMismatch: a NaN or infinity mismatch breaks the rule by an
// unbounded amount: it is the worst element, ahead of any finite one.
func TestDiffWorstMismatch(t *testing.T) {
	a := file(t, tn("w", dtype.F32, f32s(100, 1, float32(math.Inf(1))), 3))
	b := file(t, tn("w", dtype.F32, f32s(1, 1, 2), 3))
	r := diffJSON(t, 1, a, b)
	if d := r.Tensors[0]; !slices.Equal(d.Worst, []int64{2}) || !math.IsInf(float64(*d.WorstRatio), 1) ||
		!slices.Equal(d.MaxAbsIndex, []int64{0}) || d.MaxAbs != 99 {
		t.Errorf("Inf vs 2: %+v", d)
	}
	stdout, _, _ := runCLI(t, "diff", a, b)
	if want := "worst at [2]: +Inf vs 2, largest |a-b| at [0]: 100 vs 1 (beyond its tolerance too)"; !strings.Contains(stdout, want) {
		t.Errorf("output lacks %q:\n%s", want, stdout)
	}
}

// TestDiffFP8Example runs the README's example, ckpt diff F32 FP8 --dtype
// F32 --rtol 0.07 --atol 1e-4, on weights of a realistic spread (σ 0.02,
// a few outliers) quantized to scaled FP8 E4M3 by ckpt convert: without
// --atol the tiny weights, which E4M3 keeps to a fixed step, break the
// rule (and are the ones shown); with it nothing does.
func TestDiffFP8Example(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var ts []ckpttest.Tensor
	for _, p := range []string{"q_proj", "k_proj"} {
		v := make([]float32, 256*256)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * 0.02)
		}
		for range 8 {
			v[rng.IntN(len(v))] = float32(rng.NormFloat64() * 0.5)
		}
		ts = append(ts, tn("model.layers.0.self_attn."+p+".weight", dtype.F32, f32s(v...), 256, 256))
	}
	src := file(t, ts...)
	for _, scale := range [][]string{{}, {"--scale-format", "deepseek"}, {"--fp8-scale", "tensor"}} {
		dst := filepath.Join(t.TempDir(), "model.safetensors")
		if stdout, stderr, code := runCLI(t, append(append([]string{"convert", "--dtype", "F8_E4M3"}, scale...), src, dst)...); code != 0 {
			t.Fatalf("convert %v: exit %d\n%s%s", scale, code, stdout, stderr)
		}
		r := diffJSON(t, 1, src, dst, "--dtype", "F32", "--rtol", "0.07")
		for _, d := range r.Tensors {
			if d.Differing == 0 {
				continue
			}
			if d.WorstA == nil || !breaks(float64(*d.WorstA), float64(*d.WorstB), 0, 0.07) || math.Abs(float64(*d.WorstB)) > 1e-3 {
				t.Errorf("%v: %s: worst element %v, want a tiny weight breaking the rule: %+v", scale, d.Name, d.Worst, d)
			}
		}
		diffJSON(t, 0, src, dst, "--dtype", "F32", "--rtol", "0.07", "--atol", "1e-4")
	}
}
