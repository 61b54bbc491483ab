package ckpt

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/source"
)

// rangedRequest is one request of a ranged load: spans of one file read
// together, and the pieces of work they complete.
type rangedRequest struct {
	file   string
	spans  []source.Span
	items  []*rangedItem
	stage  int64 // staging bytes its conversions need
	direct bool  // only raw reads: nothing to stage
}

// rangedItem is one piece's read: raw (its bytes are the destination's)
// or a conversion from staged bytes.
type rangedItem struct {
	p       *piece
	off     int64
	n       int64 // stored bytes
	convert bool
	src     []byte // staged bytes of a conversion
	// A piece is read as one item per run of its part's byte ranges
	// (load_part.go): dst is the run's destination, part counts the
	// piece's items still to come.
	dst  []byte
	part *rangedPart
}

// runRanged does the pieces of a load from a RangeFS: raw reads straight
// into their destinations and conversions from staged bytes, neighbouring
// pieces of a file coalesced into one request of up to the source's chunk,
// its concurrency of requests in flight in file order; pieces it cannot
// read that way (dequantization) go through doPiece. Progress is reported
// per piece as in run; the first error or ctx's end stops every request.
func (m *Model) runRanged(ctx context.Context, rfs source.RangeFS, work []piece, phase string) error {
	rc := rfs.RangeConfig()
	conc := max(rc.Concurrency, 1)
	chunk := max(rc.Chunk, 1)
	gap := max(rc.MaxGap, 0)

	var items []*rangedItem
	var other []*piece
	for i := range work {
		p := &work[i]
		if its := partItems(p); its != nil {
			items = append(items, its...)
		} else {
			other = append(other, p)
		}
	}
	// Requests in file order: items sorted by file and offset, coalesced.
	slices.SortStableFunc(items, func(a, b *rangedItem) int {
		return cmp.Or(cmp.Compare(filePath(a.p.st), filePath(b.p.st)), cmp.Compare(a.off, b.off))
	})
	// A raw read that does not fit in the current request is cut at the
	// chunk's end (its destination is contiguous), so that requests are
	// whole chunks as a plain download's are; a conversion needs its
	// source at once and starts a request of its own.
	var reqs []*rangedRequest
	var cur *rangedRequest
	var curStart, curEnd int64
	for _, it := range items {
		file := filePath(it.p.st)
		for {
			if cur == nil || cur.file != file || it.off < curEnd || it.off-curEnd > gap ||
				(it.off+it.n-curStart > chunk && (it.convert || curStart+chunk-it.off < minCut)) {
				cur = &rangedRequest{file: file, direct: true}
				reqs = append(reqs, cur)
				curStart = it.off
			}
			if !it.convert && it.off+it.n-curStart > chunk && curStart+chunk-it.off >= minCut {
				head, tail := it.cut(curStart + chunk - it.off)
				cur.items = append(cur.items, head)
				curEnd = head.off + head.n
				cur = nil
				it = tail
				continue
			}
			break
		}
		curEnd = it.off + it.n
		cur.items = append(cur.items, it)
		if it.convert {
			cur.stage += it.n
			cur.direct = false
		}
	}
	meter := m.newMeter(work, phase)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stage := newByteSem(m.cfg.staging)
	opts := m.cfg.convertOptions()
	opts.Streaming = meter.total >= streamingMin
	fail := func(p *piece, err error) { cancel(readErr(err, p.c.name, p.t.Name)) }
	doRequest := func(r *rangedRequest) bool {
		if !r.direct {
			if !stage.acquire(ctx, r.stage) {
				return false
			}
			defer stage.release(r.stage)
		}
		spans := r.spans[:0]
		var staged *[]byte
		if !r.direct {
			staged = getStaging(r.stage)
			defer stagingPool.Put(staged)
		}
		var at int64
		for _, it := range r.items {
			dst := it.dst
			if it.convert {
				it.src = (*staged)[at : at+it.n : at+it.n]
				at += it.n
				dst = it.src
			}
			spans = append(spans, source.Span{Off: it.off, Dst: dst})
		}
		r.spans = spans
		if err := rfs.ReadRanges(ctx, r.file, spans); err != nil {
			fail(r.items[0].p, err)
			return false
		}
		for _, it := range r.items {
			if ck := it.p.sj.ck; ck != nil {
				b := it.dst
				if it.convert {
					b = it.src
				}
				if err := ck.add(it.off-it.p.st.Offset(), b); err != nil {
					fail(it.p, err)
					return false
				}
			}
			var st dtype.Stats
			if it.convert {
				var err error
				st, err = dtype.Convert(it.dst, it.p.e.out, it.src, it.p.st.DType(), opts)
				it.src = nil
				if err != nil {
					fail(it.p, err)
					return false
				}
			}
			if st, last := it.part.done(st); last {
				meter.finish(it.p, st)
			}
		}
		return true
	}

	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(conc, max(len(reqs), 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= int64(len(reqs)) {
					return
				}
				if !doRequest(reqs[i]) {
					return
				}
			}
		}()
	}
	wg.Wait()
	// What ranged reads cannot do (dequantization) uses the file's ReadAt,
	// on the model's workers.
	if context.Cause(ctx) == nil && len(other) > 0 {
		var nextOther atomic.Int64
		for range min(max(m.workers(), 1), len(other)) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					i := nextOther.Add(1) - 1
					if i >= int64(len(other)) {
						return
					}
					st, err := m.doPiece(ctx, other[i], opts)
					if err != nil {
						fail(other[i], err)
						return
					}
					meter.finish(other[i], st)
				}
			}()
		}
		wg.Wait()
	}
	meter.flush()
	return context.Cause(ctx)
}

// minCut is the smallest part a raw read is cut into at a request's end:
// below it, the read starts the next request instead.
const minCut = 64 << 10

// cut splits a raw item into its first k bytes and the rest, both counted
// as items of the piece (which is finished when its last item arrives).
func (it *rangedItem) cut(k int64) (head, tail *rangedItem) {
	t := it.dst
	part := it.part
	part.left++
	head = &rangedItem{p: it.p, off: it.off, n: k, dst: t[:k:k], part: part}
	tail = &rangedItem{p: it.p, off: it.off + k, n: it.n - k, dst: t[k:], part: part}
	return head, tail
}

// stagingPool holds the staging buffers of conversions read by requests.
var stagingPool sync.Pool

// getStaging returns a buffer of n bytes from stagingPool.
func getStaging(n int64) *[]byte {
	if b, ok := stagingPool.Get().(*[]byte); ok && int64(cap(*b)) >= n {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n)
	return &b
}

// byteSem bounds the bytes held at once (a request larger than the bound
// waits until it is alone).
type byteSem struct {
	mu    sync.Mutex
	cond  *sync.Cond
	limit int64
	used  int64
}

func newByteSem(limit int64) *byteSem {
	s := &byteSem{limit: limit}
	s.cond = sync.NewCond(&s.mu)
	return s
}

// acquire takes n bytes, waiting while they do not fit; false when ctx
// ended first.
func (s *byteSem) acquire(ctx context.Context, n int64) bool {
	stop := context.AfterFunc(ctx, func() {
		s.mu.Lock()
		s.cond.Broadcast()
		s.mu.Unlock()
	})
	defer stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.used > 0 && s.used+n > s.limit {
		if ctx.Err() != nil {
			return false
		}
		s.cond.Wait()
	}
	if ctx.Err() != nil {
		return false
	}
	s.used += n
	return true
}

func (s *byteSem) release(n int64) {
	s.mu.Lock()
	s.used -= n
	s.cond.Broadcast()
	s.mu.Unlock()
}
