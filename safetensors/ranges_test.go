package safetensors_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/safetensors"
)

func TestSplitBounds(t *testing.T) {
	for _, c := range []struct {
		n     int64
		world int
		want  []int64 // sizes per rank
	}{
		{10, 4, []int64{3, 3, 2, 2}}, // numpy.array_split(range(10), 4)
		{5, 4, []int64{2, 1, 1, 1}},  // torch.chunk would give 2, 2, 1, 0
		{3, 4, []int64{1, 1, 1, 0}},
		{8, 4, []int64{2, 2, 2, 2}},
		{0, 3, []int64{0, 0, 0}},
		{7, 1, []int64{7}},
	} {
		var next int64
		for r, size := range c.want {
			start, stop := safetensors.SplitBounds(c.n, r, c.world)
			if start != next || stop-start != size {
				t.Errorf("safetensors.SplitBounds(%d, %d, %d) = [%d, %d), want [%d, %d)", c.n, r, c.world, start, stop, next, next+size)
			}
			next = stop
		}
		if next != c.n {
			t.Errorf("n %d world %d: parts end at %d", c.n, c.world, next)
		}
	}
	for _, bad := range [][3]int64{{4, -1, 2}, {4, 2, 2}, {4, 0, 0}, {-1, 0, 1}} {
		if a, b := safetensors.SplitBounds(bad[0], int(bad[1]), int(bad[2])); a != 0 || b != 0 {
			t.Errorf("SplitBounds%v = %d, %d", bad, a, b)
		}
	}
}

// SliceRanges gives the spans of Tensor.Slice for one dimension as one
// regular set of ranges, on every dimension and bounds of several shapes,
// coalesced into one range whenever the spans are contiguous.
func TestSliceRangesMatchSliceView(t *testing.T) {
	for _, shape := range [][]int64{{7}, {6, 5}, {1, 4, 3}, {3, 4, 5}, {2, 1, 3, 2}, {4, 0, 3}} {
		data, _ := ckpttest.Fill("x", dtype.BF16, shape)
		f, err := safetensors.OpenBytes(mustEncodeRanges(t, ckpttest.Tensor{Name: "x", DType: dtype.BF16, Shape: shape, Data: data}))
		if err != nil {
			t.Fatal(err)
		}
		x, _ := f.Tensor("x")
		for dim := range shape {
			for start := int64(0); start <= shape[dim]; start++ {
				for stop := start; stop <= shape[dim]; stop++ {
					r, err := safetensors.SliceRanges(dtype.BF16, shape, dim, start, stop)
					if err != nil {
						t.Fatal(err)
					}
					ranges := make([]safetensors.Range, dim+1)
					ranges[dim] = safetensors.Span(start, stop)
					sv, err := x.Slice(ranges...)
					if err != nil {
						t.Fatal(err)
					}
					var want []safetensors.Extent
					for off, n := range sv.Spans() {
						want = append(want, safetensors.Extent{off, n})
					}
					want = safetensors.Coalesce(want, 0)
					var got []safetensors.Extent
					for off, n := range r.Extents() {
						got = append(got, safetensors.Extent{off, n})
					}
					if !slices.Equal(got, want) || r.Bytes() != sv.ByteLen() {
						t.Fatalf("%v dim %d [%d:%d): %v = %v, want %v", shape, dim, start, stop, r, got, want)
					}
					if r.Count > 1 && r.Length == r.Stride {
						t.Fatalf("%v: adjacent ranges not coalesced", r)
					}
				}
			}
		}
	}
	if _, err := safetensors.SliceRanges(dtype.F4, []int64{4, 3}, 1, 0, 1); !errors.Is(err, safetensors.ErrMisalignedSlice) {
		t.Errorf("F4 half bytes: %v", err)
	}
	if _, err := safetensors.SliceRanges(dtype.F32, []int64{4, 3}, 2, 0, 1); !errors.Is(err, safetensors.ErrInvalidArgument) || !strings.Contains(err.Error(), ": invalid slice: ") {
		t.Errorf("dim beyond rank: %v", err)
	}
	if _, err := safetensors.SliceRanges(dtype.F32, []int64{4, 3}, 0, 2, 5); !errors.Is(err, safetensors.ErrInvalidArgument) || !strings.Contains(err.Error(), ": invalid slice: ") {
		t.Errorf("bounds: %v", err)
	}
}

func mustEncodeRanges(t *testing.T, ts ...ckpttest.Tensor) []byte {
	t.Helper()
	b, err := ckpttest.Encode(ts, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCoalesce(t *testing.T) {
	got := safetensors.Coalesce([]safetensors.Extent{{100, 10}, {0, 10}, {10, 5}, {40, 0}, {112, 8}, {50, 20}, {60, 5}}, 2)
	want := []safetensors.Extent{{0, 15}, {50, 20}, {100, 20}}
	if !slices.Equal(got, want) {
		t.Errorf("Coalesce = %v, want %v", got, want)
	}
	if got := safetensors.Coalesce([]safetensors.Extent{{0, 10}, {11, 1}}, 0); len(got) != 2 {
		t.Errorf("gap 0 merged a hole: %v", got)
	}
}
