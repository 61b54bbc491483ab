package sink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/ckpt-go/ckpt/internal/atomicfile"
)

// Dir is the Sink of a folder of a local or shared file system, created
// when the first file is. A file is written to a hidden temporary file
// beside its name (".NAME.tmp-DIGITS", the temporaries of package shard),
// fsynced and renamed into place, and the folder is fsynced; an exclusive
// file is linked into place instead, which fails when the name is taken.
// Removals and links are fsynced too (or, for a Batched Dir, at its next
// Sync). On Linux the disk writes of a large
// file start while it is written (sync_file_range), so that its fsync
// finds little left to do.
// Writers that need more than one file to change together take the lock of
// package shard's set (".PREFIX.safetensors.lock") in Root, as
// convert.Commit does, so that they never run beside a shard.WriteFrom of
// the same set.
type Dir struct {
	dir   string
	batch *dirBatch // nil: every change fsyncs its folder itself
}

// dirBatch holds the folders a batched Dir changed since its last Sync.
type dirBatch struct {
	mu    sync.Mutex
	dirty map[string]bool
}

// NewDir returns the Sink of the folder dir.
func NewDir(dir string) *Dir { return &Dir{dir: dir} }

// Batched returns the Sink of the same folder whose Close, Remove and Link
// do not fsync the folder each: their changes become durable together at
// the next Sync, which fsyncs every folder changed since the one before.
// A writer that makes many changes and orders them with a few barriers
// (package setwrite's Commit: the shards, then the index, then the
// removals) pays a folder fsync per barrier instead of one per change.
// The files themselves are still fsynced by each Close.
func (s *Dir) Batched() *Dir { return &Dir{dir: s.dir, batch: &dirBatch{}} }

// Sync makes the changes of a Batched Dir since its last Sync durable: an
// error matches ErrNotDurable. It does nothing for a Dir that is not
// batched, whose changes are durable when they return.
func (s *Dir) Sync(ctx context.Context) error {
	if s.batch == nil {
		return nil
	}
	s.batch.mu.Lock()
	dirty := s.batch.dirty
	s.batch.dirty = nil
	s.batch.mu.Unlock()
	for _, d := range slices.Sorted(maps.Keys(dirty)) {
		if err := atomicfile.SyncDir(d); err != nil {
			return fmt.Errorf("%w: syncing the folder: %w", ErrNotDurable, err)
		}
	}
	return nil
}

// synced makes a change of the folder dir durable now, or at the next
// Sync of a Batched Dir.
func (s *Dir) synced(dir string) error {
	if s.batch == nil {
		return atomicfile.SyncDir(dir)
	}
	s.batch.mu.Lock()
	if s.batch.dirty == nil {
		s.batch.dirty = map[string]bool{}
	}
	s.batch.dirty[dir] = true
	s.batch.mu.Unlock()
	return nil
}

// Root returns the folder's path.
func (s *Dir) Root() string { return s.dir }

func (s *Dir) path(name string) string { return filepath.Join(s.dir, filepath.FromSlash(name)) }

// Location returns the path of name.
func (s *Dir) Location(name string) string {
	if name == "" || name == "." {
		return s.dir
	}
	return s.path(name)
}

// FS returns the folder as an fs.FS (os.DirFS) that reads as empty while
// the folder does not exist.
func (s *Dir) FS() fs.FS { return dirFS{os.DirFS(s.dir).(fs.StatFS), s.dir} }

// dirFS reads the sink's folder as empty while it does not exist.
type dirFS struct {
	fs.StatFS
	dir string
}

func (d dirFS) ReadDir(name string) ([]fs.DirEntry, error) {
	es, err := fs.ReadDir(d.StatFS, name)
	if name == "." && errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Stat(d.dir); errors.Is(serr, fs.ErrNotExist) {
			return nil, nil
		}
		// Created by another writer since: read what it holds now.
		return fs.ReadDir(d.StatFS, name)
	}
	return es, err
}

// Create starts the temporary file of name (see Dir).
func (s *Dir) Create(ctx context.Context, name string, exclusive bool) (File, error) {
	if !fs.ValidPath(name) || name == "." {
		return nil, &os.PathError{Op: "create", Path: name, Err: fs.ErrInvalid}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p := s.path(name)
	dir := filepath.Dir(p)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := atomicfile.CreateTemp(dir, filepath.Base(p))
	if err != nil {
		return nil, err
	}
	return &dirFile{f: f, w: newWriteback(f), path: p, exclusive: exclusive, sink: s}, nil
}

// Remove removes the file name (a missing file is not an error) and
// fsyncs its folder.
func (s *Dir) Remove(ctx context.Context, name string) error {
	if !fs.ValidPath(name) || name == "." {
		return &os.PathError{Op: "remove", Path: name, Err: fs.ErrInvalid}
	}
	p := s.path(name)
	if err := os.Remove(p); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	return s.synced(filepath.Dir(p))
}

// Link gives the file from the second name to (a hard link) and fsyncs
// the folder; it fails when to exists, or where the file system has no
// hard links.
func (s *Dir) Link(ctx context.Context, from, to string) error {
	for _, n := range []string{from, to} {
		if !fs.ValidPath(n) || n == "." {
			return &os.PathError{Op: "link", Path: n, Err: fs.ErrInvalid}
		}
	}
	if err := os.Link(s.path(from), s.path(to)); err != nil {
		return err
	}
	return s.synced(filepath.Dir(s.path(to)))
}

// writerAt is what a file of a Dir writes through.
type writerAt interface {
	io.Writer
	io.WriterAt
}

type dirFile struct {
	f         *os.File
	w         writerAt // f, or f starting its disk writes early
	path      string
	exclusive bool
	done      bool
	sink      *Dir
}

func (d *dirFile) Write(b []byte) (int, error) {
	if d.done {
		return 0, atomicfile.ErrDone
	}
	return d.w.Write(b)
}

// Reserve does nothing: every byte of a file of a folder can be
// rewritten.
func (d *dirFile) Reserve(int64) error { return nil }

// WriteAt rewrites bytes of the temporary file.
func (d *dirFile) WriteAt(b []byte, off int64) (int, error) {
	if d.done {
		return 0, atomicfile.ErrDone
	}
	return d.w.WriteAt(b, off)
}

func (d *dirFile) Close() error {
	if d.done {
		return atomicfile.ErrDone
	}
	d.done = true
	tmp := d.f.Name()
	fail := func(err error) error {
		d.f.Close()
		os.Remove(tmp)
		return err
	}
	if err := d.f.Chmod(0o644); err != nil {
		return fail(err)
	}
	if err := d.f.Sync(); err != nil {
		return fail(err)
	}
	if err := d.f.Close(); err != nil {
		return fail(err)
	}
	if d.exclusive {
		// A link fails when the name is taken: an exclusive create that
		// is also atomic (the file appears whole).
		// Where links are unsupported (some network and FUSE file
		// systems), a rename after a check: exclusive only against
		// writers that take the set's lock, as convert.Commit does.
		err := os.Link(tmp, d.path)
		if err != nil && !errors.Is(err, fs.ErrExist) {
			if _, serr := os.Lstat(d.path); errors.Is(serr, fs.ErrNotExist) {
				err = os.Rename(tmp, d.path)
			}
		}
		os.Remove(tmp)
		if err != nil {
			return err
		}
	} else if err := os.Rename(tmp, d.path); err != nil {
		return fail(err)
	}
	if err := d.sink.synced(filepath.Dir(d.path)); err != nil {
		return fmt.Errorf("%w: syncing the folder: %w", ErrNotDurable, err)
	}
	return nil
}

func (d *dirFile) Abort() error {
	if d.done {
		return nil
	}
	d.done = true
	d.f.Close()
	if err := os.Remove(d.f.Name()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

var (
	_ Sink      = (*Dir)(nil)
	_ Linker    = (*Dir)(nil)
	_ Syncer    = (*Dir)(nil)
	_ Patchable = (*dirFile)(nil)
)
