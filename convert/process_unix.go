//go:build unix

package convert

import (
	"errors"
	"syscall"
)

// processRunning reports whether a process of this id runs on this host
// (signal 0 checks without signalling; EPERM means it runs as another
// user).
func processRunning(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
