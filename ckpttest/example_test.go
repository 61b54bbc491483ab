package ckpttest_test

import (
	"fmt"
	"io/fs"
	"log"
	"os"
	"path/filepath"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/safetensors"
)

// WriteWeights builds a sharded variant set from a compact spec; the
// contents are deterministic, so a test can recompute what it should read.
func ExampleWriteWeights() {
	dir, err := os.MkdirTemp("", "ckpttest-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	files, err := ckpttest.WriteWeights(dir, ckpttest.Weights{
		Variant: "fp8",
		Shards:  2,
		Tensors: ckpttest.MustParseTensors("embed:BF16[16,8] q:F8_E4M3[8,8] q.scale:F32[] mlp:F4[8,8]"),
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range files {
		fmt.Println(f)
	}
	f, err := safetensors.Open(filepath.Join(dir, files[1]))
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	fmt.Println(f.Names())
	// Output:
	// model.fp8-00001-of-00002.safetensors
	// model.fp8-00002-of-00002.safetensors
	// model.safetensors.index.fp8.json
	// [q.scale mlp]
}

// WritePipeline lays out a diffusers pipeline with model_index.json. In a
// test, NewPipeline does the same in t.TempDir().
func ExampleWritePipeline() {
	root, err := os.MkdirTemp("", "ckpttest-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(root)
	w := ckpttest.MustParseTensors("conv.weight:F32[4,4] conv.bias:F32[4]")
	err = ckpttest.WritePipeline(root, ckpttest.Pipeline{
		Components: []ckpttest.Component{
			{Name: "unet", Weights: []ckpttest.Weights{
				{Prefix: ckpttest.DiffusersPrefix, Tensors: w},
				{Prefix: ckpttest.DiffusersPrefix, Variant: "fp16", Shards: 2, Layout: ckpttest.Legacy, Tensors: w},
			}},
			{Name: "scheduler", Class: "PNDMScheduler", Files: map[string]string{"scheduler_config.json": "{}"}},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(root, p)
			fmt.Println(filepath.ToSlash(rel))
		}
		return err
	})
	// Output:
	// model_index.json
	// scheduler/scheduler_config.json
	// unet/diffusion_pytorch_model-00001-of-00002.fp16.safetensors
	// unet/diffusion_pytorch_model-00002-of-00002.fp16.safetensors
	// unet/diffusion_pytorch_model.safetensors
	// unet/diffusion_pytorch_model.safetensors.index.fp16.json
}
