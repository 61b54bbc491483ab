// Package cpu is the reference executor: pure Go, on the host's cores, with
// exactly the semantics package executor documents. Other executors are
// tested against it.
//
// Linear converts the weight to F32 values once (dequantizing a quantized
// weight bit-exactly as quant.Weight.Dequantize to F32) and keeps them with
// the weight until it is freed: the CPU trades memory for speed. The
// product is blocked in tiles of 32 rows by 64 columns, walks K in chunks
// of 256 and shares the tiles among the workers; each output sums its
// products in increasing k in float32 (no fused multiply-add), so results
// are the same as a naive triple loop bit for bit, whatever the tiling, the
// number of workers or the processor.
//
// Importing the package registers the "cpu" backend (priority 0) with
// package executor.
package cpu

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/executor"
	"github.com/ckpt-go/ckpt/executor/backend"
	"github.com/ckpt-go/ckpt/internal/sysmem"
)

// Name is the backend's name.
const Name = "cpu"

func init() {
	if err := executor.Register(executor.Backend{Name: Name, Priority: 0, New: func(opts ...executor.Option) (executor.Executor, error) {
		e, err := New(opts...)
		if err != nil {
			return nil, err
		}
		return e, nil
	}}); err != nil {
		panic(err) // only a second package registering "cpu" gets here
	}
}

// Executor is the CPU executor. Its methods are safe for concurrent use.
type Executor struct {
	opts executor.Options
	seq  atomic.Int64

	mu     sync.Mutex
	live   map[*buffer]struct{}
	closed bool
}

var _ executor.Executor = (*Executor)(nil)

// New returns a CPU executor. It fails only on invalid options
// (negative workers).
func New(opts ...executor.Option) (*Executor, error) {
	o := executor.Apply(opts...)
	if o.Workers < 0 {
		return nil, &executor.Error{Kind: executor.ErrArgument, Executor: Name, Msg: fmt.Sprintf("%d workers", o.Workers)}
	}
	return &Executor{opts: o, live: map[*buffer]struct{}{}}, nil
}

func (e *Executor) workers() int {
	if e.opts.Workers > 0 {
		return e.opts.Workers
	}
	return runtime.GOMAXPROCS(0)
}

// Info describes the host: its cores, its memory (MemTotal) and what this
// process can still allocate (the smaller of MemAvailable and its cgroup's
// headroom, as the loader's default budget); zero where unknown.
func (e *Executor) Info() executor.DeviceInfo {
	total, avail := memInfo()
	return executor.DeviceInfo{
		Kind:       Name,
		Name:       fmt.Sprintf("Go %s/%s, %d cores (GOMAXPROCS %d)", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0)),
		TotalBytes: total, FreeBytes: avail,
		Driver: runtime.Version(),
	}
}

// memInfo returns the host's total memory and what this process can still
// allocate (package sysmem; zeros where unknown).
func memInfo() (total, avail int64) {
	a, _ := sysmem.Detect() // a partial figure is still the best there is
	return max(a.MemTotal, 0), max(a.Bytes, 0)
}

// fail fills in the executor's name in an *executor.Error.
func fail(err error) error {
	var e *executor.Error
	if errors.As(err, &e) && e.Executor == "" {
		e.Executor = Name
	}
	return err
}

func errorf(kind executor.ErrorKind, op, tensor, format string, args ...any) error {
	return &executor.Error{Kind: kind, Executor: Name, Op: op, Tensor: tensor, Msg: fmt.Sprintf(format, args...)}
}

// canceled is the error of an op stopped because its context was done: it
// names the executor and the op, says "canceled" and wraps err, which
// matches context.Canceled or context.DeadlineExceeded (ctx.Err() is
// wrapped as well when err is not the context's).
func canceled(op string, err error) error {
	return canceledCtx(op, "", nil, err)
}

func canceledCtx(op, tensor string, ctx context.Context, err error) error {
	msg := "executor: " + Name + ": " + op
	if tensor != "" {
		msg += fmt.Sprintf(": tensor %q", tensor)
	}
	if ctx != nil && ctx.Err() != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: canceled: %w: %w", msg, ctx.Err(), err)
	}
	return fmt.Errorf("%s: canceled: %w", msg, err)
}

// own checks that b is a live buffer of e and returns it with its bytes.
func (e *Executor) own(op string, b executor.Buffer) (*buffer, []byte, error) {
	if b == nil {
		return nil, nil, errorf(executor.ErrArgument, op, "", "nil buffer")
	}
	cb, ok := b.(*buffer)
	if !ok || cb.ex != e {
		return nil, nil, errorf(executor.ErrArgument, op, b.Name(), "buffer of another executor (%T)", b)
	}
	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	if closed {
		return nil, nil, errorf(executor.ErrClosed, op, b.Name(), "executor closed")
	}
	d := cb.bytes()
	if cb.freed.Load() {
		return nil, nil, errorf(executor.ErrClosed, op, b.Name(), "buffer used after Free")
	}
	return cb, d, nil
}

// start checks the executor and the context before an op.
func (e *Executor) start(ctx context.Context, op string) error {
	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	if closed {
		return errorf(executor.ErrClosed, op, "", "executor closed")
	}
	if err := ctx.Err(); err != nil {
		return canceled(op, err)
	}
	return nil
}

// alloc returns n zeroed bytes for an op's output, refusing a large output
// that is more than the memory available (ErrBudget, out of memory).
func alloc(op, name string, n int64) ([]byte, error) {
	if n > 64<<20 {
		if _, avail := memInfo(); avail > 0 && n > avail {
			return nil, errorf(executor.ErrBudget, op, name, "out of memory: output of %s, %s available", sysmem.FormatSize(n), sysmem.FormatSize(avail))
		}
	}
	return make([]byte, n), nil
}

// newBuffer registers a buffer holding data (owned by the executor).
func (e *Executor) newBuffer(dt dtype.DType, shape []int64, name string, data []byte) *buffer {
	b := &buffer{ex: e, dt: dt, shape: slices.Clone(shape), name: name, size: int64(len(data)), data: data}
	e.mu.Lock()
	e.live[b] = struct{}{}
	e.mu.Unlock()
	return b
}

// finish counts the op and, with the check-finite option, reports its
// output's NaN and Inf (from the output rounding's statistics).
func (e *Executor) finish(op string, out *buffer, st dtype.Stats) (executor.Buffer, error) {
	seq := e.seq.Add(1)
	if e.opts.CheckFinite {
		n, _ := backend.Elements(out.shape)
		r := &executor.NonFiniteError{Executor: Name, Op: op, Seq: seq, Tensor: out.name, DType: out.dt.String(),
			NaN: st.NaN, Inf: st.Inf, Elements: n}
		if err := e.opts.Finite(r); err != nil {
			_ = e.Free(out)
			return nil, err
		}
	}
	return out, nil
}

// FromHost copies data to a new buffer.
func (e *Executor) FromHost(ctx context.Context, data []byte, dt dtype.DType, shape []int64, name string) (executor.Buffer, error) {
	if err := e.start(ctx, executor.OpFromHost); err != nil {
		return nil, err
	}
	if err := backend.CheckHost(data, dt, shape, name); err != nil {
		return nil, fail(err)
	}
	return e.newBuffer(dt, shape, name, slices.Clone(data)), nil
}

// Upload copies a loaded tensor; a weight kept quantized keeps its codes
// and scales as stored.
func (e *Executor) Upload(ctx context.Context, t *ckpt.Tensor) (*executor.Weight, error) {
	if t == nil {
		return nil, errorf(executor.ErrArgument, executor.OpUpload, "", "nil tensor")
	}
	if err := e.start(ctx, executor.OpUpload); err != nil {
		return nil, err
	}
	return e.wrap(t, t.Name, true)
}

// wrap makes a Weight of t named name: copies of its bytes, or (copy
// false) buffers borrowing them.
func (e *Executor) wrap(t *ckpt.Tensor, name string, copyBytes bool) (*executor.Weight, error) {
	mk := func(data []byte, dt dtype.DType, shape []int64, name string) (*buffer, error) {
		if err := backend.CheckHost(data, dt, shape, name); err != nil {
			var xe *executor.Error
			if errors.As(err, &xe) {
				xe.Op = executor.OpUpload
			}
			return nil, fail(err)
		}
		if copyBytes {
			data = slices.Clone(data)
		}
		return e.newBuffer(dt, shape, name, data), nil
	}
	q := t.QuantWeight()
	if q == nil {
		if len(t.Scales) != 0 {
			return nil, errorf(executor.ErrArgument, executor.OpUpload, name, "scales without a quantization layout")
		}
		d, err := mk(t.Bytes(), t.DType, t.Shape, name)
		if err != nil {
			return nil, err
		}
		return &executor.Weight{Data: d}, nil
	}
	w := &executor.Weight{Quant: q}
	var made []*buffer
	undo := func(err error) (*executor.Weight, error) {
		for _, b := range made {
			_ = e.Free(b)
		}
		return nil, err
	}
	d, err := mk(t.Bytes(), q.Data.DType, q.Data.Shape, name)
	if err != nil {
		return undo(err)
	}
	made, w.Data = append(made, d), d
	if len(t.Scales) != len(q.Scales) {
		return undo(errorf(executor.ErrArgument, executor.OpUpload, name, "%d scale tensors for the %d of layout %s", len(t.Scales), len(q.Scales), q.Layout))
	}
	for i, s := range t.Scales {
		sb, err := mk(s.Bytes(), q.Scales[i].DType, q.Scales[i].Shape, s.Name)
		if err != nil {
			return undo(err)
		}
		made = append(made, sb)
		w.Scales = append(w.Scales, sb)
	}
	if err := backend.CheckWeight(executor.OpUpload, w); err != nil {
		return undo(fail(err))
	}
	return w, nil
}

// UploadModel loads m under its policy (the loader converts and
// dequantizes on the host, which is this executor's device) and makes
// every tensor a Weight that borrows the loaded memory: nothing is copied.
// Close the returned Model before m. With a device budget (UploadOptions
// BudgetBytes > 0), a model whose resident bytes exceed it is refused with
// ErrBudget before anything is read; the loader's own budget check applies
// too (its *ckpt.BudgetError is wrapped). Progress is reported per tensor
// once loaded; the loader's progress during the read is set with
// ckpt.WithProgress at Open. The load verifies the stored bytes against
// the checksums their files name (ckpt.Policy.Verify): a damaged tensor
// fails the upload with ErrRead wrapping the loader's error
// (errors.Is(err, ckpt.ErrChecksum)), and nothing is kept.
func (e *Executor) UploadModel(ctx context.Context, m *ckpt.Model, opts ...executor.UploadOption) (*executor.Model, error) {
	const op = "UploadModel"
	if m == nil {
		return nil, errorf(executor.ErrArgument, op, "", "nil model")
	}
	if err := e.start(ctx, op); err != nil {
		return nil, err
	}
	o := executor.ApplyUpload(opts...)
	if o.BudgetBytes > 0 {
		plan, err := m.Plan()
		if err != nil {
			return nil, &executor.Error{Kind: executor.ErrRead, Executor: Name, Op: op, Err: err}
		}
		if plan.TotalResidentBytes > o.BudgetBytes {
			return nil, errorf(executor.ErrBudget, op, "", "the model needs %s resident, the device budget is %s",
				sysmem.FormatSize(plan.TotalResidentBytes), sysmem.FormatSize(o.BudgetBytes))
		}
	}
	ws, err := m.Load(ctx)
	if err != nil {
		kind := executor.ErrRead
		switch {
		case errors.Is(err, ckpt.ErrBudget):
			kind = executor.ErrBudget
		case ctx.Err() != nil:
			return nil, canceledCtx(op, "", ctx, err)
		}
		return nil, &executor.Error{Kind: kind, Executor: Name, Op: op, Err: err}
	}
	var (
		names   []string
		weights []*executor.Weight
		done    int64
		total   int64
	)
	for _, t := range ws.All() {
		total += int64(len(t.Bytes()))
	}
	undo := func(err error) (*executor.Model, error) {
		for _, w := range weights {
			_ = executor.FreeWeight(e, w)
		}
		return nil, errors.Join(err, ws.Close())
	}
	for name, t := range ws.All() {
		if err := ctx.Err(); err != nil {
			return undo(canceled(op, err))
		}
		w, err := e.wrap(t, name, false)
		if err != nil {
			return undo(err)
		}
		names, weights = append(names, name), append(weights, w)
		done += int64(len(t.Bytes()))
		if o.Progress != nil {
			o.Progress(ckpt.Progress{Phase: "upload", Done: done, Total: total, Tensor: name})
		}
	}
	model, err := executor.NewModel(e, names, weights, ws.Close)
	if err != nil {
		return undo(fail(err))
	}
	return model, nil
}

// Download copies b's bytes into dst.
func (e *Executor) Download(ctx context.Context, b executor.Buffer, dst []byte) error {
	if err := e.start(ctx, executor.OpDownload); err != nil {
		return err
	}
	cb, d, err := e.own(executor.OpDownload, b)
	if err != nil {
		return err
	}
	if int64(len(dst)) != cb.size {
		return errorf(executor.ErrArgument, executor.OpDownload, cb.name, "dst is %d bytes, the buffer %d", len(dst), cb.size)
	}
	copy(dst, d)
	return nil
}

// Free releases b (a borrowed buffer of UploadModel is only marked freed:
// its memory is the loader's, released by the Model's Close).
func (e *Executor) Free(b executor.Buffer) error {
	cb, _, err := e.own(executor.OpFree, b)
	if err != nil {
		return err
	}
	cb.mu.Lock()
	if cb.freed.Swap(true) {
		cb.mu.Unlock()
		return errorf(executor.ErrClosed, executor.OpFree, cb.name, "buffer freed twice")
	}
	cb.data, cb.linear = nil, nil
	cb.mu.Unlock()
	e.mu.Lock()
	delete(e.live, cb)
	e.mu.Unlock()
	return nil
}

// Close frees every buffer; later calls fail with ErrClosed. A second Close
// does nothing.
func (e *Executor) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	for b := range e.live {
		b.mu.Lock()
		b.freed.Store(true)
		b.data, b.linear = nil, nil
		b.mu.Unlock()
	}
	clear(e.live)
	return nil
}

// Live returns the number of buffers allocated and not freed, and their
// bytes: what a test checks to find leaks.
func (e *Executor) Live() (buffers int, bytes int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for b := range e.live {
		buffers++
		bytes += b.size
	}
	return buffers, bytes
}

// quantErr turns an error of package quant or dtype into an executor error.
func quantErr(op, name string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return canceledCtx(op, name, nil, err)
	}
	return &executor.Error{Kind: executor.ErrArgument, Executor: Name, Op: op, Tensor: name, Err: err}
}
