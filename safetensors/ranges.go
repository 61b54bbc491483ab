package safetensors

import (
	"cmp"
	"fmt"
	"iter"
	"slices"

	"github.com/ckpt-go/ckpt/dtype"
)

// Where the parts of a tensor lie in its data: the arithmetic of splitting
// a tensor across ranks (SplitBounds), of the byte ranges that hold the
// part of one dimension (SliceRanges, ByteRange) and of merging ranges into
// requests (Coalesce).

// SplitBounds returns the indices [start, stop) of a dimension of size n
// that rank gets out of world (numpy.array_split): the first n mod world
// ranks get one index more than the others. Arguments outside 0 ≤ rank <
// world, n ≥ 0 give (0, 0).
func SplitBounds(n int64, rank, world int) (start, stop int64) {
	if world < 1 || rank < 0 || rank >= world || n < 0 {
		return 0, 0
	}
	w, r := int64(world), int64(rank)
	q, rem := n/w, n%w
	start = r*q + min(r, rem)
	stop = start + q
	if r < rem {
		stop++
	}
	return start, stop
}

// ByteRange is a regular set of byte ranges: Count ranges of Length bytes,
// the first at Offset and each next one Stride bytes after the previous
// (Stride is 0 when Count ≤ 1). It is how the part of a row-major tensor
// that one index range of one dimension selects lies in the tensor's data.
type ByteRange struct {
	Offset int64 `json:"offset"`
	Length int64 `json:"length"`
	Count  int64 `json:"count"`
	Stride int64 `json:"stride,omitempty"`
}

// Bytes returns the bytes of all the ranges, Length × Count.
func (r ByteRange) Bytes() int64 { return r.Length * r.Count }

// Contiguous reports whether the ranges are one range (or none).
func (r ByteRange) Contiguous() bool { return r.Count <= 1 }

// Extents iterates over the ranges in order, as (offset, length) pairs.
func (r ByteRange) Extents() iter.Seq2[int64, int64] {
	return func(yield func(int64, int64) bool) {
		if r.Length <= 0 {
			return
		}
		for i := int64(0); i < r.Count; i++ {
			if !yield(r.Offset+i*r.Stride, r.Length) {
				return
			}
		}
	}
}

// String writes the ranges as "OFFSET+LENGTH", or
// "OFFSET+LENGTH×COUNT/STRIDE" for several.
func (r ByteRange) String() string {
	if r.Count <= 1 {
		return fmt.Sprintf("%d+%d", r.Offset, r.Bytes())
	}
	return fmt.Sprintf("%d+%d×%d/%d", r.Offset, r.Length, r.Count, r.Stride)
}

// SliceRanges returns where, in the data of a row-major tensor of dtype d and
// shape, the elements whose index along dim lies in [start, stop) are: byte
// ranges relative to the tensor's first byte, coalesced (one range when the
// selection is contiguous: always for dim 0, and whenever the dimensions
// before dim have size 1 or the selection is the whole dimension). It is
// Tensor.Slice's computation for one dimension, as a regular set of ranges:
// what the loader's rank option reads (ckpt.WithRank), and what readers that
// fetch the ranges themselves (ranged GETs) ask for; use it with SplitBounds.
// Errors are *Error values: ErrInvalidArgument ("invalid slice") for a dim or
// bounds outside the shape or a dtype without a size, ErrMisalignedSlice when
// sub-byte elements would not start and end on whole bytes.
func SliceRanges(d dtype.DType, shape []int64, dim int, start, stop int64) (ByteRange, error) {
	fail := func(kind ErrorKind, format string, a ...any) (ByteRange, error) {
		return ByteRange{}, &Error{Kind: kind, Msg: fmt.Sprintf(format, a...)}
	}
	if dim < 0 || dim >= len(shape) {
		return fail(ErrInvalidArgument, "invalid slice: dimension %d of a shape %v", dim, shape)
	}
	for _, n := range shape {
		if n < 0 {
			return fail(ErrInvalidArgument, "invalid slice: negative dimension in shape %v", shape)
		}
	}
	if start < 0 || stop < start || stop > shape[dim] {
		return fail(ErrInvalidArgument, "invalid slice: indices [%d:%d) outside dimension %d of size %d", start, stop, dim, shape[dim])
	}
	bits := int64(d.Bits())
	if bits <= 0 {
		return fail(ErrInvalidArgument, "invalid slice: dtype %v has no size", d)
	}
	ranges := make([]Range, dim+1)
	ranges[dim] = Span(start, stop)
	s, kind, _ := selectRanges(shape, d, ranges)
	if kind != 0 {
		return fail(kind, "indices [%d:%d) of dimension %d of %s %v do not start and end on whole bytes", start, stop, dim, d, shape)
	}
	if s.chunks == 0 {
		return ByteRange{}, nil
	}
	r := ByteRange{Offset: s.first() * bits / 8, Length: s.chunk * bits / 8, Count: s.chunks}
	if s.chunks > 1 {
		// One dimension selected: the dimensions before it are whole, so
		// consecutive chunks lie one row of that dimension apart.
		r.Stride = s.stride[s.k-1] * bits / 8
	}
	return r, nil
}

// Extent is one contiguous range of bytes.
type Extent struct {
	Offset, Length int64
}

// Coalesce returns the extents sorted by offset with those that overlap,
// touch or lie at most gap bytes apart merged, and the empty ones dropped:
// the requests a reader that pays per request (ranged GETs) would make for
// the ranges of several tensors of one file.
func Coalesce(extents []Extent, gap int64) []Extent {
	var out []Extent
	for _, e := range extents {
		if e.Length > 0 {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b Extent) int { return cmp.Compare(a.Offset, b.Offset) })
	n := 0
	for _, e := range out {
		if n > 0 {
			last := &out[n-1]
			if e.Offset <= last.Offset+last.Length+max(gap, 0) {
				last.Length = max(last.Offset+last.Length, e.Offset+e.Length) - last.Offset
				continue
			}
		}
		out[n] = e
		n++
	}
	return out[:n]
}
