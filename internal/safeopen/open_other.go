//go:build !unix

package safeopen

import "os"

// openRegular opens path read-only and checks that it is a regular file.
// Without O_NONBLOCK on this platform, the check follows the open.
func openRegular(path string) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, &NotRegularError{Path: path, Mode: st.Mode().Type()}
	}
	return f, nil
}
