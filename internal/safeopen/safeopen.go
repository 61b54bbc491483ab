// Package safeopen opens the files of a checkpoint (safetensors files,
// indexes, model_index.json) for reading without ever blocking on something
// that is not a regular file, and reads small files with their size checked
// before any byte is read.
//
// Open follows symbolic links, opens without blocking (O_NONBLOCK on unix,
// so that a FIFO without a writer or a device does not hang the open), then
// checks with fstat on the open descriptor, not on the name, that it holds a
// regular file: anything else (FIFO, character or block device, socket,
// folder) is refused with an error matching ErrNotRegular that names the
// path. Only then is O_NONBLOCK cleared and the *os.File handed out. (On
// platforms without O_NONBLOCK the check follows a plain open.)
//
// Where the name must also stay inside a folder, the caller resolves and
// checks it first (package pathutil) and opens the resolved path.
package safeopen

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// ErrNotRegular is matched (errors.Is) by the errors of Open and ReadFile
// for a path that is not a regular file once links are followed.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is matched (errors.Is) by the error of ReadFile for a file
// larger than the limit it was given.
var ErrTooLarge = errors.New("file too large")

// NotRegularError is the error for a path that is not a regular file.
type NotRegularError struct {
	Path string
	Mode fs.FileMode // the type bits fstat reported
}

// Error names the path and what it is.
func (e *NotRegularError) Error() string {
	return fmt.Sprintf("%s: %s, not a regular file", e.Path, Describe(e.Mode))
}

// Is matches ErrNotRegular.
func (e *NotRegularError) Is(target error) bool { return target == ErrNotRegular }

// TooLargeError is the error of ReadFile for a file over its limit.
type TooLargeError struct {
	Path      string
	Size, Max int64
}

// Error names the path, its size and the limit.
func (e *TooLargeError) Error() string {
	return fmt.Sprintf("%s: %d bytes, more than the %d allowed", e.Path, e.Size, e.Max)
}

// Is matches ErrTooLarge.
func (e *TooLargeError) Is(target error) bool { return target == ErrTooLarge }

// Describe names the file type of mode for people: "a named pipe (FIFO)",
// "a character device", ...
func Describe(mode fs.FileMode) string {
	switch {
	case mode.IsRegular():
		return "a regular file"
	case mode.IsDir():
		return "a folder"
	case mode&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case mode&fs.ModeCharDevice != 0:
		return "a character device"
	case mode&fs.ModeDevice != 0:
		return "a block device"
	case mode&fs.ModeSocket != 0:
		return "a socket"
	case mode&fs.ModeSymlink != 0:
		return "a symbolic link"
	case mode&fs.ModeIrregular != 0:
		return "an irregular file"
	}
	return "a special file (" + mode.Type().String() + ")"
}

// Open opens path for reading; see the package documentation. The returned
// FileInfo is the open file's (fstat). A path that does not exist gives an
// error matching fs.ErrNotExist; one that is not a regular file, an error
// matching ErrNotRegular; both name the path.
func Open(path string) (*os.File, fs.FileInfo, error) {
	f, err := openRegular(path)
	if err != nil {
		// Some special files cannot be opened at all (a unix socket:
		// ENXIO): say what they are rather than how the open failed.
		var nr *NotRegularError
		if !errors.As(err, &nr) && !errors.Is(err, fs.ErrNotExist) {
			if st, serr := os.Stat(path); serr == nil && !st.Mode().IsRegular() {
				return nil, nil, &NotRegularError{Path: path, Mode: st.Mode().Type()}
			}
		}
		return nil, nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, st, nil
}

// ReadFile reads the whole regular file at path, refusing it (ErrTooLarge)
// when fstat says it has more than max bytes, before reading any. A file
// that grows past max while it is read is refused too.
func ReadFile(path string, max int64) ([]byte, error) {
	f, st, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st.Size() > max {
		return nil, &TooLargeError{Path: path, Size: st.Size(), Max: max}
	}
	return readAtMost(f, path, st.Size(), max)
}

// readAtMost reads r, which Stat said holds size bytes, refusing it
// (TooLargeError) when it turns out to hold more than max. Errors name
// name.
func readAtMost(r io.Reader, name string, size, max int64) ([]byte, error) {
	data := make([]byte, 0, size+1) // +1: room to see EOF without growing
	data, err := readAll(io.LimitReader(r, max+1), data)
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: name, Err: err}
	}
	if int64(len(data)) > max {
		return nil, &TooLargeError{Path: name, Size: int64(len(data)), Max: max}
	}
	return data, nil
}

// readAll is io.ReadAll appending to data.
func readAll(r io.Reader, data []byte) ([]byte, error) {
	for {
		if len(data) == cap(data) {
			data = append(data, 0)[:len(data)]
		}
		n, err := r.Read(data[len(data):cap(data)])
		data = data[:len(data)+n]
		if err == io.EOF {
			return data, nil
		}
		if err != nil {
			return data, err
		}
	}
}

// ReadFileFS is ReadFile for the file name of fsys: it must be a regular
// file (NotRegularError) of at most max bytes (TooLargeError), both checked
// with Stat before any byte is read; a file that turns out longer while it
// is read is refused too. Errors name name.
func ReadFileFS(fsys fs.FS, name string, max int64) ([]byte, error) {
	st, err := fs.Stat(fsys, name)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, &NotRegularError{Path: name, Mode: st.Mode().Type()}
	}
	if st.Size() > max {
		return nil, &TooLargeError{Path: name, Size: st.Size(), Max: max}
	}
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readAtMost(f, name, st.Size(), max)
}

// OpenFS is Open for the file name of fsys: it returns the open file and
// its FileInfo (the open file's Stat), refusing what is not a regular file
// with a NotRegularError naming name. When fsys implements fs.StatFS the
// name is stat-ed before it is opened, so that a FIFO or a device is
// refused without an open that could block; otherwise it is checked on
// the open file. Other errors are fsys's, as they are.
func OpenFS(fsys fs.FS, name string) (fs.File, fs.FileInfo, error) {
	if sfs, ok := fsys.(fs.StatFS); ok {
		st, err := sfs.Stat(name)
		if err != nil {
			return nil, nil, err
		}
		if !st.Mode().IsRegular() {
			return nil, nil, &NotRegularError{Path: name, Mode: st.Mode().Type()}
		}
	}
	f, err := fsys.Open(name)
	if err != nil {
		return nil, nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, nil, &NotRegularError{Path: name, Mode: st.Mode().Type()}
	}
	return f, st, nil
}
