// Package backend holds what the authors of an executor backend share, as
// database/sql/driver does for database drivers: the argument checks that
// make every backend refuse the same arguments with the same kinds of
// executor.Error. Programs that run weights use package executor; they never
// need this one.
package backend

import (
	"fmt"
	"math"
	"slices"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/executor"
	"github.com/ckpt-go/ckpt/internal/shapes"
)

// The checks' errors leave executor.Error.Executor empty for the executor
// to fill in.

// Elements returns the number of elements of shape, refusing negative
// dimensions and products that overflow int64 (executor.ErrArgument).
func Elements(shape []int64) (int64, error) {
	n, err := shapes.Elements(shape)
	if err != nil {
		return 0, &executor.Error{Kind: executor.ErrArgument, Msg: err.Error()}
	}
	return n, nil
}

// CheckHost checks FromHost's arguments: a valid dtype and a shape whose
// byte length is len(data).
func CheckHost(data []byte, dt dtype.DType, shape []int64, name string) error {
	if !dt.Valid() || dt == dtype.Invalid {
		return &executor.Error{Kind: executor.ErrArgument, Op: executor.OpFromHost, Tensor: name, Msg: fmt.Sprintf("invalid dtype %v", dt)}
	}
	n, err := Elements(shape)
	if err != nil {
		e := err.(*executor.Error)
		e.Op, e.Tensor = executor.OpFromHost, name
		return e
	}
	nb, err := dt.ByteLen(n)
	if err != nil || nb != int64(len(data)) {
		return &executor.Error{Kind: executor.ErrArgument, Op: executor.OpFromHost, Tensor: name,
			Msg: fmt.Sprintf("%d bytes for %d %s elements %v (want %d)", len(data), n, dt, shape, nb), Err: err}
	}
	return nil
}

// CheckWeight checks that an executor.Weight is whole: its data, and for a quantized
// weight one scale per quant scale with the byte lengths quant's layout
// requires.
func CheckWeight(op string, w *executor.Weight) error {
	if w == nil || w.Data == nil {
		return &executor.Error{Kind: executor.ErrArgument, Op: op, Msg: "nil weight"}
	}
	name := w.Data.Name()
	q := w.Quant
	if q == nil {
		if len(w.Scales) != 0 {
			return &executor.Error{Kind: executor.ErrArgument, Op: op, Tensor: name, Msg: "scales without a quantization layout"}
		}
		return nil
	}
	n, err := Elements(q.Data.Shape)
	if err != nil {
		return &executor.Error{Kind: executor.ErrArgument, Op: op, Tensor: name, Msg: "quantized data shape", Err: err}
	}
	if nb, err := q.Data.DType.ByteLen(n); err != nil || nb != w.Data.Bytes() {
		return &executor.Error{Kind: executor.ErrArgument, Op: op, Tensor: name,
			Msg: fmt.Sprintf("data is %d bytes, layout %s needs %d", w.Data.Bytes(), q.Layout, nb)}
	}
	if len(w.Scales) != len(q.Scales) {
		return &executor.Error{Kind: executor.ErrArgument, Op: op, Tensor: name,
			Msg: fmt.Sprintf("%d scale buffers for %d scales of layout %s", len(w.Scales), len(q.Scales), q.Layout)}
	}
	for i, s := range q.Scales {
		if w.Scales[i] == nil {
			return &executor.Error{Kind: executor.ErrArgument, Op: op, Tensor: s.Name, Msg: "nil scale buffer"}
		}
		n, err := Elements(s.Shape)
		if err != nil {
			return &executor.Error{Kind: executor.ErrArgument, Op: op, Tensor: s.Name, Msg: "scale shape", Err: err}
		}
		if nb, err := s.DType.ByteLen(n); err != nil || nb != w.Scales[i].Bytes() {
			return &executor.Error{Kind: executor.ErrArgument, Op: op, Tensor: s.Name,
				Msg: fmt.Sprintf("scale is %d bytes, %s %v needs %d", w.Scales[i].Bytes(), s.DType, s.Shape, nb)}
		}
	}
	return nil
}

// CheckActivation checks that x is an executor.Buffer of an activation dtype.
func CheckActivation(op string, x executor.Buffer) error {
	if x == nil {
		return &executor.Error{Kind: executor.ErrArgument, Op: op, Msg: "nil buffer"}
	}
	if !executor.IsActivation(x.DType()) {
		return &executor.Error{Kind: executor.ErrArgument, Op: op, Tensor: x.Name(), Msg: fmt.Sprintf("activation dtype %s (want F32, BF16 or F16)", x.DType())}
	}
	return nil
}

// LinearDims checks Linear's arguments and returns its dimensions: x is
// [..., K] (M rows, the product of the leading dimensions), W is [N, K],
// bias is nil or [N], and the output shape is [..., N].
func LinearDims(x executor.Buffer, w *executor.Weight, bias executor.Buffer, out dtype.DType) (m, k, n int64, outShape []int64, err error) {
	fail := func(kind executor.ErrorKind, tensor, msg string) (int64, int64, int64, []int64, error) {
		return 0, 0, 0, nil, &executor.Error{Kind: kind, Op: executor.OpLinear, Tensor: tensor, Msg: msg}
	}
	if err := CheckActivation(executor.OpLinear, x); err != nil {
		return 0, 0, 0, nil, err
	}
	if err := CheckWeight(executor.OpLinear, w); err != nil {
		return 0, 0, 0, nil, err
	}
	if !executor.IsActivation(out) {
		return fail(executor.ErrArgument, w.Name(), fmt.Sprintf("output dtype %s (want F32, BF16 or F16)", out))
	}
	if el := w.DType(); !executor.IsLinearWeight(el) {
		return fail(executor.ErrArgument, w.Name(), fmt.Sprintf("weight element type %s (want F32, BF16, F16, F8_E4M3 or F8_E5M2)", el))
	}
	ws := w.Shape()
	if len(ws) != 2 {
		return fail(executor.ErrArgument, w.Name(), fmt.Sprintf("weight shape %v is not [N, K]", ws))
	}
	xs := x.Shape()
	if len(xs) == 0 {
		return fail(executor.ErrArgument, x.Name(), "activation is a scalar, want [..., K]")
	}
	n, k = ws[0], ws[1]
	if xs[len(xs)-1] != k {
		return fail(executor.ErrArgument, w.Name(), fmt.Sprintf("activation %v has K=%d, weight %v has K=%d", xs, xs[len(xs)-1], ws, k))
	}
	if m, err = Elements(xs[:len(xs)-1]); err != nil {
		return 0, 0, 0, nil, err
	}
	if bias != nil {
		if err := CheckActivation(executor.OpLinear, bias); err != nil {
			return 0, 0, 0, nil, err
		}
		if bs := bias.Shape(); len(bs) != 1 || bs[0] != n {
			return fail(executor.ErrArgument, bias.Name(), fmt.Sprintf("bias shape %v, want [%d]", bs, n))
		}
	}
	outShape = append(slices.Clone(xs[:len(xs)-1]), n)
	if _, err := Elements(outShape); err != nil {
		return 0, 0, 0, nil, err
	}
	return m, k, n, outShape, nil
}

// CheckSameShape checks Add's arguments: activations of the same shape.
func CheckSameShape(op string, a, b executor.Buffer) error {
	if err := CheckActivation(op, a); err != nil {
		return err
	}
	if err := CheckActivation(op, b); err != nil {
		return err
	}
	if !slices.Equal(a.Shape(), b.Shape()) {
		return &executor.Error{Kind: executor.ErrArgument, Op: op, Tensor: a.Name(), Msg: fmt.Sprintf("shapes %v and %v differ", a.Shape(), b.Shape())}
	}
	return nil
}

// RMSNormDims checks RMSNorm's arguments and returns the number of rows and
// the normalized dimension D (x's last).
func RMSNormDims(x, w executor.Buffer, eps float32) (rows, d int64, err error) {
	if err := CheckActivation(executor.OpRMSNorm, x); err != nil {
		return 0, 0, err
	}
	xs := x.Shape()
	if len(xs) == 0 || xs[len(xs)-1] == 0 {
		return 0, 0, &executor.Error{Kind: executor.ErrArgument, Op: executor.OpRMSNorm, Tensor: x.Name(), Msg: fmt.Sprintf("shape %v has no last dimension to normalize", xs)}
	}
	if !(eps >= 0) || math.IsInf(float64(eps), 0) {
		return 0, 0, &executor.Error{Kind: executor.ErrArgument, Op: executor.OpRMSNorm, Tensor: x.Name(), Msg: fmt.Sprintf("eps %v (want finite and ≥ 0)", eps)}
	}
	d = xs[len(xs)-1]
	if w != nil {
		if err := CheckActivation(executor.OpRMSNorm, w); err != nil {
			return 0, 0, err
		}
		if ws := w.Shape(); len(ws) != 1 || ws[0] != d {
			return 0, 0, &executor.Error{Kind: executor.ErrArgument, Op: executor.OpRMSNorm, Tensor: w.Name(), Msg: fmt.Sprintf("weight shape %v, want [%d]", ws, d)}
		}
	}
	rows, err = Elements(xs[:len(xs)-1])
	return rows, d, err
}
