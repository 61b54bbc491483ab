package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/sample"
	"github.com/ckpt-go/ckpt/safetensors"
)

func TestInspectFile(t *testing.T) {
	path := ckpttest.File(t,
		ckpttest.T("w", dtype.F8_E4M3, 4, 8),
		ckpttest.T("b", dtype.BF16, 8),
		ckpttest.T("scale", dtype.F32))
	stdout, stderr, code := runCLI(t, "inspect", "--json", path)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep inspectReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Count != 3 || rep.Bytes != 32+16+4 {
		t.Fatalf("count %d bytes %d, want 3 and 52", rep.Count, rep.Bytes)
	}
	byName := map[string]inspectTensor{}
	for _, tt := range rep.Tensors {
		byName[tt.Name] = tt
	}
	if w := byName["w"]; w.DType != "F8_E4M3" || w.Bytes != 32 || len(w.Shape) != 2 || w.Offsets[1]-w.Offsets[0] != 32 {
		t.Errorf("w = %+v", w)
	}
	if s := byName["scale"]; s.Shape == nil || len(s.Shape) != 0 {
		t.Errorf("scalar shape = %#v, want []", s.Shape)
	}
	stdout, _, code = runCLI(t, "inspect", path)
	if code != 0 || !strings.Contains(stdout, "F8_E4M3") || !strings.Contains(stdout, "totals: 3 tensors") {
		t.Fatalf("table output (exit %d):\n%s", code, stdout)
	}
}

func TestInspectShardedFolder(t *testing.T) {
	dir := ckpttest.Dir(t, ckpttest.Weights{
		Shards:  2,
		Tensors: ckpttest.MustParseTensors("a:F32[4] b:F32[4] c:BF16[2,2]"),
	})
	stdout, stderr, code := runCLI(t, "inspect", "--json", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep inspectReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Kind != "folder" || len(rep.Files) != 2 || rep.Count != 3 {
		t.Fatalf("report %+v", rep)
	}
	for _, tt := range rep.Tensors {
		if !strings.HasPrefix(tt.File, "model-0000") {
			t.Errorf("tensor %s: file %q, want a shard name", tt.Name, tt.File)
		}
	}
}

// inspectFiles runs inspect --json on path and returns its files and the
// file of each tensor ("<absent>" when the field is missing).
func inspectFiles(t *testing.T, path string) ([]string, map[string]string) {
	t.Helper()
	stdout, stderr, code := runCLI(t, "inspect", "--json", path)
	if code != 0 {
		t.Fatalf("inspect %s: exit %d: %s", path, code, stderr)
	}
	var rep struct {
		Files   []string `json:"files"`
		Tensors []struct {
			Name string  `json:"name"`
			File *string `json:"file"`
		} `json:"tensors"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	byName := map[string]string{}
	for _, tt := range rep.Tensors {
		byName[tt.Name] = "<absent>"
		if tt.File != nil {
			byName[tt.Name] = *tt.File
		}
	}
	return rep.Files, byName
}

// TestInspectFileNames: every tensor's file is present, relative to the
// root opened (the folder, or the folder of the file or index) and
// slash-separated, whatever was opened; files follows the same rule.
func TestInspectFileNames(t *testing.T) {
	tensors := ckpttest.Tensors(t, "a:F32[4] b:F32[4] c:BF16[2,2]")
	all := func(file string) map[string]string {
		return map[string]string{"a": file, "b": file, "c": file}
	}
	sharded := ckpttest.Dir(t, ckpttest.Weights{Shards: 2, Tensors: tensors})
	index := filepath.Join(sharded, "model.safetensors.index.json")
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if raw, err := os.ReadFile(index); err != nil {
		t.Fatal(err)
	} else if err := json.Unmarshal(raw, &idx); err != nil {
		t.Fatal(err)
	}
	shards := []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}
	for _, f := range idx.WeightMap {
		if f != shards[0] && f != shards[1] {
			t.Fatalf("weight map %v, want the shards %v", idx.WeightMap, shards)
		}
	}
	sample := filepath.Join("sample", "transformer")
	sampleShards := []string{"diffusion_pytorch_model-00001-of-00002.safetensors", "diffusion_pytorch_model-00002-of-00002.safetensors"}
	sampleFP8 := "diffusion_pytorch_model.fp8.safetensors"
	pipe := ckpttest.NewPipeline(t, ckpttest.Pipeline{Components: []ckpttest.Component{
		{Name: "unet", Weights: []ckpttest.Weights{{Prefix: ckpttest.DiffusersPrefix, Tensors: tensors}}},
	}})
	for _, c := range []struct {
		what, path string
		files      []string
		byName     map[string]string // nil: each tensor's file is one of files
	}{
		{"a file", ckpttest.File(t, tensors...), []string{"model.safetensors"}, all("model.safetensors")},
		{"a single-file folder", ckpttest.Dir(t, ckpttest.Weights{Tensors: tensors}), []string{"model.safetensors"}, all("model.safetensors")},
		{"a sharded folder", sharded, shards, idx.WeightMap},
		{"the index", index, shards, idx.WeightMap},
		{"a pipeline's component folder", filepath.Join(pipe, "unet"),
			[]string{"diffusion_pytorch_model.safetensors"}, all("diffusion_pytorch_model.safetensors")},
		{"a relative file", filepath.Join(sample, sampleFP8), []string{sampleFP8}, nil},
		{"a relative folder", sample, sampleShards, nil},
		{"a relative index", filepath.Join(sample, "diffusion_pytorch_model.safetensors.index.json"), sampleShards, nil},
	} {
		files, byName := inspectFiles(t, c.path)
		if !slices.Equal(files, c.files) {
			t.Errorf("%s: files %q, want %q", c.what, files, c.files)
		}
		if c.byName != nil {
			if !maps.Equal(byName, c.byName) {
				t.Errorf("%s: tensor files %q, want %q", c.what, byName, c.byName)
			}
			continue
		}
		for name, f := range byName {
			if !slices.Contains(c.files, f) {
				t.Errorf("%s: tensor %s: file %q, want one of %q", c.what, name, f, c.files)
			}
		}
	}
}

func TestValidate(t *testing.T) {
	good := ckpttest.File(t, ckpttest.T("x", dtype.F16, 3))
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	truncated := filepath.Join(dir, "truncated.safetensors")
	if err := os.WriteFile(truncated, data[:len(data)-1], 0o644); err != nil {
		t.Fatal(err)
	}
	huge := filepath.Join(dir, "huge.safetensors")
	bomb := append([]byte(nil), data...)
	binary.LittleEndian.PutUint64(bomb, 1<<50)
	if err := os.WriteFile(huge, bomb, 0o644); err != nil {
		t.Fatal(err)
	}

	stdout, _, code := runCLI(t, "validate", good)
	if code != 0 || !strings.HasPrefix(stdout, "ok") {
		t.Fatalf("valid file: exit %d, %q", code, stdout)
	}
	stdout, _, code = runCLI(t, "validate", "--json", good, truncated, huge, filepath.Join(dir, "missing.safetensors"))
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	var results []validateResult
	if err := json.Unmarshal([]byte(stdout), &results); err != nil {
		t.Fatal(err)
	}
	wantKinds := []string{"", "incomplete_buffer", "header_too_large", "not_found"}
	if len(results) != len(wantKinds) {
		t.Fatalf("%d results, want %d", len(results), len(wantKinds))
	}
	for i, r := range results {
		if (wantKinds[i] == "") != r.OK {
			t.Errorf("%s: ok=%v", r.File, r.OK)
		}
		if wantKinds[i] != "" && (r.Error == nil || r.Error.Kind != wantKinds[i]) {
			t.Errorf("%s: error %+v, want kind %s", r.File, r.Error, wantKinds[i])
		}
	}
	// The JSON carries exactly the documented keys.
	var raw []map[string]any
	if err := json.Unmarshal([]byte(stdout), &raw); err != nil {
		t.Fatal(err)
	}
	if _, ok := raw[1]["error"].(map[string]any)["message"]; !ok {
		t.Errorf("error object lacks message: %v", raw[1])
	}
}

// Leftovers of interrupted saves are warnings, in the text and the JSON
// form, and do not make the checkpoint invalid.
func TestValidateLeftovers(t *testing.T) {
	dir := t.TempDir()
	if _, err := ckpttest.WriteWeights(dir, ckpttest.Weights{Shards: 2, Tensors: ckpttest.MustParseTensors("a:F32[2] b:F32[2]")}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{".model-00001-of-00002.safetensors.tmp-42", "model-00001-of-00003.safetensors"} {
		os.WriteFile(filepath.Join(dir, n), []byte("x"), 0o644)
	}
	stdout, _, code := runCLI(t, "validate", dir)
	if code != 0 || !strings.HasPrefix(stdout, "ok") || strings.Count(stdout, "\nwarning  ") != 2 ||
		!strings.Contains(stdout, "leftover .model-00001-of-00002.safetensors.tmp-42 (temporary)") {
		t.Fatalf("exit %d:\n%s", code, stdout)
	}
	for _, path := range []string{dir, filepath.Join(dir, "model.safetensors.index.json")} {
		stdout, _, code = runCLI(t, "validate", "--json", path)
		var results []validateResult
		if err := json.Unmarshal([]byte(stdout), &results); err != nil || code != 0 {
			t.Fatalf("exit %d, %v: %s", code, err, stdout)
		}
		r := results[0]
		if !r.OK || len(r.Warnings) != 2 || len(r.Leftovers) != 2 || r.Leftovers[1].Kind != "unreferenced" || r.Leftovers[1].Set != "model.safetensors" {
			t.Errorf("%s: %+v", path, r)
		}
	}
	// A clean checkpoint has no warnings key.
	stdout, _, _ = runCLI(t, "validate", "--json", ckpttest.File(t, ckpttest.T("x", dtype.F16, 3)))
	if strings.Contains(stdout, "warnings") || strings.Contains(stdout, "leftovers") {
		t.Errorf("clean file: %s", stdout)
	}
}

func TestResolve(t *testing.T) {
	tensors := ckpttest.MustParseTensors("w:F32[2,2]")
	half := ckpttest.MustParseTensors("w:BF16[2,2]")
	root := ckpttest.NewPipeline(t, ckpttest.Pipeline{Components: []ckpttest.Component{
		{Name: "transformer", Weights: []ckpttest.Weights{
			{Prefix: "diffusion_pytorch_model", Shards: 2, Tensors: ckpttest.MustParseTensors("a:F32[2] b:F32[2]")},
			{Prefix: "diffusion_pytorch_model", Variant: "bf16", Tensors: ckpttest.MustParseTensors("a:BF16[2] b:BF16[2]")},
		}},
		{Name: "vae", Weights: []ckpttest.Weights{{Prefix: "diffusion_pytorch_model", Tensors: tensors}}},
		{Name: "text_encoder", Library: "transformers", Weights: []ckpttest.Weights{{Tensors: tensors}, {Variant: "bf16", Tensors: half}}},
	}})
	stdout, stderr, code := runCLI(t, "resolve", "--json", "--variant", "bf16", root)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var out struct {
		Pipeline   bool `json:"pipeline"`
		Components []struct {
			Component string   `json:"component"`
			Files     []string `json:"files"`
			Ignored   []struct {
				File   string `json:"file"`
				Reason string `json:"reason"`
			} `json:"ignored"`
			Warnings []string `json:"warnings"`
		} `json:"components"`
	}
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatal(err)
	}
	if !out.Pipeline || len(out.Components) != 3 {
		t.Fatalf("output %s", stdout)
	}
	for _, c := range out.Components {
		switch c.Component {
		case "transformer":
			if len(c.Files) != 1 || c.Files[0] != "diffusion_pytorch_model.bf16.safetensors" || len(c.Ignored) != 3 {
				t.Errorf("transformer plan %+v", c)
			}
		case "vae":
			if len(c.Files) != 1 || len(c.Warnings) == 0 {
				t.Errorf("vae should fall back to untagged weights with a warning: %+v", c)
			}
		}
	}
	// A component listed in model_index.json whose folder is gone fails the
	// pipeline: exit 1, with the component's error kind in the JSON.
	if err := os.RemoveAll(filepath.Join(root, "vae")); err != nil {
		t.Fatal(err)
	}
	stdout, _, code = runCLI(t, "resolve", "--json", "--variant", "bf16", root)
	if code != 1 || !strings.Contains(stdout, `"no_weights"`) || !strings.Contains(stdout, "component missing") {
		t.Fatalf("missing component folder: exit %d, %s", code, stdout)
	}
	// A single component asked for a variant it lacks: exit 1 with a kind.
	stdout, _, code = runCLI(t, "resolve", "--json", "--variant", "fp16", filepath.Join(root, "text_encoder"))
	if code != 1 || !strings.Contains(stdout, `"variant_not_found"`) {
		t.Fatalf("missing variant: exit %d, %s", code, stdout)
	}
}

// TestSampleUpToDate regenerates the bundled sample and compares it with the
// embedded copy, byte for byte: the sample is generated, never edited.
func TestSampleUpToDate(t *testing.T) {
	dir := t.TempDir()
	if err := sample.Write(dir); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	err := fs.WalkDir(sampleFS, "sample", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel := strings.TrimPrefix(path, "sample/")
		seen[rel] = true
		want, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(rel)))
		if err != nil {
			t.Errorf("embedded %s is not generated any more: run go generate ./cmd/ckpt", rel)
			return nil
		}
		got, _ := sampleFS.ReadFile(path)
		if !bytes.Equal(got, want) {
			t.Errorf("embedded %s differs from the generator's output: run go generate ./cmd/ckpt", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, path)
			if !seen[filepath.ToSlash(rel)] {
				t.Errorf("generator writes %s, missing from the embedded sample: run go generate ./cmd/ckpt", rel)
			}
		}
		return nil
	})
}

func TestDemo(t *testing.T) {
	stdout, stderr, code := runCLI(t, "demo", "--keep", t.TempDir())
	wants := []string{
		"load    diffusion_pytorch_model.bf16.safetensors",
		"component image_encoder has no bf16 weights",
		"[incomplete_buffer]", "[header_too_large]",
		"blocks.0.attn.qkv.weight_scale_inv  F32      [3, 1]",
		"F32 -> F16   128 elements: 0 NaN, 3 Inf, 3 overflow",
		"2 NaN, 0 Inf, 2 overflow, 0 saturated",
		"0 NaN, 0 Inf, 2 overflow, 2 saturated",
		"previous file intact: true",
		// ckpt verify and ckpt checksum.
		"after:    5 files, 45 tensors, 43.6 KiB verified by checksum (45 tensors), 0 tensors without checksums",
		`diffusion_pytorch_model-00002-of-00002.safetensors: tensor "proj_out.weight": truncated: the file ends at byte 10270`,
		`diffusion_pytorch_model.bf16.safetensors: tensor "blocks.1.attn.qkv.bias": checksum mismatch in bytes 8448 to 8544`,
		"checksum refuses to write over them: errors.Is(err, ckpt.ErrChecksum) = true",
		"temp files left: 0",
		// The loader: BF16 does not fit the budget, FP8 does.
		"(174080 bytes, budget option): does NOT fit",
		"errors.Is(err, ckpt.ErrBudget) = true",
		"would fit: ", "transformer as stored (F32, F8_E4M3)",
		"budget 170.0 KiB (budget option): fits",
		"text_encoder   7 tensors BF16     convert    (default BF16)",
	}
	// The image encoder stays F32: zero-copy views, or pread copies where
	// the temporary folder is on a network filesystem.
	if !regexp.MustCompile(`image_encoder  5 tensors F32      (view|read) +\(component "image_encoder"=F32\)`).MatchString(stdout) {
		t.Error("demo output lacks the image encoder's 5 F32 tensors")
	}
	// Package quant detects the FP8 variant's layout.
	quantWants := []string{
		"quant    deepseek-fp8-block (from __metadata__ quantization_config), 9 weights",
		"transformer    9 tensors F8_E4M3  quantized  (component \"transformer\"=stored)",
		"scale blocks.0.attn.qkv.weight_scale_inv F32 [3, 1] (scale_inv)",
		"blocks.0.attn.qkv.weight F8_E4M3 [48, 16] -> F32 by dequantize: max |error|",
		"blocks.1.mlp.fc2.weight  F8_E4M3 [16, 64] -> F32 by dequantize: max |error|",
		"run the transformer's MLP blocks on an executor",
		"FP8  12 tensors, 6.6 KiB on the executor ([deepseek-fp8-block])",
		"max |FP8 − BF16| = ",
		"done: every step above ran",
	}
	if code != 0 {
		t.Fatalf("demo exit %d: %s\n%s", code, stderr, stdout)
	}
	wants = append(wants, quantWants...)
	for _, want := range wants {
		if !strings.Contains(stdout, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(stdout)
	}
}

// inspect --json streams its output; it must be byte for byte what
// json.Encoder (indent "  ") makes of the whole report.
func TestInspectJSONStreamMatchesEncoder(t *testing.T) {
	dir := t.TempDir()
	odd := filepath.Join(dir, "odd.safetensors")
	raw, err := safetensors.Serialize([]safetensors.TensorData{
		{Name: "a<b>&\"c\"\\d", DType: dtype.F32, Shape: []int64{2, 3}, Data: make([]byte, 24)},
		{Name: "é\u2028\x7f\t\x01", DType: dtype.BF16, Shape: []int64{4}, Data: make([]byte, 8)},
		{Name: "scalar", DType: dtype.I64, Shape: []int64{}, Data: make([]byte, 8)},
		{Name: "empty", DType: dtype.U8, Shape: []int64{0}},
	}, map[string]string{"format": "pt", "<k>": "v\n&", "z": ""})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(odd, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	none := filepath.Join(dir, "none.safetensors")
	if err := ckpttest.WriteFile(none, nil, nil); err != nil {
		t.Fatal(err)
	}
	// An index whose second shard has a tensor it does not map: warnings
	// and a file per tensor.
	idxDir := filepath.Join(dir, "sharded")
	os.Mkdir(idxDir, 0o755)
	shards := map[string][]ckpttest.Tensor{
		"s-1.safetensors": ckpttest.MustParseTensors("a:F32[4] b:F16[2,2]"),
		"s-2.safetensors": ckpttest.MustParseTensors("c:F32[4] extra:U8[1]"),
	}
	wm := map[string]string{"a": "s-1.safetensors", "b": "s-1.safetensors", "c": "s-2.safetensors"}
	for f, ts := range shards {
		if err := ckpttest.WriteFile(filepath.Join(idxDir, f), ts, map[string]string{"format": "pt"}); err != nil {
			t.Fatal(err)
		}
	}
	index := filepath.Join(idxDir, "model.safetensors.index.json")
	if err := ckpttest.WriteIndex(index, wm, nil); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{odd, none, index} {
		stdout, stderr, code := runCLI(t, "inspect", "--json", path)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", path, code, stderr)
		}
		target, err := openTarget(path, "", false, false)
		if err != nil {
			t.Fatal(err)
		}
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetIndent("", "  ")
		if err := enc.Encode(buildInspectReport(target)); err != nil {
			t.Fatal(err)
		}
		target.Close()
		if stdout != want.String() {
			t.Errorf("%s: streamed JSON differs from encoding/json's:\n%s\nwant:\n%s", path, stdout, want.String())
		}
	}
}
