package torch_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/torch"
)

// Convert a checkpoint written by torch.save to safetensors. In
// tied_bf16.pt, lm_head.weight is the same storage as embed.weight, and
// proj.weight_t a transposed view.
func Example() {
	ck, err := torch.Open("testdata/tied_bf16.pt")
	if err != nil {
		log.Fatal(err)
	}
	defer ck.Close()
	for name, t := range ck.Tensors() {
		fmt.Println(name, t.DType(), t.Shape(), t.Contiguous())
	}
	fmt.Println("aliases:", ck.Aliases())

	dir, _ := os.MkdirTemp("", "torch-example")
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "model.safetensors")
	if err := torch.WriteSafetensors(context.Background(), ck, out); err != nil {
		log.Fatal(err)
	}
	f, err := safetensors.Open(out)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	fmt.Println(f.Len(), "tensors;", torch.AliasesKey, "=", f.Metadata()[torch.AliasesKey])
	// Output:
	// embed.weight BF16 [64 16] true
	// proj.weight_t BF16 [12 8] false
	// proj.rows BF16 [3 12] true
	// proj.weight BF16 [8 12] true
	// aliases: map[lm_head.weight:embed.weight]
	// 4 tensors; ckpt.aliases = {"lm_head.weight":"embed.weight"}
}

// A training checkpoint's non-tensor values become metadata; its state dict
// flattens to dotted names.
func ExampleCheckpoint_Metadata() {
	ck, err := torch.Open("testdata/train_state.pt")
	if err != nil {
		log.Fatal(err)
	}
	defer ck.Close()
	fmt.Println(ck.Names())
	m := ck.Metadata()
	fmt.Println(m["epoch"], m["step"], m["lr"])
	// Output:
	// [model.enc.weight model.enc.bias]
	// 3 1200 0.0003
}

// A checkpoint whose pickle imports anything but what a state dict needs is
// refused before anything is read or written.
func ExampleErrForbiddenGlobal() {
	_, err := torch.Open("suspicious.pt")
	var e *torch.Error
	if errors.Is(err, torch.ErrForbiddenGlobal) && errors.As(err, &e) {
		fmt.Println("refused: the pickle imports", e.Global)
	}
}
