package torch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/klauspost/compress/zip"

	"github.com/ckpt-go/ckpt/dtype"
)

// copyChunk is the size of the buffer WriteTo copies through.
const copyChunk = 1 << 20

// copyBufs holds WriteTo's buffers, so that writing a checkpoint of many
// tensors does not allocate one per tensor.
var copyBufs = sync.Pool{New: func() any { return new([copyChunk]byte) }}

// Tensor is one tensor of a Checkpoint: a view (offset, shape, strides) of
// a storage record of the archive. It is cheap: nothing is read until
// ReadTo, Bytes or WriteTo, which give the elements in row-major order as
// contiguous little-endian bytes, the layout of safetensors. A Tensor is
// safe for concurrent use.
type Tensor struct {
	c       *Checkpoint
	sf      *shardFile
	name    string
	dt      dtype.DType
	shape   []int64
	stride  []int64 // in elements
	offset  int64   // storage offset, in elements
	size    int64   // bytes of the contiguous copy
	contig  bool
	base    int64 // archive offset of the view's first element
	extent  int64 // bytes from base that hold every element of the view
	storage string
	rec     *zip.File // the storage record: its name, size (checked at Open) and CRC-32
}

// Name returns the tensor's name: its dotted path in the checkpoint
// ("model.enc.weight").
func (t *Tensor) Name() string { return t.name }

// File returns the path of the archive that holds the tensor's storage:
// the checkpoint's file, or for a sharded checkpoint the shard's path (the
// index's folder joined with the name the index gives it).
func (t *Tensor) File() string { return t.sf.path }

// DType returns the element type.
func (t *Tensor) DType() dtype.DType { return t.dt }

// Shape returns the dimensions (a copy; empty for a 0-d tensor).
func (t *Tensor) Shape() []int64 { return slices.Clone(t.shape) }

// Strides returns the strides of the view in the storage, in elements (a
// copy).
func (t *Tensor) Strides() []int64 { return slices.Clone(t.stride) }

// StorageOffset returns the offset of the view's first element in its
// storage, in elements.
func (t *Tensor) StorageOffset() int64 { return t.offset }

// Storage returns the key of the storage record the tensor views (its
// record is data/KEY in the archive). Tensors of one file with the same key
// share memory in PyTorch.
func (t *Tensor) Storage() string { return t.storage }

// Contiguous reports whether the view's elements lie in row-major order
// without gaps, so that reading it is one copy. Other views (transposed,
// strided, expanded) are gathered element by element.
func (t *Tensor) Contiguous() bool { return t.contig }

// ByteLen returns the size of the tensor's contiguous bytes: the number of
// elements times the element size. It never exceeds the size of the
// tensor's storage record.
func (t *Tensor) ByteLen() int64 { return t.size }

// Offset returns the offset in its archive (File) of the view's first
// element. For a Contiguous tensor of a little-endian archive, the
// ByteLen bytes there are the tensor's bytes as ReadTo gives them; any
// other view is gathered or byte-swapped from the storage that starts
// there, so read it with ReadAt.
func (t *Tensor) Offset() int64 { return t.base }

// Record returns the name of the storage record the tensor views
// ("archive/data/3") and where its bytes lie in File: n bytes from offset
// off, as stored (a view's elements among them, in the archive's byte
// order).
func (t *Tensor) Record() (name string, off, n int64) { return t.rec.Name, t.recOff(), t.recLen() }

// recOff is the archive offset of the storage record's bytes.
func (t *Tensor) recOff() int64 { return t.base - t.offset*int64(t.dt.Bits()/8) }

// recLen is the size of the storage record: the storage's bytes, as Open
// checked.
func (t *Tensor) recLen() int64 { return int64(t.rec.UncompressedSize64) }

// RecordCRC returns the CRC-32 (IEEE polynomial) that the archive's zip
// directory records for the bytes of the storage record the tensor views,
// and whether the tensor's bytes as ReadAt gives them are exactly that
// record's bytes (whole): a Contiguous view of the whole storage from its
// first element, in a little-endian archive. Then a CRC-32 of the bytes
// read (in pieces, combined) checks them against crc; any other view (part
// of its storage, a strided view, a big-endian archive's) is checked by
// the CRC-32 of the record's bytes (ReadRecordAt) instead. Open reads no
// storage record's data, so it has not compared them
// (Checkpoint.VerifyRecords compares every record).
func (t *Tensor) RecordCRC() (crc uint32, whole bool) {
	return t.rec.CRC32, t.contig && t.offset == 0 && t.size == t.recLen() && !t.sf.ar.big
}

// ReadRecordAt reads the bytes [off, off+len(b)) of the storage record the
// tensor views, as stored (neither gathered nor byte-swapped), as
// io.ReaderAt does: fewer bytes only with an error, io.EOF past the
// record's end.
func (t *Tensor) ReadRecordAt(b []byte, off int64) (int, error) {
	recOff := t.recOff()
	return t.readRange(b, off, t.recLen(), func(b []byte, off int64) error { return t.readAt(b, recOff+off) })
}

// readRange is io.ReaderAt's contract for bytes [0, size) that read reads:
// the offset and the checkpoint checked, b cut at size, fewer bytes only
// with io.EOF past the end.
func (t *Tensor) readRange(b []byte, off, size int64, read func(b []byte, off int64) error) (int, error) {
	if off < 0 {
		return 0, t.err(ErrInvalidArgument, fmt.Sprintf("negative offset %d", off), nil)
	}
	if err := t.checkOpen(); err != nil {
		return 0, err
	}
	if off >= size {
		if len(b) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	n := min(int64(len(b)), size-off)
	if n > 0 {
		if err := read(b[:n], off); err != nil {
			return 0, err
		}
	}
	if n < int64(len(b)) {
		return int(n), io.EOF
	}
	return int(n), nil
}

// Bytes returns the tensor's contiguous little-endian bytes in a new slice.
func (t *Tensor) Bytes() ([]byte, error) {
	b := make([]byte, t.size) // <= the record's size, which is within the file
	if err := t.ReadTo(b); err != nil {
		return nil, err
	}
	return b, nil
}

// ReadTo fills dst, which must be ByteLen bytes long, with the tensor's
// contiguous little-endian bytes. A non-contiguous view reads the part of
// its storage it spans (at most the record's size) and gathers from it.
func (t *Tensor) ReadTo(dst []byte) error {
	if int64(len(dst)) != t.size {
		return t.err(ErrInvalidArgument, fmt.Sprintf("destination of %d bytes, the tensor has %d", len(dst), t.size), nil)
	}
	if err := t.checkOpen(); err != nil {
		return err
	}
	if t.size == 0 {
		return nil
	}
	if t.contig {
		if err := t.readAt(dst, t.base); err != nil {
			return err
		}
		t.toLittle(dst)
		return nil
	}
	src, err := t.span()
	if err != nil {
		return err
	}
	t.gather(dst, src, 0, 0)
	t.toLittle(dst)
	return nil
}

// WriteTo writes the tensor's contiguous little-endian bytes to w, through
// a buffer of at most 1 MiB (plus, for a non-contiguous view, the part of
// the storage it spans). It implements io.WriterTo.
func (t *Tensor) WriteTo(w io.Writer) (int64, error) {
	if err := t.checkOpen(); err != nil {
		return 0, err
	}
	var src []byte
	if !t.contig && t.size > 0 {
		var err error
		if src, err = t.span(); err != nil {
			return 0, err
		}
	}
	bp := copyBufs.Get().(*[copyChunk]byte)
	defer copyBufs.Put(bp)
	buf := bp[:min(t.size, copyChunk)]
	isz := int64(t.dt.Bits() / 8)
	chunk := int64(len(buf)) / isz * isz // whole elements, for the gather and the byte swap
	var done int64
	for done < t.size {
		n := min(chunk, t.size-done)
		b := buf[:n]
		if t.contig {
			if err := t.readAt(b, t.base+done); err != nil {
				return done, err
			}
		} else {
			t.gather(b, src, done/isz, 0)
		}
		t.toLittle(b)
		m, err := w.Write(b)
		done += int64(m)
		if err != nil {
			return done, err
		}
		if m != len(b) {
			return done, io.ErrShortWrite
		}
	}
	return done, nil
}

// ReadAt reads len(b) bytes of the tensor's contiguous little-endian bytes
// (those ReadTo gives) from offset off of them, as io.ReaderAt does: it
// returns fewer bytes only with an error, io.EOF past the end of the
// tensor. A contiguous view of a little-endian archive is read straight
// from the file; another view reads the part of its storage that the
// asked elements span (at most the record's size), or its lines where
// they cost less (a read costs a system call on an *os.File, a request on
// any other reader), and gathers them; a big-endian archive's bytes are
// byte-swapped. Offsets and lengths need not be whole elements. ReadAt
// may be called from several goroutines. A reader of a view that is not
// contiguous in many pieces reads its storage once with Gather instead.
func (t *Tensor) ReadAt(b []byte, off int64) (int, error) {
	return t.readRange(b, off, t.size, t.readElems)
}

// Gathered is a range of a tensor's bytes read from its file once, for a
// reader that reads them in many pieces (Tensor.Gather): its ReadAt serves
// them from memory. It is safe for concurrent use.
type Gathered struct {
	t      *Tensor
	e0, e1 int64  // the elements gathered, [e0, e1)
	lo     int64  // span: the storage offset (elements from the view's first) of src's first element
	src    []byte // the storage the elements span, or their contiguous little-endian bytes
	span   bool
}

// gatherPlan is how Gather reads the range [off, off+n) of the tensor's
// bytes (inside them): its elements [e0, e1) as the storage they span from
// lo (span), or as their own bytes (one read for a contiguous view, line
// by line for another, where that costs less); mem is what it holds.
func (t *Tensor) gatherPlan(off, n int64) (e0, e1, lo, mem int64, span bool) {
	isz := int64(t.dt.Bits() / 8)
	e0, e1 = off/isz, (off+n+isz-1)/isz
	if n == 0 {
		return e0, e0, 0, 0, false
	}
	if t.contig {
		return e0, e1, 0, (e1 - e0) * isz, false
	}
	lo, hi := t.spanOf(e0, e1)
	if t.linesCheaper(e0, e1, (hi-lo+1)*isz) {
		return e0, e1, 0, (e1 - e0) * isz, false
	}
	return e0, e1, lo, (hi - lo + 1) * isz, true
}

// linesCheaper reports whether reading the view's elements [e0, e1) line
// by line costs less than reading the span bytes they lie in, a read
// costing lineCost bytes besides its own: what Gather, whose memory is
// held while a reader reads its pieces, reads them by (ReadAt reads a
// span of up to twice its elements in one read, see useLines). It walks
// at most span/lineCost lines.
func (t *Tensor) linesCheaper(e0, e1, span int64) bool {
	own := (e1 - e0) * int64(t.dt.Bits()/8)
	if span <= max(own, spanRead) {
		return false
	}
	return t.fewLines(e0, e1, (span-own)/t.lineCost())
}

// fewLines reports whether the view's elements [e0, e1) lie in at most
// limit lines (see lines), walking at most limit+1 of them.
func (t *Tensor) fewLines(e0, e1, limit int64) bool {
	n := int64(0)
	stop := errors.New("")
	return t.lines(e0, e1, func(_, _, _ int64) error {
		if n++; n > limit {
			return stop
		}
		return nil
	}) == nil
}

// GatherBytes returns the memory Gather(off, n) holds: the storage the
// range's elements span, or their own bytes where the view is contiguous
// or the elements are read line by line (they hold far less than they
// span, in few lines). It is 0 for a range outside the tensor's bytes.
func (t *Tensor) GatherBytes(off, n int64) int64 {
	if off < 0 || n < 0 || off > t.size || n > t.size-off {
		return 0
	}
	_, _, _, mem, _ := t.gatherPlan(off, n)
	return mem
}

// Gather reads the bytes [off, off+n) of the tensor's contiguous
// little-endian bytes into memory (GatherBytes(off, n) of it): the
// storage they span in one read, or their lines where those reads cost
// less than the span (see ReadAt), so that reading them again in pieces
// reads nothing more from the file: a piece of a permuted view (a
// transposed weight read a few rows at a time) spans most of its storage,
// which ReadAt reads again for each piece. The bytes are read when Gather
// is called; the result does not depend on the Checkpoint staying open.
// Gather(0, ByteLen()) gathers the whole tensor.
func (t *Tensor) Gather(off, n int64) (*Gathered, error) {
	if off < 0 || n < 0 || off > t.size || n > t.size-off {
		return nil, t.err(ErrInvalidArgument, fmt.Sprintf("range [%d, +%d) of a %d-byte tensor", off, n, t.size), nil)
	}
	if err := t.checkOpen(); err != nil {
		return nil, err
	}
	e0, e1, lo, mem, span := t.gatherPlan(off, n)
	g := &Gathered{t: t, e0: e0, e1: e1, lo: lo, src: make([]byte, mem), span: span} // mem <= the record's size, within the file
	isz := int64(t.dt.Bits() / 8)
	switch {
	case mem == 0:
	case span:
		if err := t.readAt(g.src, t.base+lo*isz); err != nil {
			return nil, err
		}
	case t.contig:
		if err := t.readAt(g.src, t.base+e0*isz); err != nil {
			return nil, err
		}
		t.toLittle(g.src)
	default:
		if err := t.gatherLines(g.src, e0, e1); err != nil {
			return nil, err
		}
		t.toLittle(g.src)
	}
	return g, nil
}

// ReadAt reads len(b) bytes of the tensor's contiguous little-endian bytes
// from offset off of them, as Tensor.ReadAt does, from memory: they must
// lie in the range gathered (ErrInvalidArgument), which a read may pass
// only at the tensor's end (io.EOF).
func (g *Gathered) ReadAt(b []byte, off int64) (int, error) {
	t := g.t
	isz := int64(t.dt.Bits() / 8)
	if off >= t.size && off >= g.e0*isz {
		if len(b) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	n := min(int64(len(b)), t.size-off)
	if off < g.e0*isz || off+n > g.e1*isz {
		return 0, t.err(ErrInvalidArgument, fmt.Sprintf("read [%d, +%d) outside the gathered bytes [%d, %d)", off, len(b), g.e0*isz, g.e1*isz), nil)
	}
	switch {
	case n == 0:
	case !g.span:
		copy(b, g.src[off-g.e0*isz:off-g.e0*isz+n])
	default:
		t.gatherRange(b[:n], off, g.src, g.lo)
	}
	if n < int64(len(b)) {
		return int(n), io.EOF
	}
	return int(n), nil
}

// readElems fills dst with the contiguous bytes [off, off+len(dst)) of the
// tensor (inside it, len(dst) > 0).
func (t *Tensor) readElems(dst []byte, off int64) error {
	if t.contig && !t.sf.ar.big {
		return t.readAt(dst, t.base+off)
	}
	isz := int64(t.dt.Bits() / 8)
	e0, e1 := off/isz, (off+int64(len(dst))+isz-1)/isz
	if !t.contig {
		if lo, hi := t.spanOf(e0, e1); !t.useLines(e0, e1, (hi-lo+1)*isz) {
			src := make([]byte, (hi-lo+1)*isz) // within the view's extent, checked at Open
			if err := t.readAt(src, t.base+lo*isz); err != nil {
				return err
			}
			t.gatherRange(dst, off, src, lo)
			return nil
		}
	}
	// A contiguous view of a big-endian archive, or a view read line by
	// line: whole elements are read, through a buffer of them where dst
	// cuts an element (a read in one piece, not one per part).
	out := dst
	if off%isz != 0 || int64(len(dst))%isz != 0 {
		out = make([]byte, (e1-e0)*isz) // at most two elements more than dst
	}
	var err error
	if t.contig {
		err = t.readAt(out, t.base+e0*isz)
	} else {
		err = t.gatherLines(out, e0, e1)
	}
	if err != nil {
		return err
	}
	t.toLittle(out)
	if len(out) != len(dst) {
		copy(dst, out[off-e0*isz:])
	}
	return nil
}

// gatherRange fills dst with the tensor's contiguous little-endian bytes
// [off, off+len(dst)) (inside them, len(dst) > 0) from src, the storage
// from the view's element lo on (see gather): the whole elements straight
// into dst, an element that an end of dst cuts through a scratch element.
func (t *Tensor) gatherRange(dst []byte, off int64, src []byte, lo int64) {
	isz := int64(t.dt.Bits() / 8)
	end := off + int64(len(dst))
	if off%isz == 0 && end%isz == 0 {
		t.gather(dst, src, off/isz, lo)
		t.toLittle(dst)
		return
	}
	scratch := make([]byte, isz)
	part := func(e int64) { // element e's bytes that lie in [off, end)
		t.gather(scratch, src, e, lo)
		t.toLittle(scratch)
		a, b := max(off, e*isz), min(end, (e+1)*isz)
		copy(dst[a-off:b-off], scratch[a-e*isz:b-e*isz])
	}
	m0, m1 := (off+isz-1)/isz, end/isz // the whole elements [m0, m1)
	if m0 > m1 {                       // dst lies inside one element
		part(off / isz)
		return
	}
	if off%isz != 0 {
		part(off / isz)
	}
	if m1 > m0 {
		mid := dst[m0*isz-off : m1*isz-off]
		t.gather(mid, src, m0, lo)
		t.toLittle(mid)
	}
	if end%isz != 0 {
		part(m1)
	}
}

// spanRead is the storage a read of a view that is not contiguous reads
// in one piece, even where the elements asked for are less than half of
// it. A read takes the lines of its elements (gatherLines) where they cost
// less than the span they lie in (see readElems), a line costing what
// reading lineCost bytes of the span costs: a system call on a local file
// (lineCostLocal), a request on any other reader (lineCostRemote: a
// remote file's ReadAt is a ranged request, an fs.FS file may be one).
const (
	spanRead       = 64 << 10
	lineCostLocal  = 4 << 10
	lineCostRemote = 1 << 20
)

// lineCost is what one read of the tensor's archive costs, in bytes.
func (t *Tensor) lineCost() int64 {
	if t.sf.ar.local {
		return lineCostLocal
	}
	return lineCostRemote
}

// useLines reports whether the view's elements [e0, e1), whose storage
// spans span bytes, are read line by line rather than as the span. It
// walks at most span/lineCost lines.
func (t *Tensor) useLines(e0, e1, span int64) bool {
	isz := int64(t.dt.Bits() / 8)
	if span <= max(2*(e1-e0)*isz, spanRead) {
		return false
	}
	return t.fewLines(e0, e1, span/t.lineCost())
}

// gatherLines fills out with the view's elements [e0, e1) in row-major
// order, reading the storage line by line (see lines): each line is one
// run of the storage (its span, for a stride above 1). So a part of a
// permuted view (a transposed weight read in pieces of rows) reads its
// own elements' bytes, not the storage they span, which is most of the
// tensor's for every piece.
func (t *Tensor) gatherLines(out []byte, e0, e1 int64) error {
	isz := int64(t.dt.Bits() / 8)
	m := t.lineDim()
	sm, dm := t.stride[m], int64(1)
	for _, d := range t.shape[m+1:] {
		dm *= d
	}
	direct := sm == 1 && dm == 1 // a run of the storage is a run of out
	var buf []byte
	if !direct {
		buf = make([]byte, ((t.shape[m]-1)*sm+1)*isz) // a line's span: within the view's extent
	}
	return t.lines(e0, e1, func(off, pos, cnt int64) error {
		if direct {
			return t.readAt(out[pos*isz:(pos+cnt)*isz], t.base+off*isz)
		}
		src := buf[:((cnt-1)*sm+1)*isz]
		if err := t.readAt(src, t.base+off*isz); err != nil {
			return err
		}
		for k := range cnt {
			copy(out[(pos+k*dm)*isz:(pos+k*dm+1)*isz], src[k*sm*isz:])
		}
		return nil
	})
}

// lineDim is the dimension lines run along: the least stride among the
// dimensions above 1 (a view that is not contiguous has one).
func (t *Tensor) lineDim() int {
	m := 0
	for i := range t.shape {
		if t.shape[i] > 1 && (t.shape[m] <= 1 || t.stride[i] < t.stride[m]) {
			m = i
		}
	}
	return m
}

// lines calls fn for each line of the view's elements [e0, e1) (e0 < e1)
// along lineDim m: for each index of the other dimensions, the elements of
// the range whose index along m varies form one interval, cnt elements
// from storage offset off (elements from the view's first) that go to
// positions pos, pos+rs, ... of the range (rs the view's row-major stride
// of m). It calls fn only for lines that hold elements of the range, so
// that its work is the number of lines it reports, and stops at fn's
// first error.
func (t *Tensor) lines(e0, e1 int64, fn func(off, pos, cnt int64) error) error {
	nd, m := len(t.shape), t.lineDim()
	// An element is ((pre*M)+i)*P + q: pre the index of the dimensions
	// before m, i its index along m, q the index of those after m.
	M, P := t.shape[m], int64(1)
	for _, d := range t.shape[m+1:] {
		P *= d
	}
	block := M * P
	idx := make([]int64, nd)
	for pre := e0 / block; pre <= (e1-1)/block; pre++ {
		// The range's elements of this block, i*P+q in [s, u].
		s, u := max(e0-pre*block, 0), min(e1-pre*block, block)-1
		sI, sQ, uI, uQ := s/P, s%P, u/P, u%P
		// Line q runs along m from a(q) = sI + [q < sQ] to
		// b(q) = uI - [q > uQ]: the qs with a(q) <= b(q) are one or two
		// intervals.
		qs := [2][2]int64{{0, P - 1}, {1, 0}}
		switch {
		case uI == sI:
			qs[0] = [2]int64{sQ, uQ}
		case uI == sI+1 && uQ+1 < sQ:
			qs[0], qs[1] = [2]int64{0, uQ}, [2]int64{sQ, P - 1}
		}
		// The storage offset of the block's first element.
		var preOff int64
		for i, rem := m-1, pre; i >= 0; i-- {
			preOff += rem % t.shape[i] * t.stride[i]
			rem /= t.shape[i]
		}
		for _, r := range qs {
			if r[0] > r[1] {
				continue
			}
			// The indices after m of q = r[0], and their offset.
			var off int64
			for i, rem := nd-1, r[0]; i > m; i-- {
				idx[i] = rem % t.shape[i]
				rem /= t.shape[i]
				off += idx[i] * t.stride[i]
			}
			for q := r[0]; q <= r[1]; q++ {
				a, b := sI, uI
				if q < sQ {
					a++
				}
				if q > uQ {
					b--
				}
				if err := fn(preOff+a*t.stride[m]+off, pre*block+a*P+q-e0, b-a+1); err != nil {
					return err
				}
				// The next q's indices.
				for i := nd - 1; i > m; i-- {
					off += t.stride[i]
					if idx[i]++; idx[i] < t.shape[i] {
						break
					}
					off -= idx[i] * t.stride[i]
					idx[i] = 0
				}
			}
		}
	}
	return nil
}

// spanOf returns the least and the greatest storage offset, in elements
// from the view's first element, that the view's elements [e0, e1) in
// row-major order may use (e0 < e1): the indices both ends share fix a
// prefix, the first index that differs runs between the ends', and the
// dimensions after it may take any index.
func (t *Tensor) spanOf(e0, e1 int64) (lo, hi int64) {
	a, b := t.unravel(e0), t.unravel(e1-1)
	k := 0
	for k < len(a) && a[k] == b[k] {
		lo += a[k] * t.stride[k]
		k++
	}
	if k == len(a) {
		return lo, lo
	}
	hi = lo + b[k]*t.stride[k]
	lo += a[k] * t.stride[k]
	for i := k + 1; i < len(t.shape); i++ {
		hi += (t.shape[i] - 1) * t.stride[i]
	}
	return lo, hi
}

// unravel returns the indices of element e in row-major order.
func (t *Tensor) unravel(e int64) []int64 {
	idx := make([]int64, len(t.shape))
	for i := len(t.shape) - 1; i >= 0; i-- {
		idx[i] = e % t.shape[i]
		e /= t.shape[i]
	}
	return idx
}

func (t *Tensor) checkOpen() error {
	if t.c.closed.Load() {
		return t.err(ErrClosed, "the checkpoint is closed", nil)
	}
	return nil
}

func (t *Tensor) err(kind ErrorKind, msg string, err error) error {
	return &Error{Kind: kind, File: t.sf.path, Record: t.rec.Name, Tensor: t.name, Msg: msg, Err: err}
}

func (t *Tensor) readAt(b []byte, off int64) error {
	n, err := t.sf.ar.r.ReadAt(b, off)
	if n == len(b) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return t.err(ErrIO, "read", err)
}

// span reads the bytes of the storage that the view spans.
func (t *Tensor) span() ([]byte, error) {
	src := make([]byte, t.extent) // <= the record's size, checked at Open
	if err := t.readAt(src, t.base); err != nil {
		return nil, err
	}
	return src, nil
}

// gather copies len(dst) bytes of the view, starting at element first in
// row-major order, from src: the storage from element srcFirst of the
// span that starts at the view's first element.
func (t *Tensor) gather(dst, src []byte, first, srcFirst int64) {
	isz := int64(t.dt.Bits() / 8)
	nd := len(t.shape)
	idx := t.unravel(first)
	off := -srcFirst // element offset in src
	for i := range nd {
		off += idx[i] * t.stride[i]
	}
	// The innermost dimension is copied a run at a time: one copy when its
	// stride is 1, a strided loop otherwise.
	last := nd - 1
	for p := int64(0); p < int64(len(dst)); {
		if last < 0 { // a 0-d tensor: one element
			copy(dst, src[:isz])
			return
		}
		// Whole rows whose elements interleave in the storage (a
		// transposed matrix: the row dimension has the lesser stride, so
		// that the elements of neighbouring rows share cache lines) are
		// gathered several rows at a time, a block of columns at a time,
		// so that each cache line read serves each of those rows.
		if last > 0 && idx[last] == 0 && t.stride[last] > 1 && t.stride[last-1] < t.stride[last] && t.stride[last-1]*isz < 64 {
			rowB := t.shape[last] * isz
			if k := min(64/isz, t.shape[last-1]-idx[last-1], (int64(len(dst))-p)/rowB); k >= 2 {
				gatherTile(dst[p:p+k*rowB], src[off*isz:], k, t.shape[last], t.stride[last-1]*isz, t.stride[last]*isz, isz)
				p += k * rowB
				idx[last-1] += k
				off += k * t.stride[last-1]
				for i := last - 1; i > 0 && idx[i] == t.shape[i]; i-- { // carry
					off -= idx[i] * t.stride[i]
					idx[i] = 0
					idx[i-1]++
					off += t.stride[i-1]
				}
				continue
			}
		}
		run := min(t.shape[last]-idx[last], (int64(len(dst))-p)/isz)
		if t.stride[last] == 1 {
			copy(dst[p:p+run*isz], src[off*isz:(off+run)*isz])
		} else {
			gatherRun(dst[p:p+run*isz], src[off*isz:], t.stride[last]*isz, isz)
		}
		p += run * isz
		idx[last] += run - 1
		off += (run - 1) * t.stride[last]
		// Step to the next element.
		for i := last; i >= 0; i-- {
			idx[i]++
			off += t.stride[i]
			if idx[i] < t.shape[i] {
				break
			}
			off -= idx[i] * t.stride[i]
			idx[i] = 0
		}
	}
}

// tileCols is the number of columns gatherTile gathers of each of its
// rows in turn: the cache lines they use (one per column) stay in the
// first-level cache while every row takes its elements from them.
const tileCols = 64

// gatherTile fills dst with k rows of n elements of isz bytes: row r's
// element j is at r*rowStep + j*colStep bytes of src.
func gatherTile(dst, src []byte, k, n, rowStep, colStep, isz int64) {
	for j0 := int64(0); j0 < n; j0 += tileCols {
		j1 := min(j0+tileCols, n)
		for r := range k {
			gatherRun(dst[(r*n+j0)*isz:(r*n+j1)*isz], src[r*rowStep+j0*colStep:], colStep, isz)
		}
	}
}

// gatherRun fills dst with elements of isz bytes taken every step bytes
// from src.
func gatherRun(dst, src []byte, step, isz int64) {
	n := int64(len(dst)) / isz
	switch isz {
	case 1:
		for k := range n {
			dst[k] = src[k*step]
		}
	case 2:
		for k := range n {
			binary.LittleEndian.PutUint16(dst[2*k:], binary.LittleEndian.Uint16(src[k*step:]))
		}
	case 4:
		for k := range n {
			binary.LittleEndian.PutUint32(dst[4*k:], binary.LittleEndian.Uint32(src[k*step:]))
		}
	case 8:
		for k := range n {
			binary.LittleEndian.PutUint64(dst[8*k:], binary.LittleEndian.Uint64(src[k*step:]))
		}
	default:
		for k := range n {
			copy(dst[k*isz:(k+1)*isz], src[k*step:k*step+isz])
		}
	}
}

// toLittle byte-swaps b in place when the archive is big-endian.
func (t *Tensor) toLittle(b []byte) {
	if !t.sf.ar.big {
		return
	}
	unit := t.dt.Bits() / 8
	if t.dt.Info().Kind == dtype.KindComplex {
		unit /= 2 // each of the real and imaginary parts
	}
	swapBytes(b, unit)
}

// swapBytes reverses the byte order of each unit-byte element of b.
func swapBytes(b []byte, unit int) {
	if unit < 2 {
		return
	}
	for i := 0; i+unit <= len(b); i += unit {
		e := b[i : i+unit]
		for j, k := 0, unit-1; j < k; j, k = j+1, k-1 {
			e[j], e[k] = e[k], e[j]
		}
	}
}
