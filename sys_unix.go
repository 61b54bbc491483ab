//go:build unix

package ckpt

import "syscall"

const oNonblock = syscall.O_NONBLOCK
