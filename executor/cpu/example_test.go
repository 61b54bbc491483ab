package cpu_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/executor"
	"github.com/ckpt-go/ckpt/executor/cpu"
)

// A Linear layer y = x·Wᵀ + b on the CPU, with BF16 weights and F32
// accumulation.
func ExampleExecutor_Linear() {
	ctx := context.Background()
	ex, _ := cpu.New()
	defer ex.Close()

	wb := make([]byte, 2*2*3)
	_, _ = dtype.EncodeFloat32(wb, dtype.BF16, []float32{1, 2, 3, -1, 0.5, 0.25}, dtype.Options{})
	wd, _ := ex.FromHost(ctx, wb, dtype.BF16, []int64{2, 3}, "fc.weight")
	w := &executor.Weight{Data: wd}
	b, _ := ex.FromHost(ctx, dtype.Float32Bytes([]float32{10, 20}), dtype.F32, []int64{2}, "fc.bias")
	x, _ := ex.FromHost(ctx, dtype.Float32Bytes([]float32{1, 1, 1}), dtype.F32, []int64{1, 3}, "x")

	y, err := ex.Linear(ctx, x, w, b, dtype.F32)
	if err != nil {
		fmt.Println(err)
		return
	}
	out := make([]byte, y.Bytes())
	_ = ex.Download(ctx, y, out)
	vals := make([]float32, 2)
	_, _ = dtype.DecodeFloat32(vals, out, dtype.F32)
	fmt.Println(y.Name(), y.Shape(), vals)
	// Output: fc.weight [1 2] [16 19.75]
}

// With the check-finite option, the first op whose output overflows names
// itself and the layer.
func ExampleNew_checkFinite() {
	ctx := context.Background()
	ex, _ := cpu.New(executor.WithCheckFinite())
	defer ex.Close()
	h := make([]byte, 4)
	_, _ = dtype.EncodeFloat32(h, dtype.F16, []float32{50000, 1}, dtype.Options{})
	a, _ := ex.FromHost(ctx, h, dtype.F16, []int64{2}, "blocks.7.residual")
	_, err := ex.Add(ctx, a, a)
	var nf *executor.NonFiniteError
	if errors.As(err, &nf) {
		fmt.Printf("%s on %q: %d Inf, %d NaN\n", nf.Op, nf.Tensor, nf.Inf, nf.NaN)
	}
	// Output: Add on "blocks.7.residual": 1 Inf, 0 NaN
}
