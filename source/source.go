// Package source is where checkpoint bytes come from: the operating
// system's files, any fs.FS, or a location SCHEME://... opened by the
// source registered for its scheme.
//
// A path without a scheme names files of the operating system. A program
// with a file system of its own (an object store client it configured, an
// os.DirFS, an embed.FS, a test's fstest.MapFS) hands it to the loader
// with ckpt.WithFS. A location "SCHEME://..." is opened by the Func
// registered for its scheme with Register, the way image formats and
// database/sql drivers register: importing package remote registers s3://,
// https:// and http://, and a program that never imports it links no
// object-store client. Open resolves a location into the fs.FS and the
// name in it that ckpt.Open reads, and the tools that read checkpoints
// without the loader (package convert, the ckpt command) use it to accept
// the same locations.
//
// An fs.FS whose files are best read with few large ranged requests, many
// at a time (an object store, an HTTP server), implements RangeFS as well:
// the loader then reads tensor data with its ReadRanges, neighbouring
// tensors coalesced into requests that its RangeConfig bounds. Package
// remote implements it; this package only defines it, as net/http defines
// RoundTripper apart from the clients that use one.
//
// The registry of schemes is the package's only state; it is safe for
// concurrent use.
package source

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"
)

// Func opens a location of a registered scheme ("s3://bucket/dir",
// "https://host/model.safetensors"): it returns the file system holding
// the checkpoint and the location's name in it (an fs.ValidPath name: "."
// for its root). The loader reads everything through fsys: folders with
// fs.ReadDir, configs and indexes with bounded reads, safetensors files
// through their io.ReaderAt (see safetensors.OpenFS), and tensor data with
// RangeFS.ReadRanges when fsys implements RangeFS. When fsys is an
// io.Closer, whoever opened the location closes it once done.
type Func func(ctx context.Context, location string) (fsys fs.FS, name string, err error)

// ErrNoSource is the error, wrapped in Open's *fs.PathError, for a
// location whose scheme has no registered source.
var ErrNoSource = errors.New("no source is registered")

var registry struct {
	sync.RWMutex
	m map[string]Func
}

// Register makes Open, and so ckpt.Open and the tools built on them,
// accept locations "SCHEME://..." by opening them with open. A later
// registration of the same scheme replaces the earlier one. scheme is
// lower case ASCII letters, digits, '+', '-' and '.', starting with a
// letter, at least two characters long (one letter is a drive, C:); an
// invalid scheme or a nil open is a programming error and panics, as in
// database/sql.Register.
func Register(scheme string, open Func) {
	if !validScheme(scheme) || open == nil {
		panic(fmt.Sprintf("source: Register(%q): invalid scheme or nil function", scheme))
	}
	registry.Lock()
	defer registry.Unlock()
	if registry.m == nil {
		registry.m = make(map[string]Func)
	}
	registry.m[scheme] = open
}

// Registered returns the registered schemes, sorted.
func Registered() []string {
	registry.RLock()
	defer registry.RUnlock()
	out := make([]string, 0, len(registry.m))
	for s := range registry.m {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

func validScheme(s string) bool {
	if len(s) < 2 || s[0] < 'a' || s[0] > 'z' {
		return false // one letter is a drive (C:)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '+' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// Scheme returns the scheme of a location "SCHEME://...", lower-cased, or
// "" for a path.
func Scheme(location string) string {
	i := strings.Index(location, "://")
	if i < 0 {
		return ""
	}
	s := strings.ToLower(location[:i])
	if !validScheme(s) {
		return ""
	}
	return s
}

// Open opens location with the source registered for its scheme and
// returns the file system and the location's name in it. A path without a
// scheme gives (nil, location, nil): nil stands for the operating
// system's files. The caller closes the file system when it is an
// io.Closer.
//
// Its errors are *fs.PathError with Op "open" and the location as Path.
// They wrap ErrNoSource for a scheme with no registered source (the
// message says what to import), the source's own error (errors.Is and
// errors.As see through to it: fs.ErrNotExist for a missing object), or
// say that the source returned no file system or an invalid name.
func Open(ctx context.Context, location string) (fs.FS, string, error) {
	scheme := Scheme(location)
	if scheme == "" {
		return nil, location, nil
	}
	registry.RLock()
	open := registry.m[scheme]
	registry.RUnlock()
	if open == nil {
		var hint string
		switch scheme {
		case "s3", "http", "https":
			hint = " (import github.com/ckpt-go/ckpt/remote to register it)"
		}
		return nil, "", &fs.PathError{Op: "open", Path: location, Err: fmt.Errorf("%w for %s:// locations%s", ErrNoSource, scheme, hint)}
	}
	fsys, name, err := open(ctx, location)
	switch {
	case err != nil:
	case fsys == nil:
		err = fmt.Errorf("the %s:// source returned no file system", scheme)
	case !fs.ValidPath(name):
		err = fmt.Errorf("the %s:// source returned an invalid name %q", scheme, name)
	default:
		return fsys, name, nil
	}
	return nil, "", &fs.PathError{Op: "open", Path: location, Err: err}
}
