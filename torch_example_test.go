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

// A PyTorch checkpoint opens like a safetensors one: here a tied output
// projection and a transposed view, loaded as BF16.
func ExampleOpen_pyTorch() {
	dir, _ := os.MkdirTemp("", "ckpt-example")
	defer os.RemoveAll(dir)
	w := dtype.Float32Bytes([]float32{1, 2, 3, 4, 5, 6})
	b, err := ckpttest.EncodeTorch([]ckpttest.TorchTensor{
		{Name: "embed.weight", Storage: "0", Shape: []int64{3, 2}, Stride: []int64{2, 1}},
		{Name: "lm_head.weight", Storage: "0", Shape: []int64{3, 2}, Stride: []int64{2, 1}}, // tied
		{Name: "proj.weight", Storage: "0", Shape: []int64{2, 3}, Stride: []int64{1, 2}},    // transposed
	}, map[string]ckpttest.TorchStorage{"0": {DType: dtype.F32, Data: w}}, false)
	if err != nil {
		log.Fatal(err)
	}
	path := filepath.Join(dir, "pytorch_model.bin")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		log.Fatal(err)
	}
	m, err := ckpt.Open(path, ckpt.WithDType(ckpt.To(dtype.BF16)))
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	ws, err := m.Load(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	defer ws.Close()
	for name, t := range ws.All() {
		v, _ := t.Float32s()
		fmt.Println(name, t.DType, t.Shape, v)
	}
	// Output:
	// embed.weight BF16 [3 2] [1 2 3 4 5 6]
	// lm_head.weight BF16 [3 2] [1 2 3 4 5 6]
	// proj.weight BF16 [2 3] [1 3 5 2 4 6]
}
