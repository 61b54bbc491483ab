package backend

import (
	"errors"
	"slices"
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
		kind executor.ErrorKind
	}{
		{"nil x", nil, w, nil, dtype.F32, executor.ErrArgument},
		{"int x", buf(dtype.I32, "x", 2, 8), w, nil, dtype.F32, executor.ErrDType},
		{"nil w", x, nil, nil, dtype.F32, executor.ErrArgument},
		{"out F8", x, w, nil, dtype.F8_E4M3, executor.ErrDType},
		{"K", buf(dtype.F32, "x", 2, 7), w, nil, dtype.F32, executor.ErrShape},
		{"scalar x", buf(dtype.F32, "x"), w, nil, dtype.F32, executor.ErrShape},
		{"rank-3 w", x, &executor.Weight{Data: buf(dtype.F32, "w", 1, 5, 8)}, nil, dtype.F32, executor.ErrShape},
		{"I8 w", x, &executor.Weight{Data: buf(dtype.I8, "w", 5, 8)}, nil, dtype.F32, executor.ErrDType},
		{"F4 w", x, f4, nil, dtype.F32, executor.ErrDType},
		{"bias shape", x, w, buf(dtype.F32, "b", 4), dtype.F32, executor.ErrShape},
		{"bias dtype", x, w, buf(dtype.F8_E4M3, "b", 5), dtype.F32, executor.ErrDType},
		{"missing scale", x, fp8(), nil, dtype.F32, executor.ErrArgument},
		{"scale bytes", x, fp8(buf(dtype.F32, "s", 2, 1)), nil, dtype.F32, executor.ErrArgument},
		{"scale nil", x, fp8(nil), nil, dtype.F32, executor.ErrArgument},
		{"scales without layout", x, &executor.Weight{Data: w.Data, Scales: []executor.Buffer{b}}, nil, dtype.F32, executor.ErrArgument},
	} {
		if _, _, _, _, err := LinearDims(c.x, c.w, c.b, c.out); !errors.Is(err, c.kind) {
			t.Errorf("%s: %v, want %s", c.name, err, c.kind)
		}
	}
	if err := CheckSameShape(executor.OpAdd, buf(dtype.F16, "a", 2, 3), buf(dtype.F32, "b", 2, 3)); err != nil {
		t.Error(err)
	}
	if err := CheckSameShape(executor.OpAdd, buf(dtype.F16, "a", 2, 3), buf(dtype.F32, "b", 3, 2)); !errors.Is(err, executor.ErrShape) {
		t.Error(err)
	}
	if rows, d, err := RMSNormDims(buf(dtype.F32, "h", 4, 2, 6), buf(dtype.BF16, "n", 6), 1e-6); err != nil || rows != 8 || d != 6 {
		t.Errorf("RMSNormDims %d %d %v", rows, d, err)
	}
	for _, c := range []struct {
		x, w executor.Buffer
		eps  float32
		kind executor.ErrorKind
	}{
		{buf(dtype.F32, "h", 4, 0), nil, 0, executor.ErrShape},
		{buf(dtype.F32, "h", 4, 6), nil, -1, executor.ErrArgument},
		{buf(dtype.F32, "h", 4, 6), buf(dtype.F32, "n", 5), 0, executor.ErrShape},
		{buf(dtype.F64, "h", 4, 6), nil, 0, executor.ErrDType},
	} {
		if _, _, err := RMSNormDims(c.x, c.w, c.eps); !errors.Is(err, c.kind) {
			t.Errorf("RMSNormDims(%v): %v, want %s", c.x.Shape(), err, c.kind)
		}
	}
	if err := CheckHost(make([]byte, 6), dtype.BF16, []int64{3}, "x"); err != nil {
		t.Error(err)
	}
	for _, c := range []struct {
		n     int
		dt    dtype.DType
		shape []int64
		kind  executor.ErrorKind
	}{
		{5, dtype.BF16, []int64{3}, executor.ErrShape},
		{0, dtype.Invalid, nil, executor.ErrDType},
		{0, dtype.F32, []int64{-1}, executor.ErrShape},
		{0, dtype.F32, []int64{1 << 40, 1 << 40}, executor.ErrShape},
	} {
		if err := CheckHost(make([]byte, c.n), c.dt, c.shape, "x"); !errors.Is(err, c.kind) {
			t.Errorf("CheckHost(%d, %s, %v): %v", c.n, c.dt, c.shape, err)
		}
	}
}
