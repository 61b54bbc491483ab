package testutil

import (
	"fmt"
	"io"
	"io/fs"
	"sync/atomic"
)

// CountingFS is an fs.FS whose files add to N every byte read from them
// with ReadAt: tests use it to check how often a loader reads the same
// stored bytes. The files of FS must be io.ReaderAt (those of os.DirFS
// are); the counting files offer ReadAt and fs.File, nothing else.
type CountingFS struct {
	FS fs.FS
	N  *atomic.Int64
}

// Open opens name of c.FS, counting what is read from it.
func (c CountingFS) Open(name string) (fs.File, error) {
	f, err := c.FS.Open(name)
	if err != nil {
		return nil, err
	}
	return countingFile{f, c.N}, nil
}

type countingFile struct {
	fs.File
	n *atomic.Int64
}

// ReadAt reads from the file at off and counts the bytes read.
func (f countingFile) ReadAt(b []byte, off int64) (int, error) {
	ra, ok := f.File.(io.ReaderAt)
	if !ok {
		return 0, fmt.Errorf("testutil.CountingFS: %T is not an io.ReaderAt", f.File)
	}
	n, err := ra.ReadAt(b, off)
	f.n.Add(int64(n))
	return n, err
}
