//go:build !linux

package sysmem

import "os"

// FileSystem outside Linux only checks that path exists: it returns Type
// "unknown" and Network false (the loader then keeps mmap). The error is an
// *os.PathError for a path that cannot be stat'ed.
func FileSystem(path string) (FS, error) {
	if _, err := os.Stat(path); err != nil {
		return FS{}, err
	}
	return FS{Type: "unknown"}, nil
}
