package ckpt

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/ckpt-go/ckpt/internal/srcfs"
	"github.com/ckpt-go/ckpt/shard"
)

// SourceFunc opens a location of a registered scheme ("s3://bucket/dir",
// "https://host/model.safetensors"): it returns the file system holding
// the checkpoint and the location's name in it (an fs.ValidPath name: "."
// for its root). The loader reads everything through fsys: folders with
// fs.ReadDir, configs and indexes with bounded reads, safetensors files
// through their io.ReaderAt (see safetensors.OpenFS), and tensor data with
// RangeFS.ReadRanges when fsys implements RangeFS.
type SourceFunc func(ctx context.Context, location string) (fsys fs.FS, name string, err error)

var sources struct {
	sync.RWMutex
	m map[string]SourceFunc
}

// RegisterSource makes Open, and the command-line tools built on it, accept
// locations "SCHEME://..." by opening them with open, the way image formats
// and database/sql drivers register. Package remote registers "s3",
// "https" and "http" when it is imported; a program that never imports it
// links no object-store client. A later registration of the same scheme
// replaces the earlier one. scheme is lower case ASCII letters, digits, '+',
// '-' and '.', starting with a letter; an invalid scheme or a nil open is a
// programming error and panics, as in database/sql.Register.
func RegisterSource(scheme string, open SourceFunc) {
	if !validScheme(scheme) || open == nil {
		panic(fmt.Sprintf("ckpt: RegisterSource(%q): invalid scheme or nil function", scheme))
	}
	sources.Lock()
	defer sources.Unlock()
	if sources.m == nil {
		sources.m = make(map[string]SourceFunc)
	}
	sources.m[scheme] = open
}

// RegisteredSources returns the registered schemes, sorted.
func RegisteredSources() []string {
	sources.RLock()
	defer sources.RUnlock()
	out := make([]string, 0, len(sources.m))
	for s := range sources.m {
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

// SchemeOf returns the scheme of a location "SCHEME://...", lower-cased,
// or "" for a path.
func SchemeOf(location string) string {
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

// OpenSource opens location with the source registered for its scheme and
// returns the file system and the location's name in it. A path without a
// scheme gives (nil, location, nil): the operating system's. A scheme with
// no registered source is an *Error of kind ErrResolve that says what to
// import; the source's own errors are wrapped the same way. Tools that read
// checkpoints without the loader (package shard, package variant) use it
// to accept the same locations as Open.
func OpenSource(ctx context.Context, location string) (fs.FS, string, error) {
	scheme := SchemeOf(location)
	if scheme == "" {
		return nil, location, nil
	}
	sources.RLock()
	open := sources.m[scheme]
	sources.RUnlock()
	if open == nil {
		msg := fmt.Sprintf("no source is registered for %s:// locations", scheme)
		switch scheme {
		case "s3", "http", "https":
			msg += " (import github.com/ckpt-go/ckpt/remote to register it)"
		}
		return nil, "", &Error{Kind: ErrResolve, Path: location, Msg: msg}
	}
	fsys, name, err := open(ctx, location)
	if err != nil {
		return nil, "", &Error{Kind: ErrResolve, Path: location, Err: err}
	}
	if fsys == nil || !fs.ValidPath(name) {
		return nil, "", &Error{Kind: ErrResolve, Path: location, Msg: fmt.Sprintf("the %s:// source returned an invalid name %q", scheme, name)}
	}
	return fsys, name, nil
}

// WithFS makes Open read the files of fsys: its path is then a name of
// fsys (slash-separated, unrooted, see fs.ValidPath; "." is its root), and
// every file a folder, index or pipeline resolves to is read from fsys. It
// is how a program opens a checkpoint through its own configured client
// (package remote's NewS3FS and NewHTTPFS), an os.DirFS or a
// testing/fstest.MapFS. Folders are listed with fs.ReadDir. Tensor data is
// read into owned memory (the pread strategy) unless the files can be
// mapped and ReadMmap is asked for; from an fs.FS that implements RangeFS
// it is read with parallel ranged requests.
func WithFS(fsys fs.FS) Option {
	return func(c *config) error { c.fsys = fsys; return nil }
}

// RangeFS is an fs.FS whose files are best read with few large ranged
// requests, many at a time: an object store or an HTTP server (package
// remote). Load reads the tensor data of such a source with ReadRanges:
// neighbouring tensors coalesced into one request of up to Chunk bytes
// (when the bytes between them are at most MaxGap), Concurrency requests
// at once, each straight into the destination buffers (conversions through
// staging buffers bounded by WithStaging), with progress and cancellation
// as for local files.
type RangeFS interface {
	fs.FS
	// ReadRanges reads the bytes of file name at each span's Off into its
	// Dst, every Dst in full, with one request when it can: spans are
	// sorted by offset and do not overlap; the bytes between them are read
	// and discarded. The file must still be the version its first open
	// saw (an error otherwise, never bytes of two versions). Cancelling
	// ctx stops it promptly.
	ReadRanges(ctx context.Context, name string, spans []Span) error
	// RangeConfig returns how Load should batch and schedule its reads.
	RangeConfig() RangeConfig
}

// Span is a byte range of a file and the buffer that receives it.
type Span struct {
	Off int64
	Dst []byte
}

// RangeConfig tunes the reads Load makes from a RangeFS.
type RangeConfig struct {
	// Concurrency is the number of requests in flight (at least 1).
	Concurrency int
	// Chunk is the most bytes one request covers (neighbouring tensors
	// are coalesced up to it; a larger piece is one request of its own).
	Chunk int64
	// MaxGap is the most unused bytes between two spans that are still
	// read in one request.
	MaxGap int64
}

// openSource resolves m.path into the file system and name to read.
func (m *Model) openSource() error {
	m.name = m.path
	if m.cfg.fsys != nil {
		name := m.path
		if name == "" {
			name = "."
		}
		name = path.Clean(name)
		if !fs.ValidPath(name) {
			return &Error{Kind: ErrOption, Path: m.path, Msg: "with WithFS the path is an fs.FS name: slash-separated, without a leading slash or .. elements"}
		}
		m.src, m.name = srcfs.Of(m.cfg.fsys), name
	} else {
		fsys, name, err := OpenSource(context.Background(), m.path)
		if err != nil {
			return err
		}
		m.src, m.name, m.ownsFS = srcfs.Of(fsys), name, fsys != nil
	}
	if fsys := m.src.FS(); fsys != nil {
		m.cfg.shardOptions = append(slices.Clip(m.cfg.shardOptions), shard.WithFS(fsys))
	}
	return nil
}

// closeSource closes the file system Open opened for a location, when it
// is an io.Closer.
func (m *Model) closeSource() error {
	if !m.ownsFS {
		return nil
	}
	if c, ok := m.src.FS().(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// chooseStrategy resolves the read strategy of a component in dir.
func (m *Model) chooseStrategy(dir string) (ReadStrategy, string) {
	fsys := m.src.FS()
	if fsys == nil {
		return chooseStrategy(m.cfg.strategy, dir)
	}
	if _, ok := fsys.(RangeFS); ok {
		if m.cfg.strategy == ReadMmap {
			return ReadPread, "mmap was asked for, but the files of a remote source cannot be mapped: parallel ranged reads into owned memory"
		}
		return ReadPread, "remote source: parallel ranged reads into owned memory"
	}
	switch m.cfg.strategy {
	case ReadMmap:
		return ReadMmap, "asked for"
	case ReadPread:
		return ReadPread, "asked for"
	}
	return ReadPread, "files of an fs.FS: read into owned memory"
}

// rangeFS returns the model's source when it is a RangeFS.
func (m *Model) rangeFS() RangeFS {
	r, _ := m.src.FS().(RangeFS)
	return r
}
