package variant_test

import (
	"fmt"
	"log"
	"os"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/variant"
)

// A diffusers transformer folder with an F32 sharded set and a bf16 single
// file side by side: each plan loads exactly one of them.
func ExampleResolveComponent() {
	dir, err := os.MkdirTemp("", "variant-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	tensors := func(dt dtype.DType) []ckpttest.Tensor {
		return []ckpttest.Tensor{ckpttest.T("proj.weight", dt, 8, 8), ckpttest.T("proj.bias", dt, 8)}
	}
	ckpttest.WriteWeights(dir, ckpttest.Weights{Prefix: ckpttest.DiffusersPrefix, Shards: 2, Tensors: tensors(dtype.F32)})
	ckpttest.WriteWeights(dir, ckpttest.Weights{Prefix: ckpttest.DiffusersPrefix, Variant: "bf16", Tensors: tensors(dtype.BF16)})

	plan, err := variant.ResolveComponent(dir, "bf16")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(plan.Layout, plan.Files)
	for _, ig := range plan.Ignored {
		fmt.Printf("ignored %s: %s\n", ig.File, ig.Reason)
	}
	c, err := plan.Open()
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	t, _ := c.Tensor("proj.weight")
	fmt.Println(t.DType())

	_, err = variant.ResolveComponent(dir, "fp16")
	fmt.Println(err.(*variant.Error).Kind.String())
	// Output:
	// single [diffusion_pytorch_model.bf16.safetensors]
	// ignored diffusion_pytorch_model-00001-of-00002.safetensors: untagged; the plan loads variant bf16
	// ignored diffusion_pytorch_model-00002-of-00002.safetensors: untagged; the plan loads variant bf16
	// ignored diffusion_pytorch_model.safetensors.index.json: untagged; the plan loads variant bf16
	// BF16
	// variant_not_found
}
