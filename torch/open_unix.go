//go:build unix

package torch

import (
	"os"
	"syscall"
)

// openFlags opens without blocking, so that a FIFO planted where a
// checkpoint should be is refused by the fstat that follows instead of
// hanging the open.
const openFlags = os.O_RDONLY | syscall.O_NONBLOCK
