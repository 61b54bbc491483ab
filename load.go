package ckpt

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/sysmem"
	"github.com/ckpt-go/ckpt/quant"
	"github.com/ckpt-go/ckpt/safetensors"
)

// Tensor is a loaded tensor: its bytes in the dtype the policy chose, and
// where they live.
type Tensor struct {
	// Component is the component's name; Name the logical tensor name
	// (without the component).
	Component, Name string
	// DType and Shape describe Bytes. A weight kept quantized has its
	// element type (F8_E4M3, F4 with the packed bytes, ...) and logical
	// shape; its scales are in Scales.
	DType dtype.DType
	Shape []int64
	// Stored is the dtype the tensor has in the file (a quantized weight's
	// element type).
	Stored dtype.DType
	// Decision is the policy's decision and the rule that made it.
	Decision Decision
	// Stats are the conversion's statistics (zero for views and copies).
	Stats dtype.Stats
	// Layout is the scaled low-precision layout of a dequantized or
	// quantized weight ("" for other tensors).
	Layout string
	// Role is the role of a scale tensor attached to a quantized weight
	// ("scale", "scale_inv", "global_scale", ...).
	Role string
	// Scales are the scale tensors of a weight kept quantized, in the
	// order its layout applies them.
	Scales []*Tensor
	// Location says where the bytes live.
	Location Location
	// Split is the part of the stored tensor this rank loaded (WithRank):
	// Shape and Bytes are the part's, Location the whole stored tensor's.
	// It is nil for a tensor no split matched.
	Split *SliceInfo

	data []byte
	act  Action
	q    *quant.Weight // the layout of a weight kept quantized (see QuantWeight)
	// pending is the check of a view handed out unverified
	// (ViewCheckOnRead); nil when there is none.
	pending *onReadCheck
}

// Location says where a loaded tensor's bytes live: memory of the load or a
// view of the file's mapping, and which stored bytes of which file they
// come from.
type Location struct {
	// Owned is true when Bytes is memory of the load (converted,
	// dequantized or read with pread); false for a zero-copy view of the
	// file's mapping.
	Owned bool
	// File, Offset and Length are the stored bytes in the file (for a
	// quantized or dequantized weight: its quantized data tensor).
	File           string
	Offset, Length int64
}

// Bytes returns the tensor's little-endian bytes. A view (Location.Owned
// false) is the file's mapping: read-only, valid until the Model is closed.
// Owned bytes are valid until the Weights are closed (or their Arena
// reused). A view that a load under ViewCheckOnRead handed out is not
// verified until a Chunks loop over it ended or Check returned nil
// (Pending).
func (t *Tensor) Bytes() []byte { return t.data }

// Action says how the tensor was produced (ActionView, ActionRead,
// ActionConvert, ActionDequantize or ActionQuantized, as Item.Action
// said; its String is the word plans use).
func (t *Tensor) Action() Action { return t.act }

// NumElements returns the number of elements.
func (t *Tensor) NumElements() int64 { return numElements(t.Shape) }

// Float32s returns the elements as float32 (exact for every dtype of 24
// significant bits or fewer). A weight kept quantized is refused: load it
// with a float target to dequantize it. A view that is Pending is verified
// by the decoding's read of its bytes (a mismatch is ErrChecksum).
func (t *Tensor) Float32s() ([]float32, error) {
	if t.act == ActionQuantized {
		return nil, &Error{Kind: ErrTarget, Component: t.Component, Tensor: t.Name, Msg: "a quantized weight has no float values until it is dequantized (load it with a float target)"}
	}
	out := make([]float32, t.NumElements())
	if err := t.decodeFloat32(out); err != nil {
		return nil, err
	}
	return out, nil
}

// Weights are the tensors of one Load.
type Weights struct {
	model   *Model
	tensors []*Tensor
	arena   *Arena
	ownsMem bool
	once    sync.Once
	closed  atomic.Bool
}

// Len returns the number of tensors.
func (w *Weights) Len() int { return len(w.tensors) }

// All iterates over the tensors in load order (file order within each
// component), keyed by name: "NAME", or "COMPONENT/NAME" in a pipeline.
func (w *Weights) All() iter.Seq2[string, *Tensor] {
	return func(yield func(string, *Tensor) bool) {
		for _, t := range w.tensors {
			if !yield(w.key(t), t) {
				return
			}
		}
	}
}

// Component iterates over one component's tensors, keyed by bare name.
func (w *Weights) Component(name string) iter.Seq2[string, *Tensor] {
	return func(yield func(string, *Tensor) bool) {
		for _, t := range w.tensors {
			if t.Component == name && !yield(t.Name, t) {
				return
			}
		}
	}
}

func (w *Weights) key(t *Tensor) string { return w.model.qualify(t.Component, t.Name) }

// Tensor returns a tensor by "COMPONENT/NAME", or by a bare NAME that only
// one component has.
func (w *Weights) Tensor(name string) (*Tensor, error) {
	if w.closed.Load() {
		return nil, &Error{Kind: ErrClosed, Tensor: name, Msg: "weights are closed"}
	}
	_, e, err := w.model.lookup(name)
	if err != nil {
		return nil, err
	}
	return w.tensors[e.pos], nil
}

// Stats adds up the conversion statistics of every tensor.
func (w *Weights) Stats() dtype.Stats {
	var s dtype.Stats
	for _, t := range w.tensors {
		s.Add(t.Stats)
	}
	return s
}

// Close releases the owned memory (unless it belongs to a caller's Arena).
// Views stay valid until the Model is closed.
func (w *Weights) Close() error {
	var err error
	w.once.Do(func() {
		w.closed.Store(true)
		if w.ownsMem && w.arena != nil {
			err = w.arena.Free()
		}
	})
	return err
}

// LoadOption configures one Load.
type LoadOption func(*loadConfig)

type loadConfig struct {
	arena *Arena
}

// IntoArena makes Load carve owned buffers out of a (growing it when it is
// too small) instead of fresh memory, so that repeated loads allocate
// nothing. The Weights' Close then leaves a alone.
func IntoArena(a *Arena) LoadOption { return func(c *loadConfig) { c.arena = a } }

// Load loads every tensor under the policy. It first checks the plan
// against the memory budget and returns a *BudgetError (ErrBudget),
// having allocated nothing, when the peak would not fit. Tensors whose
// target is their stored dtype are zero-copy views of the mapping (or, with
// the pread strategy, read into owned memory); the others are converted or
// dequantized into owned memory, in file order, by all workers in pieces of
// a few MiB (tensors in parallel and large tensors split), each piece read
// once and written once. Where the files name checksums, every tensor's
// stored bytes are verified as they are read, and views by a pass over the
// mapping (see Policy.Verify), or under ViewCheckOnRead as their reader
// reads them (Tensor.Chunks); a damaged tensor fails the load with
// ErrChecksum, and a file the policy refuses (VerifyAlways without
// checksums, damaged checksums) fails it before anything is allocated.
// Cancelling ctx, or any error, stops the load promptly and frees what it
// allocated: Load returns nil Weights.
func (m *Model) Load(ctx context.Context, opts ...LoadOption) (*Weights, error) {
	if err := m.checkOpen(); err != nil {
		return nil, err
	}
	var lc loadConfig
	for _, o := range opts {
		o(&lc)
	}
	us := m.usages()
	if err := m.checkBudget(us); err != nil {
		return nil, err
	}
	var owned int64
	n := 0
	for _, c := range m.comps {
		for _, e := range c.entries {
			if err := m.checkVerify(c, e); err != nil {
				return nil, err
			}
			owned += e.arenaBytes()
			n++
		}
	}
	w := &Weights{model: m, tensors: make([]*Tensor, n)}
	w.arena, w.ownsMem = lc.arena, lc.arena == nil
	if w.arena == nil {
		w.arena = NewArena()
	}
	if err := w.arena.reset(owned); err != nil {
		return nil, &Error{Kind: ErrRead, Path: m.path, Msg: fmt.Sprintf("allocating %s of owned memory", sysmem.FormatSize(owned)), Err: err}
	}
	store := make([]Tensor, n)
	pp := &prep{alloc: w.arena.take, block: n, dims: dims{n: n}}
	if m.rangeFS() == nil {
		pp.store = store // small tensors are converted in batches
	}
	i := 0
	for _, c := range m.comps {
		for _, e := range c.entries {
			t := &store[i]
			w.tensors[i] = t
			i++
			if err := m.prepareInto(c, e, t, pp); err != nil {
				w.Close()
				return nil, err
			}
		}
	}
	if err := m.run(ctx, pp.work, "load"); err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

// checkBudget compares the peak with the budget without building the full
// plan unless it refuses.
func (m *Model) checkBudget(us []usage) error {
	budget, _ := m.budget()
	if _, peak := m.peakOf(us); budget < 0 || peak <= budget {
		return nil
	}
	p, err := m.Plan()
	if err != nil {
		return err
	}
	return p.refuse()
}

// LoadTensor loads one tensor by "COMPONENT/NAME" or by a bare NAME that
// only one component has, under the policy. A view costs nothing but its
// verification pass (where its file names checksums); a converted tensor
// gets its own buffer (Go memory), converted by all workers. The stored
// bytes are verified as Load verifies them.
func (m *Model) LoadTensor(ctx context.Context, name string) (*Tensor, error) {
	return m.loadOne(ctx, name, nil)
}

func (m *Model) loadOne(ctx context.Context, name string, dst []byte) (*Tensor, error) {
	if err := m.checkOpen(); err != nil {
		return nil, err
	}
	c, e, err := m.lookup(name)
	if err != nil {
		return nil, err
	}
	return m.loadEntry(ctx, c, e, dst)
}

// loadEntry loads one tensor, into dst when it is not nil.
func (m *Model) loadEntry(ctx context.Context, c *modelComponent, e *entry, dst []byte) (*Tensor, error) {
	if err := m.checkOpen(); err != nil {
		return nil, err
	}
	if dst != nil && int64(len(dst)) != e.outBytes {
		return nil, &Error{Kind: ErrOption, Component: c.name, Tensor: e.name,
			Msg: fmt.Sprintf("buffer: %d bytes; the tensor loads as %s %v = %d bytes", len(dst), e.out, e.shape, e.outBytes)}
	}
	if err := m.checkVerify(c, e); err != nil {
		return nil, err
	}
	used := false
	alloc := func(n int64) []byte {
		if dst != nil && !used {
			used = true
			return dst
		}
		return make([]byte, n)
	}
	t := &Tensor{}
	pp := &prep{alloc: alloc, intoCaller: dst != nil}
	if err := m.prepareInto(c, e, t, pp); err != nil {
		return nil, err
	}
	if err := m.run(ctx, pp.work, "load"); err != nil {
		return nil, err
	}
	return t, nil
}

// piece is a unit of load work: part of one tensor.
type piece struct {
	c     *modelComponent
	e     *entry
	t     *Tensor
	st    storedTensor
	first int64 // the piece's first unit of its part: element, row or byte, by sj.kind
	n     int64 // units
	dst   []byte
	bytes int64    // output bytes, for progress
	sj    *partJob // what the pieces of its part share
	idx   int      // position in the load's work
	// The source bytes [evOff, evEnd) of evFile that the load drops from
	// this process once the pieces before this one are done too (evictor).
	evFile       *safetensors.File
	evOff, evEnd int64
}

// evicting returns p when its part drops the source pages it has read
// (a conversion or dequantization from a mapping), else nil.
func (p *piece) evicting() *piece {
	if p.sj.evict {
		return p
	}
	return nil
}

// evict records that the load may drop the bytes [lo, hi) of st, relative
// to its first byte.
func (p *piece) evict(st storedTensor, lo, hi int64) {
	_, p.evFile = fileOf(st)
	p.evOff, p.evEnd = st.Offset()+lo, st.Offset()+hi
}

// prep is what preparing the tensors of a load shares: where owned memory
// comes from, the pieces of work so far, and blocks that the many small
// things each tensor needs are taken from.
type prep struct {
	alloc func(int64) []byte
	work  []piece
	// intoCaller says the first allocation is the caller's buffer: a
	// tensor that would be a view is read into it, and so is a quantized
	// weight's data.
	intoCaller bool
	// store holds the load's tensors, at their entries' positions, when
	// small tensors are converted in batches (nil: one piece each).
	store []Tensor
	block int       // how many of each a block holds (0: one)
	jobs  []partJob // the rest of the current block of jobs
	dims  dims      // the tensors' shapes
}

// job returns a new partJob holding j, from the current block.
func (pp *prep) job(j partJob) *partJob {
	if len(pp.jobs) == 0 {
		pp.jobs = make([]partJob, min(max(pp.block, 1), 1024))
	}
	p := &pp.jobs[0]
	*p = j
	pp.jobs = pp.jobs[1:]
	return p
}

// dims hands out copies of shapes from blocks: one allocation for many
// small shapes. Each copy has its own capacity, so that appending to one
// never writes into another.
type dims struct {
	free []int64 // the rest of the current block
	n    int     // the shapes to come, to size blocks (0: unknown)
}

// clone returns a copy of s as slices.Clone does (nil for nil).
func (d *dims) clone(s []int64) []int64 {
	switch {
	case s == nil:
		return nil
	case len(s) == 0:
		return []int64{}
	case len(s) > len(d.free):
		if len(s) > 64 {
			return slices.Clone(s)
		}
		d.free = make([]int64, max(min(max(d.n, 1)*2, 8192), len(s)))
	}
	out := d.free[:len(s):len(s)]
	copy(out, s)
	d.free = d.free[len(s):]
	return out
}

// prepareInto fills t's description (t is zero), assigns its memory, and
// appends its pieces of work to pp.
func (m *Model) prepareInto(c *modelComponent, e *entry, t *Tensor, pp *prep) error {
	// Field by field: t is zero (fresh memory), and a whole Tensor copied
	// in costs a bulk write barrier while the collector runs.
	t.Component, t.Name, t.DType, t.Shape, t.Stored, t.Decision, t.act = c.name, e.name, e.out, pp.dims.clone(e.shape), e.stored, e.dec, e.act
	if e.q != nil {
		t.Layout = e.q.Layout.String() // the weight's own (a scheme may be "mixed")
	}
	st, scales, err := c.stored(e)
	if err != nil {
		return inComponent(err, c.name)
	}
	t.Location = Location{File: filePath(st), Offset: st.Offset(), Length: st.ByteLen()}
	// The load reads the part's bytes once, in pieces: a PyTorch view
	// that is not contiguous is gathered once for them (torchGather).
	st = gathered(st, e.sl.data)
	return m.preparePart(c, e, t, st, scales, pp)
}

// arenaBytes is what prepare takes from an arena for e: one aligned buffer,
// or for a quantized weight read with pread one for its data and one per
// scale.
func (e *entry) arenaBytes() int64 {
	if e.owned == 0 {
		return 0
	}
	if e.act != ActionQuantized || e.sl != nil && !e.sl.whole {
		// A split part's owned bytes are aligned part by part already.
		return alignUp(e.owned)
	}
	n, _ := e.q.Data.DType.ByteLen(numElements(e.q.Data.Shape))
	total := alignUp(n)
	for _, s := range e.q.Scales {
		b, _ := s.DType.ByteLen(numElements(s.Shape))
		total += alignUp(b)
	}
	return total
}

// run does the pieces with the model's workers, in order, reporting
// progress as phase; the first error or ctx's end stops every worker.
// Then every check of the pieces must have completed (verify.go).
func (m *Model) run(ctx context.Context, work []piece, phase string) error {
	if len(work) == 0 {
		return ctx.Err()
	}
	var err error
	if rfs := m.rangeFS(); rfs != nil {
		err = m.runRanged(ctx, rfs, work, phase) // load_ranged.go
	} else {
		err = m.runPieces(ctx, work, phase)
	}
	if err != nil {
		return err
	}
	for i := range work {
		p := &work[i]
		if err := p.sj.ck.finishIn(p); err != nil {
			return err
		}
		if dq := p.sj.dq; dq != nil {
			for _, ck := range dq.scaleCk {
				if err := ck.finishIn(p); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// runPieces does the pieces of run on the model's workers.
func (m *Model) runPieces(ctx context.Context, work []piece, phase string) error {
	workers := min(m.workers(), len(work))
	if lim := int(m.cfg.staging / chunkBytes); workers > lim {
		workers = max(lim, 1)
	}
	meter := m.newMeter(work, phase)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	opts := m.cfg.convertOptions()
	opts.Streaming = meter.total >= streamingMin
	took, stop := make(chan struct{}, 1), make(chan struct{})
	var ahead sync.WaitGroup
	if readsViews(work) {
		ahead.Go(func() { readAhead(ctx, work, &next, took, stop) })
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if ctx.Err() != nil {
					return
				}
				i := next.Add(1) - 1
				select {
				case took <- struct{}{}:
				default:
				}
				if i >= int64(len(work)) {
					return
				}
				p := &work[i]
				st, err := m.doPiece(ctx, p, opts)
				if err != nil {
					cancel(err)
					return
				}
				meter.finish(p, st)
			}
		}()
	}
	wg.Wait()
	close(stop)
	ahead.Wait()
	meter.flush()
	return context.Cause(ctx)
}

// streamingMin is the output of a load from which its conversions write
// with streaming stores (dtype.Options.Streaming): each piece is one part
// of a large output that is not read back soon, and cached stores of many
// small tensors evict one another (a load of 256 KiB tensors ran at half
// the speed of 4 MiB ones without it, BENCHMARKS.md).
const streamingMin = 4 << 20

// loadMeter counts the finished pieces of a load: it adds each one's
// statistics to its tensor, reports the progress, and drops the source
// pages of finished pieces from this process in runs of at least
// evictBatch bytes, in file order: the pages of a piece go once every
// piece before it is done, merged with its neighbours' (dropping each
// piece's pages on its own costs a call per tensor, each interrupting
// the other threads to flush their address translations).
type loadMeter struct {
	progress    func(Progress)
	phase       string // Progress.Phase
	mu          sync.Mutex
	done, total int64
	work        []piece
	finished    []bool
	next        int               // the first piece not finished
	file        *safetensors.File // the pending run of pages to drop
	lo, hi      int64
}

// evictBatch is the least a drop of source pages covers, unless it is the
// last of a file or of the load.
const evictBatch = 4 << 20

func (m *Model) newMeter(work []piece, phase string) *loadMeter {
	pm := &loadMeter{progress: m.cfg.progress, phase: phase, work: work, finished: make([]bool, len(work))}
	for i := range work {
		work[i].idx = i
		pm.total += work[i].bytes
	}
	return pm
}

// finish records that p is done, with the conversion statistics st.
func (pm *loadMeter) finish(p *piece, st dtype.Stats) {
	var drops [2]evictRun
	n := 0
	pm.mu.Lock()
	p.t.Stats.Add(st)
	pm.done += p.bytes
	if pm.progress != nil {
		pm.progress(Progress{Phase: pm.phase, Done: pm.done, Total: pm.total, Component: p.c.name, Tensor: p.t.Name})
	}
	pm.finished[p.idx] = true
	for pm.next < len(pm.work) && pm.finished[pm.next] {
		q := &pm.work[pm.next]
		pm.next++
		if q.evFile == nil {
			continue
		}
		if pm.file != nil && (q.evFile != pm.file || q.evOff < pm.lo || q.evOff > pm.hi+evictGap) {
			if n < len(drops) {
				drops[n] = evictRun{pm.file, pm.lo, pm.hi}
				n++
			} else {
				pm.file.Evict(pm.lo, pm.hi-pm.lo) // rare: a third run in one call
			}
			pm.file = nil
		}
		if pm.file == nil {
			pm.file, pm.lo, pm.hi = q.evFile, q.evOff, q.evEnd
		} else {
			pm.hi = max(pm.hi, q.evEnd)
		}
		if pm.hi-pm.lo >= evictBatch && n < len(drops) {
			drops[n] = evictRun{pm.file, pm.lo, pm.hi}
			n++
			pm.file = nil
		}
	}
	pm.mu.Unlock()
	for _, d := range drops[:n] {
		d.file.Evict(d.lo, d.hi-d.lo)
	}
}

// evictGap is the most bytes between two pieces' sources that a drop
// still spans (alignment padding between tensors).
const evictGap = 4 << 10

// evictRun is a run of source bytes of one file to drop.
type evictRun struct {
	file   *safetensors.File
	lo, hi int64
}

// flush drops what is pending: the end of the load.
func (pm *loadMeter) flush() {
	pm.mu.Lock()
	f, lo, hi := pm.file, pm.lo, pm.hi
	pm.file = nil
	pm.mu.Unlock()
	if f != nil {
		f.Evict(lo, hi-lo)
	}
}

// doPiece does one piece of work; errors other than the loader's own and
// cancellation become ErrRead naming the tensor.
func (m *Model) doPiece(ctx context.Context, p *piece, opts dtype.Options) (dtype.Stats, error) {
	st, err := m.doPartPiece(ctx, p, opts)
	if err == nil {
		return st, nil
	}
	return st, readErr(err, p.c.name, p.t.Name)
}

// readErr makes err an ErrRead naming the tensor, unless it is the
// loader's own or a cancellation.
func readErr(err error, component, tensor string) error {
	var le *Error
	if errors.As(err, &le) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return &Error{Kind: ErrRead, Component: component, Tensor: tensor, Err: err}
}

// protectFault runs fn, turning a memory fault on a mapping (SIGBUS: the
// file was truncated while mapped) into an error.
func protectFault(fn func() error) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			if _, ok := r.(interface{ Addr() uintptr }); ok {
				err = fmt.Errorf("memory fault reading the mapped file: was it truncated or modified while open?")
				return
			}
			panic(r)
		}
	}()
	return fn()
}
