package ckpt_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
)

// Rank 1 of 4 loads its part of a column-parallel weight (rows), of a
// row-parallel one (columns) and the norm whole, reading a quarter of the
// split weights' bytes. 10 rows over 4 ranks are 3, 3, 2, 2.
func ExampleWithRank() {
	dir, _ := os.MkdirTemp("", "ckpt-example")
	defer os.RemoveAll(dir)
	path := dir + "/model.safetensors"
	err := ckpttest.WriteFile(path, ckpttest.MustParseTensors(
		"layers.0.q_proj.weight:BF16[10,64] layers.0.o_proj.weight:BF16[64,10] layers.0.norm.weight:BF16[64]"), nil)
	if err != nil {
		log.Fatal(err)
	}
	m, err := ckpt.Open(path, ckpt.WithDType(ckpt.To(dtype.F32)), ckpt.WithRank(1, 4,
		ckpt.Split{Pattern: ckpt.MustParsePattern("**.q_proj.weight"), Dim: 0},
		ckpt.Split{Pattern: ckpt.MustParsePattern("**.o_proj.weight"), Dim: 1}))
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	p, err := m.Plan()
	if err != nil {
		log.Fatal(err)
	}
	for _, t := range p.Components[0].Tensors {
		part := "replicated"
		if t.Split != nil {
			part = t.Split.String()
		}
		fmt.Printf("%-22s %-8s reads %4d of %4d bytes: %v, %s\n", t.Name, fmt.Sprint(t.Shape), t.ReadBytes, t.StoredBytes, t.Ranges[0].ByteRange, part)
	}
	w, err := m.Load(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	o, _ := w.Tensor("layers.0.o_proj.weight")
	fmt.Println(o.DType, o.Shape, len(o.Bytes()), "bytes")
	// Output:
	// layers.0.q_proj.weight [3 64]   reads  384 of 1280 bytes: 640+384, dim 0 [3:6) of [10 64]
	// layers.0.o_proj.weight [64 3]   reads  384 of 1280 bytes: 1542+6×64/20, dim 1 [3:6) of [64 10]
	// layers.0.norm.weight   [64]     reads  128 of  128 bytes: 2816+128, replicated
	// F32 [64 3] 768 bytes
}
