package variant_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/variant"
)

const dpm = ckpttest.DiffusersPrefix

// samplePipeline has components with different variants available:
// unet fp16 + untagged, vae untagged only, text_encoder fp16 in the legacy
// sharded layout + untagged, a tokenizer and scheduler without weights, an
// unlisted folder and weights in the root.
func samplePipeline() ckpttest.Pipeline {
	return ckpttest.Pipeline{
		Class: "StableDiffusionPipeline",
		Components: []ckpttest.Component{
			{Name: "unet", Weights: []ckpttest.Weights{{Prefix: dpm, Tensors: f32}, {Prefix: dpm, Variant: "fp16", Tensors: f16}}},
			{Name: "vae", Weights: []ckpttest.Weights{{Prefix: dpm, Tensors: f32}}},
			{Name: "text_encoder", Library: "transformers", Class: "CLIPTextModel", Weights: []ckpttest.Weights{
				{Tensors: f32, Shards: 2},
				{Variant: "fp16", Shards: 2, Layout: ckpttest.Legacy, Tensors: f16},
			}},
			{Name: "tokenizer", Library: "transformers", Class: "CLIPTokenizer", Files: map[string]string{"vocab.json": "{}"}},
			{Name: "scheduler", Class: "PNDMScheduler", Files: map[string]string{"scheduler_config.json": "{}"}},
			{Name: "extra", Unlisted: true, Weights: []ckpttest.Weights{{Variant: "fp16", Tensors: f16}}},
		},
		Null: []string{"safety_checker"},
		Root: []ckpttest.Weights{{Prefix: dpm, Tensors: f32}, {Prefix: dpm, Variant: "fp16", Tensors: f16}},
	}
}

func TestPipelineMixedVariants(t *testing.T) {
	root := ckpttest.NewPipeline(t, samplePipeline())
	pp, err := variant.ResolvePipeline(root, "fp16")
	if err != nil {
		t.Fatal(err)
	}
	if pp.Failed() || len(pp.Components) != 3 {
		t.Fatalf("plan %+v", pp)
	}
	var names []string
	for _, c := range pp.Components {
		names = append(names, c.Component)
	}
	if !slices.Equal(names, []string{"text_encoder", "unet", "vae"}) {
		t.Fatalf("components %v", names)
	}
	unet, vae, te := pp.Component("unet"), pp.Component("vae"), pp.Component("text_encoder")
	if unet.Variant != "fp16" || unet.Fallback || !slices.Equal(unet.Files, []string{"diffusion_pytorch_model.fp16.safetensors"}) {
		t.Errorf("unet %+v", unet)
	}
	if vae.Variant != "" || !vae.Fallback || !slices.Equal(vae.Files, []string{"diffusion_pytorch_model.safetensors"}) || !hasWarning(vae, "vae", "untagged") {
		t.Errorf("vae %+v", vae)
	}
	if te.Layout != variant.LayoutLegacySharded || te.Index != "model.safetensors.index.fp16.json" || !hasWarning(te, "legacy") {
		t.Errorf("text_encoder %+v", te)
	}
	if !strings.Contains(strings.Join(pp.Warnings, "\n"), "component vae has no fp16 weights") {
		t.Errorf("pipeline warnings %q", pp.Warnings)
	}
	ig := map[string]string{}
	for _, i := range pp.Ignored {
		ig[i.File] = i.Reason
	}
	for _, want := range []string{"extra/", "diffusion_pytorch_model.safetensors", "diffusion_pytorch_model.fp16.safetensors", "tokenizer/", "scheduler/"} {
		if ig[want] == "" {
			t.Errorf("%s not in ignored %v", want, ig)
		}
	}
	if _, ok := ig["safety_checker/"]; ok {
		t.Error("null component listed")
	}
	for _, c := range []struct {
		name string
		dt   dtype.DType
	}{{"unet", dtype.F16}, {"vae", dtype.F32}, {"text_encoder", dtype.F16}} {
		loadsOnly(t, pp.Component(c.name), c.dt)
	}
	ck, err := pp.Open("vae")
	if err != nil {
		t.Fatal(err)
	}
	ck.Close()

	// Untagged: every component takes its untagged weights, no fallback.
	pp, err = variant.ResolvePipeline(root, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range pp.Components {
		if c.Variant != "" || c.Fallback || len(c.Warnings) != 0 {
			t.Errorf("%s: %+v", c.Component, c)
		}
		loadsOnly(t, c, dtype.F32)
	}
	b, _ := json.Marshal(pp)
	if !strings.Contains(string(b), `"components":[{"component":"text_encoder"`) {
		t.Errorf("JSON %s", b)
	}
}

func TestPipelineNoComponentHasVariant(t *testing.T) {
	root := ckpttest.NewPipeline(t, samplePipeline())
	pp, err := variant.ResolvePipeline(root, "bf16")
	if !errors.Is(err, variant.ErrVariantNotFound) || !strings.Contains(err.Error(), ": no component has variant") || pp.Error == nil || pp.Error.Kind != "variant_not_found" || !pp.Failed() {
		t.Fatalf("got %v, %+v", err, pp.Error)
	}
	if !strings.Contains(err.Error(), "unet: fp16") || !strings.Contains(err.Error(), "vae: none") {
		t.Errorf("message does not list variants: %v", err)
	}
}

func TestPipelineComponentWithoutFallback(t *testing.T) {
	p := samplePipeline()
	p.Components[1].Weights = []ckpttest.Weights{{Prefix: dpm, Variant: "bf16", Tensors: bf16}} // vae: bf16 only
	root := ckpttest.NewPipeline(t, p)
	pp, err := variant.ResolvePipeline(root, "fp16")
	if !errors.Is(err, variant.ErrVariantNotFound) || !pp.Failed() || pp.Error != nil {
		t.Fatalf("got %v", err)
	}
	vae := pp.Component("vae")
	if vae.Error == nil || vae.Error.Kind != "variant_not_found" || !strings.Contains(vae.Error.Message, "bf16") {
		t.Errorf("vae %+v", vae)
	}
	if pp.Component("unet").Error != nil {
		t.Error("unet failed too")
	}
}

func TestPipelineRootNeverShadows(t *testing.T) {
	// unet has only fp16 weights; untagged weights sit in the root.
	root := ckpttest.NewPipeline(t, ckpttest.Pipeline{
		Components: []ckpttest.Component{{Name: "unet", Weights: []ckpttest.Weights{{Prefix: dpm, Variant: "fp16", Tensors: f16}}}},
		Root:       []ckpttest.Weights{{Prefix: dpm, Tensors: f32}},
	})
	pp, err := variant.ResolvePipeline(root, "")
	if !errors.Is(err, variant.ErrVariantNotFound) || !strings.Contains(err.Error(), ": untagged not found") {
		t.Fatalf("got %v", err)
	}
	if u := pp.Component("unet"); u.Error == nil || len(u.Files) != 0 {
		t.Errorf("unet %+v", u)
	}
}

func TestPipelineErrors(t *testing.T) {
	dir := ckpttest.Dir(t, ckpttest.Weights{Tensors: f32})
	if _, err := variant.ResolvePipeline(dir, ""); !errors.Is(err, variant.ErrNoWeights) || !strings.Contains(err.Error(), ": model index missing") {
		t.Errorf("no model_index: %v", err)
	}
	// Resolve falls back to a single component.
	pp, err := variant.Resolve(dir, "")
	if err != nil || len(pp.Components) != 1 || pp.Components[0].Files[0] != "model.safetensors" {
		t.Errorf("Resolve: %v %+v", err, pp)
	}
	os.WriteFile(filepath.Join(dir, variant.ModelIndex), []byte(`{"unet": [`), 0o644)
	if _, err := variant.ResolvePipeline(dir, ""); !errors.Is(err, variant.ErrInvalidLayout) || !strings.Contains(err.Error(), ": model index invalid") {
		t.Errorf("bad model_index: %v", err)
	}
	os.WriteFile(filepath.Join(dir, variant.ModelIndex), []byte(`{"unet": ["diffusers", "UNet2DConditionModel"], "../up": ["diffusers", "X"], "requires_safety_checker": true}`), 0o644)
	pp, err = variant.ResolvePipeline(dir, "")
	if !errors.Is(err, variant.ErrNoWeights) || !strings.Contains(err.Error(), ": component missing") || !errors.Is(err, variant.ErrInsecurePath) {
		t.Errorf("got %v", err)
	}
	if len(pp.Components) != 2 {
		t.Errorf("components %+v", pp.Components)
	}
	if _, err := variant.ResolvePipeline(dir, "x-y"); !errors.Is(err, variant.ErrInvalidArgument) || !strings.Contains(err.Error(), ": invalid variant") {
		t.Errorf("bad variant: %v", err)
	}
}

func TestPipelineComponentSymlinkEscape(t *testing.T) {
	outside := ckpttest.Dir(t, ckpttest.Weights{Prefix: dpm, Tensors: f32})
	root := ckpttest.NewPipeline(t, ckpttest.Pipeline{Components: []ckpttest.Component{{Name: "vae", Weights: []ckpttest.Weights{{Prefix: dpm, Tensors: f32}}}}})
	os.WriteFile(filepath.Join(root, variant.ModelIndex), []byte(`{"vae": ["diffusers", "AutoencoderKL"], "unet": ["diffusers", "UNet2DConditionModel"]}`), 0o644)
	if err := os.Symlink(outside, filepath.Join(root, "unet")); err != nil {
		t.Skip(err)
	}
	_, err := variant.ResolvePipeline(root, "")
	if !errors.Is(err, variant.ErrInsecurePath) {
		t.Fatalf("got %v", err)
	}
}

// TestPipelineComponentWithoutSafetensors: a component whose only weights
// are PyTorch ones is resolved to them (it used to be ignored); one whose
// weights have no recognized name is still ignored, with a warning.
func TestPipelineComponentWithoutSafetensors(t *testing.T) {
	root := ckpttest.NewPipeline(t, ckpttest.Pipeline{Components: []ckpttest.Component{
		{Name: "unet", Weights: []ckpttest.Weights{{Prefix: dpm, Tensors: f32}}},
		{Name: "text_encoder", Library: "transformers", Class: "CLIPTextModel", Files: map[string]string{"pytorch_model.bin": "x", "config.json": "{}"}},
		{Name: "vae", Library: "diffusers", Class: "AutoencoderKL", Files: map[string]string{"diffusion_pytorch_model.ckpt": "x", "config.json": "{}"}},
	}})
	pp, err := variant.ResolvePipeline(root, "")
	if err != nil {
		t.Fatal(err)
	}
	te := pp.Component("text_encoder")
	if len(pp.Components) != 2 || te == nil || te.Format != variant.FormatPyTorch || !slices.Equal(te.Files, []string{"pytorch_model.bin"}) {
		t.Fatalf("plan %+v", pp)
	}
	if !strings.Contains(strings.Join(pp.Warnings, "\n"), "vae has no safetensors or PyTorch weights under the recognized names (ignored: diffusion_pytorch_model.ckpt)") {
		t.Errorf("warnings %v", pp.Warnings)
	}
}
