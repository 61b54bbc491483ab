//go:build unix

package atomicfile

import (
	"errors"
	"syscall"
)

func isSyncUnsupported(err error) bool {
	return errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOTSUP)
}
