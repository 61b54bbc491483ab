package convert

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
)

// torchPipe writes a pipeline whose text encoder and VAE hold PyTorch
// weights only (the text encoder untagged and fp16 in a sharded set of
// the given naming, the VAE untagged) and whose UNet holds safetensors
// weights (untagged and fp16) beside PyTorch ones that they win over.
func torchPipe(t *testing.T, layout ckpttest.Layout) string {
	t.Helper()
	ts := func(prefix string, dt dtype.DType) []ckpttest.Tensor {
		return []ckpttest.Tensor{ckpttest.T(prefix+".proj.weight", dt, 8, 6), ckpttest.T(prefix+".proj.bias", dt, 8),
			ckpttest.T(prefix+".out.weight", dt, 6, 8), ckpttest.T(prefix+".norm.weight", dt, 6)}
	}
	dpm := ckpttest.DiffusersPrefix
	return ckpttest.NewPipeline(t, ckpttest.Pipeline{Components: []ckpttest.Component{
		{Name: "unet", Weights: []ckpttest.Weights{
			{Prefix: dpm, Tensors: ts("unet", dtype.F32)}, {Prefix: dpm, Variant: "fp16", Tensors: ts("unet", dtype.F16)},
			{PyTorch: true, Prefix: dpm, Variant: "fp16", Tensors: ts("unet", dtype.BF16)}}},
		{Name: "text_encoder", Library: "transformers", Class: "CLIPTextModel", Weights: []ckpttest.Weights{
			{PyTorch: true, Tensors: ts("te", dtype.F32)},
			{PyTorch: true, Variant: "fp16", Shards: 2, Layout: layout, Tensors: ts("te", dtype.F16)}},
			Files: map[string]string{"config.json": `{"torch_dtype": "float16"}`}},
		{Name: "vae", Weights: []ckpttest.Weights{{PyTorch: true, Prefix: dpm, Tensors: ts("vae", dtype.F32)}}},
		{Name: "scheduler", Files: map[string]string{"scheduler_config.json": "{}"}},
	}})
}

// TestRunTorchPipeline: Run converts every component of a pipeline whose
// components hold PyTorch weights, each to the safetensors names diffusers
// and transformers expect (variants kept, a sharded set kept sharded), and
// the output reloads as the source loads.
func TestRunTorchPipeline(t *testing.T) {
	for _, tc := range []struct {
		name    string
		layout  ckpttest.Layout
		variant string
		policy  ckpt.Policy
		files   []string
	}{
		{"untagged", ckpttest.Current, "", ckpt.Policy{}, []string{
			"text_encoder/model.safetensors", "unet/diffusion_pytorch_model.safetensors", "vae/diffusion_pytorch_model.safetensors"}},
		{"fp16", ckpttest.Current, "fp16", ckpt.Policy{Components: map[string]ckpt.Target{"vae": ckpt.To(dtype.BF16)}}, []string{
			"text_encoder/model.fp16-00001-of-00002.safetensors", "text_encoder/model.fp16-00002-of-00002.safetensors",
			"text_encoder/model.safetensors.index.fp16.json", "unet/diffusion_pytorch_model.fp16.safetensors", "vae/diffusion_pytorch_model.safetensors"}},
		{"fp16 legacy", ckpttest.Legacy, "fp16", ckpt.Policy{Default: ckpt.To(dtype.F32)}, []string{
			"text_encoder/model.fp16-00001-of-00002.safetensors", "text_encoder/model.fp16-00002-of-00002.safetensors",
			"text_encoder/model.safetensors.index.fp16.json", "unet/diffusion_pytorch_model.fp16.safetensors", "vae/diffusion_pytorch_model.safetensors"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := torchPipe(t, tc.layout)
			dst := filepath.Join(t.TempDir(), "out")
			rep := run(t, src, dst, Options{SourceVariant: tc.variant, Policy: tc.policy})
			for _, s := range rep.Skipped {
				if !strings.Contains(s.Path, ".bin") && !strings.Contains(s.Path, ".safetensors") {
					t.Errorf("skipped %v", s)
				}
			}
			if len(rep.Components) != 3 {
				t.Fatalf("components %+v", rep.Components)
			}
			var got []string
			filepath.WalkDir(dst, func(p string, d os.DirEntry, err error) error {
				if err == nil && !d.IsDir() && (strings.HasSuffix(p, ".safetensors") || strings.Contains(p, ".safetensors.index") || strings.Contains(p, ".bin")) {
					rel, _ := filepath.Rel(dst, p)
					got = append(got, filepath.ToSlash(rel))
				}
				return nil
			})
			slices.Sort(got)
			if !slices.Equal(got, tc.files) {
				t.Errorf("weights written %v, want %v", got, tc.files)
			}
			for _, f := range []string{"model_index.json", "scheduler/scheduler_config.json", "text_encoder/config.json"} {
				if _, err := os.Stat(filepath.Join(dst, f)); err != nil {
					t.Errorf("%s: %v", f, err)
				}
			}

			// The output, opened as diffusers would (the variant, falling
			// back to untagged weights), loads what the source loads.
			opts := []ckpt.Option{ckpt.WithVariant(tc.variant)}
			want := loadAllStored(t, src, append(opts, ckpt.WithPolicy(tc.policy))...)
			if got := loadAllStored(t, dst, opts...); len(got) != 12 || !mapsEqual(got, want) {
				t.Errorf("the output loads %d tensors, the source %d; or their dtypes, shapes or bytes differ", len(got), len(want))
			}
		})
	}
}

func TestTorchNamingVariants(t *testing.T) {
	for in, want := range map[string]string{
		"pytorch_model.bin.index.fp16.json":               "model.safetensors.index.fp16.json",
		"pytorch_model.bin.fp16.index.json":               "model.safetensors.fp16.index.json",
		"pytorch_model.fp16.bin":                          "model.fp16.safetensors",
		"pytorch_model.fp16-00001-of-00002.bin":           "model.fp16.safetensors",
		"diffusion_pytorch_model-00001-of-00002.fp16.bin": "diffusion_pytorch_model.fp16.safetensors",
		"diffusion_pytorch_model.bin.index.json":          "diffusion_pytorch_model.safetensors.index.json",
		"pytorch_model-00001-of-00002.bin":                "model.safetensors",
		"weights.pt":                                      "weights.safetensors",
	} {
		if got := torchNaming(in); got != want {
			t.Errorf("torchNaming(%s) = %s, want %s", in, got, want)
		}
	}
}
