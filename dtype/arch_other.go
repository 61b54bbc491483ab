//go:build !amd64 && !arm64

package dtype

// archKernel returns nil: this architecture has only the portable kernels.
func archKernel(from, to DType) kernel { return nil }
