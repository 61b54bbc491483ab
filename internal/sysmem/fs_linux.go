//go:build linux

package sysmem

import (
	"os"
	"syscall"
)

// FileSystem reports the file system holding path, from statfs(2). The
// error is an *os.PathError (errors.Is(err, fs.ErrNotExist) for a missing
// path).
func FileSystem(path string) (FS, error) {
	var st syscall.Statfs_t
	for {
		err := syscall.Statfs(path, &st)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return FS{}, &os.PathError{Op: "statfs", Path: path, Err: err}
		}
		break
	}
	// f_type is int64, int32 or uint32 depending on the architecture; the
	// magic numbers are 32-bit (CIFS's 0xFF534D42 is negative as an int32).
	return fsFromMagic(uint32(st.Type)), nil
}
