package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/safetensors"
)

// testPipeline builds a pipeline whose transformer (F32 with a BF16
// variant) and text_encoder both hold a tensor named "shared.weight", and
// a vae; it returns the root.
func testPipeline(t *testing.T) string {
	t.Helper()
	return ckpttest.NewPipeline(t, ckpttest.Pipeline{Components: []ckpttest.Component{
		{Name: "transformer", Weights: []ckpttest.Weights{
			{Prefix: "diffusion_pytorch_model", Shards: 2, Tensors: ckpttest.Tensors(t, "blocks.0.attn.weight:F32[64,32] blocks.0.attn.bias:F32[64] shared.weight:F32[8] ids:I64[5]")},
			{Prefix: "diffusion_pytorch_model", Variant: "bf16", Tensors: ckpttest.Tensors(t, "blocks.0.attn.weight:BF16[64,32] blocks.0.attn.bias:BF16[64] shared.weight:BF16[8] ids:I64[5]")},
		}},
		{Name: "text_encoder", Library: "transformers", Weights: []ckpttest.Weights{
			{Tensors: ckpttest.Tensors(t, "shared.weight:F32[8] final_layer_norm.weight:F32[16] emb.weight:F16[32,8]")},
		}},
		{Name: "vae", Weights: []ckpttest.Weights{
			{Prefix: "diffusion_pytorch_model", Tensors: ckpttest.Tensors(t, "conv.weight:F32[4,3,3,3]")},
		}},
	}})
}

// planJSON runs plan --json and decodes the output as a generic map, so
// that the test checks the documented keys themselves.
func planJSON(t *testing.T, wantCode int, args ...string) map[string]any {
	t.Helper()
	stdout, stderr, code := runCLI(t, append([]string{"plan", "--json"}, args...)...)
	if code != wantCode {
		t.Fatalf("plan %v: exit %d, want %d\nstderr: %s\nstdout: %.2000s", args, code, wantCode, stderr, stdout)
	}
	var out map[string]any
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatalf("plan %v: not JSON: %v\n%s", args, err, stdout)
	}
	return out
}

func num(t *testing.T, m map[string]any, key string) int64 {
	t.Helper()
	v, ok := m[key].(float64)
	if !ok {
		t.Fatalf("key %q is %#v, want a number", key, m[key])
	}
	return int64(v)
}

func TestPlanJSON(t *testing.T) {
	root := testPipeline(t)
	out := planJSON(t, 0, root, "--variant", "bf16", "--dtype", "F32", "--component", "vae=BF16",
		"--keep", "**.bias=stored", "--budget", "1GiB", "--read", "mmap")
	for _, key := range []string{"components", "total_resident_bytes", "peak_bytes", "budget_bytes", "fits"} {
		if _, ok := out[key]; !ok {
			t.Errorf("JSON lacks %q", key)
		}
	}
	if out["fits"] != true || num(t, out, "budget_bytes") != 1<<30 {
		t.Errorf("fits %v, budget %v", out["fits"], out["budget_bytes"])
	}
	comps := map[string]map[string]any{}
	var total int64
	for _, c := range out["components"].([]any) {
		c := c.(map[string]any)
		comps[c["name"].(string)] = c
		total += num(t, c, "resident_bytes")
	}
	if total != num(t, out, "total_resident_bytes") {
		t.Errorf("components add up to %d, total_resident_bytes %d", total, num(t, out, "total_resident_bytes"))
	}
	// transformer (bf16 variant) widened to F32 except the bias, kept BF16
	// by the rule; the I64 ids are never cast by --dtype.
	tr := comps["transformer"]
	if want := int64(64*32*4 + 64*2 + 8*4 + 5*8); num(t, tr, "resident_bytes") != want {
		t.Errorf("transformer resident %d, want %d", num(t, tr, "resident_bytes"), want)
	}
	rules := map[string]string{}
	for _, tp := range tr["tensors"].([]any) {
		tp := tp.(map[string]any)
		rules[tp["name"].(string)] = tp["dtype"].(string) + " " + tp["action"].(string) + " " + tp["rule"].(string)
	}
	for name, want := range map[string]string{
		"blocks.0.attn.weight": "F32 convert default F32",
		"blocks.0.attn.bias":   "BF16 view rule 1 **.bias=stored",
		"ids":                  "I64 view integer tensor: default F32 not applied",
	} {
		if rules[name] != want {
			t.Errorf("%s: %q, want %q", name, rules[name], want)
		}
	}
	// vae narrowed to BF16 by its component target; text_encoder fell back
	// to its untagged weights (with a warning) and is widened to F32.
	if want := int64(4 * 27 * 2); num(t, comps["vae"], "resident_bytes") != want {
		t.Errorf("vae resident %d, want %d", num(t, comps["vae"], "resident_bytes"), want)
	}
	if want := int64(8*4 + 16*4 + 32*8*4); num(t, comps["text_encoder"], "resident_bytes") != want {
		t.Errorf("text_encoder resident %d, want %d", num(t, comps["text_encoder"], "resident_bytes"), want)
	}
	if num(t, out, "peak_bytes") < num(t, out, "total_resident_bytes") {
		t.Errorf("peak %d < resident %d", num(t, out, "peak_bytes"), num(t, out, "total_resident_bytes"))
	}
	// Decimal and binary units, and "none".
	for budget, want := range map[string]int64{"1MB": 1000000, "1MiB": 1 << 20, "2.5GB": 2500000000, "123456": 123456, "none": -1} {
		out := planJSON(t, 0, root, "--budget", budget, "--staging", "1MiB")
		if num(t, out, "budget_bytes") != want {
			t.Errorf("--budget %s: budget_bytes %d, want %d", budget, num(t, out, "budget_bytes"), want)
		}
	}
}

func TestPlanText(t *testing.T) {
	root := testPipeline(t)
	stdout, stderr, code := runCLI(t, "plan", root, "--variant", "bf16", "--dtype", "F32", "--preset", "keep-norms-f32", "--budget", "1GiB")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"variant bf16",
		"component text_encoder has no bf16 weights",
		"transformer: single, variant bf16",
		"load     diffusion_pytorch_model.bf16.safetensors",
		"ignore   diffusion_pytorch_model-00001-of-00002.safetensors",
		"quant    none detected",
		"read     ",
		"resident = ",
		"rule 1 **.bias=F32", // the preset's first rule
		"integer tensor: default F32 not applied",
		"staging = ",
		"--budget): fits",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("plan output lacks %q", want)
		}
	}
	// The weights' decisions, grouped: stored, as, action, count.
	if !regexp.MustCompile(`BF16\s+F32\s+convert\s+2\s+8\.0 KiB\s+default F32`).MatchString(stdout) {
		t.Error("plan output lacks the grouped decision of the two BF16 weights")
	}
	if t.Failed() {
		t.Log(stdout)
	}
	// --tensors lists every tensor with its shape.
	stdout, _, _ = runCLI(t, "plan", root, "--tensors", "--budget", "none", "--read", "mmap")
	if !regexp.MustCompile(`blocks\.0\.attn\.weight\s+F32\s+\[64, 32\]\s+F32\s+view`).MatchString(stdout) || !strings.Contains(stdout, "budget: no budget (disabled): fits") {
		t.Errorf("--tensors output:\n%s", stdout)
	}
}

func TestPlanDoesNotFit(t *testing.T) {
	root := testPipeline(t)
	// Text: the plan is printed, with what would fit, and the status is 1.
	stdout, _, code := runCLI(t, "plan", root, "--dtype", "F32", "--budget", "4KiB", "--staging", "1MiB")
	if code != 1 || !strings.Contains(stdout, "does NOT fit") || !strings.Contains(stdout, "transformer:") ||
		!strings.Contains(stdout, "(4096 bytes, --budget)") {
		t.Fatalf("exit %d:\n%s", code, stdout)
	}
	// JSON too.
	out := planJSON(t, 1, root, "--dtype", "F32", "--budget", "4KiB")
	if out["fits"] != false || num(t, out, "budget_bytes") != 4096 || num(t, out, "shortfall_bytes") != num(t, out, "peak_bytes")-4096 {
		t.Errorf("fits %v budget %v shortfall %v peak %v", out["fits"], out["budget_bytes"], out["shortfall_bytes"], out["peak_bytes"])
	}
	if adv, _ := out["advice"].(string); !strings.Contains(adv, "transformer needs") {
		t.Errorf("advice %q", adv)
	}
}

func TestPlanUsageErrors(t *testing.T) {
	root := testPipeline(t)
	for _, args := range [][]string{
		{"plan"},
		{"plan", root, root},
		{"plan", root, "--budget", "12XB"},
		{"plan", root, "--budget", "-5"},
		{"plan", root, "--budget", "0"},
		{"plan", root, "--budget", "1.5"},
		{"plan", root, "--keep", "norm"},
		{"plan", root, "--keep", "a..b=F32"},
		{"plan", root, "--keep", "x=F33"},
		{"plan", root, "--keep", "nope/x=F32"},
		{"plan", root, "--dtype", "float7"},
		{"plan", root, "--component", "vae"},
		{"plan", root, "--component", "nope=F32"},
		{"plan", root, "--read", "nfs"},
		{"plan", root, "--preset", "fast"},
		{"plan", root, "--workers", "-1"},
		{"plan", root, "--staging", "1KiB"},
		{"plan", root, "--variant", "bad-name"},
		{"get", root},
		{"get", root, "transformer/ids", "--format", "hdf5"},
		{"get", root, "transformer/ids", "--keep", "x"},
	} {
		_, stderr, code := runCLI(t, args...)
		if code != 2 || !strings.Contains(stderr, "Usage: ckpt "+args[0]) {
			t.Errorf("%v: exit %d, want 2 with the usage\n%s", args[1:], code, stderr)
		}
	}
	// A path that does not exist is not a usage error.
	if _, stderr, code := runCLI(t, "plan", filepath.Join(root, "missing")); code != 1 || !strings.Contains(stderr, "missing") {
		t.Errorf("missing path: exit %d, %s", code, stderr)
	}
}

func TestGetRawAndConversion(t *testing.T) {
	path := ckpttest.File(t, ckpttest.Tensors(t, "w:BF16[6,4] ids:I32[3] q:F8_E4M3[2,8]")...)
	fill := func(name string, d dtype.DType, shape ...int64) []byte {
		b, err := ckpttest.Fill(name, d, shape)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// As stored, to standard output: the stored bytes.
	stdout, stderr, code := runCLI(t, "get", path, "w", "--read", "mmap")
	if code != 0 || stdout != string(fill("w", dtype.BF16, 6, 4)) {
		t.Fatalf("exit %d, %d bytes; stderr %s", code, len(stdout), stderr)
	}
	if !strings.Contains(stderr, "w: BF16 [6, 4] -> BF16 by view") {
		t.Errorf("summary %q", stderr)
	}
	// --dtype F32 widens; -o writes the file.
	out := filepath.Join(t.TempDir(), "w.f32")
	if _, stderr, code := runCLI(t, "get", path, "w", "--dtype", "F32", "-o", out); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	want := make([]byte, 6*4*4)
	if _, err := dtype.Convert(want, dtype.F32, fill("w", dtype.BF16, 6, 4), dtype.BF16, dtype.Options{}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(out); !bytes.Equal(got, want) {
		t.Errorf("F32 bytes differ")
	}
	// A rule wins over --dtype; integers are not cast by --dtype.
	stdout, stderr, _ = runCLI(t, "get", path, "q", "--dtype", "F32", "--keep", "q=F16")
	want16 := make([]byte, 16*2)
	dtype.Convert(want16, dtype.F16, fill("q", dtype.F8_E4M3, 2, 8), dtype.F8_E4M3, dtype.Options{})
	if stdout != string(want16) || !strings.Contains(stderr, `rule 1 q=F16`) {
		t.Errorf("rule: %d bytes, %s", len(stdout), stderr)
	}
	stdout, stderr, _ = runCLI(t, "get", path, "ids", "--dtype", "F32")
	if stdout != string(fill("ids", dtype.I32, 3)) || !strings.Contains(stderr, "integer tensor") {
		t.Errorf("ids: %d bytes, %s", len(stdout), stderr)
	}
	// Unknown tensor: exit 1 with similar names.
	if _, stderr, code := runCLI(t, "get", path, "W"); code != 1 || !strings.Contains(stderr, "no such tensor") || !strings.Contains(stderr, "similar names: w") {
		t.Errorf("unknown: exit %d, %s", code, stderr)
	}
}

// --saturate clamps a narrowing conversion to ±max; without it, values
// beyond F16's range become ±Inf.
func TestGetSaturates(t *testing.T) {
	data := binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, math.Float32bits(1e6)), math.Float32bits(-1e6))
	path := ckpttest.File(t, ckpttest.Tensor{Name: "w", DType: dtype.F32, Shape: []int64{2}, Data: data})
	for _, c := range []struct {
		flags []string
		want  []byte // the two F16 values, little-endian
	}{
		{nil, []byte{0x00, 0x7c, 0x00, 0xfc}},                    // +Inf, -Inf
		{[]string{"--saturate"}, []byte{0xff, 0x7b, 0xff, 0xfb}}, // ±65504
	} {
		stdout, stderr, code := runCLI(t, append([]string{"get", path, "w", "--dtype", "F16"}, c.flags...)...)
		if code != 0 || stdout != string(c.want) {
			t.Errorf("%v: exit %d, % x, want % x; %s", c.flags, code, stdout, c.want, stderr)
		}
	}
}

// readNPY parses a .npy file written by get: its descr, shape and data.
func readNPY(t *testing.T, b []byte) (string, []int64, []byte) {
	t.Helper()
	if len(b) < 10 || string(b[:6]) != "\x93NUMPY" || b[6] != 1 {
		t.Fatalf("not a .npy v1 file: %q", b[:min(len(b), 10)])
	}
	hl := int(binary.LittleEndian.Uint16(b[8:]))
	if (10+hl)%64 != 0 || b[10+hl-1] != '\n' {
		t.Fatalf("header of %d bytes not aligned or not ending in a newline", hl)
	}
	m := regexp.MustCompile(`^\{'descr': '([^']+)', 'fortran_order': False, 'shape': \(([0-9, ]*)\), \} *\n$`).FindStringSubmatch(string(b[10 : 10+hl]))
	if m == nil {
		t.Fatalf("header %q", b[10:10+hl])
	}
	var shape []int64
	for _, s := range strings.Split(m[2], ",") {
		if s = strings.TrimSpace(s); s != "" {
			n, _ := strconv.ParseInt(s, 10, 64)
			shape = append(shape, n)
		}
	}
	return m[1], shape, b[10+hl:]
}

func TestGetNPY(t *testing.T) {
	path := ckpttest.File(t, ckpttest.Tensors(t, "w:BF16[3,5] f:F32[7] s:F64[] e:F8_E5M2[4,2] p:F4[2,4] b:BOOL[3]")...)
	dir := t.TempDir()
	for _, c := range []struct {
		name, descr string
		shape       []int64
		flags       []string
		to          dtype.DType
	}{
		{"w", "bfloat16", []int64{3, 5}, nil, dtype.BF16},
		{"w", "<f4", []int64{3, 5}, []string{"--dtype", "F32"}, dtype.F32},
		{"f", "<f4", []int64{7}, nil, dtype.F32},
		{"f", "<f2", []int64{7}, []string{"--dtype", "half"}, dtype.F16},
		{"s", "<f8", nil, nil, dtype.F64},
		{"e", "float8_e5m2", []int64{4, 2}, nil, dtype.F8_E5M2},
		{"p", "float4_e2m1fn", []int64{2, 4}, nil, dtype.F4},
		{"b", "|b1", []int64{3}, nil, dtype.BOOL},
	} {
		out := filepath.Join(dir, c.name+"-"+c.to.String()+".npy")
		args := append([]string{"get", path, c.name, "-o", out}, c.flags...) // .npy implies --format npy
		if _, stderr, code := runCLI(t, args...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
		b, _ := os.ReadFile(out)
		descr, shape, data := readNPY(t, b)
		if descr != c.descr || len(shape) != len(c.shape) || !equalShape(shape, c.shape) {
			t.Errorf("%s as %s: descr %q shape %v, want %q %v", c.name, c.to, descr, shape, c.descr, c.shape)
		}
		// The values: decode what get wrote and what the loader returns.
		m, err := ckpt.Open(path, ckpt.WithRules(ckpt.Rule{Pattern: ckpt.MustParsePattern(c.name), Target: ckpt.To(c.to)}))
		if err != nil {
			t.Fatal(err)
		}
		lt, err := m.LoadTensor(context.Background(), c.name)
		if err != nil {
			t.Fatal(err)
		}
		want := lt.Bytes()
		if c.to == dtype.F4 { // unpacked: one code a byte
			var u []byte
			for _, x := range want {
				u = append(u, x&0xF, x>>4)
			}
			want = u
		}
		if !bytes.Equal(data, want) {
			t.Errorf("%s as %s: data %x, want %x", c.name, c.to, data, want)
		}
		m.Close()
	}
	// --format npy to standard output; --format raw wins over the .npy name.
	stdout, _, code := runCLI(t, "get", "--format", "npy", path, "f")
	if _, _, data := readNPY(t, []byte(stdout)); code != 0 || len(data) != 28 {
		t.Errorf("npy to stdout: exit %d, %d data bytes", code, len(data))
	}
	raw := filepath.Join(dir, "raw.npy")
	if _, _, code := runCLI(t, "get", path, "f", "--format", "raw", "-o", raw); code != 0 {
		t.Fatal(code)
	}
	if b, _ := os.ReadFile(raw); len(b) != 28 {
		t.Errorf("--format raw -o x.npy wrote %d bytes, want the 28 raw bytes", len(b))
	}
}

func equalShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestGetPipelineNames(t *testing.T) {
	root := testPipeline(t)
	// COMPONENT/NAME picks one; the F32 component file holds it.
	stdout, stderr, code := runCLI(t, "get", root, "transformer/shared.weight")
	if code != 0 || len(stdout) != 8*4 || !strings.Contains(stderr, "transformer/shared.weight: F32 [8]") {
		t.Fatalf("exit %d, %d bytes, %s", code, len(stdout), stderr)
	}
	want, _ := ckpttest.Fill("shared.weight", dtype.F32, []int64{8})
	if stdout != string(want) {
		t.Error("transformer/shared.weight bytes differ")
	}
	// With the variant, the BF16 file's bytes.
	stdout, _, _ = runCLI(t, "get", root, "transformer/shared.weight", "--variant", "bf16")
	if wantBF, _ := ckpttest.Fill("shared.weight", dtype.BF16, []int64{8}); stdout != string(wantBF) {
		t.Errorf("bf16 variant: %d bytes", len(stdout))
	}
	// A bare name in two components is ambiguous; in one, it is accepted.
	_, stderr, code = runCLI(t, "get", root, "shared.weight")
	if code != 1 || !strings.Contains(stderr, "ambiguous") || !strings.Contains(stderr, "text_encoder, transformer") ||
		!strings.Contains(stderr, "COMPONENT/NAME") {
		t.Errorf("ambiguous: exit %d, %s", code, stderr)
	}
	stdout, stderr, code = runCLI(t, "get", root, "conv.weight", "--component", "vae=F16")
	if code != 0 || len(stdout) != 4*27*2 || !strings.Contains(stderr, `vae/conv.weight: F32 [4, 3, 3, 3] -> F16 by convert (component "vae"=F16)`) {
		t.Errorf("bare unique name: exit %d, %d bytes, %s", code, len(stdout), stderr)
	}
	// A component rule limits the rule to that component.
	_, stderr, _ = runCLI(t, "get", root, "text_encoder/shared.weight", "--keep", "transformer/shared.weight=F16", "--read", "mmap")
	if !strings.Contains(stderr, "-> F32 by view") {
		t.Errorf("a transformer rule applied to text_encoder: %s", stderr)
	}
}

// deepSeekFixture writes a component folder in DeepSeek's FP8 block layout
// (block 2×4) whose scale for "bad" has the given shape, and returns the
// folder and the expected dequantized F32 values of "w.weight".
func deepSeekFixture(t *testing.T, badScale []int64) (string, []float32) {
	t.Helper()
	q, _ := ckpttest.Fill("w.weight", dtype.F8_E4M3, []int64{4, 8})
	scales := []float32{0.5, 2, 0.25, 8} // [2, 2] blocks of 2×4
	sb := dtype.Float32Bytes(scales)
	tensors := []ckpttest.Tensor{
		{Name: "w.weight", DType: dtype.F8_E4M3, Shape: []int64{4, 8}, Data: q},
		{Name: "w.weight_scale_inv", DType: dtype.F32, Shape: []int64{2, 2}, Data: sb},
		ckpttest.T("norm.weight", dtype.BF16, 8),
	}
	if badScale != nil {
		n := int64(1)
		for _, d := range badScale {
			n *= d
		}
		tensors = append(tensors,
			ckpttest.T("bad.weight", dtype.F8_E4M3, 4, 8),
			ckpttest.T("bad.weight_scale_inv", dtype.F32, badScale...))
	}
	dir := ckpttest.Dir(t, ckpttest.Weights{Tensors: tensors})
	cfg := `{"quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [2, 4]}}`
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	vals := make([]float32, 32)
	dtype.DecodeFloat32(vals, q, dtype.F8_E4M3)
	for i := range vals {
		r, c := i/8, i%8
		vals[i] = float32(float64(vals[i]) * float64(scales[(r/2)*2+c/4]))
	}
	return dir, vals
}

func TestGetDequantizes(t *testing.T) {
	dir, want := deepSeekFixture(t, nil)
	stdout, stderr, code := runCLI(t, "get", dir, "w.weight", "--dtype", "F32")
	if code != 0 || !strings.Contains(stderr, "w.weight: F8_E4M3 [4, 8] (deepseek-fp8-block) -> F32 by dequantize") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if got := stdout; got != string(dtype.Float32Bytes(want)) {
		t.Errorf("dequantized values differ")
	}
	// Kept quantized: the narrow data alone, and the plan says so.
	stdout, stderr, _ = runCLI(t, "get", dir, "w.weight", "--dtype", "quantized")
	q, _ := ckpttest.Fill("w.weight", dtype.F8_E4M3, []int64{4, 8})
	if stdout != string(q) || !strings.Contains(stderr, "without its scales w.weight_scale_inv") {
		t.Errorf("quantized: %d bytes, %s", len(stdout), stderr)
	}
	stdout, _, _ = runCLI(t, "plan", dir, "--dtype", "BF16", "--budget", "none")
	if !strings.Contains(stdout, "quant    deepseek-fp8-block (from config.json quantization_config), 1 weights") ||
		!regexp.MustCompile(`F8_E4M3 \(deepseek-fp8-block\)\s+BF16\s+dequantize\s+1`).MatchString(stdout) {
		t.Errorf("plan:\n%s", stdout)
	}
	// The scale itself, with --scale-tensors.
	stdout, _, code = runCLI(t, "get", dir, "w.weight_scale_inv", "--scale-tensors")
	if code != 0 || stdout != string(dtype.Float32Bytes([]float32{0.5, 2, 0.25, 8})) {
		t.Errorf("scale: exit %d, %x", code, stdout)
	}
}

func TestGetMalformedScales(t *testing.T) {
	dir, _ := deepSeekFixture(t, []int64{3, 2}) // [2, 2] expected
	for _, args := range [][]string{{"get", dir, "w.weight", "--dtype", "F32"}, {"plan", dir}} {
		_, stderr, code := runCLI(t, args...)
		if code != 1 || !strings.Contains(stderr, "bad.weight") {
			t.Errorf("%v: exit %d, want 1 with the tensor named: %s", args, code, stderr)
		}
	}
}

// TestSampleDequantizes checks the numbers the demo's FP8 story rests on:
// the bundled FP8 variant dequantizes to within FP8 precision of the F32
// weights, block by block.
func TestSampleDequantizes(t *testing.T) {
	root, err := extractSample(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m, err := ckpt.Open(filepath.Join(root, "transformer"), ckpt.WithVariant("fp8"), ckpt.WithDType(ckpt.To(dtype.F32)))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ref, err := ckpt.Open(filepath.Join(root, "transformer"))
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	for _, name := range ref.Names() {
		got, err := m.LoadTensor(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		r, err := ref.LoadTensor(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		g, _ := got.Float32s()
		w, _ := r.Float32s()
		if len(got.Shape) == 2 && got.Action() != ckpt.ActionDequantize {
			t.Errorf("%s: %s, want dequantize", name, got.Action())
		}
		for i := range g {
			// E4M3 keeps 3 mantissa bits: relative error ≤ 2^-4 for
			// normal values; subnormals (below 2^-6 × the block's scale,
			// at most 1000/448) are within half their spacing 2^-9 × scale.
			if d := math.Abs(float64(g[i]) - float64(w[i])); d > math.Abs(float64(w[i]))/16+0.005 {
				t.Errorf("%s[%d] = %g, F32 weight %g", name, i, g[i], w[i])
				break
			}
		}
	}
}

// --verify chooses what plan and get check against the checksums files
// name: plan prints what will be verified (and --json says it), get
// refuses a damaged tensor (exit 1 naming it) unless --verify never, and
// --verify always refuses a file without checksums.
func TestPlanAndGetVerify(t *testing.T) {
	plain := ckpttest.File(t, ckpttest.Tensors(t, "w:BF16[6,4] ids:I32[3]")...)
	checked := filepath.Join(t.TempDir(), "checked.safetensors")
	w, _ := ckpttest.Fill("w", dtype.BF16, []int64{6, 4})
	ids, _ := ckpttest.Fill("ids", dtype.I32, []int64{3})
	if err := safetensors.Save(context.Background(), checked, []safetensors.TensorData{
		{Name: "w", DType: dtype.BF16, Shape: []int64{6, 4}, Data: w},
		{Name: "ids", DType: dtype.I32, Shape: []int64{3}, Data: ids},
	}, nil); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := runCLI(t, "plan", checked)
	if code != 0 || !strings.Contains(stdout, "verify (present): 2 tensors (60 B) by checksum") {
		t.Errorf("plan: exit %d\n%s%s", code, stdout, stderr)
	}
	if stdout, _, _ := runCLI(t, "plan", checked, "--tensors"); !regexp.MustCompile(`ids\s+I32\s+\[3\]\s+I32\s+view\s+12\s+no target: as stored\s+checksum`).MatchString(stdout) {
		t.Errorf("plan --tensors:\n%s", stdout)
	}
	out := planJSON(t, 0, plain, "--verify", "always")
	v, _ := out["verify"].(map[string]any)
	if v["policy"] != "always" || num(t, v, "refused") != 2 {
		t.Errorf("plan --json --verify always: verify %v", v)
	}
	if _, stderr, code := runCLI(t, "get", plain, "w", "--verify", "always"); code != 1 || !strings.Contains(stderr, "names no checksums") {
		t.Errorf("get --verify always of a file without checksums: exit %d, %s", code, stderr)
	}
	h, err := safetensors.ReadHeaderFile(checked)
	if err != nil {
		t.Fatal(err)
	}
	info, _ := h.Lookup("w")
	b, _ := os.ReadFile(checked)
	b[h.DataOffset+info.Begin+5] ^= 0x20
	os.WriteFile(checked, b, 0o644)
	if _, stderr, code := runCLI(t, "get", checked, "w", "--dtype", "F32"); code != 1 || !strings.Contains(stderr, `tensor "w": checksum mismatch`) {
		t.Errorf("get of a damaged tensor: exit %d, %s", code, stderr)
	}
	if stdout, _, code := runCLI(t, "get", checked, "w", "--verify", "never"); code != 0 || len(stdout) != 48 {
		t.Errorf("get --verify never of a damaged tensor: exit %d, %d bytes", code, len(stdout))
	}
	if _, stderr, code := runCLI(t, "plan", checked, "--verify", "sometimes"); code != 2 || !strings.Contains(stderr, "--verify") {
		t.Errorf("--verify sometimes: exit %d, %s", code, stderr)
	}
}
