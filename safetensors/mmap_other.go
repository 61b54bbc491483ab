//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package safetensors

import (
	"errors"
	"os"
)

const mmapSupported = false

var errNoMmap = errors.New("memory mapping not supported on this platform")

func mmapFile(f *os.File, size int64) ([]byte, error) { return nil, errNoMmap }

func munmap(b []byte) error { return nil }
