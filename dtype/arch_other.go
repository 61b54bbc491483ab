//go:build (!amd64 && !arm64) || purego

package dtype

// archKernel returns nil: without assembly (other architectures, or the
// purego build tag) only the portable kernels exist.
func archKernel(from, to DType) kernel { return nil }

// vecKernelFor returns nil: there are no vector kernels in this build.
func vecKernelFor(from, to DType, fallback kernel) kernel { return nil }

// archSumKernel returns nil: there are no summing kernels in this build.
func archSumKernel(from, to DType) sumKernel { return nil }
