//go:build !amd64 || purego

package crc32c

// best and bestIEEE are nil: without the amd64 kernels (other
// architectures, or the purego build tag) hash/crc32 does all the work.
var best, bestIEEE *kernel

// kernels lists the folding kernels this build and CPU can run: none.
func kernels() []*kernel { return nil }

// foldConsts: no kernel reads folding constants.
func foldConsts(uint32) *[14]uint64 { return nil }

// castagnoliReduce is nil: no kernel leaves a remainder to reduce.
var castagnoliReduce func(lo, hi uint64) uint32
