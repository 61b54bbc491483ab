package convert

import (
	"context"
	"errors"
	"maps"
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
)

// sdPipeline is a Stable Diffusion-like pipeline: a diffusers UNet and
// VAE, a transformers CLIP text encoder, each with a 2-D linear weight.
func sdPipeline(t *testing.T) string {
	rng := rand.New(rand.NewPCG(51, 52))
	return ckpttest.NewPipeline(t, ckpttest.Pipeline{
		Class: "StableDiffusionPipeline",
		Components: []ckpttest.Component{
			{Name: "unet", Library: "diffusers", Class: "UNet2DConditionModel", Weights: []ckpttest.Weights{{Prefix: "diffusion_pytorch_model", Tensors: []ckpttest.Tensor{
				randTensor(rng, "down_blocks.0.attentions.0.proj_in.weight", dtype.F32, 64, 64),
				randTensor(rng, "conv_in.weight", dtype.F32, 8, 4, 3, 3),
			}}}, Files: map[string]string{"config.json": `{"_class_name": "UNet2DConditionModel", "_diffusers_version": "0.31.0"}`}},
			{Name: "vae", Library: "diffusers", Class: "AutoencoderKL", Weights: []ckpttest.Weights{{Prefix: "diffusion_pytorch_model", Tensors: []ckpttest.Tensor{
				randTensor(rng, "encoder.mid_block.attentions.0.to_q.weight", dtype.F32, 64, 64),
				randTensor(rng, "encoder.conv_in.weight", dtype.F32, 8, 3, 3, 3),
			}}}, Files: map[string]string{"config.json": `{"_class_name": "AutoencoderKL", "_diffusers_version": "0.31.0"}`}},
			{Name: "text_encoder", Library: "transformers", Class: "CLIPTextModel", Weights: []ckpttest.Weights{{Tensors: []ckpttest.Tensor{
				randTensor(rng, "text_model.encoder.layers.0.self_attn.q_proj.weight", dtype.F32, 64, 64),
				randTensor(rng, "text_model.final_layer_norm.weight", dtype.F32, 64),
			}}}, Files: map[string]string{"config.json": `{"architectures": ["CLIPTextModel"], "transformers_version": "4.46.0", "torch_dtype": "float32"}`}},
		},
	})
}

// storedDTypes returns "component/tensor" -> stored dtype of a converted
// pipeline.
func storedDTypes(t *testing.T, dir string) map[string]string {
	t.Helper()
	m, err := ckpt.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	p, err := m.Plan()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, c := range p.Components {
		for _, tp := range c.Tensors {
			out[c.Name+"/"+tp.Name] = strings.Fields(tp.Stored)[0]
		}
	}
	return out
}

func hasWarning(rep *Report, parts ...string) bool {
	return slices.ContainsFunc(rep.Warnings, func(w string) bool {
		for _, p := range parts {
			if !strings.Contains(w, p) {
				return false
			}
		}
		return true
	})
}

func TestRunPipelineOwners(t *testing.T) {
	src := sdPipeline(t)
	fp8 := target(t, "F8_E4M3")
	const (
		unetW = "unet/down_blocks.0.attentions.0.proj_in.weight"
		vaeW  = "vae/encoder.mid_block.attentions.0.to_q.weight"
		textW = "text_encoder/text_model.encoder.layers.0.self_attn.q_proj.weight"
	)

	// A pipeline-wide FP8 default: diffusers cannot read the unet's
	// compressed-tensors config, so nothing is written.
	dst := filepath.Join(t.TempDir(), "out")
	_, err := Run(context.Background(), src, dst, Options{Policy: ckpt.Policy{Default: fp8}})
	var ce *Error
	if !errors.Is(err, ErrCast) || !strings.Contains(err.Error(), "unreadable: ") || !errors.As(err, &ce) || ce.Component != "unet" ||
		!strings.Contains(err.Error(), "--component unet=BF16") || !strings.Contains(err.Error(), "--allow-ckpt-only-quant") {
		t.Fatalf("FP8 unet: %v", err)
	}
	if _, err := os.Stat(dst); err == nil {
		t.Errorf("%s written", dst)
	}

	// The unet kept in BF16: only the text encoder is quantized; the VAE
	// is not, by the default, and the report says why.
	rep := run(t, src, dst, Options{Policy: ckpt.Policy{Default: fp8, Components: map[string]ckpt.Target{"unet": target(t, "bf16")}}, Verify: true})
	got := storedDTypes(t, dst)
	for k, want := range map[string]string{unetW: "BF16", vaeW: "F32", textW: "F8_E4M3", "vae/encoder.conv_in.weight": "F32"} {
		if got[k] != want {
			t.Errorf("%s: %s, want %s", k, got[k], want)
		}
	}
	if !hasWarning(rep, "vae", "VAEs and image encoders are not quantized", "--component vae=F8_E4M3") {
		t.Errorf("warnings %q", rep.Warnings)
	}
	for _, tr := range rep.Tensors {
		if tr.Component == "vae" && !strings.Contains(tr.Rule, "VAEs and image encoders") {
			t.Errorf("vae tensor %s: rule %q", tr.Name, tr.Rule)
		}
	}
	for comp, want := range map[string]bool{"text_encoder": true, "unet": false, "vae": false} {
		b, err := os.ReadFile(filepath.Join(dst, comp, "config.json"))
		if err != nil || strings.Contains(string(b), "quantization_config") != want {
			t.Errorf("%s/config.json: %s %v", comp, b, err)
		}
	}

	// Opted in: the unet is written for ckpt, and the report says diffusers
	// will not load it; the VAE still is not quantized.
	dst2 := filepath.Join(t.TempDir(), "ckpt-only")
	rep = run(t, src, dst2, Options{Policy: ckpt.Policy{Default: fp8}, AllowCkptOnlyQuant: true})
	got = storedDTypes(t, dst2)
	if got[unetW] != "F8_E4M3" || got[vaeW] != "F32" || got[textW] != "F8_E4M3" {
		t.Errorf("opted in: %v", got)
	}
	if !hasWarning(rep, "unet", "for ckpt and vLLM", "diffusers will not load it") {
		t.Errorf("warnings %q", rep.Warnings)
	}

	// Named explicitly, the VAE is quantized (a diffusers model: opted in),
	// by a component target or by a rule.
	for _, p := range []ckpt.Policy{
		{Default: fp8, Components: map[string]ckpt.Target{"vae": fp8}},
		{Default: fp8, Rules: []ckpt.Rule{mustRule(t, "vae/**.to_q.weight=F8_E4M3")}},
	} {
		dst3 := filepath.Join(t.TempDir(), "vae")
		run(t, src, dst3, Options{Policy: p, AllowCkptOnlyQuant: true})
		if got := storedDTypes(t, dst3); got[vaeW] != "F8_E4M3" {
			t.Errorf("%+v: vae %s", p, got[vaeW])
		}
	}

	// A 16-bit default casts the VAE as before: only narrow defaults
	// leave it alone.
	dst4 := filepath.Join(t.TempDir(), "bf16")
	run(t, src, dst4, Options{Policy: ckpt.Policy{Default: target(t, "bf16")}})
	if got := storedDTypes(t, dst4); got[vaeW] != "BF16" {
		t.Errorf("bf16: vae %s", got[vaeW])
	}
}

// TestRunTransformersMisread: FP8 weights transformers would load with
// wrong values. A GPT-2's Conv1D layers are kept out of an FP8 target (the
// report says why) and refused when a rule quantizes them, unless
// AllowCkptOnlyQuant; DeepSeek's format with partial blocks is written
// with a warning (transformers' CPU dequantization misreads it).
func TestRunTransformersMisread(t *testing.T) {
	rng := rand.New(rand.NewPCG(53, 54))
	gpt2 := ckpttest.Dir(t, ckpttest.Weights{Tensors: []ckpttest.Tensor{
		randTensor(rng, "transformer.wte.weight", dtype.F32, 100, 64),
		randTensor(rng, "transformer.h.0.attn.c_attn.weight", dtype.F32, 64, 192),
		randTensor(rng, "transformer.h.0.attn.c_proj.weight", dtype.F32, 64, 64),
		randTensor(rng, "transformer.h.0.mlp.c_fc.weight", dtype.F32, 64, 256),
		randTensor(rng, "transformer.h.0.mlp.c_proj.weight", dtype.F32, 256, 64),
		randTensor(rng, "transformer.h.0.ln_1.weight", dtype.F32, 64),
	}})
	if err := os.WriteFile(filepath.Join(gpt2, "config.json"), []byte(`{"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "transformers_version": "5.23.0"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	fp8 := target(t, "F8_E4M3")

	dst := filepath.Join(t.TempDir(), "default")
	rep := run(t, gpt2, dst, Options{Policy: ckpt.Policy{Default: fp8}})
	for k, d := range storedDTypes(t, dst) {
		if d != "F32" {
			t.Errorf("%s: %s, want F32", k, d)
		}
	}
	if !hasWarning(rep, "kept as stored", "Conv1D", "GPT2LMHeadModel") {
		t.Errorf("warnings %q", rep.Warnings)
	}
	for _, tr := range rep.Tensors {
		if strings.Contains(tr.Name, ".c_") && !strings.Contains(tr.Rule, "Conv1D") {
			t.Errorf("%s: rule %q", tr.Name, tr.Rule)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dst, "config.json")); err != nil || strings.Contains(string(b), "quantization_config") {
		t.Errorf("config.json: %s %v", b, err)
	}

	rule := Options{Policy: ckpt.Policy{Rules: []ckpt.Rule{mustRule(t, "**.c_fc.weight=F8_E4M3")}}}
	dst = filepath.Join(t.TempDir(), "rule")
	_, err := Run(context.Background(), gpt2, dst, rule)
	var ce *Error
	if !errors.Is(err, ErrCast) || !strings.Contains(err.Error(), "unreadable: ") || !errors.As(err, &ce) || !strings.Contains(err.Error(), "transformer.h.0.mlp.c_fc.weight") ||
		!strings.Contains(err.Error(), "--allow-ckpt-only-quant") {
		t.Fatalf("a Conv1D weight quantized by a rule: %v", err)
	}
	if _, err := os.Stat(dst); err == nil {
		t.Errorf("%s written", dst)
	}
	rule.AllowCkptOnlyQuant = true
	rep = run(t, gpt2, dst, rule)
	if got := storedDTypes(t, dst); !slices.Contains(slices.Collect(maps.Values(got)), "F8_E4M3") {
		t.Errorf("opted in: %v", got)
	}
	if !hasWarning(rep, "written anyway", "c_fc") {
		t.Errorf("warnings %q", rep.Warnings)
	}

	// DeepSeek's format, blocks of 64 over 96 rows and columns.
	llama := ckpttest.Dir(t, ckpttest.Weights{Tensors: []ckpttest.Tensor{
		randTensor(rng, "model.layers.0.self_attn.q_proj.weight", dtype.F32, 96, 96),
		randTensor(rng, "model.layers.0.mlp.up_proj.weight", dtype.F32, 128, 64),
	}})
	if err := os.WriteFile(filepath.Join(llama, "config.json"), []byte(`{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "transformers_version": "5.23.0"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	rep = run(t, llama, filepath.Join(t.TempDir(), "ds"), Options{Policy: ckpt.Policy{Default: fp8}, ScaleFormat: DeepSeek,
		Scale: Scale{Granularity: quant.PerBlock, Block: 64}})
	if !hasWarning(rep, "1 FP8 weights do not divide into blocks of 64", "q_proj.weight [96 96]", "compressed-tensors") {
		t.Errorf("warnings %q", rep.Warnings)
	}
}
