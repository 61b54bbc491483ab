//go:build arm64 && !purego

package dtype

// archKernel returns a vectorized kernel for the pair, or nil when there is
// none and the portable kernel must be used.
func archKernel(from, to DType) kernel { return nil }

// vecKernelFor returns the vector kernel for the pair that falls back to
// fallback for special values and tails, or nil when there is none.
func vecKernelFor(from, to DType, fallback kernel) kernel { return nil }
