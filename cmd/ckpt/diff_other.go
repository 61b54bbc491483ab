//go:build !linux

package main

// dropPages does nothing where madvise is not used: the kernel reclaims
// the file pages diff has read when memory is short.
func dropPages([]byte) {}
