package pagecache

import (
	"os"
	"syscall"
	"unsafe"
)

// Drop releases the whole pages inside b, a part of a read-only file
// mapping, from this process (MADV_DONTNEED): its resident size shrinks,
// the page cache keeps the data, and a later read faults it back in. The
// partial pages at either end of b are kept.
func Drop(b []byte) {
	ps := os.Getpagesize()
	if len(b) < ps {
		return
	}
	start := 0
	if r := int(uintptr(unsafe.Pointer(unsafe.SliceData(b))) % uintptr(ps)); r != 0 {
		start = ps - r
	}
	end := start + (len(b)-start)/ps*ps
	if end > start {
		_ = syscall.Madvise(b[start:end], syscall.MADV_DONTNEED)
	}
}
