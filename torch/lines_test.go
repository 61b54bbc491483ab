package torch

import (
	"bytes"
	"io"
	"slices"
	"testing"

	"github.com/ckpt-go/ckpt/dtype"
)

// viewOf returns a Tensor of F32 elements with the given shape and strides
// (its storage is never read), to test the walk over its lines.
func viewOf(shape, stride []int64) *Tensor {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	return &Tensor{dt: dtype.F32, shape: shape, stride: stride, size: 4 * n,
		sf: &shardFile{ar: &archive{r: bytes.NewReader(nil)}}}
}

// TestLines checks lines against the view's own arithmetic for every range
// of elements of small views: each element of the range is reported once,
// at its storage offset and position, and every call reports at least one
// element, so that the walk costs the lines it reports.
func TestLines(t *testing.T) {
	for _, v := range []struct{ shape, stride []int64 }{
		{[]int64{6, 4}, []int64{1, 6}},
		{[]int64{3, 2, 4}, []int64{1, 12, 3}},
		{[]int64{2, 3, 2, 2}, []int64{12, 1, 6, 3}},
		{[]int64{4, 5}, []int64{5, 1}},
		{[]int64{1, 7, 3}, []int64{21, 1, 7}},
		{[]int64{3, 1, 5}, []int64{1, 3, 3}},
		{[]int64{2, 5}, []int64{10, 2}},
	} {
		tn := viewOf(v.shape, v.stride)
		n := tn.size / 4
		offOf := func(e int64) int64 {
			var off int64
			for i, idx := range tn.unravel(e) {
				off += idx * tn.stride[i]
			}
			return off
		}
		m := tn.lineDim()
		rs := int64(1)
		for _, d := range v.shape[m+1:] {
			rs *= d
		}
		for e0 := range n {
			for e1 := e0 + 1; e1 <= n; e1++ {
				seen := make([]int, e1-e0)
				err := tn.lines(e0, e1, func(off, pos, cnt int64) error {
					if cnt < 1 {
						t.Fatalf("%v %v [%d, %d): a line of %d elements", v.shape, v.stride, e0, e1, cnt)
					}
					for k := range cnt {
						p := pos + k*rs
						if p < 0 || p >= e1-e0 {
							t.Fatalf("%v %v [%d, %d): position %d outside", v.shape, v.stride, e0, e1, p)
						}
						seen[p]++
						if want := offOf(e0 + p); off+k*tn.stride[m] != want {
							t.Fatalf("%v %v [%d, %d): element %d at %d, want %d", v.shape, v.stride, e0, e1, e0+p, off+k*tn.stride[m], want)
						}
					}
					return nil
				})
				if err != nil || slices.ContainsFunc(seen, func(c int) bool { return c != 1 }) {
					t.Fatalf("%v %v [%d, %d): %v, elements seen %v", v.shape, v.stride, e0, e1, err, seen)
				}
			}
		}
	}
}

// TestLinesFewElements walks a few elements of a view whose lines are
// short and many ([3, C] with strides [1, 3]: C lines of 3, C = 2^40, a
// view of 12 TiB that is never read): the walk reports the lines of those
// elements only, however many the view has. It used to step over every
// line of the view from the first, so that reading such a view in pieces
// took time quadratic in its size; here that would be 2^40 steps per
// range, and the test would not end.
func TestLinesFewElements(t *testing.T) {
	const c = 1 << 40
	tn := viewOf([]int64{3, c}, []int64{1, 3})
	for _, r := range [][2]int64{{c + 5, c + 1005}, {c - 500, c + 500}, {0, 3}, {3*c - 7, 3 * c}, {2*c + c/2, 2*c + c/2 + 1}} {
		calls := 0
		if err := tn.lines(r[0], r[1], func(_, _, _ int64) error { calls++; return nil }); err != nil {
			t.Fatal(err)
		}
		if want := int(r[1] - r[0]); calls != want {
			t.Errorf("elements [%d, %d): %d lines, want %d", r[0], r[1], calls, want)
		}
	}
	// A whole row: c lines of one element, spanning the whole storage.
	// useLines gives up after span/lineCost of them and reads the span.
	if tn.useLines(0, c, 3*c*4) {
		t.Errorf("a row of %d one-element lines is read line by line", int64(c))
	}
	calls := 0
	_ = tn.lines(0, 4, func(_, _, _ int64) error { calls++; return io.EOF })
	if calls != 1 {
		t.Errorf("lines went on after fn's error: %d calls", calls)
	}
}

// TestGatherTiles gathers transposed views of 1-, 2-, 4- and 8-byte
// elements (whose whole rows gather takes several at a time) from every
// first element, in lengths of whole and partial rows, and compares with
// the views' own arithmetic.
func TestGatherTiles(t *testing.T) {
	for _, dt := range []dtype.DType{dtype.U8, dtype.BF16, dtype.F32, dtype.F64} {
		isz := int64(dt.Bits() / 8)
		for _, v := range []struct{ shape, stride []int64 }{
			{[]int64{37, 70}, []int64{1, 37}},
			{[]int64{2, 19, 70}, []int64{19 * 70, 1, 19}},
			{[]int64{19, 3, 70}, []int64{3, 1, 57}}, // rows of the middle dimension interleave, the first's too
			{[]int64{20, 30}, []int64{2, 40}},       // a step: neighbouring rows two elements apart
		} {
			tn := viewOf(v.shape, v.stride)
			tn.dt = dt
			n := tn.size / 4
			var hi int64
			for i := range v.shape {
				hi += (v.shape[i] - 1) * v.stride[i]
			}
			src := make([]byte, (hi+1)*isz)
			for i := range src {
				src[i] = byte(i*131 + i/7)
			}
			want := make([]byte, n*isz)
			for e := range n {
				var off int64
				for i, idx := range tn.unravel(e) {
					off += idx * v.stride[i]
				}
				copy(want[e*isz:(e+1)*isz], src[off*isz:])
			}
			for first := int64(0); first < n; first += 13 {
				for _, cnt := range []int64{1, 69, 70, 71, 140, 7 * 70, n - first} {
					cnt = min(cnt, n-first)
					dst := make([]byte, cnt*isz)
					tn.gather(dst, src, first, 0)
					if !bytes.Equal(dst, want[first*isz:(first+cnt)*isz]) {
						t.Fatalf("%s %v %v: elements [%d, %d) differ", dt, v.shape, v.stride, first, first+cnt)
					}
				}
			}
		}
	}
}
