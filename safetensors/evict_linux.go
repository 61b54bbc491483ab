package safetensors

import (
	"os"
	"syscall"
	"unsafe"
)

// dropPages releases the whole pages inside b, a part of a read-only file
// mapping, from this process (MADV_DONTNEED): its resident size shrinks,
// the page cache keeps the data, and a later read faults it back in.
func dropPages(b []byte) {
	ps := os.Getpagesize()
	if len(b) < ps {
		return
	}
	start := 0
	if r := int(uintptrOf(b) % uintptr(ps)); r != 0 {
		start = ps - r
	}
	end := start + (len(b)-start)/ps*ps
	if end > start {
		_ = syscall.Madvise(b[start:end], syscall.MADV_DONTNEED)
	}
}

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
