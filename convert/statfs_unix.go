//go:build linux || darwin || freebsd

package convert

import "syscall"

// statfsFree returns the bytes available to unprivileged users on the file
// system holding path (f_bavail × f_bsize).
func statfsFree(path string) (uint64, bool, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, false, err
	}
	return uint64(st.Bavail) * uint64(st.Bsize), true, nil
}
