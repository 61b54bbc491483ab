package convert

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/testutil"
	"github.com/ckpt-go/ckpt/variant"
)

func TestWeightsName(t *testing.T) {
	for _, tc := range []struct {
		in, prefix, variant string
		ok                  bool
	}{
		{"model.safetensors", "model", "", true},
		{"model.fp16.safetensors", "model", "fp16", true},
		{"diffusion_pytorch_model-00001-of-00002.safetensors", "diffusion_pytorch_model", "", true},
		{"model.bf16-00002-of-00003.safetensors", "model", "bf16", true},
		{"model-00001-of-00002.fp16.safetensors", "model", "fp16", true},
		{"model-00001-of-00002.swap-0123456789ab.safetensors", "model", "", true},
		{"model.safetensors.index.json", "model", "", true},
		{"model.safetensors.index.fp8.json", "model", "fp8", true},
		{"diffusion_pytorch_model.safetensors.fp16.index.json", "diffusion_pytorch_model", "fp16", true},
		{"my model.safetensors", "my model", "", false},
		{"a.b.c.safetensors", "a", "b.c", false},
		{"weights.json", "", "", false},
	} {
		p, v, ok := weightsName(tc.in)
		if p != tc.prefix || v != tc.variant || ok != tc.ok {
			t.Errorf("weightsName(%q) = %q, %q, %v; want %q, %q, %v", tc.in, p, v, ok, tc.prefix, tc.variant, tc.ok)
		}
	}
}

// component folder: config, tokenizer files in a subfolder, weights of
// another format and another variant left out.
func TestRunFolderLayout(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	src := ckpttest.Dir(t,
		ckpttest.Weights{Tensors: llama(rng, dtype.F32), Shards: 3, Metadata: map[string]string{"format": "pt", "origin": "test"}},
		ckpttest.Weights{Variant: "fp16", Tensors: llama(rng, dtype.F16)})
	write := func(rel, s string) {
		p := filepath.Join(src, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("config.json", `{"architectures": ["LlamaForCausalLM"], "torch_dtype": "float32", "hidden_size": 32}`)
	write("generation_config.json", `{"do_sample": true}`)
	write("tokenizer/tokenizer.json", `{"model": {}}`)
	write("pytorch_model.bin", "not copied")
	write("README.md", "# model")

	dst := filepath.Join(t.TempDir(), "out")
	rep := run(t, src, dst, Options{Policy: ckpt.Policy{Default: target(t, "F8_E4M3")}, MaxShardSize: 20000})
	files := testutil.Entries(t, dst)
	var shards int
	for _, f := range files {
		if m, _ := filepath.Match("model-0000?-of-0000?.safetensors", f); m {
			shards++
		}
	}
	want := []string{"README.md", "config.json", "generation_config.json", "model.safetensors.index.json", "tokenizer"}
	if shards < 2 || len(files) != len(want)+shards || !slices.Equal(slices.DeleteFunc(slices.Clone(files), func(f string) bool { return strings.HasPrefix(f, "model-") }), want) {
		t.Errorf("output folder %v, want %v and shards", files, want)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "tokenizer", "tokenizer.json")); string(b) != `{"model": {}}` {
		t.Errorf("tokenizer not copied: %q", b)
	}
	var skipped []string
	for _, s := range rep.Skipped {
		skipped = append(skipped, s.Path)
	}
	if !slices.Contains(skipped, "pytorch_model.bin") || !slices.Contains(skipped, "model.fp16.safetensors") {
		t.Errorf("skipped %v", rep.Skipped)
	}
	var cfg map[string]any
	b, _ := os.ReadFile(filepath.Join(dst, "config.json"))
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	qc, _ := cfg["quantization_config"].(map[string]any)
	if qc["quant_method"] != "compressed-tensors" || cfg["torch_dtype"] != "float32" || cfg["hidden_size"] != float64(32) {
		t.Errorf("config.json: %s", b)
	}
	if !strings.HasPrefix(string(b), "{\n  \"architectures\"") {
		t.Errorf("config.json does not keep its keys' order: %s", b)
	}
	// The loader reads the folder as a compressed-tensors model; every
	// tensor is there, each of the three shards holds whole weights and
	// their scales.
	m, err := ckpt.Open(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	p, _ := m.Plan()
	if p.Components[0].Quant.Layout != "compressed-tensors-fp8" || p.Components[0].Quant.Weights != 3 || p.Components[0].Quant.Source != "config.json quantization_config" {
		t.Errorf("plan: %+v", p.Components[0].Quant)
	}
	cs := contents(t, m)
	f1 := storedPart(t, cs, "model.layers.0.mlp.down_proj.weight").File
	f2 := storedPart(t, cs, "model.layers.0.mlp.down_proj.weight_scale").File
	if f1 != f2 || cs.Metadata["origin"] != "test" {
		t.Errorf("weight in %s, scale in %s; metadata %v", f1, f2, cs.Metadata)
	}
	// Converting again replaces the set atomically (the shards packed by
	// size by the source's three): nothing of the old set, no temporary
	// file left.
	if shards == 3 {
		t.Fatalf("MaxShardSize made %d shards, as many as the source has", shards)
	}
	run(t, src, dst, Options{Policy: ckpt.Policy{Default: target(t, "bf16")}})
	files = testutil.Entries(t, dst)
	want = []string{"README.md", "config.json", "generation_config.json",
		"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors",
		"model.safetensors.index.json", "tokenizer"}
	if !slices.Equal(files, want) {
		t.Errorf("after reconverting: %v, want %v", files, want)
	}
	b, _ = os.ReadFile(filepath.Join(dst, "config.json"))
	if strings.Contains(string(b), "quantization_config") || !strings.Contains(string(b), `"torch_dtype": "bfloat16"`) {
		t.Errorf("config.json after BF16: %s", b)
	}
}

// TestRunVariantBeside writes variant files beside the source and checks
// that variant resolution picks each set cleanly.
func TestRunVariantBeside(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	src := ckpttest.Dir(t, ckpttest.Weights{Prefix: "diffusion_pytorch_model", Tensors: llama(rng, dtype.F32), Shards: 2})
	os.WriteFile(filepath.Join(src, "config.json"), []byte(`{"_class_name": "X"}`), 0o644)
	run(t, src, src, Options{Policy: ckpt.Policy{Default: target(t, "bf16")}, Variant: "bf16"})
	run(t, src, src, Options{Policy: ckpt.Policy{Default: target(t, "F8_E4M3")}, Variant: "fp8", MaxShardSize: 10000, Scale: Scale{Granularity: 3, Block: 16}})
	files := testutil.Entries(t, src)
	for _, f := range []string{"diffusion_pytorch_model.bf16-00001-of-00002.safetensors", "diffusion_pytorch_model.bf16-00002-of-00002.safetensors",
		"diffusion_pytorch_model.safetensors.index.bf16.json", "diffusion_pytorch_model.fp8-00001-of-00004.safetensors",
		"diffusion_pytorch_model.safetensors.index.fp8.json", "diffusion_pytorch_model.safetensors.index.json"} {
		if !slices.Contains(files, f) {
			t.Errorf("no %s in %v", f, files)
		}
	}
	for _, f := range files {
		if strings.HasPrefix(f, ".") && !strings.HasSuffix(f, ".lock") {
			t.Errorf("leftover %s", f)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(src, "config.json")); string(b) != `{"_class_name": "X"}` {
		t.Errorf("config.json changed beside the source: %s", b)
	}
	for v, want := range map[string]dtype.DType{"": dtype.F32, "bf16": dtype.BF16, "fp8": dtype.F8_E4M3} {
		plan, err := variant.ResolveComponent(src, v)
		if err != nil {
			t.Fatalf("variant %q: %v", v, err)
		}
		if len(plan.Warnings) > 0 {
			t.Errorf("variant %q: warnings %v", v, plan.Warnings)
		}
		m, err := ckpt.Open(src, ckpt.WithVariant(v))
		if err != nil {
			t.Fatal(err)
		}
		p, _ := m.Plan()
		for _, tp := range p.Components[0].Tensors {
			if tp.Name == "model.layers.0.mlp.up_proj.weight" && !strings.HasPrefix(tp.Stored, want.String()) {
				t.Errorf("variant %q: up_proj stored %s, want %s (files %v)", v, tp.Stored, want, plan.Files)
			}
		}
		if v == "fp8" && p.Components[0].Quant.Layout != "compressed-tensors-fp8" {
			t.Errorf("fp8 variant read as %+v", p.Components[0].Quant)
		}
		m.Close()
	}
}

func TestRunPipeline(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	src := ckpttest.NewPipeline(t, ckpttest.Pipeline{
		Components: []ckpttest.Component{
			{Name: "text_encoder", Library: "transformers", Weights: []ckpttest.Weights{{Tensors: llama(rng, dtype.F32)}}, Files: map[string]string{"config.json": `{"torch_dtype": "float32"}`}},
			{Name: "transformer", Weights: []ckpttest.Weights{{Prefix: "diffusion_pytorch_model", Tensors: llama(rng, dtype.F32), Shards: 2}}, Files: map[string]string{"config.json": `{}`}},
			{Name: "scheduler", Files: map[string]string{"scheduler_config.json": `{"beta": 1}`}},
		},
	})
	dst := filepath.Join(t.TempDir(), "pipe")
	rep := run(t, src, dst, Options{Policy: ckpt.Policy{Default: target(t, "bf16"), Components: map[string]ckpt.Target{"transformer": target(t, "F8_E4M3")},
		Rules: []ckpt.Rule{mustRule(t, "text_encoder/**.bias=F32")}}, AllowCkptOnlyQuant: true}) // the transformer is diffusers': FP8 for ckpt
	for _, f := range []string{"model_index.json", "scheduler/scheduler_config.json", "text_encoder/config.json", "text_encoder/model.safetensors",
		"transformer/config.json", "transformer/diffusion_pytorch_model.safetensors.index.json",
		"transformer/diffusion_pytorch_model-00001-of-00002.safetensors", "transformer/diffusion_pytorch_model-00002-of-00002.safetensors"} {
		if _, err := os.Stat(filepath.Join(dst, f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	if len(rep.Skipped) != 0 {
		t.Errorf("skipped %v: every component's weights were converted", rep.Skipped)
	}
	m, err := ckpt.Open(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	p, _ := m.Plan()
	for _, c := range p.Components {
		for _, tp := range c.Tensors {
			want := map[string]string{"text_encoder": "BF16", "transformer": "BF16"}[c.Name]
			switch {
			case c.Name == "text_encoder" && strings.HasSuffix(tp.Name, ".bias"):
				want = "F32"
			case c.Name == "transformer" && ckpt.LinearWeight(tp.Name, tp.Shape):
				want = "F8_E4M3"
			case c.Name == "transformer":
				want = "F32"
			}
			if tp.Name == "model.position_ids" {
				want = "I64"
			}
			if strings.Fields(tp.Stored)[0] != want {
				t.Errorf("%s/%s: %s, want %s", c.Name, tp.Name, tp.Stored, want)
			}
		}
	}
	var keys []string
	for _, tr := range rep.Tensors {
		keys = append(keys, tr.Key())
	}
	if !slices.Contains(keys, "transformer/model.layers.0.mlp.up_proj.weight_scale") {
		t.Errorf("report keys %v", keys)
	}
	if _, err := Run(context.Background(), src, dst, Options{Policy: ckpt.Policy{Components: map[string]ckpt.Target{"vae": target(t, "bf16")}}}); !errors.Is(err, ErrOption) {
		t.Errorf("unknown component: %v", err)
	}
	if _, err := Run(context.Background(), src, filepath.Join(src, "sub"), Options{}); !errors.Is(err, ErrTarget) || !strings.Contains(err.Error(), "contain one another") {
		t.Errorf("destination inside the source: %v", err)
	}
}

func mustRule(t *testing.T, s string) ckpt.Rule {
	t.Helper()
	r, err := ckpt.ParseRule(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRunFileDestinations(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	src := ckpttest.File(t, llama(rng, dtype.F32)...)
	dir := t.TempDir()
	// Into a folder: the source's name.
	run(t, src, dir+string(filepath.Separator), Options{Policy: ckpt.Policy{Default: target(t, "f16")}})
	// A variant name and an arbitrary name.
	run(t, src, filepath.Join(dir, "model.fp16.safetensors"), Options{Policy: ckpt.Policy{Default: target(t, "f16")}})
	run(t, src, filepath.Join(dir, "my weights.safetensors"), Options{Policy: ckpt.Policy{Default: target(t, "bf16")}})
	run(t, src, filepath.Join(dir, "x.safetensors"), Options{Policy: ckpt.Policy{Default: target(t, "bf16")}, MaxShardSize: 20000})
	files := testutil.Entries(t, dir)
	for _, f := range []string{filepath.Base(src), "model.fp16.safetensors", "my weights.safetensors", "x-00001-of-00004.safetensors", "x.safetensors.index.json"} {
		if !slices.Contains(files, f) {
			t.Errorf("no %s in %v", f, files)
		}
	}
	if _, err := Run(context.Background(), src, filepath.Join(dir, "my weights.safetensors"), Options{MaxShardSize: 1000}); !errors.Is(err, ErrTarget) || !strings.Contains(err.Error(), "largest shard") {
		t.Errorf("an arbitrary name that needs shards: %v", err)
	}
	// In place: the file is replaced atomically while it is read from
	// its mapping.
	run(t, src, src, Options{Policy: ckpt.Policy{Default: target(t, "bf16")}})
	_, infos, _ := readAll(t, src)
	if infos["lm_head.weight"].DType != dtype.BF16 {
		t.Errorf("in place: %v", infos["lm_head.weight"])
	}
}

// TestRunAtomic: a conversion that fails or is canceled mid-write leaves
// the previous output as it was and no temporary file.
func TestRunAtomic(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	src := ckpttest.Dir(t, ckpttest.Weights{Tensors: llama(rng, dtype.F32)})
	os.WriteFile(filepath.Join(src, "config.json"), []byte(`{}`), 0o644)
	dst := filepath.Join(t.TempDir(), "out")
	run(t, src, dst, Options{Policy: ckpt.Policy{Default: target(t, "bf16")}, MaxShardSize: 20000})
	snapshot := func() map[string]string {
		out := map[string]string{}
		for _, f := range testutil.Entries(t, dst) {
			if strings.HasSuffix(f, ".lock") {
				continue
			}
			b, _ := os.ReadFile(filepath.Join(dst, f))
			out[f] = string(b)
		}
		return out
	}
	before := snapshot()
	for _, tc := range []struct {
		name string
		hook func(string) error
		kind error
	}{
		{"error mid-write", func(name string) error {
			if name == "model.layers.0.mlp.up_proj.weight" {
				return errors.New("disk on fire")
			}
			return nil
		}, ErrSource},
	} {
		testHookPiece = tc.hook
		_, err := Run(context.Background(), src, dst, Options{Policy: ckpt.Policy{Default: target(t, "F8_E4M3")}, ChunkBytes: 4096})
		testHookPiece = nil
		if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), "disk on fire") {
			t.Errorf("%s: %v", tc.name, err)
		}
		if after := snapshot(); !mapsEqual(before, after) {
			t.Errorf("%s: output changed: %v", tc.name, testutil.Entries(t, dst))
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := Run(ctx, src, dst, Options{Policy: ckpt.Policy{Default: target(t, "F8_E4M3")}, ChunkBytes: 4096, Progress: func(p ckpt.Progress) {
		if p.Phase == "write" && p.Done > p.Total/2 {
			cancel()
		}
	}})
	if !errors.Is(err, ErrTarget) || !strings.Contains(err.Error(), "write: canceled") || !errors.Is(err, context.Canceled) {
		t.Errorf("canceled: %v", err)
	}
	if after := snapshot(); !mapsEqual(before, after) {
		t.Errorf("canceled: output changed: %v", testutil.Entries(t, dst))
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestRunRefusesSpecialFiles: a FIFO or a symbolic link out of the folder
// among the files to copy is refused before anything is written, without
// blocking.
func TestRunRefusesSpecialFiles(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no FIFOs, symbolic links need privileges")
	}
	rng := rand.New(rand.NewPCG(17, 18))
	for _, tc := range []struct {
		name  string
		setup func(dir string) error
	}{
		{"fifo", func(dir string) error { return mkfifo(filepath.Join(dir, "tokenizer.json")) }},
		{"link out", func(dir string) error {
			out := filepath.Join(t.TempDir(), "secret")
			os.WriteFile(out, []byte("secret"), 0o644)
			return os.Symlink(out, filepath.Join(dir, "vocab.txt"))
		}},
	} {
		src := ckpttest.Dir(t, ckpttest.Weights{Tensors: llama(rng, dtype.F32)})
		if err := tc.setup(src); err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(t.TempDir(), "out")
		_, err := Run(context.Background(), src, dst, Options{Policy: ckpt.Policy{Default: target(t, "bf16")}})
		if !errors.Is(err, ErrSource) || !strings.Contains(err.Error(), "copy: ") {
			t.Errorf("%s: %v", tc.name, err)
		}
		if _, err := os.Stat(dst); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: the destination was written", tc.name)
		}
	}
	// A link inside the folder is copied (as the file it leads to).
	src := ckpttest.Dir(t, ckpttest.Weights{Tensors: llama(rng, dtype.F32)})
	os.WriteFile(filepath.Join(src, "a.txt"), []byte("a"), 0o644)
	os.Symlink("a.txt", filepath.Join(src, "b.txt"))
	dst := filepath.Join(t.TempDir(), "out")
	run(t, src, dst, Options{})
	if b, err := os.ReadFile(filepath.Join(dst, "b.txt")); err != nil || string(b) != "a" {
		t.Errorf("link inside: %q %v", b, err)
	}
}
