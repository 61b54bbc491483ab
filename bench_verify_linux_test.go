package ckpt

import (
	"os"
	"syscall"
	"testing"
)

// dropCache drops the file's pages from the page cache
// (POSIX_FADV_DONTNEED; the file must not be mapped).
func dropCache(b *testing.B, path string) {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	const fadvDontNeed = 4
	if _, _, e := syscall.Syscall6(syscall.SYS_FADVISE64, f.Fd(), 0, 0, fadvDontNeed, 0, 0); e != 0 {
		b.Skip("fadvise: ", e)
	}
}
