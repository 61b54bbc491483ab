//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly || illumos

package atomicfile

import (
	"errors"
	"os"
	"syscall"
)

const flockSupported = true

// openLockFile opens (creating) the lock file without following a symlink,
// so a planted link cannot make a save open or create another file.
func openLockFile(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o644)
}

// tryLock takes an exclusive flock without waiting; false when another
// open file holds one.
func tryLock(f *os.File) (bool, error) {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, syscall.EWOULDBLOCK):
			return false, nil
		case errors.Is(err, syscall.EINTR):
			continue
		}
		return false, err
	}
}

// probeHeld reports whether another open file holds a lock on f's file.
func probeHeld(f *os.File) bool {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
	if err == nil {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		return false
	}
	return errors.Is(err, syscall.EWOULDBLOCK)
}
