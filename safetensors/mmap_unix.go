//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package safetensors

import (
	"math"
	"os"
	"syscall"
)

const mmapSupported = true

// mmapFile maps the first size bytes of f read-only and shared. (It uses the
// standard syscall package, which provides the same call as x/sys/unix on
// these platforms.)
func mmapFile(f *os.File, size int64) ([]byte, error) {
	if size <= 0 || uint64(size) > math.MaxInt {
		return nil, syscall.EINVAL
	}
	return syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
}

func munmap(b []byte) error { return syscall.Munmap(b) }
