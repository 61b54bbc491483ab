package dtype

// archKernel returns a vectorized kernel for the pair, or nil when there is
// none and the portable kernel must be used.
func archKernel(from, to DType) kernel { return nil }
