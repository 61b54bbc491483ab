package variant_test

import (
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

// When neither the single file nor the index is complete, the error is the
// single file's (its kind and cause), and its message lists the index's
// failure separately, not as if the single file's cause explained it.
func TestNeitherCompleteMessage(t *testing.T) {
	ts := weights(dtype.F16)
	dir := ckpttest.Dir(t,
		ckpttest.Weights{Variant: "fp16", Tensors: ts},
		ckpttest.Weights{Variant: "fp16", Shards: 2, Tensors: ts})
	if err := os.Truncate(filepath.Join(dir, "model.fp16.safetensors"), 50); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "model.fp16-00002-of-00002.safetensors")); err != nil {
		t.Fatal(err)
	}
	p, err := variant.ResolveComponent(dir, "fp16")
	var e *variant.Error
	if !errors.As(err, &e) || e.Kind != variant.ErrInvalidLayout || !strings.Contains(err.Error(), ": invalid weights") || e.File != "model.fp16.safetensors" {
		t.Fatalf("got %v", err)
	}
	msg := err.Error()
	i := strings.Index(msg, "model.safetensors.index.fp16.json (")
	j := strings.Index(msg, "header length")
	if i < 0 || j < i || strings.Count(msg, "header length") != 1 {
		t.Errorf("message does not list the index's failure apart from the single file's cause: %s", msg)
	}
	if !slices.IsSortedFunc(p.Ignored, func(a, b variant.Ignored) int { return strings.Compare(a.File, b.File) }) {
		t.Errorf("ignored files not sorted on failure: %+v", p.Ignored)
	}
	// Resolving again gives the same message (the candidate's error was not
	// modified in place).
	_, err2 := variant.ResolveComponent(dir, "fp16")
	if err2.Error() != msg {
		t.Errorf("second resolution differs:\n%s\n%s", msg, err2)
	}
}

// A pipeline asked for a variant fails when no component has it, also when
// no component has any weights at all.
func TestPipelineVariantWithoutAnyWeights(t *testing.T) {
	root := ckpttest.NewPipeline(t, ckpttest.Pipeline{
		Components: []ckpttest.Component{{Name: "tokenizer", Files: map[string]string{"vocab.json": "{}"}}},
		Root:       []ckpttest.Weights{{Prefix: ckpttest.DiffusersPrefix, Variant: "fp16", Tensors: weights(dtype.F16)}},
	})
	pp, err := variant.ResolvePipeline(root, "fp16")
	if !errors.Is(err, variant.ErrVariantNotFound) || !strings.Contains(err.Error(), ": no component has variant") || pp.Error == nil || !pp.Failed() {
		t.Fatalf("got %v, %+v", err, pp.Error)
	}
}

// In a pipeline, a folder with weights under both prefixes resolves to the
// prefix of the component's library (from model_index.json), with a warning;
// the same folder on its own, or under an unknown library, is ambiguous.
func TestPipelinePrefixFromLibrary(t *testing.T) {
	ts := weights(dtype.F16)
	both := []ckpttest.Weights{{Tensors: ts}, {Prefix: ckpttest.DiffusersPrefix, Tensors: ts}}
	root := ckpttest.NewPipeline(t, ckpttest.Pipeline{Components: []ckpttest.Component{
		{Name: "text_encoder", Library: "transformers", Class: "CLIPTextModel", Weights: both},
		{Name: "unet", Library: "diffusers", Class: "UNet2DConditionModel", Weights: both},
		{Name: "custom", Library: "my_lib", Class: "Thing", Weights: both},
	}})
	pp, err := variant.ResolvePipeline(root, "")
	if !errors.Is(err, variant.ErrInvalidLayout) || !strings.Contains(err.Error(), ": ambiguous prefix") {
		t.Fatalf("got %v", err)
	}
	for comp, want := range map[string]string{"text_encoder": "model.safetensors", "unet": "diffusion_pytorch_model.safetensors"} {
		p := pp.Component(comp)
		if p.Error != nil || !slices.Equal(p.Files, []string{want}) || !hasWarning(p, "both prefixes") {
			t.Errorf("%s: %+v", comp, p)
		}
	}
	if p := pp.Component("custom"); p.Error == nil || p.Error.Kind != "invalid_layout" || !strings.Contains(p.Error.Message, "ambiguous prefix") {
		t.Errorf("custom: %+v", p)
	}
	wantErr(t, filepath.Join(root, "unet"), "", variant.ErrInvalidLayout, ": ambiguous prefix")
}
