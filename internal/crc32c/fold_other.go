//go:build !amd64 || purego

package crc32c

// best is nil: without the amd64 kernels (other architectures, or the
// purego build tag) hash/crc32 does all the work.
var best *kernel

// kernels lists the folding kernels this build and CPU can run: none.
func kernels() []*kernel { return nil }
