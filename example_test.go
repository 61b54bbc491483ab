package ckpt_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
)

// A pipeline whose transformer stays FP8 while its image encoder loads as
// F32, with norms and biases kept in F32.
func Example() {
	root, _ := os.MkdirTemp("", "ckpt-example")
	defer os.RemoveAll(root)
	err := ckpttest.WritePipeline(root, ckpttest.Pipeline{Components: []ckpttest.Component{
		{Name: "transformer", Weights: []ckpttest.Weights{{Prefix: "diffusion_pytorch_model",
			Tensors: ckpttest.MustParseTensors("blocks.0.attn.weight:F8_E4M3[256,256] blocks.0.norm.weight:BF16[256]")}}},
		{Name: "image_encoder", Weights: []ckpttest.Weights{{
			Tensors: ckpttest.MustParseTensors("proj.weight:BF16[128,64] proj.bias:BF16[128]")}}},
	}})
	if err != nil {
		log.Fatal(err)
	}
	m, err := ckpt.Open(root,
		ckpt.WithComponentDType("transformer", ckpt.AsStored),
		ckpt.WithComponentDType("image_encoder", ckpt.To(dtype.F32)),
		ckpt.WithRules(ckpt.KeepNormsAndBiasesF32()...),
		ckpt.WithBudget(1<<30))
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	w, err := m.Load(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	for name, t := range w.All() {
		fmt.Printf("%-36s %-8s %-8s %s\n", name, t.DType, t.Action(), t.Decision.Rule)
	}
	// Output:
	// image_encoder/proj.weight            F32      convert  component "image_encoder"=F32
	// image_encoder/proj.bias              F32      convert  rule 1 **.bias=F32
	// transformer/blocks.0.attn.weight     F8_E4M3  view     component "transformer"=stored
	// transformer/blocks.0.norm.weight     F32      convert  rule 2 **.*norm.*=F32
}

// A budget that the BF16 weights do not fit is refused before anything is
// allocated, with what would fit.
func ExampleBudgetError() {
	dir, _ := os.MkdirTemp("", "ckpt-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "unet", "model.safetensors")
	if err := os.Mkdir(filepath.Dir(path), 0o755); err != nil {
		log.Fatal(err)
	}
	if err := ckpttest.WriteFile(path, ckpttest.MustParseTensors("w:BF16[2048,2048]"), nil); err != nil {
		log.Fatal(err)
	}
	m, err := ckpt.Open(path, ckpt.WithBudget(6<<20))
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	_, err = m.Load(context.Background())
	fmt.Println(err)
	// Output:
	// ckpt: budget: the load needs 8.0 MiB at its peak and the budget is 6.0 MiB (budget option): 2.0 MiB short. unet needs 8.0 MiB as stored (BF16) and 4.0 MiB as F8_E4M3; budget 6.0 MiB; would fit: unet as F8_E4M3
}

// Patterns match dotted names part by part.
func ExamplePattern() {
	p := ckpt.MustParsePattern("norm") // shorthand for **.norm.**
	for _, name := range []string{"blocks.0.norm.weight", "blocks.0.layernorm.weight", "blocks.0.norm2.bias"} {
		fmt.Println(name, p.Match(name))
	}
	// Output:
	// blocks.0.norm.weight true
	// blocks.0.layernorm.weight false
	// blocks.0.norm2.bias false
}
