package ckpt

import (
	"context"
	"io"
	"io/fs"
	"path"

	"github.com/ckpt-go/ckpt/shard"
	"github.com/ckpt-go/ckpt/source"
)

// WithFS makes Open read the files of fsys: its path is then a name of
// fsys (slash-separated, unrooted, see fs.ValidPath; "." is its root), and
// every file a folder, index or pipeline resolves to is read from fsys. It
// is how a program opens a checkpoint through its own configured client
// (package remote's NewS3FS and NewHTTPFS), an os.DirFS or a
// testing/fstest.MapFS. Folders are listed with fs.ReadDir. Tensor data is
// read into owned memory (the pread strategy) unless the files can be
// mapped and readMmap is asked for; from an fs.FS that implements
// source.RangeFS
// it is read with parallel ranged requests.
func WithFS(fsys fs.FS) Option {
	return func(c *config) error { c.src = c.src.WithFS(fsys); return nil }
}

// openSource resolves m.path into the file system and name to read.
func (m *Model) openSource() error {
	m.name = m.path
	if m.cfg.src.FS() != nil {
		name := m.path
		if name == "" {
			name = "."
		}
		name = path.Clean(name)
		if !fs.ValidPath(name) {
			return &Error{Kind: ErrOption, Path: m.path, Msg: "with WithFS the path is an fs.FS name: slash-separated, without a leading slash or .. elements"}
		}
		m.src, m.name = m.cfg.src, name
	} else {
		fsys, name, err := source.Open(context.Background(), m.path)
		if err != nil {
			// The location is the Error's Path: keep the cause only.
			if pe, ok := err.(*fs.PathError); ok && pe.Path == m.path {
				err = pe.Err
			}
			return &Error{Kind: ErrResolve, Path: m.path, Err: err}
		}
		m.src, m.name, m.ownsFS = m.cfg.src.WithFS(fsys), name, fsys != nil
	}
	return nil
}

// sourceOptions are the shard options every file of the model is resolved
// and opened with: the source (file system and symlink rule), then what
// the options tests add.
func (m *Model) sourceOptions() []shard.Option {
	return append([]shard.Option{shard.WithSource(m.src)}, m.cfg.shardOptions...)
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
func (m *Model) chooseStrategy(dir string) (readStrategy, string) {
	fsys := m.src.FS()
	if fsys == nil {
		return chooseStrategy(m.cfg.strategy, dir)
	}
	if _, ok := fsys.(source.RangeFS); ok {
		if m.cfg.strategy == readMmap {
			return readPread, "mmap was asked for, but the files of a remote source cannot be mapped: parallel ranged reads into owned memory"
		}
		return readPread, "remote source: parallel ranged reads into owned memory"
	}
	switch m.cfg.strategy {
	case readMmap:
		return readMmap, "asked for"
	case readPread:
		return readPread, "asked for"
	}
	return readPread, "files of an fs.FS: read into owned memory"
}

// rangeFS returns the model's source when it is a RangeFS.
func (m *Model) rangeFS() source.RangeFS {
	r, _ := m.src.FS().(source.RangeFS)
	return r
}
