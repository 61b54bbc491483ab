package cuda

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/executor"
	"github.com/ckpt-go/ckpt/executor/backend"
)

// Name is the backend's name.
const Name = "cuda"

func init() {
	if err := executor.Register(executor.Backend{Name: Name, Priority: 100, New: func(opts ...executor.Option) (executor.Executor, error) {
		e, err := New(opts...)
		if err != nil {
			return nil, err
		}
		return e, nil
	}}); err != nil {
		panic(err) // only a second package registering "cuda" gets here
	}
}

// ioBytes is the size of the executor's pinned buffer for FromHost,
// Upload and Download (which go through it in pieces).
const ioBytes = 8 << 20

// Executor is the CUDA executor: one device, its primary context, one
// stream for the ops. Its methods are safe for concurrent use; the ops run
// one at a time on the device, each synchronized before it returns.
type Executor struct {
	opts executor.Options
	drv  driver
	th   *thread
	seq  atomic.Int64

	dev     cuDevice
	ctx     cuContext
	info    executor.DeviceInfo
	cc      int // compute capability, major·10+minor
	sms     int
	drvVer  int
	stream  cuStream
	mods    []cuModule
	funcs   map[string]cuFunction
	hasMMA  bool
	tables  devPtr  // decodeTables on the device (allTables' layout)
	counts  devPtr  // two uint64 counters for check-finite
	small   hostMem // pinned: the counters read back
	linear  atomic.Value
	opMu    sync.Mutex // one op at a time: they share small and io
	io      hostMem    // pinned, ioBytes, allocated at first use
	staging *ring      // UploadModel's pinned ring, kept between uploads

	mu     sync.Mutex
	live   map[*buffer]struct{}
	arenas map[*arena]struct{}
	// cache holds the device memory of freed buffers for the next buffer of
	// the same size class (see sizeClass): an op's output otherwise costs a
	// cuMemAlloc and, when freed, a cuMemFree, which waits for the whole
	// device. cached is its total. Never call th.do while holding mu: the
	// driver thread takes mu for the cache.
	cache    map[int64][]devPtr
	cached   int64
	closed   bool
	released bool
}

var _ executor.Executor = (*Executor)(nil)

// New starts the CUDA executor on device executor.WithDevice (0 by
// default). Without a driver or a device it returns an error matching
// executor.ErrUnavailable that says why: no CUDA driver or no CUDA device,
// wrapping the *Error that names what is missing; it never panics.
func New(opts ...executor.Option) (*Executor, error) {
	o := executor.Apply(opts...)
	d, err := openLibcuda()
	if err != nil {
		return nil, unavailable("no CUDA driver", err)
	}
	return newExecutor(d, o)
}

// unavailable wraps why the executor cannot start.
func unavailable(msg string, err error) error {
	return &executor.Error{Kind: executor.ErrUnavailable, Executor: Name, Msg: msg, Err: err}
}

// newExecutor starts an executor on driver d (the real one or a fake).
func newExecutor(d driver, o executor.Options) (*Executor, error) {
	if o.Device < 0 {
		return nil, &executor.Error{Kind: executor.ErrArgument, Executor: Name, Msg: fmt.Sprintf("device %d", o.Device)}
	}
	e := &Executor{opts: o, drv: d, th: newThread(), funcs: map[string]cuFunction{},
		live: map[*buffer]struct{}{}, arenas: map[*arena]struct{}{}, cache: map[int64][]devPtr{}}
	var retained bool
	err := e.th.do(func() error {
		if err := d.Init(); err != nil {
			return err
		}
		var err error
		if e.drvVer, err = d.DriverVersion(); err != nil {
			return err
		}
		n, err := d.DeviceCount()
		if err != nil {
			return err
		}
		if n == 0 {
			return &Error{Kind: executor.ErrUnavailable, Msg: "the driver reports no CUDA device"}
		}
		if o.Device >= n {
			return &Error{Kind: executor.ErrUnavailable, Msg: fmt.Sprintf("device %d asked for; the driver reports %d", o.Device, n)}
		}
		if e.dev, err = d.DeviceGet(o.Device); err != nil {
			return err
		}
		name, err := d.DeviceName(e.dev)
		if err != nil {
			return err
		}
		maj, err := d.DeviceAttribute(attrComputeCapMajor, e.dev)
		if err != nil {
			return err
		}
		mnr, err := d.DeviceAttribute(attrComputeCapMinor, e.dev)
		if err != nil {
			return err
		}
		if e.sms, err = d.DeviceAttribute(attrMultiprocessorCount, e.dev); err != nil {
			return err
		}
		total, err := d.DeviceTotalMem(e.dev)
		if err != nil {
			return err
		}
		e.cc = maj*10 + mnr
		e.info = executor.DeviceInfo{Kind: Name, Name: name, TotalBytes: total,
			ComputeCapability: fmt.Sprintf("%d.%d", maj, mnr),
			Driver:            fmt.Sprintf("CUDA %d.%d", e.drvVer/1000, e.drvVer%1000/10)}
		if l, ok := d.(interface{ location() string }); ok && l.location() != "" {
			e.info.Driver += " (" + l.location() + ")"
		}
		mods, err := modulesFor(e.cc, e.drvVer)
		if err != nil {
			return &Error{Kind: executor.ErrUnavailable, Msg: name + ": " + err.Error()}
		}
		if e.ctx, err = d.PrimaryCtxRetain(e.dev); err != nil {
			return err
		}
		retained = true
		if err := d.CtxSetCurrent(e.ctx); err != nil {
			return err
		}
		if e.stream, err = d.StreamCreate(); err != nil {
			return err
		}
		for _, m := range mods {
			h, err := d.ModuleLoadData([]byte(m.src))
			if err != nil {
				return withOp(err, "load "+m.file, "")
			}
			e.mods = append(e.mods, h)
			for _, k := range m.kernels {
				f, err := d.ModuleGetFunction(h, k)
				if err != nil {
					return err
				}
				e.funcs[k] = f
			}
			if m.target >= 80 {
				e.hasMMA = true
			}
		}
		if e.small, err = d.MemHostAlloc(4096); err != nil {
			return err
		}
		tab := allTables()
		if e.tables, err = d.MemAlloc(int64(8 * len(tab))); err != nil {
			return err
		}
		if e.counts, err = d.MemAlloc(16); err != nil {
			return err
		}
		// The tables go up through the small pinned buffer, 4 KiB at a time.
		tb := dtype.Float64Bytes(tab)
		for off := 0; off < len(tb); off += 4096 {
			k := copy(e.small.bytes(), tb[off:])
			if err := d.MemcpyHtoDAsync(e.tables+devPtr(off), e.small, 0, int64(k), e.stream); err != nil {
				return err
			}
			if err := d.StreamSynchronize(e.stream); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		e.release(retained)
		var ce *Error
		if errors.As(err, &ce) && ce.Kind == executor.ErrUnavailable {
			return nil, unavailable("no CUDA device", err)
		}
		return nil, unavailable("CUDA driver error", err)
	}
	e.linear.Store("auto")
	return e, nil
}

// release frees what the executor holds on the device and stops its
// thread. Errors are ignored: it runs after a failure or at Close, which
// reports the first.
func (e *Executor) release(retained bool) error {
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	e.th.do(func() error {
		d := e.drv
		if e.stream != 0 {
			keep(d.StreamSynchronize(e.stream))
		}
		if e.staging != nil {
			keep(e.staging.free(d))
			e.staging = nil
		}
		if e.io.p != nil {
			keep(d.MemFreeHost(e.io))
			e.io = hostMem{}
		}
		if e.small.p != nil {
			keep(d.MemFreeHost(e.small))
			e.small = hostMem{}
		}
		for _, p := range []*devPtr{&e.tables, &e.counts} {
			if *p != 0 {
				keep(d.MemFree(*p))
				*p = 0
			}
		}
		for _, m := range e.mods {
			keep(d.ModuleUnload(m))
		}
		e.mods = nil
		if e.stream != 0 {
			keep(d.StreamDestroy(e.stream))
			e.stream = 0
		}
		keep(d.Close())
		if retained {
			keep(d.PrimaryCtxRelease(e.dev))
		}
		return nil
	})
	e.th.close()
	return first
}

// Info describes the device; FreeBytes is current (cuMemGetInfo, plus the
// memory of freed buffers the executor keeps for reuse: see ReleaseCached).
func (e *Executor) Info() executor.DeviceInfo {
	info := e.info
	if free, _, err := e.memInfo(); err == nil {
		info.FreeBytes = free
	}
	return info
}

// memInfo is cuMemGetInfo, the cached memory counted as free.
func (e *Executor) memInfo() (free, total int64, err error) {
	err = e.th.do(func() error {
		var err error
		free, total, err = e.drv.MemGetInfo()
		return err
	})
	e.mu.Lock()
	free += e.cached
	e.mu.Unlock()
	return free, total, err
}

// sizeClass is the size of the allocation that holds n bytes: a power of
// two from 512 bytes up to 1 MiB, then a multiple of 2 MiB. Freed
// allocations are reused by size class.
func sizeClass(n int64) int64 {
	if n > 1<<20 {
		return (n + 2<<20 - 1) &^ (2<<20 - 1)
	}
	c := int64(512)
	for c < n {
		c <<= 1
	}
	return c
}

// alloc returns device memory of size class c: a cached allocation, or a
// new one; when the device is out of memory it frees the cache and tries
// again (on the driver thread).
func (e *Executor) alloc(c int64) (devPtr, error) {
	e.mu.Lock()
	if l := e.cache[c]; len(l) > 0 {
		p := l[len(l)-1]
		e.cache[c] = l[:len(l)-1]
		e.cached -= c
		e.mu.Unlock()
		return p, nil
	}
	e.mu.Unlock()
	var p devPtr
	err := e.th.do(func() error {
		var err error
		p, err = e.drv.MemAlloc(c)
		var ce *Error
		if errors.As(err, &ce) && ce.Code == cudaErrorOutOfMemory {
			if n, ferr := e.freeCached(); n > 0 && ferr == nil {
				p, err = e.drv.MemAlloc(c)
			}
		}
		return err
	})
	return p, err
}

// freeCache frees the cached allocations (on the driver thread).
func (e *Executor) freeCache() error {
	_, err := e.freeCached()
	return err
}

// freeCached frees the cached allocations and returns how many there were
// (on the driver thread).
func (e *Executor) freeCached() (int, error) {
	e.mu.Lock()
	var ptrs []devPtr
	for _, l := range e.cache {
		ptrs = append(ptrs, l...)
	}
	clear(e.cache)
	e.cached = 0
	e.mu.Unlock()
	var first error
	for _, p := range ptrs {
		if err := e.drv.MemFree(p); err != nil && first == nil {
			first = err
		}
	}
	return len(ptrs), first
}

// ReleaseCached frees the device memory the executor keeps from freed
// buffers for reuse, as torch.cuda.empty_cache does: for other programs
// on the device. The executor releases it by itself when an allocation
// would fail without it and before UploadModel allocates a model.
func (e *Executor) ReleaseCached() error {
	if err := e.start(context.Background(), "ReleaseCached"); err != nil {
		return err
	}
	return e.devErr("ReleaseCached", "", e.th.do(e.freeCache))
}

// SetLinearKernel chooses Linear's kernel: "auto" (the default: tensor
// cores for BF16/F16 activations on sm_80 and later, the tiled F32 kernel
// otherwise), "tiled" or "mma" (an error where the device has no
// tensor-core variant). Tests and benchmarks use it to check both.
func (e *Executor) SetLinearKernel(k string) error {
	switch k {
	case "auto", "tiled":
	case "mma":
		if !e.hasMMA {
			return &executor.Error{Kind: executor.ErrArgument, Executor: Name, Msg: "this device has no tensor-core Linear (sm_80 or later)"}
		}
	default:
		return &executor.Error{Kind: executor.ErrArgument, Executor: Name, Msg: fmt.Sprintf("Linear kernel %q (want auto, tiled or mma)", k)}
	}
	e.linear.Store(k)
	return nil
}

// Close frees every buffer still allocated, the pinned buffers and the
// modules, and releases the primary context. A second Close does nothing.
func (e *Executor) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	bufs := make([]*buffer, 0, len(e.live))
	for b := range e.live {
		bufs = append(bufs, b)
	}
	ars := make([]*arena, 0, len(e.arenas))
	for a := range e.arenas {
		ars = append(ars, a)
	}
	clear(e.live)
	clear(e.arenas)
	e.mu.Unlock()
	e.opMu.Lock()
	defer e.opMu.Unlock()
	var errs []error
	errs = append(errs, e.th.do(func() error {
		first := e.freeCache()
		for _, b := range bufs {
			b.freed.Store(true)
			if b.arena == nil && b.ptr != 0 {
				if err := e.drv.MemFree(b.ptr); err != nil && first == nil {
					first = err
				}
			}
		}
		for _, a := range ars {
			if err := e.drv.MemFree(a.ptr); err != nil && first == nil {
				first = err
			}
		}
		return first
	}))
	errs = append(errs, e.release(true))
	if err := errors.Join(errs...); err != nil {
		return e.devErr("Close", "", err)
	}
	return nil
}

// buffer is device memory holding one tensor: its own allocation, or a
// range of an arena (UploadModel's single allocation for a whole model).
type buffer struct {
	ex    *Executor
	dt    dtype.DType
	shape []int64
	name  string
	size  int64
	class int64 // the size of its own allocation (sizeClass); 0 in an arena
	ptr   devPtr
	arena *arena
	freed atomic.Bool
}

// arena is one device allocation shared by buffers; it is freed with the
// last of them.
type arena struct {
	ptr  devPtr
	size int64
	refs int
}

func (b *buffer) DType() dtype.DType { return b.dt }
func (b *buffer) Shape() []int64     { return slices.Clone(b.shape) }
func (b *buffer) Bytes() int64       { return b.size }
func (b *buffer) Name() string       { return b.name }

// Live returns the buffers allocated and not freed and their bytes (what
// a test checks to find leaks).
func (e *Executor) Live() (buffers int, bytes int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for b := range e.live {
		buffers++
		bytes += b.size
	}
	return buffers, bytes
}

// devErr turns a driver error into an executor error of the op.
func (e *Executor) devErr(op, tensor string, err error) error {
	if err == nil {
		return nil
	}
	var xe *executor.Error
	if errors.As(err, &xe) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return canceled(op, tensor, err)
	}
	kind := executor.ErrDevice
	var ce *Error
	if errors.As(err, &ce) {
		kind = ce.Kind
	}
	return &executor.Error{Kind: kind, Executor: Name, Op: op, Tensor: tensor, Err: err}
}

func errorf(kind executor.ErrorKind, op, tensor, format string, args ...any) error {
	return &executor.Error{Kind: kind, Executor: Name, Op: op, Tensor: tensor, Msg: fmt.Sprintf(format, args...)}
}

// fail fills in the executor's name in an *executor.Error.
func fail(err error) error {
	var e *executor.Error
	if errors.As(err, &e) && e.Executor == "" {
		e.Executor = Name
	}
	return err
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
		return canceled(op, "", err)
	}
	return nil
}

// canceled is the error of an op stopped because its context was done: it
// names the executor, the op and the tensor (if any), says "canceled" and
// wraps err, the context's error.
func canceled(op, tensor string, err error) error {
	msg := "executor: " + Name + ": " + op
	if tensor != "" {
		msg += fmt.Sprintf(": tensor %q", tensor)
	}
	return fmt.Errorf("%s: canceled: %w", msg, err)
}

// own checks that b is a live buffer of e.
func (e *Executor) own(op string, b executor.Buffer) (*buffer, error) {
	if b == nil {
		return nil, errorf(executor.ErrArgument, op, "", "nil buffer")
	}
	cb, ok := b.(*buffer)
	if !ok || cb.ex != e {
		return nil, errorf(executor.ErrArgument, op, b.Name(), "buffer of another executor (%T)", b)
	}
	if cb.freed.Load() {
		return nil, errorf(executor.ErrClosed, op, cb.name, "buffer used after Free")
	}
	return cb, nil
}

// newBuffer allocates device memory for a tensor (on the driver thread).
func (e *Executor) newBuffer(op string, dt dtype.DType, shape []int64, name string) (*buffer, error) {
	n, err := backend.Elements(shape)
	if err != nil {
		return nil, fail(err)
	}
	size, err := dt.ByteLen(n)
	if err != nil {
		return nil, errorf(executor.ErrArgument, op, name, "byte size of %d %s elements: %v", n, dt, err)
	}
	b := &buffer{ex: e, dt: dt, shape: slices.Clone(shape), name: name, size: size}
	if size > 0 {
		b.class = sizeClass(size)
		if b.ptr, err = e.alloc(b.class); err != nil {
			return nil, e.devErr(op, name, err)
		}
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		if b.ptr != 0 {
			e.th.do(func() error { return e.drv.MemFree(b.ptr) })
		}
		return nil, errorf(executor.ErrClosed, op, name, "executor closed")
	}
	e.live[b] = struct{}{}
	e.mu.Unlock()
	return b, nil
}

// Free releases b: its device memory stays with the executor for the next
// buffer of its size class (ReleaseCached frees it). A buffer of
// UploadModel's arena releases the arena with the last of its buffers.
func (e *Executor) Free(b executor.Buffer) error {
	cb, err := e.own(executor.OpFree, b)
	if err != nil {
		return err
	}
	if cb.freed.Swap(true) {
		return errorf(executor.ErrClosed, executor.OpFree, cb.name, "buffer freed twice")
	}
	e.mu.Lock()
	if _, ok := e.live[cb]; !ok { // Close got there first
		e.mu.Unlock()
		return nil
	}
	delete(e.live, cb)
	var ptr devPtr
	if a := cb.arena; a != nil {
		a.refs--
		if a.refs == 0 {
			ptr = a.ptr
			delete(e.arenas, a)
		}
	} else if cb.ptr != 0 {
		// Every op synchronizes its stream before it returns, so no work
		// on the device uses this memory any more.
		e.cache[cb.class] = append(e.cache[cb.class], cb.ptr)
		e.cached += cb.class
	}
	e.mu.Unlock()
	if ptr == 0 {
		return nil
	}
	return e.devErr(executor.OpFree, cb.name, e.th.do(func() error { return e.drv.MemFree(ptr) }))
}

// Pinned is page-locked host memory from the driver (cuMemHostAlloc), for
// programs that stage their own copies or measure the host's read rate
// into such memory (bench/gpu). Free it before closing the executor.
type Pinned struct {
	e *Executor
	h hostMem
}

// AllocPinned allocates n bytes of page-locked host memory.
func (e *Executor) AllocPinned(n int64) (*Pinned, error) {
	if n <= 0 {
		return nil, errorf(executor.ErrArgument, "AllocPinned", "", "%d bytes", n)
	}
	var h hostMem
	err := e.th.do(func() error {
		var err error
		h, err = e.drv.MemHostAlloc(n)
		return err
	})
	if err != nil {
		return nil, e.devErr("AllocPinned", "", err)
	}
	return &Pinned{e: e, h: h}, nil
}

// Bytes returns the memory (valid until Free).
func (p *Pinned) Bytes() []byte { return p.h.bytes() }

// Free releases the memory; a second Free does nothing.
func (p *Pinned) Free() error {
	if p.h.p == nil {
		return nil
	}
	h := p.h
	p.h = hostMem{}
	return p.e.devErr("FreePinned", "", p.e.th.do(func() error { return p.e.drv.MemFreeHost(h) }))
}

// Copy returns a device-to-device copy of b (the baseline a dequantizing
// kernel's bandwidth is measured against).
func (e *Executor) Copy(ctx context.Context, b executor.Buffer) (executor.Buffer, error) {
	const op = "Copy"
	if err := e.start(ctx, op); err != nil {
		return nil, err
	}
	src, err := e.own(op, b)
	if err != nil {
		return nil, err
	}
	out, err := e.newBuffer(op, src.dt, src.shape, src.name)
	if err != nil {
		return nil, err
	}
	err = e.exec(func() error {
		if err := e.drv.MemcpyDtoDAsync(out.ptr, src.ptr, src.size, e.stream); err != nil {
			return err
		}
		return e.drv.StreamSynchronize(e.stream)
	})
	if err != nil {
		_ = e.Free(out)
		return nil, e.devErr(op, src.name, err)
	}
	return out, nil
}
