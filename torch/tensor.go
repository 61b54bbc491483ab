package torch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

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
	record  string
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
// asked elements span (at most the record's size) and gathers them, and a
// big-endian archive's bytes are byte-swapped. Offsets and lengths need
// not be whole elements. ReadAt may be called from several goroutines.
func (t *Tensor) ReadAt(b []byte, off int64) (int, error) {
	if off < 0 {
		return 0, t.err(ErrInvalidArgument, fmt.Sprintf("negative offset %d", off), nil)
	}
	if err := t.checkOpen(); err != nil {
		return 0, err
	}
	if off >= t.size {
		if len(b) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	n := min(int64(len(b)), t.size-off)
	if n > 0 {
		if err := t.readElems(b[:n], off); err != nil {
			return 0, err
		}
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
	out := dst
	if off%isz != 0 || int64(len(dst))%isz != 0 {
		out = make([]byte, (e1-e0)*isz) // at most two elements more than dst
	}
	if t.contig {
		if err := t.readAt(out, t.base+e0*isz); err != nil {
			return err
		}
	} else if lo, hi := t.spanOf(e0, e1); t.useLines(e0, e1, (hi-lo+1)*isz) {
		if err := t.gatherLines(out, e0, e1); err != nil {
			return err
		}
	} else {
		src := make([]byte, (hi-lo+1)*isz) // within the view's extent, checked at Open
		if err := t.readAt(src, t.base+lo*isz); err != nil {
			return err
		}
		t.gather(out, src, e0, lo)
	}
	t.toLittle(out)
	if len(out) != len(dst) {
		copy(dst, out[off-e0*isz:])
	}
	return nil
}

// spanRead is the storage a read of a view that is not contiguous reads
// in one piece, even where the elements asked for are less than half of
// it; lineCost is what reading one line costs, in bytes of the span (a
// system call): a read takes the lines of its elements (gatherLines)
// where they cost less than the span they lie in (see readElems).
const (
	spanRead = 64 << 10
	lineCost = 4 << 10
)

// useLines reports whether the view's elements [e0, e1), whose storage
// spans span bytes, are read line by line rather than as the span.
func (t *Tensor) useLines(e0, e1, span int64) bool {
	isz := int64(t.dt.Bits() / 8)
	if span <= max(2*(e1-e0)*isz, spanRead) {
		return false
	}
	limit, n := span/lineCost, int64(0)
	stop := errors.New("")
	return t.lines(e0, e1, func(_, _, _ int64) error {
		if n++; n > limit {
			return stop
		}
		return nil
	}) == nil
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
// of m). It stops at fn's first error.
func (t *Tensor) lines(e0, e1 int64, fn func(off, pos, cnt int64) error) error {
	nd, m := len(t.shape), t.lineDim()
	rs := make([]int64, nd) // the view's row-major strides
	n := int64(1)
	for i := nd - 1; i >= 0; i-- {
		rs[i] = n
		n *= t.shape[i]
	}
	lo, hi := t.unravel(e0), t.unravel(e1-1)
	// The lines: the dimensions before m from lo's indices to hi's, those
	// after m over all their indices (idx[m] is not used).
	idx := slices.Clone(lo)
	for i := m + 1; i < nd; i++ {
		idx[i] = 0
	}
	for {
		a, b := int64(0), t.shape[m] // the line's interval along m
		if slices.Equal(idx[:m], lo[:m]) {
			a = lo[m]
			if slices.Compare(idx[m+1:], lo[m+1:]) < 0 {
				a++
			}
		}
		if slices.Equal(idx[:m], hi[:m]) {
			b = hi[m] + 1
			if slices.Compare(idx[m+1:], hi[m+1:]) > 0 {
				b--
			}
		}
		if a < b {
			off, pos := a*t.stride[m], a*rs[m]-e0
			for i := range nd {
				if i != m {
					off += idx[i] * t.stride[i]
					pos += idx[i] * rs[i]
				}
			}
			if err := fn(off, pos, b-a); err != nil {
				return err
			}
		}
		// The next line, in row-major order of the other dimensions.
		i := nd - 1
		for ; i >= 0; i-- {
			if i == m {
				continue
			}
			if idx[i]++; idx[i] < t.shape[i] {
				break
			}
			idx[i] = 0
		}
		if i < 0 || i < m && slices.Compare(idx[:m], hi[:m]) > 0 {
			return nil
		}
	}
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
	return &Error{Kind: kind, File: t.sf.path, Record: t.record, Tensor: t.name, Msg: msg, Err: err}
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
