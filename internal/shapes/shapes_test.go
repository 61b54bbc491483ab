package shapes

import (
	"math"
	"testing"
)

func TestElements(t *testing.T) {
	for _, tc := range []struct {
		shape []int64
		n     int64
		err   string
	}{
		{nil, 1, ""},
		{[]int64{0}, 0, ""},
		{[]int64{2, 3, 4}, 24, ""},
		{[]int64{0, math.MaxInt64, math.MaxInt64}, 0, ""},
		{[]int64{math.MaxInt64}, math.MaxInt64, ""},
		{[]int64{2, -1}, 0, "negative dimension in shape [2 -1]"},
		{[]int64{0, -1}, 0, "negative dimension in shape [0 -1]"},
		{[]int64{1 << 32, 1 << 31}, 0, "shape [4294967296 2147483648] overflows int64"},
		{[]int64{math.MaxInt64, 2}, 0, "shape [9223372036854775807 2] overflows int64"},
	} {
		n, err := Elements(tc.shape)
		if tc.err == "" && (err != nil || n != tc.n) {
			t.Errorf("Elements(%v) = %d, %v; want %d", tc.shape, n, err, tc.n)
		}
		if tc.err != "" && (err == nil || err.Error() != tc.err || n != 0) {
			t.Errorf("Elements(%v) = %d, %v; want error %q", tc.shape, n, err, tc.err)
		}
	}
}
