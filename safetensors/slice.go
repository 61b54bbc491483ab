package safetensors

import (
	"fmt"
	"iter"
	"slices"

	"github.com/ckpt-go/ckpt/dtype"
)

// Range selects part of one dimension for Tensor.Slice, like the
// reference's get_slice indexers.
type Range struct {
	start, stop int64
	kind        rangeKind
}

type rangeKind uint8

const (
	rangeFull rangeKind = iota
	rangeSpan
	rangeAt
)

// Full selects a whole dimension (the zero Range does too).
func Full() Range { return Range{} }

// Span selects indices [start, stop) of a dimension.
func Span(start, stop int64) Range { return Range{start: start, stop: stop, kind: rangeSpan} }

// At selects the single index i and drops the dimension from the result's
// shape.
func At(i int64) Range { return Range{start: i, stop: i + 1, kind: rangeAt} }

// String formats r as in Python: ":", "a:b" or "i".
func (r Range) String() string {
	switch r.kind {
	case rangeSpan:
		return fmt.Sprintf("%d:%d", r.start, r.stop)
	case rangeAt:
		return fmt.Sprintf("%d", r.start)
	}
	return ":"
}

// SliceView is a rectangular part of a tensor, selected by Tensor.Slice.
// It reads only the selected bytes: one contiguous byte range when the
// selection is contiguous in the row-major layout (Bytes is then zero-copy on
// mapped files), otherwise one range per row of the innermost partial
// dimension.
type SliceView struct {
	t *Tensor
	selection
}

// selection is where a rectangular selection of a row-major tensor lies in
// its elements: the computation behind Tensor.Slice and SliceRanges.
type selection struct {
	shape  []int64 // result shape
	elems  int64   // element count of the result
	k      int     // last partially selected dimension, -1 if none
	starts []int64 // per source dimension
	counts []int64 // per source dimension
	stride []int64 // per source dimension, in elements
	chunk  int64   // elements per contiguous chunk
	chunks int64   // number of chunks
}

// Slice selects a sub-range of the tensor along any dimensions. Ranges apply
// to the leading dimensions; missing trailing ones are Full. Out of range
// indices yield ErrInvalidArgument ("invalid slice"); for sub-byte dtypes, a
// selection whose pieces do not start and end on byte boundaries yields
// ErrMisalignedSlice.
func (t *Tensor) Slice(ranges ...Range) (*SliceView, error) {
	sel, kind, msg := selectRanges(t.info.Shape, t.info.DType, ranges)
	if kind != 0 {
		return nil, t.err(kind, msg)
	}
	return &SliceView{t: t, selection: sel}, nil
}

// selectRanges computes the selection of ranges in a row-major tensor of
// shape dims and dtype dt; a non-zero kind says what is wrong.
func selectRanges(dims []int64, dt dtype.DType, ranges []Range) (selection, ErrorKind, string) {
	if len(ranges) > len(dims) {
		return selection{}, ErrInvalidArgument, fmt.Sprintf("invalid slice: %d ranges for a tensor of rank %d", len(ranges), len(dims))
	}
	s := selection{k: -1, starts: make([]int64, len(dims)), counts: make([]int64, len(dims)), stride: make([]int64, len(dims))}
	s.shape = make([]int64, 0, len(dims))
	for d, n := range dims {
		r := Range{}
		if d < len(ranges) {
			r = ranges[d]
		}
		switch r.kind {
		case rangeFull:
			s.starts[d], s.counts[d] = 0, n
		case rangeSpan:
			if r.start < 0 || r.stop < r.start || r.stop > n {
				return selection{}, ErrInvalidArgument, fmt.Sprintf("invalid slice: range %v out of bounds for dimension %d of size %d", r, d, n)
			}
			s.starts[d], s.counts[d] = r.start, r.stop-r.start
		case rangeAt:
			if r.start < 0 || r.start >= n {
				return selection{}, ErrInvalidArgument, fmt.Sprintf("invalid slice: index %d out of bounds for dimension %d of size %d", r.start, d, n)
			}
			s.starts[d], s.counts[d] = r.start, 1
		}
		if r.kind != rangeAt {
			s.shape = append(s.shape, s.counts[d])
		}
		if s.counts[d] != n {
			s.k = d
		}
	}
	st := int64(1)
	for d := len(dims) - 1; d >= 0; d-- {
		s.stride[d] = st
		st *= dims[d]
	}
	s.elems = 1
	for _, c := range s.counts {
		s.elems *= c
	}
	if s.k < 0 {
		s.chunk, s.chunks = s.elems, 1
	} else {
		s.chunk = s.counts[s.k] * s.stride[s.k]
		s.chunks = 1
		for d := 0; d < s.k; d++ {
			s.chunks *= s.counts[d]
		}
	}
	if s.elems == 0 {
		s.chunks, s.chunk = 0, 0
	}
	if bits := int64(dt.Bits()); bits%8 != 0 && s.chunks > 0 {
		aligned := s.chunk*bits%8 == 0
		for d := 0; d < s.k; d++ {
			if s.counts[d] > 1 && s.stride[d]*bits%8 != 0 {
				aligned = false
			}
		}
		if s.first()*bits%8 != 0 || !aligned {
			return selection{}, ErrMisalignedSlice, fmt.Sprintf("slice of %s does not start and end on byte boundaries", dt)
		}
	}
	return s, 0, ""
}

// first returns the selection's first element.
func (s *selection) first() int64 {
	var first int64
	for d := 0; d <= s.k; d++ {
		first += s.starts[d] * s.stride[d]
	}
	return first
}

// Tensor returns the tensor the view selects from.
func (s *SliceView) Tensor() *Tensor { return s.t }

// DType returns the element type.
func (s *SliceView) DType() dtype.DType { return s.t.info.DType }

// Shape returns the shape of the selection (dimensions selected with At
// removed).
func (s *SliceView) Shape() []int64 { return slices.Clone(s.shape) }

// NumElements returns the number of selected elements.
func (s *SliceView) NumElements() int64 { return s.elems }

// ByteLen returns the size of the selection in bytes.
func (s *SliceView) ByteLen() int64 { return s.elems * int64(s.t.info.DType.Bits()) / 8 }

// Contiguous reports whether the selection is one contiguous byte range of
// the tensor.
func (s *SliceView) Contiguous() bool { return s.chunks <= 1 }

// Spans iterates over the contiguous byte ranges of the selection in order,
// as (offset within the tensor's data, length) pairs.
func (s *SliceView) Spans() iter.Seq2[int64, int64] {
	bits := int64(s.t.info.DType.Bits())
	return func(yield func(int64, int64) bool) {
		if s.chunks == 0 {
			return
		}
		if s.k < 0 {
			yield(0, s.chunk*bits/8)
			return
		}
		idx := make([]int64, s.k) // odometer over dims [0, k)
		length := s.chunk * bits / 8
		for {
			e := s.starts[s.k] * s.stride[s.k]
			for d := 0; d < s.k; d++ {
				e += (s.starts[d] + idx[d]) * s.stride[d]
			}
			if !yield(e*bits/8, length) {
				return
			}
			d := s.k - 1
			for ; d >= 0; d-- {
				idx[d]++
				if idx[d] < s.counts[d] {
					break
				}
				idx[d] = 0
			}
			if d < 0 {
				return
			}
		}
	}
}

// Bytes returns the selected bytes. A contiguous selection of a mapped or
// in-memory file is a zero-copy view (with the caveats of Tensor.Bytes);
// anything else is gathered into a new buffer.
func (s *SliceView) Bytes() ([]byte, error) {
	f := s.t.f
	if s.Contiguous() && f.data != nil {
		var off int64
		for o := range s.Spans() {
			off = o
		}
		b, err := s.t.Bytes()
		if err != nil {
			return nil, err
		}
		return b[off : off+s.ByteLen() : off+s.ByteLen()], nil
	}
	out := make([]byte, s.ByteLen())
	if err := s.ReadTo(out); err != nil {
		return nil, err
	}
	return out, nil
}

// ReadTo copies the selected bytes, in row-major order, into dst, which
// must be exactly ByteLen bytes long.
func (s *SliceView) ReadTo(dst []byte) error {
	if int64(len(dst)) != s.ByteLen() {
		return s.t.err(ErrInvalidArgument, fmt.Sprintf("destination is %d bytes, slice has %d", len(dst), s.ByteLen()))
	}
	f := s.t.f
	base := f.hdr.DataOffset + s.t.info.Begin
	name := s.t.info.Name
	if err := f.rlock(name); err != nil {
		return err
	}
	defer f.mu.RUnlock()
	if f.usePread() {
		var pos int64
		for off, n := range s.Spans() {
			if err := f.readAt(name, dst[pos:pos+n], base+off); err != nil {
				return err
			}
			pos += n
		}
		return nil
	}
	if base+s.t.info.ByteLen() > int64(len(f.data)) {
		return s.t.err(ErrIO, "tensor extends past the mapped file")
	}
	return f.protect(name, func() {
		var pos int64
		for off, n := range s.Spans() {
			copy(dst[pos:pos+n], f.data[base+off:base+off+n])
			pos += n
		}
	})
}

// ConvertTo reads the selection converted to dtype to into dst, which must
// hold exactly NumElements elements of to (see Tensor.ConvertTo).
func (s *SliceView) ConvertTo(to dtype.DType, dst []byte, opts dtype.Options) (dtype.Stats, error) {
	from := s.t.info.DType
	if !validDType(to) {
		return dtype.Stats{}, s.t.err(ErrUnknownDType, fmt.Sprintf("unknown target dtype %v", to))
	}
	want, err := to.ByteLen(s.elems)
	if err != nil {
		return dtype.Stats{}, &Error{Kind: ErrMisalignedSlice, File: s.t.f.path, Tensor: s.t.info.Name, Err: err}
	}
	if int64(len(dst)) != want {
		return dtype.Stats{}, s.t.err(ErrInvalidArgument, fmt.Sprintf("destination is %d bytes, %d elements of %s need %d", len(dst), s.elems, to, want))
	}
	if to == from {
		return dtype.Stats{Elements: s.elems}, s.ReadTo(dst)
	}
	fb, tb := int64(from.Bits()), int64(to.Bits())
	if s.chunks > 1 && (s.chunk*tb)%8 != 0 {
		return dtype.Stats{}, s.t.err(ErrMisalignedSlice, fmt.Sprintf("pieces of the slice do not fill whole bytes of %s", to))
	}
	f := s.t.f
	base := f.hdr.DataOffset + s.t.info.Begin
	var total dtype.Stats
	var pos int64
	for off, n := range s.Spans() {
		m := n * 8 / fb * tb / 8
		st, err := f.convertRange(s.t.info.Name, dst[pos:pos+m], to, base+off, n, from, opts)
		total.Add(st)
		if err != nil {
			return total, err
		}
		pos += m
	}
	return total, nil
}
