package ckpt

import (
	"context"
	"slices"
	"sync"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/crc32c"
	"github.com/ckpt-go/ckpt/internal/pagecache"
	"github.com/ckpt-go/ckpt/safetensors"
)

// Loading a part: every tensor is loaded as a part of itself (the whole
// tensor, or this rank's part of a split one), read as the byte ranges that
// hold it and produced piece by piece.

type partKind uint8

const (
	partRaw     partKind = iota // bytes of a selection into dst
	partPlain                   // a plain tensor's elements, converted when its target differs
	partDequant                 // rows of a dequantized weight
	partCheck                   // bytes read only to verify them: a view's, the rest of a part's tensor
	partSmall                   // small tensors converted whole from the mapping, one after the other (a batch)
)

// partJob is what the pieces of one part share.
type partJob struct {
	kind    partKind
	st      storedTensor // the stored (data) tensor
	sel     strided      // partRaw: the bytes of st read
	convert bool         // partPlain: converted (else copied)
	evict   bool         // drop the source pages from this process after reading
	mapped  bool         // read from the mapping (mmap strategy, mapped file), else ReadAt
	dq      *dequantJob  // partDequant
	ck      *tensorCheck // verifies st from the bytes read (nil: not verified)
	rest    bool         // partCheck: the rest of a part's tensor, read only to verify it
	// partSmall: the tensors of the batch (consecutive in the load's
	// tensors) and their entries (consecutive in their component's).
	ts []Tensor
	es []*entry
}

// dequantJob is what the pieces of a dequantized part share: the scales'
// stored tensors, those read once for the whole part (not per piece), and
// from a mapping, views of the data and the scales.
type dequantJob struct {
	scaleT  []storedTensor
	scaleCk []*tensorCheck // verify the scales (nil: not verified)
	once    sync.Once
	shared  [][]byte
	err     error

	viewOnce sync.Once
	views    [][]byte
	viewErr  error
}

// checkRun appends pieces of chunkBytes that read the bytes [lo, hi) of
// st only to verify them (ck), from the mapping when mapped: a view's
// (kept), or the rest of a part's tensor (rest: dropped again from a
// mapping).
func (pp *prep) checkRun(c *modelComponent, e *entry, t *Tensor, st storedTensor, ck *tensorCheck, lo, hi int64, mapped, rest bool) {
	sj := pp.job(partJob{kind: partCheck, st: st, ck: ck, mapped: mapped, evict: rest && mapped, rest: rest})
	for first := lo; first < hi; first += chunkBytes {
		pp.work = append(pp.work, piece{c: c, e: e, t: t, st: st, first: first, n: min(chunkBytes, hi-first), sj: sj})
	}
}

// preparePart assigns the memory of e's part (t) and appends its pieces of
// work: views of the mapping where the part is stored contiguously and
// loads as stored, else reads, conversions or dequantizations of about
// chunkBytes each. Each stored tensor the part reads gets its check
// (verify.go): the reads add to it, views get a pass over the mapping
// (or are verified as they are read, onread.go), and a part that
// verifies the rest of its tensor gets pieces that read it.
func (m *Model) preparePart(c *modelComponent, e *entry, t *Tensor, st storedTensor, scales []storedTensor, pp *prep) error {
	sl := e.sl
	if sl.info != nil {
		info := *sl.info
		info.Shape = slices.Clone(info.Shape)
		t.Split = &info
	}
	pread := c.strategy == readPread
	checkRun := func(t *Tensor, st storedTensor, ck *tensorCheck, lo, hi int64, rest bool) {
		pp.checkRun(c, e, t, st, ck, lo, hi, !pread && mappedFile(st) != nil, rest)
	}
	// check returns the check of the part sel of st (nil when it is not
	// verified) and appends the pieces that read the rest of the tensor
	// when the check needs them.
	// A PyTorch view's check reads its storage record (checkRecord): the
	// part's own reads, not the record's bytes, get no check.
	check := func(t *Tensor, st storedTensor, sel strided) (*tensorCheck, error) {
		ck, err := m.newCheck(st, sel)
		if ck != nil && ck.kind == checkRest {
			for _, r := range restRanges(sel, ck.size) {
				checkRun(t, st, ck, r[0], r[1], true)
			}
		}
		if ck != nil && ck.kind == checkRecord {
			checkRun(t, st, ck, 0, ck.size, true)
			return nil, nil
		}
		return ck, err
	}
	view := func(t *Tensor, st storedTensor, sel strided) ([]byte, error) {
		b, err := st.Bytes()
		if err != nil {
			return nil, &Error{Kind: ErrRead, Component: c.name, Tensor: e.name, Err: err}
		}
		if h := m.cfg.onRead; h != nil {
			h(st, sel.first, sel.total())
		}
		ck, err := check(t, st, sel)
		if err != nil {
			return nil, err
		}
		switch {
		case ck != nil && m.onRead(ck.kind):
			t.pending = &onReadCheck{m: m, c: c, e: e, st: st} // verified as it is read (onread.go)
		case ck != nil:
			checkRun(t, st, ck, sel.first, sel.first+sel.total(), false)
		}
		end := sel.first + sel.total()
		return b[sel.first:end:end], nil
	}
	// raw appends pieces that read a selection of st into dst.
	raw := func(t *Tensor, st storedTensor, sel strided, dst []byte) error {
		ck, err := check(t, st, sel)
		if err != nil {
			return err
		}
		sj := pp.job(partJob{kind: partRaw, st: st, sel: sel, mapped: !pread && mappedFile(st) != nil, ck: ck})
		total := sel.total()
		for first := int64(0); first < total; first += chunkBytes {
			n := min(chunkBytes, total-first)
			pp.work = append(pp.work, piece{c: c, e: e, t: t, st: st, first: first, n: n, dst: dst[first : first+n], bytes: n, sj: sj})
		}
		return nil
	}
	mapped := mappedFile(st) != nil
	act := e.act
	if pp.intoCaller && act == ActionView {
		act = ActionRead // the caller's buffer: read instead of viewing
	}
	t.act = act
	switch act {
	case ActionView:
		if mapped {
			b, err := view(t, st, sl.data)
			t.data = b
			return err
		}
		t.data = make([]byte, sl.data.total())
		return raw(t, st, sl.data, t.data)
	case ActionRead, ActionConvert:
		t.data = pp.alloc(e.outBytes)
		t.Location.Owned = true
		ck, err := check(t, st, sl.data)
		if err != nil {
			return err
		}
		if act == ActionConvert && mapped && !pread && sl.whole && ck == nil && e.outBytes <= smallMax && pp.small(c, e, st) {
			return nil
		}
		sj := pp.job(partJob{kind: partPlain, st: st, convert: act == ActionConvert, evict: act == ActionConvert && mapped, mapped: !pread && mapped, ck: ck})
		fb, ob := int64(e.stored.Bits()), int64(e.out.Bits())
		per := max(chunkBytes*8/max(fb, ob)/8*8, 8)
		n := sl.elems.total()
		for first := int64(0); first < n; first += per {
			cnt := min(per, n-first)
			d0, d1 := first*ob/8, (first+cnt)*ob/8
			pp.work = append(pp.work, piece{c: c, e: e, t: t, st: st, first: first, n: cnt, dst: t.data[d0:d1], bytes: d1 - d0, sj: sj})
		}
	case ActionDequantize:
		t.data = pp.alloc(e.outBytes)
		t.Location.Owned = true
		q := sl.q
		dq := &dequantJob{scaleT: scales}
		ck, err := check(t, st, sl.data)
		if err != nil {
			return err
		}
		for i, sst := range scales {
			sck, err := check(t, sst, q.scales[i].sel)
			if err != nil {
				return err
			}
			if sck != nil && dq.scaleCk == nil {
				dq.scaleCk = make([]*tensorCheck, len(scales))
			}
			if sck != nil {
				dq.scaleCk[i] = sck
			}
		}
		sj := pp.job(partJob{kind: partDequant, st: st, evict: mapped, mapped: !pread && mapped, dq: dq, ck: ck})
		outRow := (q.c1 - q.c0) * int64(e.out.Bits()) / 8
		rows := q.pad + q.rows.total()
		if q.c1 == q.c0 {
			rows = 0
		}
		per := q.pieceRows(e.out)
		for p0 := int64(0); p0 < rows; p0 += per {
			p1 := min(rows, p0+per)
			r0 := max(p0, q.pad)
			dst := t.data[(r0-q.pad)*outRow : (p1-q.pad)*outRow]
			pp.work = append(pp.work, piece{c: c, e: e, t: t, st: st, first: p0, n: p1 - p0, dst: dst, bytes: int64(len(dst)), sj: sj})
		}
	case ActionQuantized:
		q := sl.q
		t.q = q.keep
		var err error
		switch {
		case !pread && !pp.intoCaller && mapped && sl.data.isContiguous():
			t.data, err = view(t, st, sl.data)
		case !pread && !pp.intoCaller && sl.data.isContiguous():
			// Planned as mapped, but the file has no mapping: a copy.
			t.data = make([]byte, sl.data.total())
			err = raw(t, st, sl.data, t.data)
		default:
			t.data = pp.alloc(sl.data.total())
			t.Location.Owned = true
			err = raw(t, st, sl.data, t.data)
		}
		if err != nil {
			return err
		}
		for i, s := range e.q.Scales {
			sst, qs := scales[i], q.scales[i]
			sc := &Tensor{Component: c.name, Name: s.Name, DType: s.DType, Shape: slices.Clone(qs.shape), Stored: s.DType,
				Decision: e.dec, Role: s.Role, act: ActionView,
				Location: Location{File: filePath(sst), Offset: sst.Offset(), Length: sst.ByteLen()}}
			switch {
			case !pread && qs.sel.isContiguous() && mappedFile(sst) != nil:
				sc.data, err = view(sc, sst, qs.sel)
			case !pread && qs.sel.isContiguous():
				sc.data = make([]byte, qs.sel.total())
				err = raw(sc, sst, qs.sel, sc.data)
			default:
				sc.act, sc.Location.Owned = ActionRead, true
				sc.data = pp.alloc(qs.sel.total())
				err = raw(sc, sst, qs.sel, sc.data)
			}
			if err != nil {
				return err
			}
			t.Scales = append(t.Scales, sc)
		}
	}
	return nil
}

// directRun is the run length from which a part is converted straight
// from the mapping, run by run; shorter runs (the rows of a split of
// dimension 1) are first gathered into a staging buffer and converted in
// one call, as a conversion call costs about as much as a few KiB of
// copying.
const directRun = 64 << 10

// stagePool holds the buffers that converting reads of parts read into.
var stagePool sync.Pool

// doPartPiece does one piece of a part.
func (m *Model) doPartPiece(ctx context.Context, p *piece, opts dtype.Options) (dtype.Stats, error) {
	sj, e := p.sj, p.e
	switch sj.kind {
	case partRaw:
		return dtype.Stats{}, m.readSel(ctx, sj, sj.st, sj.sel, p.first, p.dst, nil, sj.ck)
	case partCheck:
		return dtype.Stats{}, m.checkPiece(ctx, p)
	case partSmall:
		return dtype.Stats{}, m.smallPiece(ctx, p, opts)
	case partPlain:
		fb, ob := int64(e.stored.Bits()), int64(e.out.Bits())
		from, n := p.first*fb/8, p.n*fb/8
		if !sj.convert {
			return dtype.Stats{}, m.readSel(ctx, sj, sj.st, e.sl.data, from, p.dst, nil, sj.ck)
		}
		var stats dtype.Stats
		if sj.mapped && (e.sl.data.n >= directRun || e.sl.data.isContiguous()) {
			// Long runs, and a part stored in one run, are converted
			// straight from the mapping.
			// Verified, each run is summed by the conversion as it reads
			// it (dtype.ConvertSum).
			err := m.mappedSel(ctx, sj.st, e.sl.data, from, from+n, p.evicting(), sj.ck, true, func(src []byte, pos int64, crc *uint32) error {
				d0 := (pos - from) * 8 / fb * ob / 8
				dst := p.dst[d0 : d0+int64(len(src))*8/fb*ob/8]
				if crc == nil {
					st, err := dtype.Convert(dst, e.out, src, e.stored, opts)
					stats.Add(st)
					return err
				}
				st, sum, err := dtype.ConvertSum(dst, e.out, src, e.stored, opts, *crc)
				stats.Add(st)
				*crc = sum
				return err
			})
			return stats, err
		}
		bp, _ := stagePool.Get().(*[]byte)
		if bp == nil || int64(cap(*bp)) < n {
			b := make([]byte, n)
			bp = &b
		}
		defer stagePool.Put(bp)
		buf := (*bp)[:n]
		if sj.ck != nil && !sj.mapped && m.src.IsOS() {
			// Verified, read with pread from a file of the OS: read, sum
			// and convert a step at a time, each step from the cache its
			// read wrote (a mapping's short runs are summed a step at a
			// time by mappedSel).
			var stats dtype.Stats
			for k := int64(0); k < n; k += crc32c.Step {
				k1 := min(n, k+crc32c.Step)
				if err := m.readSel(ctx, sj, sj.st, e.sl.data, from+k, buf[k:k1], p.evicting(), sj.ck); err != nil {
					return stats, err
				}
				st, err := dtype.Convert(p.dst[k*8/fb*ob/8:k1*8/fb*ob/8], e.out, buf[k:k1], e.stored, opts)
				stats.Add(st)
				if err != nil {
					return stats, err
				}
			}
			return stats, nil
		}
		if err := m.readSel(ctx, sj, sj.st, e.sl.data, from, buf, p.evicting(), sj.ck); err != nil {
			return dtype.Stats{}, err
		}
		return dtype.Convert(p.dst, e.out, buf, e.stored, opts)
	}
	return m.dequantPart(ctx, p, opts)
}

// smallMax is the largest output of a tensor that a load converts in a
// batch of small tensors (prep.small): converting one costs about as much
// as a piece of work's own bookkeeping.
const smallMax = 64 << 10

// smallBatch is the most tensors of one batch of small tensors.
const smallBatch = 1024

// small adds e, a tensor whose output is at most smallMax bytes, converted
// whole from the mapping of st's file and not verified, to the batch that
// the last piece of work is, or starts a batch with it. It reports false,
// adding nothing, where a load does not batch (prep.store is nil: a single
// tensor, or a source read with ranged requests).
func (pp *prep) small(c *modelComponent, e *entry, st storedTensor) bool {
	if pp.store == nil {
		return false
	}
	if n := len(pp.work); n > 0 {
		p := &pp.work[n-1]
		sj := p.sj
		if sj.kind == partSmall && p.c == c && mappedFile(sj.st) == mappedFile(st) && len(sj.ts) < smallBatch &&
			p.bytes+e.outBytes <= chunkBytes && e.pos == sj.es[0].pos+len(sj.es) {
			k := len(sj.es) + 1
			sj.ts = pp.store[sj.es[0].pos : sj.es[0].pos+k]
			sj.es = c.entries[sj.es[0].pos-c.entries[0].pos:][:k]
			p.n++
			p.bytes += e.outBytes
			return true
		}
	}
	sj := pp.job(partJob{kind: partSmall, st: st, evict: true, mapped: true,
		ts: pp.store[e.pos : e.pos+1], es: c.entries[e.pos-c.entries[0].pos:][:1]})
	pp.work = append(pp.work, piece{c: c, e: e, t: &sj.ts[0], st: st, n: 1, bytes: e.outBytes, sj: sj})
	return true
}

// smallPiece converts a batch of small tensors whole from the mapping,
// under one fault protection, each into its own output, and records the
// source bytes they span for the load to drop (evictor). Each tensor gets
// its own statistics; the piece reports none.
func (m *Model) smallPiece(ctx context.Context, p *piece, opts dtype.Options) error {
	sj := p.sj
	if err := ctx.Err(); err != nil {
		return err
	}
	k := 0
	err := protectFault(func() error {
		for ; k < len(sj.ts); k++ {
			t, e := &sj.ts[k], sj.es[k]
			st := e.loaded() // looked up when the load was prepared
			src, err := st.Bytes()
			if err != nil {
				return err
			}
			if h := m.cfg.onRead; h != nil {
				h(st, 0, int64(len(src)))
			}
			if t.Stats, err = dtype.Convert(t.data, e.out, src, e.stored, opts); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return readErr(err, p.c.name, sj.ts[min(k, len(sj.ts)-1)].Name)
	}
	first, last := sj.es[0].loaded(), sj.es[len(sj.es)-1].loaded()
	_, p.evFile = fileOf(first)
	p.evOff, p.evEnd = first.Offset(), last.Offset()+last.ByteLen()
	return nil
}

// checkPiece reads the bytes [p.first, p.first+p.n) of a tensor only to
// verify them: from the mapping (dropping the pages of the rest of a
// part's tensor again), or with ReadAt into a staging buffer.
func (m *Model) checkPiece(ctx context.Context, p *piece) error {
	sj := p.sj
	lo, hi := p.first, p.first+p.n
	if err := ctx.Err(); err != nil {
		return err
	}
	if h := m.cfg.onRead; h != nil && sj.rest {
		h(sj.st, lo, p.n)
	}
	if sj.mapped {
		view, err := sj.st.Bytes()
		if err != nil {
			return err
		}
		if !sj.rest {
			pagecache.Populate(view[lo:hi:hi], false) // a view's pages, which the load hands out: in one call, not a fault each few pages
		}
		err = protectFault(func() error { return sj.ck.add(lo, view[lo:hi:hi]) })
		if sj.evict && err == nil {
			p.evict(sj.st, lo, hi)
		}
		return err
	}
	bp, _ := stagePool.Get().(*[]byte)
	if bp == nil || int64(cap(*bp)) < p.n {
		b := make([]byte, p.n)
		bp = &b
	}
	defer stagePool.Put(bp)
	buf := (*bp)[:p.n]
	if _, err := sj.ck.of.ReadAt(buf, lo); err != nil { // the tensor's bytes, or a view's storage record's
		return err
	}
	return sj.ck.add(lo, buf)
}

// readSel reads the compact bytes [from, from+len(dst)) of a selection of
// st's bytes into dst: copied from the mapping when the load reads mapped
// files, else with one ReadAt per run. ck, when not nil, gets the bytes
// read.
func (m *Model) readSel(ctx context.Context, sj *partJob, st storedTensor, sel strided, from int64, dst []byte, ev *piece, ck *tensorCheck) error {
	if sj.mapped && mappedFile(st) != nil {
		return m.mappedSel(ctx, st, sel, from, from+int64(len(dst)), ev, ck, false, func(src []byte, pos int64, crc *uint32) error {
			copy(dst[pos-from:], src)
			if crc != nil {
				*crc = safetensors.UpdateChecksum(*crc, dst[pos-from:pos-from+int64(len(src))]) // from the cache the copy wrote
			}
			return nil
		})
	}
	return sel.segments(from, from+int64(len(dst)), func(src, pos, n int64) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if h := m.cfg.onRead; h != nil {
			h(st, src, n)
		}
		b := dst[pos-from : pos-from+n]
		if ck == nil {
			_, err := st.ReadAt(b, src)
			return err
		}
		// From a file of the OS a step at a time, each one summed from
		// the cache its read wrote (other sources: one read, fewer calls).
		step := n
		if m.src.IsOS() {
			step = crc32c.Step
		}
		var crc uint32
		for k := int64(0); k < n; k += step {
			k1 := min(n, k+step)
			if _, err := st.ReadAt(b[k:k1], src+k); err != nil {
				return err
			}
			crc = ck.update(crc, b[k:k1])
		}
		return ck.addSummed(src, b, crc, true)
	})
}

// mappedSel calls fn with the mapped bytes of each run of the compact
// bytes [from, to) of a selection of st, under one fault protection, and
// then, when ev is not nil, records there the bytes the runs span for the
// load to drop from this process (evictor). With a check, fn also adds
// the bytes it reads to the run's CRC at crc (not nil then; as
// safetensors.UpdateChecksum): it is handed crc32c.Step bytes at a time, so
// that it sums them from the cache it read them into, unless it sums them
// as it reads them (fuses: a conversion, dtype.ConvertSum), which takes
// whole runs.
func (m *Model) mappedSel(ctx context.Context, st storedTensor, sel strided, from, to int64, ev *piece, ck *tensorCheck, fuses bool, fn func(src []byte, pos int64, crc *uint32) error) error {
	view, err := st.Bytes()
	if err != nil {
		return err
	}
	step := int64(crc32c.Step)
	if fuses {
		step = max(to-from, 1)
	}
	lo, hi := int64(-1), int64(0)
	err = protectFault(func() error {
		return sel.segments(from, to, func(src, pos, n int64) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			if h := m.cfg.onRead; h != nil {
				h(st, src, n)
			}
			if lo < 0 {
				lo = src
			}
			hi = src + n
			if ck == nil {
				return fn(view[src:src+n:src+n], pos, nil)
			}
			var crc uint32
			for k := int64(0); k < n; k += step {
				s0, s1 := src+k, src+min(n, k+step)
				if err := fn(view[s0:s1:s1], pos+k, &crc); err != nil {
					return err
				}
			}
			return ck.addSummed(src, view[src:src+n:src+n], crc, true)
		})
	})
	if ev != nil && lo >= 0 {
		ev.evict(st, lo, hi)
	}
	return err
}

// dequantPart dequantizes the rows [p.first, p.first+p.n) of a part (in
// rows of the part, counting its pad): it reads those data rows and the
// scale rows they use, and dequantizes them as a weight of their own.
func (m *Model) dequantPart(ctx context.Context, p *piece, opts dtype.Options) (dtype.Stats, error) {
	sj, e := p.sj, p.e
	dq := sj.dq
	q := e.sl.q
	p0, p1 := p.first, p.first+p.n
	if views, ok, err := m.partViews(sj, e); err != nil || ok {
		if err != nil {
			return dtype.Stats{}, err
		}
		// The part is a weight of its own stored contiguously in the
		// mapping (a whole weight, a part of whole scale blocks): its rows
		// are dequantized straight from the views.
		if h := m.cfg.onRead; h != nil {
			h(sj.st, e.sl.data.first+p0*q.colB, p.n*q.colB)
		}
		var st dtype.Stats
		err := protectFault(func() (err error) {
			if sj.ck != nil {
				if err := sj.ck.add(e.sl.data.first+p0*q.colB, views[0][p0*q.colB:p1*q.colB]); err != nil {
					return err
				}
			}
			st, err = q.keep.DequantizeRows(ctx, p.dst, e.out, views[0], views[1:], p0, p.n, opts)
			return err
		})
		if sj.evict && err == nil {
			lo := e.sl.data.first + p0*q.colB
			p.evict(sj.st, lo, lo+p.n*q.colB)
		}
		return st, err
	}
	r0 := max(p0, q.pad)
	data := make([]byte, (p1-p0)*q.colB)
	if err := m.readSel(ctx, sj, sj.st, e.sl.data, (r0-q.pad)*q.colB, data[(r0-p0)*q.colB:], p.evicting(), sj.ck); err != nil {
		return dtype.Stats{}, err
	}
	dq.once.Do(func() {
		dq.shared = make([][]byte, len(q.scales))
		for i, qs := range q.scales {
			if qs.perRow {
				continue
			}
			b := make([]byte, qs.sel.total())
			if dq.err = m.readSel(ctx, sj, dq.scaleT[i], qs.sel, 0, b, nil, dq.scaleCheck(i)); dq.err != nil {
				return
			}
			dq.shared[i] = b
		}
	})
	if dq.err != nil {
		return dtype.Stats{}, dq.err
	}
	w := *e.q
	w.Shape = []int64{p1 - p0, q.c1 - q.c0}
	w.Scales = slices.Clone(e.q.Scales)
	scales := make([][]byte, len(q.scales))
	for i, qs := range q.scales {
		if !qs.perRow {
			scales[i] = dq.shared[i]
			w.Scales[i].Shape = qs.shape
			continue
		}
		g0, g1 := p0/qs.br, ceilDiv(p1, qs.br)
		b := make([]byte, (g1-g0)*qs.gC*qs.sb)
		if err := m.readSel(ctx, sj, dq.scaleT[i], qs.sel, g0*qs.gC*qs.sb, b, nil, dq.scaleCheck(i)); err != nil {
			return dtype.Stats{}, err
		}
		scales[i] = b
		w.Scales[i].Shape = []int64{g1 - g0, qs.gC}
	}
	return w.DequantizeRows(ctx, p.dst, e.out, data, scales, r0-p0, p1-r0, opts)
}

// scaleCheck returns the check of scale i (nil: not verified).
func (dq *dequantJob) scaleCheck(i int) *tensorCheck {
	if dq.scaleCk == nil {
		return nil
	}
	return dq.scaleCk[i]
}

// partViews returns the views of a quantized part's data and scales (in
// that order) when the part is a weight of its own (its layout is known)
// whose bytes are contiguous runs of mapped files read from the mapping;
// ok is false otherwise.
func (m *Model) partViews(sj *partJob, e *entry) (views [][]byte, ok bool, err error) {
	q, dq := e.sl.q, sj.dq
	if !sj.mapped || !e.sl.weightRuns() {
		return nil, false, nil
	}
	for _, st := range dq.scaleT {
		if mappedFile(st) == nil {
			return nil, false, nil
		}
	}
	dq.viewOnce.Do(func() {
		view := func(st storedTensor, sel strided) []byte {
			b, err := st.Bytes()
			if err != nil {
				dq.viewErr = err
				return nil
			}
			end := sel.first + sel.total()
			return b[sel.first:end:end]
		}
		dq.views = append(dq.views, view(sj.st, e.sl.data))
		for i, qs := range q.scales {
			v := view(dq.scaleT[i], qs.sel)
			dq.views = append(dq.views, v)
			if h := m.cfg.onRead; h != nil {
				h(dq.scaleT[i], qs.sel.first, qs.sel.total())
			}
			if ck := dq.scaleCheck(i); ck != nil && dq.viewErr == nil {
				dq.viewErr = protectFault(func() error { return ck.add(qs.sel.first, v) })
			}
		}
	})
	return dq.views, dq.viewErr == nil, dq.viewErr
}

// rangedPart gathers the items of one piece of a part read from a source.RangeFS.
type rangedPart struct {
	mu    sync.Mutex
	left  int
	stats dtype.Stats
}

// done records one item's stats; last reports that the piece is complete
// (with all its items' stats).
func (r *rangedPart) done(st dtype.Stats) (dtype.Stats, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stats.Add(st)
	r.left--
	return r.stats, r.left == 0
}

// partItems turns a piece of a part into ranged-read items, one
// per run of its byte ranges (raw reads straight into the destination,
// conversions run by run); nil for pieces that need the whole rows of a
// quantized weight (dequantization), and for a PyTorch tensor (whose bytes
// may be gathered or byte-swapped), which read through the tensor's ReadAt.
func partItems(p *piece) []*rangedItem {
	sj, e := p.sj, p.e
	if _, f := fileOf(p.st); f == nil {
		return nil
	}
	var sel strided
	var from, n int64
	convert := false
	fb, ob := int64(e.stored.Bits()), int64(e.out.Bits())
	switch sj.kind {
	case partRaw:
		sel, from, n = sj.sel, p.first, int64(len(p.dst))
		fb, ob = 8, 8
	case partPlain:
		sel, from, n = e.sl.data, p.first*fb/8, p.n*fb/8
		convert = sj.convert
		if !convert {
			fb, ob = 8, 8
		}
	default:
		return nil
	}
	part := &rangedPart{}
	var items []*rangedItem
	base := p.st.Offset()
	_ = sel.segments(from, from+n, func(src, pos, cnt int64) error {
		d0, d1 := (pos-from)*8/fb*ob/8, (pos-from+cnt)*8/fb*ob/8
		items = append(items, &rangedItem{p: p, off: base + src, n: cnt, convert: convert, dst: p.dst[d0:d1:d1], part: part})
		return nil
	})
	if len(items) == 0 {
		return nil
	}
	part.left = len(items)
	return items
}
