// Package srcfs is where the packages that read checkpoints (shard, variant
// and the loader) find their files: the operating system's paths, or the
// names of an fs.FS (an object store through package remote, an os.DirFS,
// a test's fstest.MapFS). The zero FS is the operating system's, and every
// method then does exactly what those packages did before fs.FS sources
// existed (package pathutil's symlink rule, package safeopen's checks), so
// that local paths keep their behaviour.
//
// Names of an fs.FS are slash-separated and unrooted (fs.ValidPath); an
// fs.FS has no symbolic links to leave a folder by, so every name resolves
// to itself.
package srcfs

import (
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/ckpt-go/ckpt/internal/pathutil"
	"github.com/ckpt-go/ckpt/internal/safeopen"
)

// FS is the one value that says where a checkpoint's bytes come from and
// how its paths are followed: the operating system (the zero value) or an
// fs.FS, and whether symbolic links may lead out of their folder (Follow).
// The entry points (ckpt.Open's options, convert.Options, integrity's
// options, the CLI's flags) build it once and pass it down to package
// variant and package shard (their WithSource options), which decide the
// symlink rule from it alone.
type FS struct {
	fsys   fs.FS
	follow bool
}

// Of returns the FS for fsys; nil gives the operating system's. It does
// not follow links out of their folder.
func Of(fsys fs.FS) FS { return FS{fsys: fsys} }

// WithFS returns s reading fsys (nil: the operating system), its symlink
// rule unchanged.
func (s FS) WithFS(fsys fs.FS) FS { s.fsys = fsys; return s }

// Following returns s with symbolic links allowed to lead out of their
// folder (follow) or not: the project's one opt-in, which the Hugging Face
// cache needs (its snapshots link into ../../blobs). An fs.FS has no links,
// so it changes nothing there.
func (s FS) Following(follow bool) FS { s.follow = follow; return s }

// Follow reports whether links may lead out of their folder.
func (s FS) Follow() bool { return s.follow }

// FS returns the fs.FS, or nil for the operating system.
func (s FS) FS() fs.FS { return s.fsys }

// IsOS reports whether s is the operating system's file system.
func (s FS) IsOS() bool { return s.fsys == nil }

// Join joins names with the separator of s.
func (s FS) Join(elem ...string) string {
	if s.fsys == nil {
		return filepath.Join(elem...)
	}
	return path.Join(elem...)
}

// Dir returns all but the last element of name.
func (s FS) Dir(name string) string {
	if s.fsys == nil {
		return filepath.Dir(name)
	}
	return path.Dir(name)
}

// Base returns the last element of name.
func (s FS) Base(name string) string {
	if s.fsys == nil {
		return filepath.Base(name)
	}
	return path.Base(name)
}

// Clean returns the shortest equivalent name.
func (s FS) Clean(name string) string {
	if s.fsys == nil {
		return filepath.Clean(name)
	}
	return path.Clean(name)
}

// Abs returns an absolute path for a path of the operating system, and
// name itself for an fs.FS (whose names are all relative to its root).
func (s FS) Abs(name string) (string, error) {
	if s.fsys == nil {
		return filepath.Abs(name)
	}
	return name, nil
}

// ReadDir lists the folder dir, sorted by name.
func (s FS) ReadDir(dir string) ([]fs.DirEntry, error) {
	if s.fsys == nil {
		return os.ReadDir(dir)
	}
	return fs.ReadDir(s.fsys, dir)
}

// Stat describes name, following symbolic links.
func (s FS) Stat(name string) (fs.FileInfo, error) {
	if s.fsys == nil {
		return os.Stat(name)
	}
	return fs.Stat(s.fsys, name)
}

// IsFolder reports whether name stands for a folder (a component folder or
// a pipeline root) rather than a file: a folder, unless named like a file
// (ending in .safetensors or .json), which is then opened as the file it
// should be and refused with the reason it is not. A name that does not
// exist is not a folder. It is how ckpt.Open and package convert tell the
// two apart.
func (s FS) IsFolder(name string) bool {
	if strings.HasSuffix(name, ".safetensors") || strings.HasSuffix(name, ".json") {
		return false
	}
	st, err := s.Stat(name)
	return err == nil && st.IsDir()
}

// Lstat describes name without following a final symbolic link (an fs.FS
// has none: Stat).
func (s FS) Lstat(name string) (fs.FileInfo, error) {
	if s.fsys == nil {
		return os.Lstat(name)
	}
	return fs.Stat(s.fsys, name)
}

// Resolve applies package pathutil's rule to name, a file or folder inside
// the folder Dir(name): the name its links lead to, and whether that is
// still inside the folder. In an fs.FS a name is what it names: Resolve
// only checks that it exists (an error matching fs.ErrNotExist otherwise).
func (s FS) Resolve(name string) (real string, inside bool, err error) {
	if s.fsys == nil {
		return pathutil.Resolve(filepath.Dir(name), name)
	}
	if _, err := fs.Stat(s.fsys, name); err != nil {
		return "", false, err
	}
	return name, true, nil
}

// ReadFile reads the whole regular file name of at most max bytes, with
// package safeopen's checks and errors (NotRegularError, TooLargeError).
func (s FS) ReadFile(name string, max int64) ([]byte, error) {
	if s.fsys == nil {
		return safeopen.ReadFile(name, max)
	}
	return safeopen.ReadFileFS(s.fsys, name, max)
}
