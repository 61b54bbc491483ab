package pagecache

import (
	"os"
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
	_ = unix.Madvise(pages(b), advice)
}

// LastPageResident reports whether the last page of b is in memory
// (mincore): memory fresh from the system is not, until it is touched.
func LastPageResident(b []byte) bool {
	if len(b) == 0 {
		return true
	}
	w := pages(b)
	var vec [1]byte
	last := uintptr(unsafe.Pointer(&w[len(w)-os.Getpagesize()]))
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, last, uintptr(os.Getpagesize()), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		return true // unknown: take it as in use
	}
	return vec[0]&1 != 0
}

// pages returns b widened to whole pages (the same memory, as madvise and
// mincore take it).
func pages(b []byte) []byte {
	ps := uintptr(os.Getpagesize())
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	start, end := p&^(ps-1), (p+uintptr(len(b))+ps-1)&^(ps-1)
	return unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(b)), -int(p-start))), end-start)
}
