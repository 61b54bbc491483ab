package ckpt

import (
	"runtime"
	"syscall"
	"unsafe"
)

// adviseHuge asks for transparent huge pages on a large anonymous mapping;
// it is advice only.
func adviseHuge(b []byte) { _ = syscall.Madvise(b, syscall.MADV_HUGEPAGE) }

// populate maps the pages of b, a part of a file's mapping, in one call
// (MADV_POPULATE_READ, Linux 5.14) instead of a fault every few pages; it
// is advice only (older kernels refuse it, and the pages fault in as
// they are read). The range is widened to whole pages.
func populate(b []byte) {
	if len(b) == 0 {
		return
	}
	const madvPopulateRead = 22
	p := uintptr(unsafe.Pointer(&b[0]))
	start := p &^ uintptr(syscall.Getpagesize()-1)
	_, _, _ = syscall.Syscall(syscall.SYS_MADVISE, start, p-start+uintptr(len(b)), madvPopulateRead)
	runtime.KeepAlive(b)
}
