// Command variants rebuilds the folder that made diffusers load BF16 and
// F32 weights mixed — a transformer/ holding
// diffusion_pytorch_model.bf16.safetensors beside F32 shards and their
// index — and shows how ckpt resolves it for each request, and how it
// refuses a variant index that points at untagged shards.
//
//	go run ./examples/variants
package main

import (
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/variant"
)

func main() {
	root, err := os.MkdirTemp("", "variants-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(root)

	dir := filepath.Join(root, "transformer")
	f32 := ckpttest.MustParseTensors("proj.weight:F32[8,8] proj.bias:F32[8] out.weight:F32[4,8]")
	bf16 := ckpttest.MustParseTensors("proj.weight:BF16[8,8] proj.bias:BF16[8] out.weight:BF16[4,8]")
	for _, w := range []ckpttest.Weights{
		{Prefix: variant.DiffusersPrefix, Shards: 2, Tensors: f32},
		{Prefix: variant.DiffusersPrefix, Variant: "bf16", Tensors: bf16},
	} {
		if _, err := ckpttest.WriteWeights(dir, w); err != nil {
			log.Fatal(err)
		}
	}

	for _, v := range []string{"bf16", "", "fp16"} {
		plan, err := variant.ResolveComponent(dir, v)
		fmt.Printf("request %q:\n", v)
		if err != nil {
			var ve *variant.Error
			if errors.As(err, &ve) {
				fmt.Printf("  error [%s] %v\n\n", ve.Kind.String(), err)
				continue
			}
			log.Fatal(err)
		}
		fmt.Printf("  load %v (%s)\n", plan.Files, plan.Layout)
		for _, ig := range plan.Ignored {
			fmt.Printf("  ignore %s: %s\n", ig.File, ig.Reason)
		}
		for _, w := range plan.Warnings {
			fmt.Printf("  warning: %s\n", w)
		}
		fmt.Println()
	}

	// A bf16 index whose weight map names the untagged F32 shards: loading it
	// would silently give F32 weights. ckpt refuses.
	bad := filepath.Join(root, "mismatched")
	if _, err := ckpttest.WriteWeights(bad, ckpttest.Weights{Prefix: variant.DiffusersPrefix, Shards: 2, Tensors: f32}); err != nil {
		log.Fatal(err)
	}
	weightMap := map[string]string{
		"proj.weight": "diffusion_pytorch_model-00001-of-00002.safetensors",
		"proj.bias":   "diffusion_pytorch_model-00001-of-00002.safetensors",
		"out.weight":  "diffusion_pytorch_model-00002-of-00002.safetensors",
	}
	if err := ckpttest.WriteIndex(filepath.Join(bad, "diffusion_pytorch_model.safetensors.index.bf16.json"), weightMap, nil); err != nil {
		log.Fatal(err)
	}
	_, err = variant.ResolveComponent(bad, "bf16")
	var ve *variant.Error
	if errors.As(err, &ve) {
		fmt.Printf("bf16 index mapping to untagged shards: error [%s]\n  %v\n", ve.Kind.String(), err)
	} else {
		log.Fatalf("expected a typed error, got %v", err)
	}
}
