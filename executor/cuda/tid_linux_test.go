//go:build linux

package cuda

import "syscall"

// gettid returns the OS thread id (0 where there is none to read).
func gettid() int { return syscall.Gettid() }
