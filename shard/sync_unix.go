//go:build unix

package shard

import (
	"errors"
	"syscall"
)

// syncUnsupported reports errors of file systems that cannot fsync a folder.
func syncUnsupported(err error) bool {
	return errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOTSUP)
}
