package cuda

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/executor"
	"github.com/ckpt-go/ckpt/executor/backend"
)

// Call these on the driver thread with opMu held.

// ensureIO allocates the pinned I/O buffer at first use.
func (e *Executor) ensureIO() error {
	if e.io.p != nil {
		return nil
	}
	h, err := e.drv.MemHostAlloc(ioBytes)
	if err != nil {
		return err
	}
	e.io = h
	return nil
}

// toDevice copies host bytes to dst through the pinned I/O buffer.
func (e *Executor) toDevice(dst devPtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	if err := e.ensureIO(); err != nil {
		return err
	}
	for off := 0; off < len(src); off += ioBytes {
		k := copy(e.io.bytes(), src[off:])
		if err := e.drv.MemcpyHtoDAsync(dst+devPtr(off), e.io, 0, int64(k), e.stream); err != nil {
			return err
		}
		if err := e.drv.StreamSynchronize(e.stream); err != nil {
			return err
		}
	}
	return nil
}

// fromDevice copies device bytes to dst through the pinned I/O buffer.
func (e *Executor) fromDevice(dst []byte, src devPtr) error {
	if len(dst) == 0 {
		return nil
	}
	if err := e.ensureIO(); err != nil {
		return err
	}
	for off := 0; off < len(dst); off += ioBytes {
		k := min(ioBytes, len(dst)-off)
		if err := e.drv.MemcpyDtoHAsync(e.io, 0, src+devPtr(off), int64(k), e.stream); err != nil {
			return err
		}
		if err := e.drv.StreamSynchronize(e.stream); err != nil {
			return err
		}
		copy(dst[off:off+k], e.io.bytes())
	}
	return nil
}

// grid returns a grid-stride launch's block count for n elements.
func (e *Executor) grid(n int64) uint32 {
	b := (n + 255) / 256
	return uint32(max(1, min(b, int64(max(e.sms, 1))*32)))
}

// launch runs kernel k on the op stream (on the driver thread).
func (e *Executor) launch(k string, grid, block [3]uint32, args ...uint64) error {
	f, ok := e.funcs[k]
	if !ok {
		return &Error{Kind: executor.ErrArgument, Msg: "kernel " + k + " is not loaded on this device"}
	}
	return e.drv.LaunchKernel(f, grid, block, 0, e.stream, args)
}

// launch1D runs an elementwise kernel over n elements and waits for it.
func (e *Executor) launch1D(k string, n int64, args ...uint64) error {
	if n == 0 {
		return nil
	}
	if err := e.launch(k, [3]uint32{e.grid(n), 1, 1}, [3]uint32{256, 1, 1}, args...); err != nil {
		return err
	}
	return e.drv.StreamSynchronize(e.stream)
}

// exec runs f on the driver thread with opMu held.
func (e *Executor) exec(f func() error) error {
	e.opMu.Lock()
	defer e.opMu.Unlock()
	return e.th.do(f)
}

// finish counts the op and, with the check-finite option, counts NaN and
// Inf in out on the device and reports them. On a failure out is freed.
func (e *Executor) finish(op string, out *buffer, err error) (executor.Buffer, error) {
	if err != nil {
		_ = e.Free(out)
		return nil, e.devErr(op, out.name, err)
	}
	seq := e.seq.Add(1)
	if !e.opts.CheckFinite {
		return out, nil
	}
	n, _ := backend.Elements(out.shape)
	var nan, inf int64
	if dt, ok := kernelDType(out.dt); ok && n > 0 {
		err = e.exec(func() error {
			if err := e.drv.MemsetD8Async(e.counts, 0, 16, e.stream); err != nil {
				return err
			}
			if err := e.launch(kNonFinite, [3]uint32{e.grid(n), 1, 1}, [3]uint32{256, 1, 1},
				uint64(out.ptr), uint64(dt), uint64(n), uint64(e.counts)); err != nil {
				return err
			}
			if err := e.drv.MemcpyDtoHAsync(e.small, 0, e.counts, 16, e.stream); err != nil {
				return err
			}
			if err := e.drv.StreamSynchronize(e.stream); err != nil {
				return err
			}
			b := e.small.bytes()
			nan, inf = int64(binary.LittleEndian.Uint64(b)), int64(binary.LittleEndian.Uint64(b[8:]))
			return nil
		})
		if err != nil {
			_ = e.Free(out)
			return nil, e.devErr(op, out.name, err)
		}
	}
	r := &executor.NonFiniteError{Executor: Name, Op: op, Seq: seq, Tensor: out.name, DType: out.dt.String(),
		NaN: nan, Inf: inf, Elements: n}
	if err := e.opts.Finite(r); err != nil {
		_ = e.Free(out)
		return nil, err
	}
	return out, nil
}

// FromHost copies data to a new device buffer.
func (e *Executor) FromHost(ctx context.Context, data []byte, dt dtype.DType, shape []int64, name string) (executor.Buffer, error) {
	b, err := e.fromHost(ctx, executor.OpFromHost, data, dt, shape, name)
	if err != nil {
		return nil, err
	}
	return b, nil
}

func (e *Executor) fromHost(ctx context.Context, op string, data []byte, dt dtype.DType, shape []int64, name string) (*buffer, error) {
	if err := e.start(ctx, op); err != nil {
		return nil, err
	}
	if err := backend.CheckHost(data, dt, shape, name); err != nil {
		if xe, ok := err.(*executor.Error); ok {
			xe.Op = op
		}
		return nil, fail(err)
	}
	b, err := e.newBuffer(op, dt, shape, name)
	if err != nil {
		return nil, err
	}
	if err := e.exec(func() error { return e.toDevice(b.ptr, data) }); err != nil {
		_ = e.Free(b)
		return nil, e.devErr(op, name, err)
	}
	return b, nil
}

// Upload copies one loaded tensor (a view of the file's mapping or owned
// bytes) to the device through the pinned I/O buffer; a weight kept
// quantized keeps its codes and scales as stored.
func (e *Executor) Upload(ctx context.Context, t *ckpt.Tensor) (*executor.Weight, error) {
	const op = executor.OpUpload
	if t == nil {
		return nil, errorf(executor.ErrArgument, op, "", "nil tensor")
	}
	q := t.QuantWeight()
	if q == nil {
		if len(t.Scales) != 0 {
			return nil, errorf(executor.ErrArgument, op, t.Name, "scales without a quantization layout")
		}
		d, err := e.fromHost(ctx, op, t.Bytes(), t.DType, t.Shape, t.Name)
		if err != nil {
			return nil, err
		}
		return &executor.Weight{Data: d}, nil
	}
	w := &executor.Weight{Quant: q}
	undo := func(err error) (*executor.Weight, error) {
		_ = executor.FreeWeight(e, w)
		return nil, err
	}
	if len(t.Scales) != len(q.Scales) {
		return nil, errorf(executor.ErrArgument, op, t.Name, "%d scale tensors for the %d of layout %s", len(t.Scales), len(q.Scales), q.Layout)
	}
	d, err := e.fromHost(ctx, op, t.Bytes(), q.Data.DType, q.Data.Shape, t.Name)
	if err != nil {
		return nil, err
	}
	w.Data = d
	for i, s := range t.Scales {
		sb, err := e.fromHost(ctx, op, s.Bytes(), q.Scales[i].DType, q.Scales[i].Shape, s.Name)
		if err != nil {
			return undo(err)
		}
		w.Scales = append(w.Scales, sb)
	}
	if err := backend.CheckWeight(op, w); err != nil {
		return undo(fail(err))
	}
	return w, nil
}

// Download copies b's bytes into dst through the pinned I/O buffer.
func (e *Executor) Download(ctx context.Context, b executor.Buffer, dst []byte) error {
	const op = executor.OpDownload
	if err := e.start(ctx, op); err != nil {
		return err
	}
	cb, err := e.own(op, b)
	if err != nil {
		return err
	}
	if int64(len(dst)) != cb.size {
		return errorf(executor.ErrArgument, op, cb.name, "dst is %d bytes, the buffer %d", len(dst), cb.size)
	}
	return e.devErr(op, cb.name, e.exec(func() error { return e.fromDevice(dst, cb.ptr) }))
}

// dqArgs returns the scale arguments of the dequantizing kernels (s,
// skind, stab, svaries, br, bc, gridc, g, gkind, gtab, gmode) for w.
func (e *Executor) dqArgs(op string, w *executor.Weight, p *dqPlan) ([]uint64, error) {
	scale := func(s dqScale) (ptr, kind, tab uint64, err error) {
		if s.index < 0 {
			return 0, ckSNone, 0, nil
		}
		sb, err := e.own(op, w.Scales[s.index])
		if err != nil {
			return 0, 0, 0, err
		}
		if s.kind == ckSTab {
			off, _ := tableIndex(s.tab)
			tab = uint64(e.tables) + uint64(8*off)
		}
		return uint64(sb.ptr), uint64(s.kind), tab, nil
	}
	sp, sk, st, err := scale(p.prim)
	if err != nil {
		return nil, err
	}
	gp, gk, gt, err := scale(p.glob)
	if err != nil {
		return nil, err
	}
	return []uint64{sp, sk, st, b2u(p.varies), uint64(p.br), uint64(p.bc), uint64(p.gridC), gp, gk, gt, uint64(p.gmode)}, nil
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// qtab returns the device address of the table of w's code values.
func (e *Executor) qtab(elem dtype.DType) uint64 {
	off, _ := tableIndex(elem)
	return uint64(e.tables) + uint64(8*off)
}

// Dequantize returns w's logical tensor in F32, BF16 or F16, computed on
// the device: bit-exact with quant.Weight.Dequantize for a quantized
// weight, with dtype.Convert for a plain F32, BF16, F16 or FP8 one.
func (e *Executor) Dequantize(ctx context.Context, w *executor.Weight, to dtype.DType) (executor.Buffer, error) {
	const op = executor.OpDequantize
	if err := e.start(ctx, op); err != nil {
		return nil, err
	}
	if err := backend.CheckWeight(op, w); err != nil {
		return nil, fail(err)
	}
	tc, ok := kernelDType(to)
	if !ok {
		return nil, errorf(executor.ErrArgument, op, w.Name(), "target %s (the CUDA executor dequantizes to F32, BF16 or F16)", to)
	}
	db, err := e.own(op, w.Data)
	if err != nil {
		return nil, err
	}
	var args []uint64
	var kernel string
	n, _ := backend.Elements(w.Shape())
	if w.Quant == nil {
		sdt, tab, err := e.convertSource(op, db.name, db.dt)
		if err != nil {
			return nil, err
		}
		kernel, args = kConvert, []uint64{uint64(db.ptr), sdt, tab, 0, uint64(tc), 0, 0, uint64(n)}
	} else {
		p, err := planDequant(w.Quant)
		if err != nil {
			return nil, errorf(executor.ErrArgument, op, w.Name(), "%v", err)
		}
		sa, err := e.dqArgs(op, w, p)
		if err != nil {
			return nil, err
		}
		kernel = kDequant
		args = append([]uint64{uint64(db.ptr), e.qtab(p.elem), b2u(p.fp4), uint64(p.c)}, sa...)
		args = append(args, 0, uint64(tc), 0, 0, uint64(n))
	}
	out, err := e.newBuffer(op, to, w.Shape(), w.Name())
	if err != nil {
		return nil, err
	}
	dstArg := 3
	if kernel == kDequant {
		dstArg = 15
	}
	args[dstArg] = uint64(out.ptr)
	return e.finish(op, out, e.exec(func() error { return e.launch1D(kernel, n, args...) }))
}

// convertSource returns ck_convert's source dtype and table arguments.
func (e *Executor) convertSource(op, name string, d dtype.DType) (sdt, tab uint64, err error) {
	if c, ok := kernelDType(d); ok {
		return uint64(c), 0, nil
	}
	if d == dtype.F8_E4M3 || d == dtype.F8_E5M2 || d == dtype.F8_E4M3FNUZ || d == dtype.F8_E5M2FNUZ {
		return ckTab, e.qtab(d), nil
	}
	return 0, 0, errorf(executor.ErrArgument, op, name, "the CUDA executor converts F32, BF16, F16 and FP8 on the device, not %s", d)
}

// Linear returns y = x·Wᵀ + b in dtype out, summed in F32: on tensor
// cores (mma.sync, BF16/F16 inputs, FP8 weights dequantized to the
// activation's type in the tile loader) for BF16 and F16 activations on
// sm_80 and later, else with the tiled F32 kernel, whose sums are those of
// the CPU reference (increasing k, no fused multiply-add).
func (e *Executor) Linear(ctx context.Context, x executor.Buffer, w *executor.Weight, bias executor.Buffer, out dtype.DType) (executor.Buffer, error) {
	const op = executor.OpLinear
	if err := e.start(ctx, op); err != nil {
		return nil, err
	}
	m, k, n, shape, err := backend.LinearDims(x, w, bias, out)
	if err != nil {
		return nil, fail(err)
	}
	xb, err := e.own(op, x)
	if err != nil {
		return nil, err
	}
	db, err := e.own(op, w.Data)
	if err != nil {
		return nil, err
	}
	var bptr, bdt, hasb uint64
	if bias != nil {
		bb, err := e.own(op, bias)
		if err != nil {
			return nil, err
		}
		c, _ := kernelDType(bb.dt)
		bptr, bdt, hasb = uint64(bb.ptr), uint64(c), 1
	}
	xdt, _ := kernelDType(xb.dt)
	odt, _ := kernelDType(out)
	// The weight: plain 16/32-bit, or FP8 codes with their scale arguments
	// (a plain FP8 weight has none).
	elem := w.DType()
	wdt, plain := kernelDType(elem)
	var sa []uint64
	if !plain {
		if w.Quant != nil {
			p, err := planDequant(w.Quant)
			if err != nil {
				return nil, errorf(executor.ErrArgument, op, w.Name(), "%v", err)
			}
			if sa, err = e.dqArgs(op, w, p); err != nil {
				return nil, err
			}
		} else {
			sa = []uint64{0, ckSNone, 0, 0, 1, 1, 1, 0, ckSNone, 0, ckGNone}
		}
	}
	mode, _ := e.linear.Load().(string)
	mma := e.hasMMA && mode != "tiled" && (xb.dt == dtype.BF16 || xb.dt == dtype.F16) &&
		(elem == xb.dt || elem == dtype.F8_E4M3 || elem == dtype.F8_E5M2)
	if mode == "mma" && !mma {
		return nil, errorf(executor.ErrArgument, op, w.Name(), "the tensor-core Linear takes BF16/F16 activations with a weight of the same type or FP8; have %s and %s", xb.dt, elem)
	}
	y, err := e.newBuffer(op, out, shape, w.Name())
	if err != nil {
		return nil, err
	}
	if m*n == 0 {
		return e.finish(op, y, nil)
	}
	var kernel string
	var args []uint64
	var grid [3]uint32
	if mma {
		var wq uint64
		switch elem {
		case dtype.F8_E4M3:
			wq = 1
		case dtype.F8_E5M2:
			wq = 2
		}
		if wq == 0 {
			sa = []uint64{0, ckSNone, 0, 0, 1, 1, 1, 0, ckSNone, 0, ckGNone}
		}
		kernel = kMMABF16
		if xb.dt == dtype.F16 {
			kernel = kMMAF16
		}
		args = append([]uint64{uint64(xb.ptr), uint64(m), uint64(k), uint64(db.ptr), uint64(n), wq, e.qtab(qElem(elem))}, sa...)
		args = append(args, bptr, bdt, hasb, uint64(y.ptr), uint64(odt))
		grid, err = gridFor(m, n, 128)
	} else {
		wk := uint64(wdt)
		var qdata, qt uint64
		if !plain {
			wk, qdata, qt = ckTab, uint64(db.ptr), e.qtab(elem)
		}
		kernel = kLinear
		args = append([]uint64{uint64(xb.ptr), uint64(xdt), uint64(m), uint64(k), uint64(db.ptr), wk, uint64(n), qdata, qt}, padScale(sa)...)
		args = append(args, bptr, bdt, hasb, uint64(y.ptr), uint64(odt))
		grid, err = gridFor(m, n, 64)
	}
	if err != nil {
		_ = e.Free(y)
		return nil, errorf(executor.ErrArgument, op, w.Name(), "Linear of %d×%d by %d×%d: %v", m, k, n, k, err)
	}
	return e.finish(op, y, e.exec(func() error {
		if err := e.launch(kernel, grid, [3]uint32{256, 1, 1}, args...); err != nil {
			return err
		}
		return e.drv.StreamSynchronize(e.stream)
	}))
}

// gridFor returns the grid of a Linear kernel with tiles of t×t outputs.
func gridFor(m, n, t int64) ([3]uint32, error) {
	gm, gn := (m+t-1)/t, (n+t-1)/t
	if gm > 65535 || gn > math.MaxInt32 {
		return [3]uint32{}, fmt.Errorf("%d×%d tiles are beyond one launch's grid (65535 rows of tiles)", gm, gn)
	}
	return [3]uint32{uint32(gn), uint32(gm), 1}, nil
}

// qElem returns the table type of a Linear weight's codes (E4M3 for plain
// 16/32-bit weights, whose table is unused).
func qElem(d dtype.DType) dtype.DType {
	if d == dtype.F8_E5M2 {
		return dtype.F8_E5M2
	}
	return dtype.F8_E4M3
}

// padScale returns the scale arguments, or "no scale" ones for a plain
// weight.
func padScale(sa []uint64) []uint64 {
	if sa == nil {
		return []uint64{0, ckSNone, 0, 0, 1, 1, 1, 0, ckSNone, 0, ckGNone}
	}
	return sa
}

// unary runs an elementwise kernel (x, dt, out, n) over x.
func (e *Executor) unary(ctx context.Context, op, kernel string, x executor.Buffer) (executor.Buffer, error) {
	if err := e.start(ctx, op); err != nil {
		return nil, err
	}
	if err := backend.CheckActivation(op, x); err != nil {
		return nil, fail(err)
	}
	xb, err := e.own(op, x)
	if err != nil {
		return nil, err
	}
	out, err := e.newBuffer(op, xb.dt, xb.shape, xb.name)
	if err != nil {
		return nil, err
	}
	dt, _ := kernelDType(xb.dt)
	n, _ := backend.Elements(xb.shape)
	return e.finish(op, out, e.exec(func() error {
		return e.launch1D(kernel, n, uint64(xb.ptr), uint64(dt), uint64(out.ptr), uint64(n))
	}))
}

// GELU returns 0.5·x·(1 + erf(x/√2)), computed in float64 on the device and
// rounded once to x's dtype.
func (e *Executor) GELU(ctx context.Context, x executor.Buffer) (executor.Buffer, error) {
	return e.unary(ctx, executor.OpGELU, kGELU, x)
}

// SiLU returns x / (1 + exp(−x)), computed in float64 on the device and
// rounded once to x's dtype.
func (e *Executor) SiLU(ctx context.Context, x executor.Buffer) (executor.Buffer, error) {
	return e.unary(ctx, executor.OpSiLU, kSiLU, x)
}

// Add returns a + b in F32, rounded once to a's dtype.
func (e *Executor) Add(ctx context.Context, a, b executor.Buffer) (executor.Buffer, error) {
	const op = executor.OpAdd
	if err := e.start(ctx, op); err != nil {
		return nil, err
	}
	if err := backend.CheckSameShape(op, a, b); err != nil {
		return nil, fail(err)
	}
	ab, err := e.own(op, a)
	if err != nil {
		return nil, err
	}
	bb, err := e.own(op, b)
	if err != nil {
		return nil, err
	}
	out, err := e.newBuffer(op, ab.dt, ab.shape, ab.name)
	if err != nil {
		return nil, err
	}
	adt, _ := kernelDType(ab.dt)
	bdt, _ := kernelDType(bb.dt)
	n, _ := backend.Elements(ab.shape)
	return e.finish(op, out, e.exec(func() error {
		return e.launch1D(kAdd, n, uint64(ab.ptr), uint64(adt), uint64(bb.ptr), uint64(bdt), uint64(out.ptr), uint64(adt), uint64(n))
	}))
}

// RMSNorm returns x / sqrt(mean(x²) + eps) · w over x's last dimension, in
// F32 (a block per row; the sum of squares in a tree, not in increasing
// order: within F32 rounding of the CPU's), rounded once to x's dtype.
func (e *Executor) RMSNorm(ctx context.Context, x executor.Buffer, w executor.Buffer, eps float32) (executor.Buffer, error) {
	const op = executor.OpRMSNorm
	if err := e.start(ctx, op); err != nil {
		return nil, err
	}
	rows, d, err := backend.RMSNormDims(x, w, eps)
	if err != nil {
		return nil, fail(err)
	}
	xb, err := e.own(op, x)
	if err != nil {
		return nil, err
	}
	var wptr, wdt, hasw uint64
	if w != nil {
		wb, err := e.own(op, w)
		if err != nil {
			return nil, err
		}
		c, _ := kernelDType(wb.dt)
		wptr, wdt, hasw = uint64(wb.ptr), uint64(c), 1
	}
	out, err := e.newBuffer(op, xb.dt, xb.shape, xb.name)
	if err != nil {
		return nil, err
	}
	dt, _ := kernelDType(xb.dt)
	block := uint32(32)
	for int64(block) < d && block < 1024 {
		block *= 2
	}
	grid := uint32(min(rows, int64(max(e.sms, 1))*16))
	if rows == 0 {
		return e.finish(op, out, nil)
	}
	return e.finish(op, out, e.exec(func() error {
		if err := e.launch(kRMSNorm, [3]uint32{grid, 1, 1}, [3]uint32{block, 1, 1}, uint64(xb.ptr), uint64(dt), wptr, wdt, hasw,
			uint64(out.ptr), uint64(rows), uint64(d), uint64(math.Float32bits(eps))); err != nil {
			return err
		}
		return e.drv.StreamSynchronize(e.stream)
	}))
}
