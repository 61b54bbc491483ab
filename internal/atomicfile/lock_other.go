//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly || illumos)

package atomicfile

import "os"

// flockSupported: this platform has no flock; Lock holds nothing.
const flockSupported = false

func openLockFile(path string) (*os.File, error) { return nil, os.ErrInvalid }
func tryLock(*os.File) (bool, error)             { return false, nil }
func probeHeld(*os.File) bool                    { return false }
