package convert

import (
	"errors"
	"os"
	"runtime"
	"syscall"
	"unsafe"
)

// renameat2 system call numbers (Linux 3.15+); other architectures fall
// back to moving the old folder aside.
var renameat2Nums = map[string]uintptr{
	"amd64": 316, "arm64": 276, "riscv64": 276, "loong64": 276,
	"386": 353, "arm": 382, "ppc64": 357, "ppc64le": 357, "s390x": 347,
}

// exchange swaps the folders a and b in one atomic step
// (renameat2(RENAME_EXCHANGE)). errExchangeUnsupported means the kernel,
// the architecture or the file system cannot.
func exchange(a, b string) error {
	nr, ok := renameat2Nums[runtime.GOARCH]
	if !ok {
		return errExchangeUnsupported
	}
	pa, err := syscall.BytePtrFromString(a)
	if err != nil {
		return err
	}
	pb, err := syscall.BytePtrFromString(b)
	if err != nil {
		return err
	}
	const renameExchange = 1 << 1
	cwd := -100 // AT_FDCWD
	_, _, e := syscall.Syscall6(nr, uintptr(cwd), uintptr(unsafe.Pointer(pa)), uintptr(cwd), uintptr(unsafe.Pointer(pb)), renameExchange, 0)
	runtime.KeepAlive(pa)
	runtime.KeepAlive(pb)
	switch {
	case e == 0:
		return nil
	case errors.Is(e, syscall.ENOSYS), errors.Is(e, syscall.EINVAL), errors.Is(e, syscall.ENOTSUP):
		return errExchangeUnsupported
	}
	return &os.LinkError{Op: "renameat2 exchange", Old: a, New: b, Err: e}
}
