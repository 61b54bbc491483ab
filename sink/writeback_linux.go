package sink

import (
	"os"

	"golang.org/x/sys/unix"
)

// writebackEvery is how many bytes a file of a Dir lets accumulate before
// it asks the kernel to start writing them to disk.
const writebackEvery = 32 << 20

// writeback passes writes to f and, every writebackEvery bytes, starts the
// disk writes of what was written (sync_file_range with
// SYNC_FILE_RANGE_WRITE: asynchronous, no wait), so that the fsync of
// Close finds little left to do instead of the whole shard: the disk
// works while the rest is produced. Errors of the hint are ignored; the
// fsync reports real ones.
type writeback struct {
	f          *os.File
	off, start int64
}

func newWriteback(f *os.File) writerAt { return &writeback{f: f} }

// WriteAt rewrites bytes written earlier (a header's checksums, filled in
// after the data).
func (w *writeback) WriteAt(b []byte, off int64) (int, error) { return w.f.WriteAt(b, off) }

func (w *writeback) Write(b []byte) (int, error) {
	n, err := w.f.Write(b)
	w.off += int64(n)
	if w.off-w.start >= writebackEvery {
		unix.SyncFileRange(int(w.f.Fd()), w.start, w.off-w.start, unix.SYNC_FILE_RANGE_WRITE)
		w.start = w.off
	}
	return n, err
}
