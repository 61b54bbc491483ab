package convert

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"sync"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/fpkern"
	"github.com/ckpt-go/ckpt/quant"
	"github.com/ckpt-go/ckpt/safetensors"
)

// taskKind says how one output tensor is produced.
type taskKind int

const (
	kCopy    taskKind = iota // the stored bytes
	kCast                    // a plain dtype conversion
	kQuant                   // a float weight to scaled FP8 (its scales are a kScale task)
	kScale                   // the scales of a kQuant or kRequant task
	kDequant                 // a scaled low-precision weight to a float dtype
	kRequant                 // a scaled weight dequantized and quantized anew
)

// task produces one output tensor, piece by piece.
type task struct {
	kind taskKind
	comp *component
	spec safetensors.TensorSpec
	rep  *TensorReport

	src    *partTensor         // the stored tensor read (a weight's data)
	w      *quant.Weight       // kDequant, kRequant: the source weight
	scales []*partTensor       // its stored scales, in w.Scales' order
	q      *quant.FP8Quantizer // kQuant, kRequant, kScale
	narrow bool                // kCast: measure the errors

	// Pieces: units are elements (kCopy, kCast) or rows of the [rows, cols]
	// view (the other kinds), per of them at a time.
	rows, cols int64
	units, per int64
	outBits    int64

	views     sync.Mutex // kDequant, kRequant: the stored scales, fetched once
	scaleData [][]byte
	viewErr   error
}

// pieces returns the number of pieces of t.
func (t *task) pieces() int64 {
	if t.kind == kScale {
		return 1
	}
	if t.units == 0 {
		return 0
	}
	return (t.units + t.per - 1) / t.per
}

// piece returns the units [first, first+n) of piece i and the output bytes
// they fill.
func (t *task) piece(i int64) (first, n, outLen int64) {
	if t.kind == kScale {
		b, _ := t.spec.ByteLen()
		return 0, 1, b
	}
	first = i * t.per
	n = min(t.per, t.units-first)
	unitBits := t.outBits
	if t.kind != kCopy && t.kind != kCast {
		unitBits *= t.cols
	}
	total, _ := t.spec.ByteLen()
	start := first * unitBits / 8
	end := (first + n) * unitBits / 8
	if first+n == t.units {
		end = total
	}
	return first, n, end - start
}

// stats of one piece: the rounding's counters and the errors.
type pieceStats struct {
	st             dtype.Stats
	nan, inf       int64 // produced from finite values
	maxAbsErr, rel float64
	sse, ss        float64 // sums of squared errors and of squared source values
	read           int64   // source bytes read
}

func (p *pieceStats) addQuant(s quant.QuantizeStats) {
	s.Stats.MaxAbs = 0 // of the quotients x / scale; the source's comes from the quantizer
	p.st.Add(s.Stats)
	p.nan += s.NonFinite
	p.maxAbsErr = max(p.maxAbsErr, s.MaxAbsErr)
	p.rel = max(p.rel, s.MaxRelErr)
	p.sse += s.SumSqErr
	p.ss += s.SumSq
}

// scratch holds one worker's staging buffers, reused from piece to piece.
type scratch struct {
	raw []byte
	f32 []float32
	f64 []float64
	y32 []float32
	y64 []float64
}

func grow[T any](s []T, n int64) []T {
	if int64(cap(s)) < n {
		return make([]T, n)
	}
	return s[:n]
}

// testHookPiece, when set (tests only), is called before each piece with
// the tensor's name; an error fails the piece as a source error would.
var testHookPiece func(tensor string) error

// run computes one piece into out.
func (t *task) run(ctx context.Context, first, n int64, out []byte, sc *scratch, opts dtype.Options) (ps pieceStats, err error) {
	if testHookPiece != nil {
		if err := testHookPiece(t.spec.Name); err != nil {
			return ps, &Error{Kind: ErrSource, Component: t.comp.name, Tensor: t.spec.Name, Err: err}
		}
	}
	one := dtype.Options{Saturate: opts.Saturate, Workers: 1}
	wrap := func(err error) error {
		if err == nil {
			return nil
		}
		return &Error{Kind: ErrSource, Component: t.comp.name, Tensor: t.spec.Name, Err: err}
	}
	switch t.kind {
	case kCopy:
		if n == 0 {
			return ps, nil
		}
		ps.read = int64(len(out))
		_, err = t.src.ConvertElementsTo(t.src.DType(), out, first, one)
		return ps, wrap(err)
	case kCast:
		from, to := t.src.DType(), t.spec.DType
		if !t.narrow {
			ps.st, err = t.src.ConvertElementsTo(to, out, first, one)
			ps.read = n * int64(from.Bits()) / 8
			return ps, wrap(err)
		}
		return t.castMeasured(first, n, out, sc, one)
	case kScale:
		for i, s := range t.q.Scales() {
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(s))
		}
		return ps, nil
	case kQuant:
		x := grow(sc.f32, n*t.cols)
		sc.f32 = x
		if err := t.readRows(first, n, x, &ps); err != nil {
			return ps, err
		}
		qs, err := t.q.Quantize(out, first, x, one)
		ps.addQuant(qs)
		return ps, wrap(err)
	case kDequant, kRequant:
		if err := t.fetchScales(); err != nil {
			return ps, err
		}
		ps.read = t.storedBytes(first, n)
		if t.kind == kRequant {
			x := grow(sc.f32, n*t.cols)
			sc.f32 = x
			if err := t.dequantRows(ctx, dtype.Float32Bytes(x), dtype.F32, first, n, &sc.raw); err != nil {
				return ps, err
			}
			qs, err := t.q.Quantize(out, first, x, one)
			ps.addQuant(qs)
			return ps, wrap(err)
		}
		// Exact values first (a narrow code times its scales is exact in
		// float64), then one rounding to the target, measured.
		x := grow(sc.f64, n*t.cols)
		sc.f64 = x
		if err := t.dequantRows(ctx, dtype.Float64Bytes(x), dtype.F64, first, n, &sc.raw); err != nil {
			return ps, err
		}
		if ps.st, err = dtype.EncodeFloat64(out, t.spec.DType, x, one); err != nil {
			return ps, &Error{Kind: ErrCast, Component: t.comp.name, Tensor: t.spec.Name, Err: err}
		}
		y := grow(sc.y64, n*t.cols)
		sc.y64 = y
		dtype.DecodeFloat64(y, out, t.spec.DType)
		measure(x, y, &ps)
		return ps, nil
	}
	return ps, fmt.Errorf("convert: unknown task kind %d", t.kind)
}

// castBlock is how many elements a narrowing cast reads, converts and
// measures at a time: the source block, its output and the output widened
// back for the measure (at most 20 bytes an element) stay in a core's L2
// cache between the steps, instead of each step streaming a whole piece
// through memory.
const castBlock = 16 << 10

// castMeasured converts the elements [first, first+n) of a narrowing cast
// into out, block by block, measuring each block's errors against its
// source values.
func (t *task) castMeasured(first, n int64, out []byte, sc *scratch, one dtype.Options) (ps pieceStats, err error) {
	from, to := t.src.DType(), t.spec.DType
	fb, tb := int64(from.Bits()), int64(to.Bits())
	// Values of 32 bits or fewer are measured in float32 (exactly: every
	// such float is a float32), others in float64. An F32 source is read
	// straight into the float32 staging it is measured from: its bytes are
	// the F32 layout, as dtype.Float32Bytes and DecodeFloat32 take them.
	// The source is read castReads blocks at a time (one read, verified as
	// one, instead of one per block), then converted and measured block by
	// block.
	wide := from == dtype.F64 || fb > 32 || tb > 32
	native := from == dtype.F32 && !wide
	blk := min(n, castBlock)
	rblk := min(n, castBlock*castReads)
	if wide {
		sc.f64, sc.y64 = grow(sc.f64, blk), grow(sc.y64, blk)
	} else {
		sc.y32 = grow(sc.y32, blk)
		if native {
			sc.f32 = grow(sc.f32, rblk)
		} else {
			sc.f32 = grow(sc.f32, blk)
		}
	}
	raw := dtype.Float32Bytes(sc.f32)
	if !native {
		sc.raw = grow(sc.raw, (rblk*fb+7)/8)
		raw = sc.raw
	}
	for done := int64(0); done < n; done += rblk {
		rm := min(rblk, n-done)
		rr := raw[:(rm*fb+7)/8]
		if _, err := t.src.ConvertElementsTo(from, rr, first+done, one); err != nil {
			return ps, &Error{Kind: ErrSource, Component: t.comp.name, Tensor: t.spec.Name, Err: err}
		}
		ps.read += int64(len(rr))
		for sub := int64(0); sub < rm; sub += blk {
			m := min(blk, rm-sub)
			rb := rr[sub*fb/8:]
			ob := out[(done+sub)*tb/8:]
			if done+sub+m < n {
				rb, ob = rb[:m*fb/8], ob[:m*tb/8]
			}
			st, err := dtype.Convert(ob, to, rb, from, one)
			if err != nil {
				return ps, &Error{Kind: ErrCast, Component: t.comp.name, Tensor: t.spec.Name, Err: err}
			}
			ps.st.Add(st)
			if wide {
				x, y := sc.f64[:m], sc.y64[:m]
				dtype.DecodeFloat64(x, rb, from)
				dtype.DecodeFloat64(y, ob, to)
				measure(x, y, &ps)
				continue
			}
			x, y := sc.f32[:m], sc.y32[:m]
			if native {
				x = sc.f32[sub : sub+m]
			} else {
				dtype.DecodeFloat32(x, rb, from)
			}
			dtype.DecodeFloat32(y, ob, to)
			measure(x, y, &ps)
		}
	}
	return ps, nil
}

// castReads is how many blocks of castBlock elements a narrowing cast
// reads at a time: a few hundred KiB, still in a core's L2 cache when
// its blocks are converted, in one read of the source (a pread, and one
// piece of its verification) instead of one per block.
const castReads = 4

// readRows reads rows [first, first+n) of a float source as float32 into
// x (exact for every float type of 32 bits or fewer).
func (t *task) readRows(first, n int64, x []float32, ps *pieceStats) error {
	if n == 0 || t.cols == 0 {
		return nil
	}
	e0 := first * t.cols
	ps.read += n * t.cols * int64(t.src.DType().Bits()) / 8
	_, err := t.src.ConvertElementsTo(dtype.F32, dtype.Float32Bytes(x), e0, dtype.Options{Workers: 1})
	if err != nil {
		return &Error{Kind: ErrSource, Component: t.comp.name, Tensor: t.spec.Name, Err: err}
	}
	return nil
}

// fetchScales gets the stored scales of a scaled weight, once per task
// (they are small: a scale per block, row or tensor); its data is read
// row piece by row piece (dequantRows).
func (t *task) fetchScales() error {
	t.views.Lock()
	defer t.views.Unlock()
	if t.scaleData == nil && t.viewErr == nil {
		for _, s := range t.scales {
			b, err := s.Bytes()
			if err != nil {
				t.viewErr = err
				t.scaleData = nil
				break
			}
			t.scaleData = append(t.scaleData, b)
		}
	}
	if t.viewErr != nil {
		return &Error{Kind: ErrSource, Component: t.comp.name, Tensor: t.spec.Name, Err: t.viewErr}
	}
	return nil
}

// dropViews forgets the stored scales.
func (t *task) dropViews() {
	t.views.Lock()
	t.scaleData = nil
	t.views.Unlock()
}

// storedBytes is the stored data that rows [first, first+n) use.
func (t *task) storedBytes(first, n int64) int64 {
	return n * t.cols * int64(t.w.Elem.Bits()) / 8
}

// dequantRows dequantizes rows [first, first+n) of a scaled weight into
// dst: it reads the stored bytes of these rows only (into *buf, reused;
// verified as the source reads them), so that a piece of a large weight
// holds a piece's worth of memory. The scales must have been fetched
// (fetchScales).
func (t *task) dequantRows(ctx context.Context, dst []byte, to dtype.DType, first, n int64, buf *[]byte) error {
	if err := dequantStored(ctx, t.w, t.src, t.scaleData, t.cols, dst, to, first, n, buf); err != nil {
		return &Error{Kind: ErrSource, Component: t.comp.name, Tensor: t.spec.Name, Err: err}
	}
	return nil
}

// dequantStored dequantizes rows [first, first+n) of the scaled weight w
// (cols columns) into dst as to, reading the stored bytes of these rows
// only from src, its data tensor, into *buf (reused), with its scales'
// bytes.
func dequantStored(ctx context.Context, w *quant.Weight, src *partTensor, scales [][]byte, cols int64, dst []byte, to dtype.DType, first, n int64, buf *[]byte) error {
	eb, sb := int64(w.Elem.Bits()), int64(src.DType().Bits())
	rows := grow(*buf, n*cols*eb/8)
	*buf = rows
	if _, err := src.ConvertElementsTo(src.DType(), rows, first*cols*eb/sb, dtype.Options{Workers: 1}); err != nil {
		return err
	}
	_, err := w.DequantizeRows(ctx, dst, to, rows, scales, first, n, dtype.Options{Workers: 1})
	return err
}

// measure compares source values x with output values y.
func measure[T float32 | float64](x, y []T, ps *pieceStats) {
	a := fpkern.Acc{MaxAbs: ps.maxAbsErr, MaxRel: ps.rel}
	switch xs := any(x).(type) {
	case []float32:
		fpkern.Measure(xs, any(y).([]float32), 1, &a)
	case []float64:
		fpkern.Measure64(xs, any(y).([]float64), 1, &a)
	}
	ps.nan += a.NaN
	ps.inf += a.Inf
	ps.maxAbsErr, ps.rel = a.MaxAbs, a.MaxRel
	ps.sse += a.SumSqErr
	ps.ss += a.SumSq
}

// piece is one unit of pipeline work.
type piece struct {
	t        *task
	first, n int64
	out      []byte
	ps       pieceStats
	err      error
	done     chan struct{}
	cost     int64
}

// pipeline computes the pieces of a set's tensors ahead of the writer, in
// the writer's order, with a bounded number of bytes in flight.
type pipeline struct {
	ctx    context.Context
	cancel context.CancelFunc
	work   chan *piece
	queue  chan *piece
	wg     sync.WaitGroup
	opts   dtype.Options

	mu       sync.Mutex
	cond     *sync.Cond
	inFlight int64
	limit    int64
	stopped  bool

	free      map[int][][]byte // reusable output buffers by capacity (powers of two)
	freeBytes int64
	chunk     int64
}

// newPipeline starts workers that compute the pieces of the tasks of order
// (output tensor names in write order; byName maps them to tasks) ahead of
// the consumer, keeping at most limit bytes of output in flight.
func newPipeline(ctx context.Context, order []*task, scratches []*scratch, limit, chunk int64, opts dtype.Options) *pipeline {
	workers := len(scratches)
	ctx, cancel := context.WithCancel(ctx)
	p := &pipeline{ctx: ctx, cancel: cancel, work: make(chan *piece, 4*workers), queue: make(chan *piece, 4096),
		opts: opts, limit: limit, chunk: chunk, free: map[int][][]byte{}}
	p.cond = sync.NewCond(&p.mu)
	for _, sc := range scratches {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for pc := range p.work {
				if p.ctx.Err() != nil {
					pc.err = p.ctx.Err()
				} else {
					pc.ps, pc.err = pc.t.run(p.ctx, pc.first, pc.n, pc.out, sc, p.opts)
				}
				close(pc.done)
			}
		}()
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer close(p.work)
		defer close(p.queue)
		for _, t := range order {
			for i, np := int64(0), t.pieces(); i < np; i++ {
				first, n, outLen := t.piece(i)
				if !p.acquire(outLen) {
					return
				}
				pc := &piece{t: t, first: first, n: n, out: p.buffer(outLen), done: make(chan struct{}), cost: outLen}
				select {
				case p.queue <- pc:
				case <-p.ctx.Done():
					return
				}
				select {
				case p.work <- pc:
				case <-p.ctx.Done():
					pc.err = p.ctx.Err()
					close(pc.done)
					return
				}
			}
		}
	}()
	return p
}

// acquire waits until n more bytes may be in flight (a piece larger than
// the limit goes alone); false when the pipeline stopped.
func (p *pipeline) acquire(n int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for !p.stopped && p.inFlight > 0 && p.inFlight+n > p.limit {
		p.cond.Wait()
	}
	if p.stopped {
		return false
	}
	p.inFlight += n
	return true
}

func (p *pipeline) release(pc *piece) {
	p.mu.Lock()
	p.inFlight -= pc.cost
	// Buffers kept and buffers in flight stay within the limit together.
	if c := cap(pc.out); c >= minClass && c&(c-1) == 0 && p.freeBytes+p.inFlight+int64(c) <= p.limit {
		p.free[c] = append(p.free[c], pc.out[:0])
		p.freeBytes += int64(c)
	}
	pc.out = nil
	p.mu.Unlock()
	p.cond.Broadcast()
}

// minClass is the smallest buffer kept for reuse; buffers come in powers
// of two from there, so that pieces of every size reuse memory instead of
// leaving garbage behind (which the collector would let grow).
const minClass = 64 << 10

func (p *pipeline) buffer(n int64) []byte {
	if n < minClass/2 {
		return make([]byte, n)
	}
	c := minClass
	for int64(c) < n {
		c *= 2
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if l := p.free[c]; len(l) > 0 {
		b := l[len(l)-1]
		p.free[c] = l[:len(l)-1]
		p.freeBytes -= int64(c)
		return b[:n]
	}
	return make([]byte, n, c)
}

// stop ends the pipeline and waits for its goroutines.
func (p *pipeline) stop() {
	p.cancel()
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	p.cond.Broadcast()
	for range p.queue { // unblock the feeder
	}
	p.wg.Wait()
}

// next returns the next piece in order, computed; the caller releases it.
func (p *pipeline) next() (*piece, error) {
	select {
	case pc, ok := <-p.queue:
		if !ok {
			if err := p.ctx.Err(); err != nil {
				return nil, err
			}
			return nil, io.ErrUnexpectedEOF
		}
		<-pc.done
		return pc, pc.err
	case <-p.ctx.Done():
		return nil, p.ctx.Err()
	}
}
