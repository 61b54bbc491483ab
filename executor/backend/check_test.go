package backend

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/executor"
	"github.com/ckpt-go/ckpt/quant"
)

// fakeBuf is a Buffer with no memory behind it.
type fakeBuf struct {
	dt    dtype.DType
	shape []int64
	name  string
}

func (b *fakeBuf) DType() dtype.DType { return b.dt }
func (b *fakeBuf) Shape() []int64     { return slices.Clone(b.shape) }
func (b *fakeBuf) Name() string       { return b.name }
func (b *fakeBuf) Bytes() int64 {
	n, _ := Elements(b.shape)
	nb, _ := b.dt.ByteLen(n)
	return nb
}

func buf(dt dtype.DType, name string, shape ...int64) *fakeBuf {
	return &fakeBuf{dt: dt, shape: shape, name: name}
}

func TestChecks(t *testing.T) {
	x := buf(dtype.BF16, "x", 2, 3, 8)
	w := &executor.Weight{Data: buf(dtype.F32, "fc.weight", 5, 8)}
	b := buf(dtype.F32, "fc.bias", 5)
	m, k, n, shape, err := LinearDims(x, w, b, dtype.F16)
	if err != nil || m != 6 || k != 8 || n != 5 || !slices.Equal(shape, []int64{2, 3, 5}) {
		t.Fatalf("LinearDims = %d %d %d %v %v", m, k, n, shape, err)
	}
	blockScale := quant.Scale{Role: quant.RoleScaleInv, Stored: quant.Stored{Name: "fc.weight_scale_inv", DType: dtype.F32, Shape: []int64{1, 1}}, Block: [2]int64{128, 128}}
	fp8 := func(scales ...executor.Buffer) *executor.Weight {
		return &executor.Weight{Data: buf(dtype.F8_E4M3, "fc.weight", 5, 8), Scales: scales, Quant: &quant.Weight{
			Name: "fc.weight", Shape: []int64{5, 8}, Elem: dtype.F8_E4M3, Layout: quant.DeepSeekFP8Block,
			Data: quant.Stored{Name: "fc.weight", DType: dtype.F8_E4M3, Shape: []int64{5, 8}}, Scales: []quant.Scale{blockScale}}}
	}
	if _, _, _, _, err := LinearDims(x, fp8(buf(dtype.F32, "s", 1, 1)), nil, dtype.F32); err != nil {
		t.Errorf("fp8 weight: %v", err)
	}
	f4 := &executor.Weight{Data: buf(dtype.U8, "q", 5, 4), Quant: &quant.Weight{Name: "q", Shape: []int64{5, 8}, Elem: dtype.F4, Data: quant.Stored{DType: dtype.U8, Shape: []int64{5, 4}}}}
	for _, c := range []struct {
		name string
		x    executor.Buffer
		w    *executor.Weight
		b    executor.Buffer
		out  dtype.DType
		msg  string // says which argument, as the kind did before it was general
	}{
		{"nil x", nil, w, nil, dtype.F32, "nil buffer"},
		{"int x", buf(dtype.I32, "x", 2, 8), w, nil, dtype.F32, "activation dtype I32"},
		{"nil w", x, nil, nil, dtype.F32, "nil weight"},
		{"out F8", x, w, nil, dtype.F8_E4M3, "output dtype F8_E4M3"},
		{"K", buf(dtype.F32, "x", 2, 7), w, nil, dtype.F32, "has K=7"},
		{"scalar x", buf(dtype.F32, "x"), w, nil, dtype.F32, "activation is a scalar"},
		{"rank-3 w", x, &executor.Weight{Data: buf(dtype.F32, "w", 1, 5, 8)}, nil, dtype.F32, "is not [N, K]"},
		{"I8 w", x, &executor.Weight{Data: buf(dtype.I8, "w", 5, 8)}, nil, dtype.F32, "weight element type I8"},
		{"F4 w", x, f4, nil, dtype.F32, "weight element type F4"},
		{"bias shape", x, w, buf(dtype.F32, "b", 4), dtype.F32, "bias shape [4], want [5]"},
		{"bias dtype", x, w, buf(dtype.F8_E4M3, "b", 5), dtype.F32, `tensor "b": activation dtype F8_E4M3`},
		{"missing scale", x, fp8(), nil, dtype.F32, "0 scale buffers for 1 scales"},
		{"scale bytes", x, fp8(buf(dtype.F32, "s", 2, 1)), nil, dtype.F32, "scale is 8 bytes, F32 [1 1] needs 4"},
		{"scale nil", x, fp8(nil), nil, dtype.F32, "nil scale buffer"},
		{"scales without layout", x, &executor.Weight{Data: w.Data, Scales: []executor.Buffer{b}}, nil, dtype.F32, "scales without a quantization layout"},
	} {
		if _, _, _, _, err := LinearDims(c.x, c.w, c.b, c.out); !errors.Is(err, executor.ErrArgument) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: %v, want ErrArgument saying %q", c.name, err, c.msg)
		}
	}
	if err := CheckSameShape(executor.OpAdd, buf(dtype.F16, "a", 2, 3), buf(dtype.F32, "b", 2, 3)); err != nil {
		t.Error(err)
	}
	if err := CheckSameShape(executor.OpAdd, buf(dtype.F16, "a", 2, 3), buf(dtype.F32, "b", 3, 2)); !errors.Is(err, executor.ErrArgument) || !strings.Contains(err.Error(), "shapes [2 3] and [3 2] differ") {
		t.Error(err)
	}
	if rows, d, err := RMSNormDims(buf(dtype.F32, "h", 4, 2, 6), buf(dtype.BF16, "n", 6), 1e-6); err != nil || rows != 8 || d != 6 {
		t.Errorf("RMSNormDims %d %d %v", rows, d, err)
	}
	for _, c := range []struct {
		x, w executor.Buffer
		eps  float32
		msg  string
	}{
		{buf(dtype.F32, "h", 4, 0), nil, 0, "shape [4 0]"},
		{buf(dtype.F32, "h", 4, 6), nil, -1, "eps -1"},
		{buf(dtype.F32, "h", 4, 6), buf(dtype.F32, "n", 5), 0, "weight shape [5], want [6]"},
		{buf(dtype.F64, "h", 4, 6), nil, 0, "activation dtype F64"},
	} {
		if _, _, err := RMSNormDims(c.x, c.w, c.eps); !errors.Is(err, executor.ErrArgument) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("RMSNormDims(%v): %v, want ErrArgument saying %q", c.x.Shape(), err, c.msg)
		}
	}
	if err := CheckHost(make([]byte, 6), dtype.BF16, []int64{3}, "x"); err != nil {
		t.Error(err)
	}
	for _, c := range []struct {
		n     int
		dt    dtype.DType
		shape []int64
		msg   string
	}{
		{5, dtype.BF16, []int64{3}, "5 bytes for 3 BF16 elements"},
		{0, dtype.Invalid, nil, "invalid dtype"},
		{0, dtype.F32, []int64{-1}, "negative dimension"},
		{0, dtype.F32, []int64{1 << 40, 1 << 40}, "overflows int64"},
	} {
		if err := CheckHost(make([]byte, c.n), c.dt, c.shape, "x"); !errors.Is(err, executor.ErrArgument) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("CheckHost(%d, %s, %v): %v", c.n, c.dt, c.shape, err)
		}
	}
}
