package cuda

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/executor"
	"github.com/ckpt-go/ckpt/executor/backend"
	"github.com/ckpt-go/ckpt/internal/sysmem"
	"github.com/ckpt-go/ckpt/quant"
)

// Defaults of UploadModel's staging: readers reading with pread into a ring
// of pinned buffers, four more buffers than readers so that copies to the
// device overlap the reads.
const (
	defaultReaders  = 16
	defaultSlotSize = 8 << 20
	minSlotSize     = 1 << 20
	ringStreams     = 2
	// reserveBytes is kept free on the device when the budget is its free
	// memory (the CUDA context, the ops' outputs).
	reserveBytes = 256 << 20
	align        = 256
)

// slot is one pinned staging buffer of the ring and the event recorded
// after the last copy (or kernel) that reads it.
type slot struct {
	host    hostMem
	ev      cuEvent
	pending bool
	stream  cuStream
}

// ring is UploadModel's pinned staging memory, allocated once and kept by
// the executor between uploads (allocating page-locked memory is slow:
// most of a second per GiB), freed by Close or after a failed upload.
type ring struct {
	slots   []*slot
	size    int64
	streams []cuStream
}

// newRing allocates count buffers of size bytes (on the driver thread).
// On failure it frees what it allocated.
func newRing(d driver, count int, size int64) (*ring, error) {
	r := &ring{size: size}
	for range ringStreams {
		s, err := d.StreamCreate()
		if err != nil {
			r.free(d)
			return nil, err
		}
		r.streams = append(r.streams, s)
	}
	for i := range count {
		h, err := d.MemHostAlloc(size)
		if err != nil {
			r.free(d)
			return nil, err
		}
		ev, err := d.EventCreate()
		if err != nil {
			d.MemFreeHost(h)
			r.free(d)
			return nil, err
		}
		r.slots = append(r.slots, &slot{host: h, ev: ev, stream: r.streams[i%len(r.streams)]})
	}
	return r, nil
}

// free releases the ring after waiting for its copies.
func (r *ring) free(d driver) error {
	var errs []error
	for _, s := range r.slots {
		if s.pending {
			errs = append(errs, d.EventSynchronize(s.ev))
		}
		errs = append(errs, d.EventDestroy(s.ev), d.MemFreeHost(s.host))
	}
	for _, s := range r.streams {
		errs = append(errs, d.StreamDestroy(s))
	}
	r.slots, r.streams = nil, nil
	return errors.Join(errs...)
}

// upKind is what UploadModel does with a tensor's stored bytes.
type upKind int

const (
	upCopy    upKind = iota // as stored
	upConvert               // dtype conversion on the device
	upDequant               // scaled weight dequantized on the device
	upScratch               // a scale of a dequantized weight: copied to scratch memory, freed after the upload
)

// upSource is one stored tensor (or this rank's part of it) to read.
type upSource struct {
	name   string     // stored name
	part   *ckpt.Part // what is read of it, through the model's files
	host   *hostItem  // or: the bytes the loader produces on the host
	length int64
	dt     dtype.DType
	shape  []int64
	dst    devPtr // where its bytes (or its conversion) go
	off    int64  // offset of dst in the arena or scratch allocation
	kind   upKind
}

// upTensor is one logical tensor of the model.
type upTensor struct {
	key    string
	data   upSource
	scales []upSource
	q      *quant.Weight // kept quantized, or dequantized
	out    dtype.DType   // the dtype on the device
	shape  []int64
	bytes  int64 // output bytes
	plan   *dqPlan
}

// UploadModel puts every tensor of m on the device in the dtype its policy
// decides: stored bytes are read with pread, by several readers in
// parallel, straight into a ring of pinned staging buffers, and copied to
// the device on streams while the next reads go on. Conversions the policy
// asks for (BF16 → F32, a scaled FP8 weight dequantized to BF16) run on the
// device, chunk by chunk, as each chunk arrives; weights kept quantized
// stay narrow with their scales. The whole model takes one device
// allocation; before it, the memory plan (outputs, scratch and staging) is
// checked against the device budget (UploadOptions.BudgetBytes, by default
// the device's free memory less 256 MiB) and a model that does not fit is
// refused with ErrBudget, nothing allocated. Progress is reported per
// chunk; a failed or canceled upload frees every device and pinned
// allocation it made (the pinned ring included).
//
// The stored bytes are verified against the checksums their files name
// as the readers read them (the loader's Part.ReadAt, under the model's
// Policy.Verify): a damaged tensor fails the upload with executor.ErrRead wrapping
// the loader's *safetensors.ChecksumError (errors.Is(err,
// ckpt.ErrChecksum)), which names the file, the tensor and its bytes, and
// no model is returned; a tensor the policy refuses to read (VerifyAlways
// and a file without checksums, damaged checksums) is refused so before
// anything is allocated.
func (e *Executor) UploadModel(ctx context.Context, m *ckpt.Model, opts ...executor.UploadOption) (*executor.Model, error) {
	const op = "UploadModel"
	if m == nil {
		return nil, errorf(executor.ErrArgument, op, "", "nil model")
	}
	if err := e.start(ctx, op); err != nil {
		return nil, err
	}
	o := executor.ApplyUpload(opts...)
	if o.Readers < 0 || o.StagingBytes < 0 {
		return nil, errorf(executor.ErrArgument, op, "", "readers %d, staging %d bytes", o.Readers, o.StagingBytes)
	}
	ts, err := uploadList(ctx, m)
	if err != nil {
		return nil, err
	}
	readers := o.Readers
	if readers == 0 {
		readers = defaultReaders
	}
	nslots := readers + 4
	slotSize := int64(defaultSlotSize)
	if o.StagingBytes > 0 {
		slotSize = max(minSlotSize, o.StagingBytes/int64(nslots)) &^ (64<<10 - 1)
	}
	// The memory plan: the arena (outputs), scratch (scales of dequantized
	// weights, and a device staging buffer per slot when a conversion
	// runs), aligned.
	var arenaBytes, scratchBytes int64
	converts := false
	for i := range ts {
		t := &ts[i]
		for _, s := range append([]*upSource{&t.data}, ptrs(t.scales)...) {
			switch s.kind {
			case upScratch:
				s.off = scratchBytes
				scratchBytes += alignUp(s.length)
			case upCopy:
				s.off = arenaBytes
				arenaBytes += alignUp(s.length)
			default:
				converts = true
				s.off = arenaBytes
				arenaBytes += alignUp(t.bytes)
			}
		}
	}
	stagingOff := scratchBytes
	if converts {
		scratchBytes += int64(nslots) * slotSize
	}
	need := arenaBytes + scratchBytes
	budget, source := o.BudgetBytes, "UploadOptions.BudgetBytes"
	if budget == 0 {
		free, _, err := e.memInfo()
		if err != nil {
			return nil, e.devErr(op, "", err)
		}
		budget, source = max(0, free-reserveBytes), fmt.Sprintf("the device's free memory (%s) less %s", sysmem.FormatSize(free), sysmem.FormatSize(reserveBytes))
	}
	if budget >= 0 && need > budget {
		return nil, errorf(executor.ErrBudget, op, "", "the model needs %s on the device (%s of tensors, %s of scratch and staging), the budget is %s: %s",
			sysmem.FormatSize(need), sysmem.FormatSize(arenaBytes), sysmem.FormatSize(scratchBytes), sysmem.FormatSize(budget), source)
	}

	e.opMu.Lock()
	defer e.opMu.Unlock()
	var ar, scratch devPtr
	cleanup := func(freeRing bool) error {
		return e.th.do(func() error {
			var errs []error
			if e.staging != nil {
				for _, s := range e.staging.slots {
					if s.pending {
						errs = append(errs, e.drv.EventSynchronize(s.ev))
						s.pending = false
					}
				}
				if freeRing {
					errs = append(errs, e.staging.free(e.drv))
					e.staging = nil
				}
			}
			if scratch != 0 {
				errs = append(errs, e.drv.MemFree(scratch))
			}
			if freeRing && ar != 0 {
				errs = append(errs, e.drv.MemFree(ar))
			}
			return errors.Join(errs...)
		})
	}
	fail := func(err error) (*executor.Model, error) {
		cerr := cleanup(true)
		if ctx.Err() != nil {
			err = ctx.Err() // devErr makes it the canceled error
		}
		return nil, errors.Join(e.devErr(op, "", err), cerr)
	}
	err = e.th.do(func() error {
		// The budget counted the cached memory of freed buffers as free.
		if err := e.freeCache(); err != nil {
			return err
		}
		if e.staging != nil && (len(e.staging.slots) != nslots || e.staging.size != slotSize) {
			if err := e.staging.free(e.drv); err != nil {
				return err
			}
			e.staging = nil
		}
		if e.staging == nil {
			r, err := newRing(e.drv, nslots, slotSize)
			if err != nil {
				return err
			}
			e.staging = r
		}
		var err error
		if arenaBytes > 0 {
			if ar, err = e.drv.MemAlloc(arenaBytes); err != nil {
				return err
			}
		}
		if scratchBytes > 0 {
			if scratch, err = e.drv.MemAlloc(scratchBytes); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fail(err)
	}
	for i := range ts {
		t := &ts[i]
		for _, s := range append([]*upSource{&t.data}, ptrs(t.scales)...) {
			if s.kind == upScratch {
				s.dst = scratch + devPtr(s.off)
			} else {
				s.dst = ar + devPtr(s.off)
			}
		}
	}
	up := &uploader{e: e, ctx: ctx, r: e.staging, progress: o.Progress}
	if converts {
		up.staging = scratch + devPtr(stagingOff)
	}
	for _, t := range ts {
		up.total += t.data.length
		for _, s := range t.scales {
			up.total += s.length
		}
	}
	// Scales first (dequantization reads them), then everything else.
	var first, rest []chunk
	for i, t := range ts {
		for j := range t.scales {
			first = up.chunks(first, ts[i], &ts[i].scales[j])
		}
		rest = up.chunks(rest, t, &ts[i].data)
	}
	if err := up.run(first, readers); err != nil {
		return fail(err)
	}
	if err := up.run(rest, readers); err != nil {
		return fail(err)
	}
	if err := cleanup(false); err != nil {
		e.th.do(func() error { return e.drv.MemFree(ar) })
		return nil, e.devErr(op, "", err)
	}
	// The tensors, as buffers of the arena.
	a := &arena{ptr: ar, size: arenaBytes}
	names := make([]string, 0, len(ts))
	weights := make([]*executor.Weight, 0, len(ts))
	var bufs []*buffer
	mk := func(dt dtype.DType, shape []int64, name string, ptr devPtr, size int64) *buffer {
		b := &buffer{ex: e, dt: dt, shape: slices.Clone(shape), name: name, size: size, ptr: ptr, arena: a}
		bufs = append(bufs, b)
		return b
	}
	for _, t := range ts {
		w := &executor.Weight{}
		if t.data.kind == upCopy {
			w.Data = mk(t.data.dt, t.data.shape, t.key, t.data.dst, t.data.length)
		} else {
			w.Data = mk(t.out, t.shape, t.key, t.data.dst, t.bytes)
		}
		if t.data.kind == upCopy && t.q != nil {
			w.Quant = t.q
			for _, s := range t.scales {
				w.Scales = append(w.Scales, mk(s.dt, s.shape, s.name, s.dst, s.length))
			}
		}
		names, weights = append(names, t.key), append(weights, w)
	}
	e.mu.Lock()
	if ar != 0 {
		e.arenas[a] = struct{}{}
	}
	for _, b := range bufs {
		e.live[b] = struct{}{}
		a.refs++
	}
	e.mu.Unlock()
	if ar != 0 && len(bufs) == 0 {
		e.th.do(func() error { return e.drv.MemFree(ar) })
	}
	model, err := executor.NewModel(e, names, weights, nil)
	if err != nil {
		for _, w := range weights {
			_ = executor.FreeWeight(e, w)
		}
		return nil, fail2(err)
	}
	return model, nil
}

func fail2(err error) error {
	return &executor.Error{Kind: executor.ErrArgument, Executor: Name, Op: "UploadModel", Err: err}
}

func ptrs(s []upSource) []*upSource {
	out := make([]*upSource, len(s))
	for i := range s {
		out[i] = &s[i]
	}
	return out
}

func alignUp(n int64) int64 { return (n + align - 1) / align * align }

// uploadList lists what UploadModel reads for every logical tensor of m:
// the loader's items (the policy's decisions, this rank's parts, the
// layouts of quantized weights), read through the model's own files.
func uploadList(ctx context.Context, m *ckpt.Model) ([]upTensor, error) {
	const op = "UploadModel"
	items, err := m.Items()
	if err != nil {
		return nil, &executor.Error{Kind: executor.ErrRead, Executor: Name, Op: op, Err: err}
	}
	src := func(p *ckpt.Part, kind upKind) upSource {
		return upSource{name: p.Tensor, part: p, length: p.Size(), dt: p.DType, shape: slices.Clone(p.Shape), kind: kind}
	}
	out := make([]upTensor, 0, len(items))
	for _, it := range items {
		key := it.Key
		t := upTensor{key: key, shape: slices.Clone(it.Shape), out: it.DType, bytes: it.Bytes}
		if _, err := backend.Elements(it.Shape); err != nil {
			return nil, fail(err)
		}
		// A part the loader refuses to read (its Policy.Verify) says why
		// to an empty ReadAt, before anything is allocated.
		for _, p := range append([]ckpt.Part{it.Data}, it.Scales...) {
			if _, err := p.ReadAt(nil, 0); err != nil {
				return nil, &executor.Error{Kind: executor.ErrRead, Executor: Name, Op: op, Tensor: key, Err: err}
			}
		}
		switch it.Action {
		case ckpt.ActionView, ckpt.ActionRead:
			t.data = src(&it.Data, upCopy)
		case ckpt.ActionConvert:
			t.data = src(&it.Data, upConvert)
			if _, ok := kernelDType(t.out); !ok {
				return nil, errorf(executor.ErrArgument, op, key, "the policy converts it to %s; the CUDA executor converts to F32, BF16 or F16 on the device", t.out)
			}
			if !convertible(t.data.dt) {
				return nil, errorf(executor.ErrArgument, op, key, "the policy converts it from %s; the CUDA executor converts F32, BF16, F16 and FP8 on the device", t.data.dt)
			}
		case ckpt.ActionQuantized:
			t.q = it.Quant
			t.data = src(&it.Data, upCopy)
			for i := range it.Scales {
				t.scales = append(t.scales, src(&it.Scales[i], upCopy))
			}
		case ckpt.ActionDequantize:
			if it.Quant == nil {
				// The part starts inside a scale block: its bytes are no
				// weight of their own, so the loader dequantizes it on the
				// host and the result is copied.
				t.data = upSource{name: key, host: &hostItem{it: it}, length: it.Bytes, dt: it.DType, shape: slices.Clone(it.Shape), kind: upCopy}
				break
			}
			if _, ok := kernelDType(t.out); !ok {
				return nil, errorf(executor.ErrArgument, op, key, "the policy dequantizes it to %s; the CUDA executor dequantizes to F32, BF16 or F16", t.out)
			}
			t.q = it.Quant
			if t.plan, err = planDequant(t.q); err != nil {
				return nil, errorf(executor.ErrArgument, op, key, "%v", err)
			}
			t.data = src(&it.Data, upDequant)
			for i := range it.Scales {
				t.scales = append(t.scales, src(&it.Scales[i], upScratch))
			}
		default:
			return nil, errorf(executor.ErrArgument, op, key, "action %v", it.Action)
		}
		out = append(out, t)
	}
	return out, nil
}

// hostItem is an item the loader produces on the host (UploadModel then
// copies its bytes): produced on the first read, released after the last.
type hostItem struct {
	it   *ckpt.Item
	once sync.Once
	mu   sync.Mutex
	buf  []byte
	err  error
	left int64
}

// readAt copies the produced bytes [off, off+len(b)) into b.
func (h *hostItem) readAt(ctx context.Context, b []byte, off int64) error {
	h.once.Do(func() {
		h.buf = make([]byte, h.it.Bytes)
		h.left = h.it.Bytes
		_, h.err = h.it.Produce(ctx, h.buf)
	})
	if h.err != nil {
		return h.err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.buf == nil || off < 0 || off+int64(len(b)) > int64(len(h.buf)) {
		return fmt.Errorf("read of [%d, %d) outside the %d bytes produced (or read twice)", off, off+int64(len(b)), h.it.Bytes)
	}
	copy(b, h.buf[off:])
	if h.left -= int64(len(b)); h.left <= 0 {
		h.buf = nil
	}
	return nil
}

// readAt reads the bytes [off, off+len(b)) of s: of its part of the stored
// tensor, through the model's files, or of what the loader produced.
func (s *upSource) readAt(ctx context.Context, b []byte, off int64) error {
	if s.host != nil {
		return s.host.readAt(ctx, b, off)
	}
	_, err := s.part.ReadAt(b, off)
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return err
}

func convertible(d dtype.DType) bool {
	if _, ok := kernelDType(d); ok {
		return true
	}
	return d == dtype.F8_E4M3 || d == dtype.F8_E5M2 || d == dtype.F8_E4M3FNUZ || d == dtype.F8_E5M2FNUZ
}

// chunk is one piece of a stored tensor: at most a slot's bytes.
type chunk struct {
	t     *upTensor
	s     *upSource
	off   int64 // within the stored tensor
	n     int64
	index int // of the piece, for the device staging buffer
}

// uploader runs one UploadModel's reads and copies.
type uploader struct {
	e        *Executor
	ctx      context.Context
	r        *ring
	staging  devPtr // device staging, a slot's size per slot (conversions)
	progress func(ckpt.Progress)

	mu          sync.Mutex
	done, total int64
}

// chunks appends the pieces of s.
func (u *uploader) chunks(out []chunk, t upTensor, s *upSource) []chunk {
	tt := t
	for off := int64(0); off < s.length; off += u.r.size {
		out = append(out, chunk{t: &tt, s: s, off: off, n: min(u.r.size, s.length-off)})
	}
	return out
}

// run reads and uploads the chunks with the given number of readers and
// waits for the device to finish them.
func (u *uploader) run(chunks []chunk, readers int) error {
	if len(chunks) == 0 {
		return nil
	}
	free := make(chan *slot, len(u.r.slots))
	for _, s := range u.r.slots {
		free <- s
	}
	work := make(chan chunk)
	var (
		wg   sync.WaitGroup
		once sync.Once
		ferr error
		stop = make(chan struct{})
	)
	setErr := func(err error) {
		once.Do(func() { ferr = err; close(stop) })
	}
	for range min(readers, len(chunks)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range work {
				var s *slot
				select {
				case s = <-free:
				case <-stop:
					continue
				case <-u.ctx.Done():
					setErr(u.ctx.Err())
					continue
				}
				err := u.one(c, s)
				free <- s
				if err != nil {
					setErr(err)
				}
			}
		}()
	}
feed:
	for _, c := range chunks {
		select {
		case work <- c:
		case <-stop:
			break feed
		case <-u.ctx.Done():
			setErr(u.ctx.Err())
			break feed
		}
	}
	close(work)
	wg.Wait()
	// Wait for the device: every slot's last copy or kernel.
	werr := u.e.th.do(func() error {
		var errs []error
		for _, s := range u.r.slots {
			if s.pending {
				errs = append(errs, u.e.drv.EventSynchronize(s.ev))
				s.pending = false
			}
		}
		return errors.Join(errs...)
	})
	if ferr != nil {
		return ferr
	}
	return werr
}

// one reads chunk c into slot s and queues its copy (and conversion).
func (u *uploader) one(c chunk, s *slot) error {
	e := u.e
	if s.pending {
		if err := e.th.do(func() error { return e.drv.EventSynchronize(s.ev) }); err != nil {
			return err
		}
		s.pending = false
	}
	buf := s.host.bytes()[:c.n]
	if err := c.s.readAt(u.ctx, buf, c.off); err != nil {
		var le *ckpt.Error
		switch {
		case errors.Is(err, ckpt.ErrChecksum):
			// The loader's verification (Part.ReadAt, Item.Produce): the
			// error names the file, the tensor and its bytes.
			return &Error{Kind: executor.ErrRead, Tensor: c.s.name, Err: err}
		case errors.As(err, &le) || u.ctx.Err() != nil:
			return err
		}
		where := "the loader's output"
		if c.s.part != nil {
			where = c.s.part.File
		}
		return &Error{Kind: executor.ErrRead, Tensor: c.s.name, Msg: fmt.Sprintf("%s, bytes [%d, %d) of what the upload reads of it", where, c.off, c.off+c.n), Err: err}
	}
	if err := u.ctx.Err(); err != nil {
		return err
	}
	err := e.th.do(func() error {
		switch c.s.kind {
		case upCopy, upScratch:
			if err := e.drv.MemcpyHtoDAsync(c.s.dst+devPtr(c.off), s.host, 0, c.n, s.stream); err != nil {
				return err
			}
		default:
			idx := slices.Index(u.r.slots, s)
			stage := u.staging + devPtr(int64(idx)*u.r.size)
			if err := e.drv.MemcpyHtoDAsync(stage, s.host, 0, c.n, s.stream); err != nil {
				return err
			}
			if err := u.convert(c, stage, s.stream); err != nil {
				return err
			}
		}
		if err := e.drv.EventRecord(s.ev, s.stream); err != nil {
			return err
		}
		s.pending = true
		return nil
	})
	if err != nil {
		return withOp(err, "", c.s.name)
	}
	u.mu.Lock()
	u.done += c.n
	if u.progress != nil {
		u.progress(ckpt.Progress{Phase: "upload", Done: u.done, Total: u.total, Tensor: c.t.key})
	}
	u.mu.Unlock()
	return nil
}

// convert launches the conversion (or dequantization) of chunk c, staged
// at stage, into its tensor's output (on the driver thread).
func (u *uploader) convert(c chunk, stage devPtr, st cuStream) error {
	e := u.e
	t := c.t
	to, _ := kernelDType(t.out)
	bits := int64(c.s.dt.Bits())
	if t.plan != nil && t.plan.fp4 {
		bits = 4
	}
	e0, n := c.off*8/bits, c.n*8/bits
	grid := [3]uint32{e.grid(n), 1, 1}
	block := [3]uint32{256, 1, 1}
	if c.s.kind == upConvert {
		sdt := uint64(ckTab)
		var tab uint64
		if k, ok := kernelDType(c.s.dt); ok {
			sdt = uint64(k)
		} else {
			tab = e.qtab(c.s.dt)
		}
		return e.launchOn(kConvert, grid, block, st, uint64(stage), sdt, tab, uint64(c.s.dst), uint64(to), 0, uint64(e0), uint64(n))
	}
	p := t.plan
	scale := func(s dqScale) []uint64 {
		if s.index < 0 {
			return []uint64{0, ckSNone, 0}
		}
		var tab uint64
		if s.kind == ckSTab {
			off, _ := tableIndex(s.tab)
			tab = uint64(e.tables) + uint64(8*off)
		}
		return []uint64{uint64(t.scales[s.index].dst), uint64(s.kind), tab}
	}
	args := []uint64{uint64(stage), e.qtab(p.elem), b2u(p.fp4), uint64(p.c)}
	args = append(args, scale(p.prim)...)
	args = append(args, b2u(p.varies), uint64(p.br), uint64(p.bc), uint64(p.gridC))
	args = append(args, scale(p.glob)...)
	args = append(args, uint64(p.gmode), uint64(c.s.dst), uint64(to), 0, uint64(e0), uint64(n))
	return e.launchOn(kDequant, grid, block, st, args...)
}

// launchOn runs kernel k on stream st (on the driver thread).
func (e *Executor) launchOn(k string, grid, block [3]uint32, st cuStream, args ...uint64) error {
	f, ok := e.funcs[k]
	if !ok {
		return &Error{Kind: executor.ErrArgument, Msg: "kernel " + k + " is not loaded on this device"}
	}
	return e.drv.LaunchKernel(f, grid, block, 0, st, args)
}
