//go:build !linux

package pagecache

// Drop does nothing where madvise is not used: the kernel reclaims the
// file pages a process has read when memory is short.
func Drop([]byte) {}

// Populate does nothing where madvise is not used: pages fault in as they
// are touched.
func Populate([]byte, bool) {}

// LastPageResident reports true (unknown) where mincore is not used.
func LastPageResident([]byte) bool { return true }
