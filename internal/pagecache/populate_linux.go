package pagecache

import (
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Populate maps the pages of b in one call instead of a page fault every
// few pages (MADV_POPULATE_READ, or MADV_POPULATE_WRITE with write: Linux
// 5.14), widened to whole pages. It is advice only: it changes no byte,
// and an older kernel that refuses it leaves the pages to fault in as
// they are touched. write is for memory the caller is about to overwrite
// (a new output), read for a file's mapping it is about to read.
func Populate(b []byte, write bool) {
	if len(b) == 0 {
		return
	}
	advice := unix.MADV_POPULATE_READ
	if write {
		advice = unix.MADV_POPULATE_WRITE
	}
	start, end := pages(b)
	_, _, _ = unix.Syscall(unix.SYS_MADVISE, start, end-start, uintptr(advice))
	runtime.KeepAlive(b)
}

// LastPageResident reports whether the last page of b is in memory
// (mincore): memory fresh from the system is not, until it is touched.
func LastPageResident(b []byte) bool {
	if len(b) == 0 {
		return true
	}
	_, end := pages(b)
	ps := uintptr(os.Getpagesize())
	var vec [1]byte
	_, _, e := unix.Syscall(unix.SYS_MINCORE, end-ps, ps, uintptr(unsafe.Pointer(&vec[0])))
	runtime.KeepAlive(b)
	if e != 0 {
		return true // unknown: take it as in use
	}
	return vec[0]&1 != 0
}

// pages returns the addresses of the whole pages that hold b, as madvise
// and mincore take them. They are only addresses: the pages may hold other
// Go objects, so no slice is made of them.
func pages(b []byte) (start, end uintptr) {
	ps := uintptr(os.Getpagesize())
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return p &^ (ps - 1), (p + uintptr(len(b)) + ps - 1) &^ (ps - 1)
}
