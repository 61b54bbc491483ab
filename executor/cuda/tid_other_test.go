//go:build !linux

package cuda

// gettid returns 0: thread ids are read on Linux only.
func gettid() int { return 0 }
