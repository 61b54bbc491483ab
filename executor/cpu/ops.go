package cpu

import (
	"context"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/executor"
	"github.com/ckpt-go/ckpt/executor/backend"
)

// chunk is the number of elements an elementwise worker takes at a time.
const chunk = 16 << 10

// Dequantize returns w's logical tensor in dtype to (any float dtype):
// quant.Weight.Dequantize for a quantized weight, dtype.Convert for a plain
// one.
func (e *Executor) Dequantize(ctx context.Context, w *executor.Weight, to dtype.DType) (executor.Buffer, error) {
	const op = executor.OpDequantize
	if err := e.start(ctx, op); err != nil {
		return nil, err
	}
	if err := backend.CheckWeight(op, w); err != nil {
		return nil, fail(err)
	}
	if !to.IsFloat() {
		return nil, errorf(executor.ErrArgument, op, w.Name(), "target %s is not a float dtype", to)
	}
	data, scales, err := e.weightBytes(op, w)
	if err != nil {
		return nil, err
	}
	n, err := backend.Elements(w.Shape())
	if err != nil {
		return nil, fail(err)
	}
	nb, err := to.ByteLen(n)
	if err != nil {
		return nil, errorf(executor.ErrArgument, op, w.Name(), "byte size of %d %s elements: %v", n, to, err)
	}
	dst, err := alloc(op, w.Name(), nb)
	if err != nil {
		return nil, err
	}
	opts := dtype.Options{Workers: e.workers()}
	var st dtype.Stats
	if w.Quant != nil {
		st, err = w.Quant.DequantizeContext(ctx, dst, to, data, scales, opts)
	} else {
		st, err = dtype.ConvertContext(ctx, dst, to, data, w.Data.DType(), opts)
	}
	if err != nil {
		return nil, quantErr(op, w.Name(), err)
	}
	return e.finish(op, e.newBuffer(to, w.Shape(), w.Name(), dst), st)
}

// weightBytes checks that w's buffers are e's and returns their bytes.
func (e *Executor) weightBytes(op string, w *executor.Weight) (data []byte, scales [][]byte, err error) {
	if _, data, err = e.own(op, w.Data); err != nil {
		return nil, nil, err
	}
	for _, s := range w.Scales {
		_, sb, err := e.own(op, s)
		if err != nil {
			return nil, nil, err
		}
		scales = append(scales, sb)
	}
	return data, scales, nil
}

// weightF32 returns w's values in F32, from the cache kept with its data
// buffer or computed (and cached) now.
func (e *Executor) weightF32(ctx context.Context, op string, w *executor.Weight) ([]float32, error) {
	data, scales, err := e.weightBytes(op, w)
	if err != nil {
		return nil, err
	}
	db := w.Data.(*buffer) // checked by weightBytes
	db.mu.Lock()
	defer db.mu.Unlock()
	if c := db.linear; c != nil && c.q == w.Quant && slices.Equal(c.scales, w.Scales) {
		return c.vals, nil
	}
	n, err := backend.Elements(w.Shape())
	if err != nil {
		return nil, fail(err)
	}
	vals := make([]float32, n)
	if w.Quant == nil {
		_, err = dtype.DecodeFloat32(vals, data, w.Data.DType())
	} else {
		// Straight into vals: F32 bytes as DecodeFloat32 writes them.
		_, err = w.Quant.DequantizeContext(ctx, dtype.Float32Bytes(vals), dtype.F32, data, scales, dtype.Options{Workers: e.workers()})
	}
	if err != nil {
		return nil, quantErr(op, w.Name(), err)
	}
	if db.freed.Load() {
		return nil, errorf(executor.ErrClosed, op, w.Name(), "weight freed during the op")
	}
	db.linear = &f32Cache{q: w.Quant, scales: slices.Clone(w.Scales), vals: vals}
	return vals, nil
}

// decode returns a buffer's elements as float32.
func decode(b *buffer, d []byte) ([]float32, error) {
	v := make([]float32, b.size*8/int64(b.dt.Bits()))
	_, err := dtype.DecodeFloat32(v, d, b.dt)
	return v, err
}

// ownFloats returns the elements of an optional operand b as float32: nil
// when b is nil.
func (e *Executor) ownFloats(op string, b executor.Buffer) ([]float32, error) {
	if b == nil {
		return nil, nil
	}
	bb, bd, err := e.own(op, b)
	if err != nil {
		return nil, err
	}
	v, err := decode(bb, bd)
	if err != nil {
		return nil, quantErr(op, bb.name, err)
	}
	return v, nil
}

// Linear returns y = x·Wᵀ + b in dtype out (see package executor): the
// weight's F32 values (cached), x widened to F32, the blocked product
// summed in increasing k in float32, the bias added in float32, one
// rounding to out.
func (e *Executor) Linear(ctx context.Context, x executor.Buffer, w *executor.Weight, bias executor.Buffer, out dtype.DType) (executor.Buffer, error) {
	const op = executor.OpLinear
	if err := e.start(ctx, op); err != nil {
		return nil, err
	}
	m, k, n, shape, err := backend.LinearDims(x, w, bias, out)
	if err != nil {
		return nil, fail(err)
	}
	xb, xd, err := e.own(op, x)
	if err != nil {
		return nil, err
	}
	bv, err := e.ownFloats(op, bias)
	if err != nil {
		return nil, err
	}
	nb, _ := out.ByteLen(m * n)
	dst, err := alloc(op, w.Name(), nb)
	if err != nil {
		return nil, err
	}
	wv, err := e.weightF32(ctx, op, w)
	if err != nil {
		return nil, err
	}
	xv, err := decode(xb, xd)
	if err != nil {
		return nil, quantErr(op, xb.name, err)
	}
	y := make([]float32, m*n)
	if err := gemm(ctx, xv, wv, y, int(m), int(n), int(k), e.workers()); err != nil {
		return nil, canceled(op, err)
	}
	if bv != nil {
		for i := int64(0); i < m; i++ {
			row := y[i*n : (i+1)*n]
			for j, b := range bv {
				row[j] += b
			}
		}
	}
	st, err := dtype.EncodeFloat32(dst, out, y, dtype.Options{Workers: e.workers()})
	if err != nil {
		return nil, quantErr(op, w.Name(), err)
	}
	return e.finish(op, e.newBuffer(out, shape, w.Name(), dst), st)
}

// elementwise runs f over chunks of the inputs' elements (all of the same
// count) on the workers: each chunk is decoded to float32, f writes the
// results as float64 values, and they are rounded once to dt.
func (e *Executor) elementwise(ctx context.Context, op, name string, dt dtype.DType, shape []int64, ins []*buffer, ind [][]byte,
	f func(dst []float64, src [][]float32)) (executor.Buffer, error) {
	n, err := backend.Elements(shape)
	if err != nil {
		return nil, fail(err)
	}
	nb, _ := dt.ByteLen(n)
	dst, err := alloc(op, name, nb)
	if err != nil {
		return nil, err
	}
	ob := int64(dt.Bits() / 8)
	chunks := (n + chunk - 1) / chunk
	st, err := e.parallel(ctx, chunks, func() func(int64) (dtype.Stats, error) {
		src := make([][]float32, len(ins))
		for i := range src {
			src[i] = make([]float32, chunk)
		}
		res := make([]float64, chunk)
		args := make([][]float32, len(ins))
		return func(c int64) (dtype.Stats, error) {
			lo, hi := c*chunk, min((c+1)*chunk, n)
			cnt := int(hi - lo)
			for i, b := range ins {
				ib := int64(b.dt.Bits() / 8)
				if _, err := dtype.DecodeFloat32(src[i][:cnt], ind[i][lo*ib:hi*ib], b.dt); err != nil {
					return dtype.Stats{}, err
				}
				args[i] = src[i][:cnt]
			}
			f(res[:cnt], args)
			return dtype.EncodeFloat64(dst[lo*ob:hi*ob], dt, res[:cnt], dtype.Options{Workers: 1})
		}
	})
	if err := ctx.Err(); err != nil {
		return nil, canceled(op, err)
	}
	if err != nil {
		return nil, quantErr(op, name, err)
	}
	return e.finish(op, e.newBuffer(dt, shape, name, dst), st)
}

// parallel runs the units of work 0 to n-1 on the executor's workers (at
// most n goroutines, the caller's among them) and returns the sum of their
// statistics. Each goroutine calls newWorker once for its unit function
// (which owns its scratch buffers). A unit's error is returned once every
// goroutine has stopped; ctx's end stops them too, and the caller checks
// ctx.Err() first.
func (e *Executor) parallel(ctx context.Context, n int64, newWorker func() func(i int64) (dtype.Stats, error)) (dtype.Stats, error) {
	var (
		next atomic.Int64
		mu   sync.Mutex
		st   dtype.Stats
		ferr error
		wg   sync.WaitGroup
	)
	workers := int(min(int64(e.workers()), max(n, 1)))
	run := func() {
		defer wg.Done()
		unit := newWorker()
		var local dtype.Stats
		for ctx.Err() == nil {
			i := next.Add(1) - 1
			if i >= n {
				break
			}
			s, err := unit(i)
			if err != nil {
				mu.Lock()
				ferr = err
				mu.Unlock()
				return
			}
			local.Add(s)
		}
		mu.Lock()
		st.Add(local)
		mu.Unlock()
	}
	wg.Add(workers)
	for range workers - 1 {
		go run()
	}
	run()
	wg.Wait()
	return st, ferr
}

// unary checks x and runs f elementwise.
func (e *Executor) unary(ctx context.Context, op string, x executor.Buffer, f func(float32) float64) (executor.Buffer, error) {
	if err := e.start(ctx, op); err != nil {
		return nil, err
	}
	if err := backend.CheckActivation(op, x); err != nil {
		return nil, fail(err)
	}
	xb, xd, err := e.own(op, x)
	if err != nil {
		return nil, err
	}
	return e.elementwise(ctx, op, xb.name, xb.dt, xb.shape, []*buffer{xb}, [][]byte{xd}, func(dst []float64, src [][]float32) {
		for i, v := range src[0] {
			dst[i] = f(v)
		}
	})
}

// Add returns a + b: the float32 sum of the widened values, rounded once
// to a's dtype, named after b (a when b has no name).
func (e *Executor) Add(ctx context.Context, a, b executor.Buffer) (executor.Buffer, error) {
	const op = executor.OpAdd
	if err := e.start(ctx, op); err != nil {
		return nil, err
	}
	if err := backend.CheckSameShape(op, a, b); err != nil {
		return nil, fail(err)
	}
	ab, ad, err := e.own(op, a)
	if err != nil {
		return nil, err
	}
	bb, bd, err := e.own(op, b)
	if err != nil {
		return nil, err
	}
	name := bb.name
	if name == "" {
		name = ab.name
	}
	return e.elementwise(ctx, op, name, ab.dt, ab.shape, []*buffer{ab, bb}, [][]byte{ad, bd}, func(dst []float64, src [][]float32) {
		y := src[1][:len(src[0])]
		for i, v := range src[0] {
			dst[i] = float64(v + y[i])
		}
	})
}

// GELU returns 0.5·x·(1 + erf(x/√2)), computed in float64 and rounded once
// to x's dtype.
func (e *Executor) GELU(ctx context.Context, x executor.Buffer) (executor.Buffer, error) {
	return e.unary(ctx, executor.OpGELU, x, gelu)
}

func gelu(v float32) float64 {
	x := float64(v)
	return 0.5 * x * (1 + math.Erf(x/math.Sqrt2))
}

// SiLU returns x / (1 + exp(−x)), computed in float64 and rounded once to
// x's dtype.
func (e *Executor) SiLU(ctx context.Context, x executor.Buffer) (executor.Buffer, error) {
	return e.unary(ctx, executor.OpSiLU, x, silu)
}

func silu(v float32) float64 {
	x := float64(v)
	return x / (1 + math.Exp(-x))
}

// RMSNorm returns x / sqrt(mean(x²) + eps) · w over x's last dimension D,
// in float32 (see package executor), rounded once to x's dtype.
func (e *Executor) RMSNorm(ctx context.Context, x executor.Buffer, w executor.Buffer, eps float32) (executor.Buffer, error) {
	const op = executor.OpRMSNorm
	if err := e.start(ctx, op); err != nil {
		return nil, err
	}
	rows, d, err := backend.RMSNormDims(x, w, eps)
	if err != nil {
		return nil, fail(err)
	}
	xb, xd, err := e.own(op, x)
	if err != nil {
		return nil, err
	}
	wv, err := e.ownFloats(op, w)
	if err != nil {
		return nil, err
	}
	nb, _ := xb.dt.ByteLen(rows * d)
	dst, err := alloc(op, xb.name, nb)
	if err != nil {
		return nil, err
	}
	ib := int64(xb.dt.Bits() / 8)
	st, err := e.parallel(ctx, rows, func() func(int64) (dtype.Stats, error) {
		src := make([]float32, d)
		res := make([]float64, d)
		return func(r int64) (dtype.Stats, error) {
			if _, err := dtype.DecodeFloat32(src, xd[r*d*ib:(r+1)*d*ib], xb.dt); err != nil {
				return dtype.Stats{}, err
			}
			rmsRow(res, src, wv, eps)
			return dtype.EncodeFloat64(dst[r*d*ib:(r+1)*d*ib], xb.dt, res, dtype.Options{Workers: 1})
		}
	})
	if err := ctx.Err(); err != nil {
		return nil, canceled(op, err)
	}
	if err != nil {
		return nil, quantErr(op, xb.name, err)
	}
	return e.finish(op, e.newBuffer(xb.dt, xb.shape, xb.name, dst), st)
}

// rmsRow normalizes one row in float32: the sum of squares in increasing
// order, r = 1/sqrt(sum/D + eps), y = (x·r)·w. (A float32 square root
// computed through float64 is the correctly rounded float32 one.)
func rmsRow(dst []float64, x, w []float32, eps float32) {
	var ss float32
	for _, v := range x {
		ss += float32(v * v)
	}
	ms := ss / float32(len(x))
	r := 1 / float32(math.Sqrt(float64(ms+eps)))
	for i, v := range x {
		y := float32(v * r)
		if w != nil {
			y = float32(y * w[i])
		}
		dst[i] = float64(y)
	}
}
