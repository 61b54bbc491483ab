// Package atomicfile writes files atomically: the data goes to a hidden
// temporary file in the target's directory, which is fsynced and renamed over
// the target only on Commit. Until then, and after any failure, the previous
// file at the target path is untouched and readers never see a partial file.
//
// A write holds the target's Lock from Create to Commit or Abort, so writes
// of one target are serialized, and Create removes the temporary files that
// killed writes of the same target left behind.
package atomicfile

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// ErrDone is returned by Write and Commit after the file was committed or
// aborted.
var ErrDone = errors.New("atomicfile: file already committed or aborted")

// File is a pending atomic write. It is not safe for concurrent use.
type File struct {
	f    *os.File
	path string // the target
	tmp  string // the temporary file
	perm fs.FileMode
	lock *Lock
	done bool
}

// Create starts an atomic write of path. It first takes the target's Lock
// (waiting, until ctx is done, while another write of path holds it) and
// removes the temporary files of path that killed writes left. The
// temporary file is created in the same directory (so the final rename
// stays on one file system), named ".NAME.tmp-RANDOM". If path already
// exists, its permission bits are kept; otherwise the new file gets mode
// 0644.
func Create(ctx context.Context, path string) (*File, error) {
	dir, base := filepath.Split(path)
	if base == "" {
		return nil, &os.PathError{Op: "atomicfile.Create", Path: path, Err: errors.New("path names a directory")}
	}
	if dir == "" {
		dir = "."
	}
	perm := fs.FileMode(0o644)
	if st, err := os.Stat(path); err == nil {
		if !st.Mode().IsRegular() {
			return nil, &os.PathError{Op: "atomicfile.Create", Path: path, Err: errors.New("target exists and is not a regular file")}
		}
		perm = st.Mode().Perm()
	}
	lock, err := LockTarget(ctx, dir, base)
	if err != nil {
		return nil, err
	}
	if lock.Exclusive() {
		removeStaleTemps(dir, base)
	}
	f, err := CreateTemp(dir, base)
	if err != nil {
		lock.Unlock()
		return nil, err
	}
	return &File{f: f, path: path, tmp: f.Name(), perm: perm, lock: lock}, nil
}

// Name returns the path of the temporary file.
func (f *File) Name() string { return f.tmp }

// Path returns the target path.
func (f *File) Path() string { return f.path }

// Write writes to the temporary file.
func (f *File) Write(p []byte) (int, error) {
	if f.done {
		return 0, ErrDone
	}
	return f.f.Write(p)
}

// WriteAt writes to the temporary file at offset off (a writer patching
// a header it wrote first).
func (f *File) WriteAt(p []byte, off int64) (int, error) {
	if f.done {
		return 0, ErrDone
	}
	return f.f.WriteAt(p, off)
}

// Commit makes the write durable and visible: it fsyncs the temporary file,
// closes it, renames it over the target and fsyncs the directory. On any
// error the temporary file is removed and the target is left as it was
// (unless the rename itself succeeded and only the directory sync failed, in
// which case the error says so). Commit after Commit or Abort returns ErrDone.
func (f *File) Commit() error {
	if f.done {
		return ErrDone
	}
	f.done = true
	defer f.lock.Unlock()
	if err := f.f.Chmod(f.perm); err != nil {
		f.cleanup()
		return fmt.Errorf("atomicfile: chmod %s: %w", f.tmp, err)
	}
	if err := f.f.Sync(); err != nil {
		f.cleanup()
		return fmt.Errorf("atomicfile: fsync %s: %w", f.tmp, err)
	}
	if err := f.f.Close(); err != nil {
		_ = os.Remove(f.tmp)
		return fmt.Errorf("atomicfile: close %s: %w", f.tmp, err)
	}
	if err := os.Rename(f.tmp, f.path); err != nil {
		_ = os.Remove(f.tmp)
		return fmt.Errorf("atomicfile: rename to %s: %w", f.path, err)
	}
	if err := SyncDir(filepath.Dir(f.path)); err != nil {
		return fmt.Errorf("atomicfile: %s renamed but directory fsync failed: %w", f.path, err)
	}
	return nil
}

// Abort discards the write: it closes and removes the temporary file. The
// target is untouched. Abort after Commit or Abort is a no-op returning nil,
// so it can be deferred unconditionally.
func (f *File) Abort() error {
	if f.done {
		return nil
	}
	f.done = true
	defer f.lock.Unlock()
	return f.cleanup()
}

func (f *File) cleanup() error {
	cerr := f.f.Close()
	rerr := os.Remove(f.tmp)
	if rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
		return rerr
	}
	if cerr != nil && !errors.Is(cerr, os.ErrClosed) {
		return cerr
	}
	return nil
}

// SyncDir fsyncs a directory so a rename in it is durable. File systems and
// platforms that cannot sync directories (EINVAL, or Windows) are tolerated.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !isSyncUnsupported(err) {
		return err
	}
	return nil
}
