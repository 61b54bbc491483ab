package main

import (
	"os"
	"syscall"
	"unsafe"
)

// dropPages releases the whole pages inside b, a part of a read-only file
// mapping that diff has compared, from this process (MADV_DONTNEED): the
// resident size stays small however large the checkpoints are, the page
// cache keeps the data.
func dropPages(b []byte) {
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
