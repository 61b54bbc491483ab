// Package sink is where checkpoints are written: a folder of a local or
// shared file system (NewDir, what a path without a scheme opens), or a
// key prefix of an object store, opened through the Func registered for
// its scheme (Register). It is the writing side of package source, and,
// like it, only defines the interface and the registry: package remote
// registers s3:// and implements it for S3, and package convert writes
// checkpoints through it (Save, Run, SaveShard, Commit).
//
// The package imports nothing of ckpt beyond package source (for the
// syntax of schemes), so that an object-store client implements a Sink
// without linking the converter: package remote imports this package, not
// package convert (remote's TestNoConvertDependency checks it).
//
// The registry of schemes is the package's only state; it is safe for
// concurrent use.
package sink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sync"

	"github.com/ckpt-go/ckpt/source"
)

// Sink is a folder that checkpoints are written into.
//
// Names are slash-separated and relative to the sink's root (fs.ValidPath
// names). A Sink is safe for concurrent use.
type Sink interface {
	// Create starts writing the file name. Nothing is visible under name
	// before the returned file's Close returns nil (or an error matching
	// ErrNotDurable); then the whole file is, durably, replacing a file of
	// that name in one step. With
	// exclusive set, Close fails with an error matching fs.ErrExist when
	// a file of that name exists by then (an object store's conditional
	// write, If-None-Match: *), and nothing is written.
	Create(ctx context.Context, name string, exclusive bool) (File, error)
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

// File is a file being written to a Sink.
type File interface {
	io.Writer
	// Close finishes the file and makes it visible, whole and durable.
	// After a failed Close nothing of the file is visible, except after
	// an error matching ErrNotDurable: the file is in place, whole, but
	// a power loss may undo that.
	Close() error
	// Abort discards the file: nothing of it is visible or left behind
	// (an object store's multipart upload is aborted). After Close, or a
	// second time, it does nothing.
	Abort() error
}

// Patchable is a File whose bytes can be rewritten after they were
// written, until Close: a writer that learns what its first bytes must
// hold only at the end writes a placeholder, then the rest, then the first
// bytes again. ckpt's safetensors writers do so for the header, which
// names every tensor's checksum (safetensors.NewWriter): through a
// Patchable file every shard carries checksums. The files of Dir and of
// package remote's S3Sink are Patchable; a File that is not gets shards
// without checksums (unless their metadata names them all).
type Patchable interface {
	File
	// Reserve keeps the first n bytes of the file rewritable until
	// Close. It is called before the first Write; an S3 upload holds
	// them in memory (its first part) until Close.
	Reserve(n int64) error
	// WriteAt rewrites len(p) bytes at offset off, all of them written
	// before (Write) and within the first n bytes of Reserve; beyond
	// those it may fail.
	io.WriterAt
}

// Conditional is a Sink whose files carry versions (an object store's
// ETags), so that a writer replaces a file only while it is still the
// version the writer saw: the entry point of a checkpoint (its index or
// single file) that package convert replaces is written this way, so that
// of two writers replacing a checkpoint at once only one wins. Package
// remote's S3Sink is one (If-Match); a folder sink is not (writers there
// take the set's lock instead).
type Conditional interface {
	Sink
	// Version returns the current version of the file name; an error
	// matching fs.ErrNotExist when there is no such file.
	Version(ctx context.Context, name string) (string, error)
	// CreateReplacing is Create for a file that replaces the version of
	// name: Close fails with an error matching fs.ErrExist, and nothing is
	// written, when name is no longer that version (replaced or removed).
	CreateReplacing(ctx context.Context, name, version string) (File, error)
}

// ErrNotDurable is matched by the error of a File's Close that put the
// file in place, visible to readers, but could not make that durable (a
// folder's fsync failed): a power loss may revert it.
var ErrNotDurable = errors.New("the file is in place, but not durably")

// Syncer is a Sink whose changes may become durable only at Sync (a
// Batched Dir): a writer whose changes must become durable in an order
// calls Sync between them. Changes on other Sinks are durable when they
// return.
type Syncer interface {
	Sink
	// Sync makes every change since the last Sync durable; an error
	// matches ErrNotDurable.
	Sync(ctx context.Context) error
}

// Linker is a Sink that gives a file a second name without copying it (a
// folder's hard links); Dir is one. A set written under swap names (see
// package setname) moves to its standard names through it.
type Linker interface {
	Sink
	// Link makes the file from readable as to too, durably; it fails
	// when to exists.
	Link(ctx context.Context, from, to string) error
}

// WriteFile writes b as the file name of s: exclusive, or, given a
// version (SeenVersion's) and a Conditional sink, replacing only that
// version (CreateIf). It returns the version written (Written: "" on a
// sink that is not Conditional).
func WriteFile(ctx context.Context, s Sink, name string, b []byte, exclusive bool, version string) (string, error) {
	f, err := CreateIf(ctx, s, name, exclusive, version)
	if err != nil {
		return "", err
	}
	if _, err := f.Write(b); err != nil {
		f.Abort()
		return "", err
	}
	if err := f.Close(); err != nil {
		if !errors.Is(err, ErrNotDurable) {
			f.Abort()
		}
		return "", err
	}
	return Written(ctx, s, f, name)
}

// UploadAborter is a Sink whose writers killed in the middle of a file
// leave its upload behind, unseen but stored (an object store's multipart
// uploads); package remote's S3Sink is one. convert.Save aborts those
// under a checkpoint folder it writes into that already holds files.
type UploadAborter interface {
	// AbortUploads aborts the unfinished uploads of the files under the
	// folder dir and returns how many it aborted.
	AbortUploads(ctx context.Context, dir string) (int, error)
}

// SeenVersion returns the version of name that a writer is about to
// replace, on a Conditional sink ("" on another sink). gone reports that
// name no longer exists: its write is then exclusive.
func SeenVersion(ctx context.Context, s Sink, name string) (version string, gone bool, err error) {
	cs, ok := s.(Conditional)
	if !ok {
		return "", false, nil
	}
	v, err := cs.Version(ctx, name)
	if errors.Is(err, fs.ErrNotExist) {
		return "", true, nil
	}
	return v, false, err
}

// CreateIf creates name in s: exclusive, or, given a version (SeenVersion's)
// and a Conditional sink, replacing only that version.
func CreateIf(ctx context.Context, s Sink, name string, exclusive bool, version string) (File, error) {
	if cs, ok := s.(Conditional); ok && version != "" {
		return cs.CreateReplacing(ctx, name, version)
	}
	return s.Create(ctx, name, exclusive)
}

// Written returns the version of name that f, a file of s just closed
// without error, wrote: "" on a sink that is not Conditional. A file that
// knows its version (an object store's ETag from the write's response)
// reports it with a Version method; for one that does not, the version is
// read back, which a writer racing in between could have replaced.
func Written(ctx context.Context, s Sink, f File, name string) (string, error) {
	cs, ok := s.(Conditional)
	if !ok {
		return "", nil
	}
	if v, ok := f.(interface{ Version() string }); ok && v.Version() != "" {
		return v.Version(), nil
	}
	return cs.Version(ctx, name)
}

// Func opens a location of a registered scheme as a Sink.
type Func func(ctx context.Context, location string) (Sink, error)

// ErrNoSink is the error, wrapped in Open's *fs.PathError, for a location
// whose scheme has no registered sink.
var ErrNoSink = errors.New("no sink is registered")

var registry struct {
	sync.RWMutex
	m map[string]Func
}

// Register makes Open, and so package convert's writers, accept locations
// "SCHEME://..." by opening them with open, as source.Register does for
// reading. Package remote registers "s3" when it is imported; a program
// that never imports it links no object-store client. A later
// registration of a scheme replaces the earlier one. An invalid scheme
// (see source.Register) or a nil open is a programming error and panics.
func Register(scheme string, open Func) {
	if source.Scheme(scheme+"://") != scheme || open == nil {
		panic(fmt.Sprintf("sink: Register(%q): invalid scheme or nil function", scheme))
	}
	registry.Lock()
	defer registry.Unlock()
	if registry.m == nil {
		registry.m = make(map[string]Func)
	}
	registry.m[scheme] = open
}

// Open opens location for writing: a folder path (NewDir), or a location
// of a registered scheme. Its errors are *fs.PathError with Op "open" and
// the location as Path; they wrap ErrNoSink for a scheme with no
// registered sink (the message says what to import), fs.ErrInvalid for an
// empty location, or the registered function's error.
func Open(ctx context.Context, location string) (Sink, error) {
	scheme := source.Scheme(location)
	if scheme == "" {
		if location == "" {
			return nil, &fs.PathError{Op: "open", Path: location, Err: fmt.Errorf("%w: no location given", fs.ErrInvalid)}
		}
		return NewDir(location), nil
	}
	registry.RLock()
	open := registry.m[scheme]
	registry.RUnlock()
	if open == nil {
		hint := ""
		if scheme == "s3" {
			hint = " (import github.com/ckpt-go/ckpt/remote to register it)"
		}
		return nil, &fs.PathError{Op: "open", Path: location, Err: fmt.Errorf("%w for %s:// locations%s", ErrNoSink, scheme, hint)}
	}
	s, err := open(ctx, location)
	if err == nil && s == nil {
		err = fmt.Errorf("the %s:// sink function returned no sink", scheme)
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: location, Err: err}
	}
	return s, nil
}
