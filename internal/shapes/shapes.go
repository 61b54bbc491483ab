// Package shapes counts the elements of tensor shapes, refusing negative
// dimensions and counts past int64, for every package that reads or writes
// shapes (safetensors headers and writers, shard writers, test fixtures).
package shapes

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
)

// Elements returns the number of elements of a tensor of shape s: the
// product of its dimensions, 1 for a scalar (an empty shape). A negative
// dimension, or a product that overflows int64, is an error naming the
// shape.
func Elements(s []int64) (int64, error) {
	n := int64(1)
	for _, d := range s {
		if d < 0 {
			return 0, fmt.Errorf("negative dimension in shape %v", slices.Clone(s))
		}
		hi, lo := bits.Mul64(uint64(n), uint64(d))
		if hi != 0 || lo > math.MaxInt64 {
			// Clone: the error must not keep the caller's slice alive (nor make it escape).
			return 0, fmt.Errorf("shape %v overflows int64", slices.Clone(s))
		}
		n = int64(lo)
	}
	return n, nil
}
