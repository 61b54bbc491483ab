package convert

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/ckpt-go/ckpt/internal/atomicfile"
	"github.com/ckpt-go/ckpt/source"
)

// Sink is a folder that checkpoints are written into: a folder of a local
// or shared file system (NewDirSink, what a path without a scheme opens),
// or a key prefix of an object store, opened through the function
// registered for its scheme (RegisterSink; package remote registers s3://).
// SaveShard and Commit write through a Sink, and so do Save and Run to a
// location with a scheme.
//
// Names are slash-separated and relative to the sink's root (fs.ValidPath
// names). A Sink is safe for concurrent use.
type Sink interface {
	// Create starts writing the file name. Nothing is visible under name
	// before the returned file's Close returns nil; then the whole file
	// is, durably, replacing a file of that name in one step. With
	// exclusive set, Close fails with an error matching fs.ErrExist when
	// a file of that name exists by then (an object store's conditional
	// write, If-None-Match: *), and nothing is written.
	Create(ctx context.Context, name string, exclusive bool) (SinkFile, error)
	// Remove removes the file name; a missing file is not an error.
	Remove(ctx context.Context, name string) error
	// FS returns the sink's files for reading, as they are when it is
	// called (a fresh view: everything closed before the call is seen).
	// A sink whose root does not exist yet reads as an empty folder.
	FS() fs.FS
	// Location returns the location of name in the sink, for messages
	// ("" for its root).
	Location(name string) string
}

// SinkFile is a file being written to a Sink.
type SinkFile interface {
	io.Writer
	// Close finishes the file and makes it visible, whole and durable.
	// After a failed Close nothing of the file is visible.
	Close() error
	// Abort discards the file: nothing of it is visible or left behind
	// (an object store's multipart upload is aborted). After Close, or a
	// second time, it does nothing.
	Abort() error
}

// ConditionalSink is a Sink whose files carry versions (an object store's
// ETags), so that a writer replaces a file only while it is still the
// version the writer saw: the entry point of a checkpoint (its index or
// single file) that Save, Run and Commit replace is written this way, so
// that of two writers replacing a checkpoint at once only one wins and the
// other fails with ErrConflict. Package remote's S3Sink is one (If-Match);
// a folder sink is not (writers there take the set's lock instead).
type ConditionalSink interface {
	Sink
	// Version returns the current version of the file name; an error
	// matching fs.ErrNotExist when there is no such file.
	Version(ctx context.Context, name string) (string, error)
	// CreateReplacing is Create for a file that replaces the version of
	// name: Close fails with an error matching fs.ErrExist, and nothing is
	// written, when name is no longer that version (replaced or removed).
	CreateReplacing(ctx context.Context, name, version string) (SinkFile, error)
}

// UploadAborter is a Sink whose writers killed in the middle of a file
// leave its upload behind, unseen but stored (an object store's multipart
// uploads); package remote's S3Sink is one. Save aborts those under a
// checkpoint folder it writes into that already holds files: one it takes
// over from a killed save, or replaces, and one that a killed removal left.
type UploadAborter interface {
	// AbortUploads aborts the unfinished uploads of the files under the
	// folder dir and returns how many it aborted.
	AbortUploads(ctx context.Context, dir string) (int, error)
}

// seenVersion returns the version of name that a writer is about to
// replace, on a ConditionalSink ("" on another sink). gone reports that
// name no longer exists: its write is then exclusive.
func seenVersion(ctx context.Context, sink Sink, name string) (version string, gone bool, err error) {
	cs, ok := sink.(ConditionalSink)
	if !ok {
		return "", false, nil
	}
	v, err := cs.Version(ctx, name)
	if errors.Is(err, fs.ErrNotExist) {
		return "", true, nil
	}
	return v, false, err
}

// createSinkFile creates name in sink: exclusive, or, with a version of
// a ConditionalSink, replacing that version.
func createSinkFile(ctx context.Context, sink Sink, name string, exclusive bool, version string) (SinkFile, error) {
	if cs, ok := sink.(ConditionalSink); ok && version != "" {
		return cs.CreateReplacing(ctx, name, version)
	}
	return sink.Create(ctx, name, exclusive)
}

// SinkFunc opens a location of a registered scheme as a Sink.
type SinkFunc func(ctx context.Context, location string) (Sink, error)

var sinks struct {
	sync.RWMutex
	m map[string]SinkFunc
}

// RegisterSink makes SaveShard, Commit, Save and Run accept locations
// "SCHEME://..." by opening them with open, as source.Register does for
// reading. Package remote registers "s3" when it is imported; a program
// that never imports it links no object-store client. A later registration
// of a scheme replaces the earlier one. An invalid scheme (see
// source.Register) or a nil open is a programming error and panics.
func RegisterSink(scheme string, open SinkFunc) {
	if source.Scheme(scheme+"://") != scheme || open == nil {
		panic(fmt.Sprintf("convert: RegisterSink(%q): invalid scheme or nil function", scheme))
	}
	sinks.Lock()
	defer sinks.Unlock()
	if sinks.m == nil {
		sinks.m = make(map[string]SinkFunc)
	}
	sinks.m[scheme] = open
}

// OpenSink opens location for writing: a folder path (NewDirSink), or a
// location of a registered scheme. A scheme without a registered sink is
// an *Error of kind ErrTarget that says what to import.
func OpenSink(ctx context.Context, location string) (Sink, error) {
	scheme := source.Scheme(location)
	if scheme == "" {
		if location == "" {
			return nil, &Error{Kind: ErrTarget, Msg: "no location given"}
		}
		return NewDirSink(location), nil
	}
	sinks.RLock()
	open := sinks.m[scheme]
	sinks.RUnlock()
	if open == nil {
		msg := fmt.Sprintf("no sink is registered for %s:// locations", scheme)
		if scheme == "s3" {
			msg += " (import github.com/ckpt-go/ckpt/remote to register it)"
		}
		return nil, &Error{Kind: ErrTarget, Path: location, Msg: msg}
	}
	s, err := open(ctx, location)
	if err != nil {
		return nil, &Error{Kind: ErrTarget, Path: location, Err: err}
	}
	return s, nil
}

// NewDirSink returns the Sink of the folder dir of a local or shared file
// system, created when the first file is. A file is written to a hidden
// temporary file beside its name (".NAME.tmp-DIGITS", the temporaries of
// package shard), fsynced and renamed into place, and the folder is
// fsynced; an exclusive file is linked into place instead, which fails
// when the name is taken. Commit takes the lock of package shard's set
// (".PREFIX.safetensors.lock"), so that it never runs beside a
// shard.WriteFrom of the same set.
func NewDirSink(dir string) Sink { return &dirSink{dir: dir} }

type dirSink struct{ dir string }

func (s *dirSink) path(name string) string { return filepath.Join(s.dir, filepath.FromSlash(name)) }

func (s *dirSink) Location(name string) string {
	if name == "" || name == "." {
		return s.dir
	}
	return s.path(name)
}

func (s *dirSink) FS() fs.FS { return dirFS{os.DirFS(s.dir).(fs.StatFS), s.dir} }

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
	}
	return es, err
}

func (s *dirSink) Create(ctx context.Context, name string, exclusive bool) (SinkFile, error) {
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
	return &dirFile{f: f, path: p, exclusive: exclusive}, nil
}

func (s *dirSink) Remove(ctx context.Context, name string) error {
	if !fs.ValidPath(name) || name == "." {
		return &os.PathError{Op: "remove", Path: name, Err: fs.ErrInvalid}
	}
	p := s.path(name)
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// lock takes the lock of target in the sink's folder (created if needed).
func (s *dirSink) lock(ctx context.Context, target string) (*atomicfile.Lock, error) {
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return nil, err
	}
	return atomicfile.LockTarget(ctx, s.dir, target)
}

// syncDir makes the removals and renames in the sink's folder durable.
func (s *dirSink) syncDir() error { return atomicfile.SyncDir(s.dir) }

type dirFile struct {
	f         *os.File
	path      string
	exclusive bool
	done      bool
}

func (d *dirFile) Write(b []byte) (int, error) {
	if d.done {
		return 0, atomicfile.ErrDone
	}
	return d.f.Write(b)
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
		// writers that take the set's lock, as Commit does.
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
	return atomicfile.SyncDir(filepath.Dir(d.path))
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

// listSink lists the sink's root folder: names of regular files and
// their sizes (folders are left out).
func listSink(fsys fs.FS) (map[string]int64, error) {
	es, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(es))
	for _, e := range es {
		if e.IsDir() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // removed since the listing
			}
			return nil, err
		}
		if !info.Mode().IsRegular() && info.Mode()&fs.ModeSymlink == 0 {
			continue
		}
		out[e.Name()] = info.Size()
	}
	return out, nil
}

// sortedNames returns the keys of a listing, sorted.
func sortedNames(m map[string]int64) []string {
	out := make([]string, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// joinLocation joins a location (a path or SCHEME://...) and a relative
// slash-separated name.
func joinLocation(loc, name string) string {
	if source.Scheme(loc) == "" {
		return filepath.Join(loc, filepath.FromSlash(name))
	}
	return strings.TrimSuffix(loc, "/") + "/" + path.Clean(name)
}
