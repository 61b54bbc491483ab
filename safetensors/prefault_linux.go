package safetensors

import (
	"runtime"
	"syscall"
	"unsafe"
)

// prefaultMin is the smallest output that prefault maps ahead: below it,
// the calls cost more than the few page faults they save.
const prefaultMin = 64 << 10

// prefault maps the pages of b, a new output that the caller is about to
// overwrite whole, in one call (MADV_POPULATE_WRITE, Linux 5.14) instead
// of a page fault every 4 KiB, when its memory is fresh from the system
// (a new process's heap, or pages the runtime gave back): its last page
// is not resident (mincore). Memory already in use is left alone (walking
// it again costs more than nothing). It is advice only: it changes no
// byte (a page it maps reads as the zeros it held), and an older kernel
// that refuses it leaves the pages to fault in as they are written.
func prefault(b []byte) {
	if len(b) < prefaultMin {
		return
	}
	const madvPopulateWrite = 23
	ps := uintptr(syscall.Getpagesize())
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	start, end := p&^(ps-1), (p+uintptr(len(b))+ps-1)&^(ps-1)
	var last [1]byte
	if _, _, e := syscall.Syscall(syscall.SYS_MINCORE, end-ps, ps, uintptr(unsafe.Pointer(&last[0]))); e == 0 && last[0]&1 != 0 {
		return
	}
	_, _, _ = syscall.Syscall(syscall.SYS_MADVISE, start, end-start, madvPopulateWrite)
	runtime.KeepAlive(b)
}
