package integrity

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/ckpt-go/ckpt/internal/crc32c"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/source"
)

// localPiece is the most bytes of a tensor one job checks in a local file
// (or an fs.FS file read through its ReadAt), and localRead the most it
// reads at once: jobs large enough that combining their CRCs costs
// nothing, small enough that tensors of a few pieces spread over the
// workers; reads small enough that the bytes a read copies are still in
// the core's cache when the CRC reads them. From a source.RangeFS a job
// is one request of its RangeConfig's Chunk.
const (
	localPiece = 16 << 20
	localRead  = 256 << 10
)

// check reads the data of every file that has checksums or is a hub blob
// and checks it: tensors in pieces, spread over the workers (each with one
// reused buffer), a piece's CRC combined with the others' of its tensor;
// hub blobs in order, hashed whole, their tensors' CRCs (a PyTorch blob:
// its records' CRC-32s) taken on the way. PyTorch files come last, one at
// a time, their records spread over the workers (checkTorch), those of
// hub blobs checked from the sums the hashing pass took.
func (v *verifier) check() error {
	var rfs source.RangeFS
	if fsys := v.src.FS(); fsys != nil {
		rfs, _ = fsys.(source.RangeFS)
	}
	workers, piece, read := runtime.GOMAXPROCS(0), int64(localPiece), int64(localRead)
	if rfs != nil {
		rc := rfs.RangeConfig()
		workers, piece = max(rc.Concurrency, 1), min(max(rc.Chunk, 1<<20), 64<<20)
		read = piece
	}
	if v.cfg.workers > 0 {
		workers = v.cfg.workers
	}
	if v.cfg.piece > 0 {
		piece, read = v.cfg.piece, min(v.cfg.read, v.cfg.piece)
	}
	if err := v.checkData(rfs, workers, piece, read); err != nil {
		return err
	}
	return v.checkTorch(workers, read)
}

// checkData checks the files with checksums and the hub blobs (see
// check).
func (v *verifier) checkData(rfs source.RangeFS, workers int, piece, read int64) error {
	var runs []*fileRun
	var largest int64
	for _, fc := range v.files {
		seq := fc.blob != nil || (fc.seqOnly && fc.sums != nil)
		if !seq && (fc.sums == nil || fc.hdr == nil) {
			continue
		}
		r := &fileRun{v: v, fc: fc, seq: seq, rfs: rfs}
		runs = append(runs, r)
		largest = max(largest, fc.size)
	}
	if len(runs) == 0 {
		return v.ctx.Err()
	}
	slices.SortFunc(runs, func(a, b *fileRun) int { return strings.Compare(a.fc.display, b.fc.display) })
	read = min(read, max(largest, 1))

	ctx, cancel := context.WithCancel(v.ctx)
	defer cancel()
	jobs := make(chan func(context.Context, []byte), workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf []byte
			for job := range jobs {
				if ctx.Err() != nil {
					continue
				}
				if buf == nil {
					buf = make([]byte, read)
				}
				job(ctx, buf)
			}
		}()
	}
	send := func(job func(context.Context, []byte)) bool {
		select {
		case jobs <- job:
			return true
		case <-ctx.Done():
			return false
		}
	}
produce:
	for _, r := range runs {
		for _, job := range r.jobs(piece) {
			if !send(job) {
				break produce
			}
		}
	}
	close(jobs)
	wg.Wait()
	for _, r := range runs { // those whose jobs did not all run (canceled)
		r.closeReader()
	}
	return v.ctx.Err()
}

// reader reads the data of one file.
type reader interface {
	// readAt fills p with the bytes at off.
	readAt(ctx context.Context, p []byte, off int64) error
	close()
}

// fileRun is the data check of one file: its jobs, the reader they share
// (opened by the first, closed by the last), and whether one failed.
type fileRun struct {
	v   *verifier
	fc  *fileCheck
	seq bool // one job reads the whole file in order
	rfs source.RangeFS

	once   sync.Once
	rd     reader
	rdErr  error
	closed sync.Once
	left   atomic.Int64 // jobs not finished
	failed atomic.Bool  // a read failed: the other jobs stop
}

// jobs returns the file's jobs: one that reads it in order, or one per
// piece of its data section, each checking the parts of the tensors it
// covers (several small tensors, or a part of a large one).
func (r *fileRun) jobs(piece int64) []func(context.Context, []byte) {
	fc := r.fc
	if r.seq {
		r.left.Store(1)
		return []func(context.Context, []byte){r.sequential}
	}
	h := fc.hdr
	runs := make([]*tensorRun, len(h.Tensors)) // nil: not checked (cut, or empty)
	for i := range h.Tensors {
		t := &h.Tensors[i]
		b, e := h.DataOffset+t.Begin, h.DataOffset+t.End
		if e > fc.size {
			continue // cut: reported as truncated
		}
		tr := &tensorRun{r: r, t: t, want: fc.sums[t.Name]}
		if e == b {
			tr.finish(0)
			continue
		}
		tr.first = t.Begin / piece
		n := (t.End-1)/piece - tr.first + 1
		tr.parts, tr.lens = make([]uint32, n), make([]int64, n)
		tr.left.Store(int32(n))
		runs[i] = tr
	}
	var jobs []func(context.Context, []byte)
	end := min(dataEnd(h), fc.size)
	ti := 0 // the first tensor that ends after the piece's start
	for s := h.DataOffset; s < end; s += piece {
		for ti < len(h.Tensors) && h.DataOffset+h.Tensors[ti].End <= s {
			ti++
		}
		k, n, first := (s-h.DataOffset)/piece, min(piece, end-s), ti
		jobs = append(jobs, func(ctx context.Context, buf []byte) { r.piece(ctx, buf, k, s, n, first, runs) })
	}
	r.left.Store(int64(len(jobs)))
	return jobs
}

// piece reads the n bytes of piece k of the data section, at file offset
// s, in reads of len(buf) bytes, and gives each tensor that overlaps it,
// from the tensor ti on, the CRC of its part.
func (r *fileRun) piece(ctx context.Context, buf []byte, k, s, n int64, ti int, runs []*tensorRun) {
	defer r.done()
	if r.failed.Load() {
		return
	}
	rd, err := r.reader()
	if err != nil {
		r.fail(&Range{s, s + n}, err)
		return
	}
	h := r.fc.hdr
	var crc uint32
	begin := s // where the current tensor's part begins
	for o := s; o < s+n; {
		m := min(int64(len(buf)), s+n-o)
		if err := rd.readAt(ctx, buf[:m], o); err != nil {
			r.fail(&Range{s, s + n}, err)
			return
		}
		for p := o; p < o+m && ti < len(h.Tensors); {
			te := h.DataOffset + h.Tensors[ti].End
			if te <= p {
				ti++
				continue
			}
			hi := min(te, o+m)
			crc = safetensors.UpdateChecksum(crc, buf[p-o:hi-o])
			p = hi
			if hi == te || hi == s+n {
				if tr := runs[ti]; tr != nil {
					tr.part(k, crc, hi-begin)
				}
				crc, begin = 0, hi
			}
		}
		o += m
	}
}

// reader opens the file's reader once.
func (r *fileRun) reader() (reader, error) {
	r.once.Do(func() {
		fc := r.fc
		if r.rfs != nil {
			r.rd = &rangeReader{fs: r.rfs, name: fc.open}
			return
		}
		f, size, err := r.v.openRegular(fc.open)
		if err != nil {
			r.rdErr = err
			return
		}
		if size != fc.size {
			f.Close()
			r.rdErr = fmt.Errorf("the file changed while it was verified: %d bytes, then %d", fc.size, size)
			return
		}
		if ra, ok := f.(io.ReaderAt); ok {
			r.rd = &raReader{f: f, ra: ra}
			return
		}
		r.rd = &seqReader{f: f}
	})
	return r.rd, r.rdErr
}

// done counts a finished job; the last closes the reader.
func (r *fileRun) done() {
	if r.left.Add(-1) == 0 {
		r.closeReader()
	}
}

// closeReader closes the reader, if one was opened, once.
func (r *fileRun) closeReader() {
	r.closed.Do(func() {
		r.once.Do(func() {}) // none will be opened from now on
		if r.rd != nil {
			r.rd.close()
		}
	})
}

// fail reports the first read that failed (of the bytes rng, when set).
func (r *fileRun) fail(rng *Range, err error) {
	if !r.failed.CompareAndSwap(false, true) {
		return
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return // Verify returns the context's error
	}
	msg := "reading the file: " + err.Error()
	if rng != nil {
		msg = fmt.Sprintf("reading bytes %d to %d: %v", rng.Begin, rng.End, err)
	}
	r.v.problem(newProblem(IO, r.fc.display, "", rng, msg))
}

// tensorRun is the check of one tensor read in parts (one per piece of
// the data section it overlaps).
type tensorRun struct {
	r     *fileRun
	t     *safetensors.TensorInfo
	want  uint32
	first int64    // the first piece the tensor overlaps
	parts []uint32 // the CRC of each part
	lens  []int64  // the bytes of each part
	left  atomic.Int32
}

// part records the CRC of the tensor's part in piece k, n bytes long; the
// last part combines them and checks the tensor.
func (tr *tensorRun) part(k int64, crc uint32, n int64) {
	tr.parts[k-tr.first], tr.lens[k-tr.first] = crc, n
	if tr.left.Add(-1) != 0 {
		return
	}
	crc = tr.parts[0]
	for i := 1; i < len(tr.parts); i++ {
		crc = safetensors.CombineChecksums(crc, tr.parts[i], tr.lens[i])
	}
	tr.finish(crc)
}

// finish checks the tensor's CRC, got, and counts it.
func (tr *tensorRun) finish(got uint32) {
	r, t := tr.r, tr.t
	if r.failed.Load() {
		return
	}
	v := r.v
	b := r.fc.hdr.DataOffset + t.Begin
	if got != tr.want {
		e := &safetensors.ChecksumError{File: r.fc.display, Tensor: t.Name, Begin: b, End: b + t.ByteLen(), Want: tr.want, Got: got}
		p := newProblem(ChecksumMismatch, r.fc.display, t.Name, &Range{e.Begin, e.End},
			fmt.Sprintf("checksum mismatch in bytes %d to %d: the header says crc32c %s, the data have %s",
				e.Begin, e.End, safetensors.FormatChecksum(e.Want), safetensors.FormatChecksum(e.Got)))
		p.Err = e
		v.problem(p)
	}
	v.mu.Lock()
	v.rep.VerifiedTensors++
	v.rep.VerifiedBytes += t.ByteLen()
	v.mu.Unlock()
}

// sequential reads the whole file in order: its blob's hash, when it is a
// hub blob, and its tensors' CRCs, when it has checksums.
func (r *fileRun) sequential(ctx context.Context, buf []byte) {
	defer r.done()
	fc := r.fc
	rd, err := r.reader()
	if err != nil {
		r.fail(nil, err)
		return
	}
	var h interface{ Write([]byte) (int, error) }
	var sum func([]byte) []byte
	if fc.blob != nil {
		hh := fc.blob.hasher(fc.size)
		h, sum = hh, hh.Sum
	}
	var tensors []safetensors.TensorInfo
	var crcs []uint32
	if fc.sums != nil && fc.hdr != nil {
		tensors = fc.hdr.Tensors
		crcs = make([]uint32, len(tensors))
		for i := range tensors {
			if tensors[i].ByteLen() == 0 {
				(&tensorRun{r: r, t: &tensors[i], want: fc.sums[tensors[i].Name]}).finish(0)
			}
		}
	}
	next := 0 // the first tensor not yet finished
	recs := fc.records
	recCRC := make([]uint32, len(recs))
	nextRec := 0 // the first record not yet summed whole
	for off := int64(0); off < fc.size; {
		if ctx.Err() != nil {
			return
		}
		n := min(int64(len(buf)), fc.size-off)
		b := buf[:n]
		if err := rd.readAt(ctx, b, off); err != nil {
			r.fail(nil, fmt.Errorf("at byte %d: %w", off, err))
			return
		}
		if h != nil {
			h.Write(b)
		}
		for i := next; i < len(tensors); i++ {
			t := &tensors[i]
			tb, te := fc.hdr.DataOffset+t.Begin, fc.hdr.DataOffset+t.End
			if tb >= off+n {
				break
			}
			if te <= off || te == tb {
				if i == next {
					next++
				}
				continue
			}
			lo, hi := max(tb, off), min(te, off+n)
			crcs[i] = safetensors.UpdateChecksum(crcs[i], b[lo-off:hi-off])
			if te <= off+n {
				(&tensorRun{r: r, t: t, want: fc.sums[t.Name]}).finish(crcs[i])
				if i == next {
					next++
				}
			}
		}
		for i := nextRec; i < len(recs) && recs[i].Begin < off+n; i++ {
			if lo, hi := max(recs[i].Begin, off), min(recs[i].End, off+n); lo < hi {
				recCRC[i] = crc32c.UpdateIEEE(recCRC[i], b[lo-off:hi-off])
			}
		}
		for nextRec < len(recs) && recs[nextRec].End <= off+n { // by start: a hostile archive's records may overlap
			nextRec++
		}
		off += n
	}
	if len(recs) > 0 {
		// Every record was read whole: checkTorch checks them from these.
		sums := make(map[string]uint32, len(recs))
		for i, rec := range recs {
			sums[rec.Name] = recCRC[i]
		}
		fc.recordSums = sums
	}
	if sum != nil {
		if p := fc.blob.problem(fc.display, sum(nil)); p != nil {
			r.v.problem(p)
		}
		r.v.mu.Lock()
		r.v.rep.Blobs++
		r.v.mu.Unlock()
	}
}

// raReader reads through the file's ReadAt (pread for a local file).
type raReader struct {
	f  fs.File
	ra io.ReaderAt
}

func (r *raReader) readAt(_ context.Context, p []byte, off int64) error {
	n, err := r.ra.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || err == io.EOF {
		return fmt.Errorf("the file ends at byte %d: it was truncated while it was verified", off+int64(n))
	}
	return err
}

func (r *raReader) close() { r.f.Close() }

// rangeReader reads with ranged requests (an object store).
type rangeReader struct {
	fs   source.RangeFS
	name string
}

func (r *rangeReader) readAt(ctx context.Context, p []byte, off int64) error {
	return r.fs.ReadRanges(ctx, r.name, []source.Span{{Off: off, Dst: p}})
}

func (r *rangeReader) close() {}

// seqReader reads a file that has no ReadAt, in order.
type seqReader struct {
	f   fs.File
	pos int64
}

func (r *seqReader) readAt(_ context.Context, p []byte, off int64) error {
	if off != r.pos {
		return fmt.Errorf("read at %d: the file can only be read in order (at %d)", off, r.pos)
	}
	n, err := io.ReadFull(r.f, p)
	r.pos += int64(n)
	if err == io.ErrUnexpectedEOF || err == io.EOF {
		return fmt.Errorf("the file ends at byte %d: it was truncated while it was verified", r.pos)
	}
	return err
}

func (r *seqReader) close() { r.f.Close() }
