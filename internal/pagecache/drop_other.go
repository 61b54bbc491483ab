//go:build !linux

package pagecache

// Drop does nothing where madvise is not used: the kernel reclaims the
// file pages a process has read when memory is short.
func Drop([]byte) {}
