package integrity

import (
	"io/fs"

	"github.com/ckpt-go/ckpt/internal/srcfs"
)

// Option configures Verify and Checksum.
type Option func(*config)

type config struct {
	// src is where the files are (WithFS) and the symlink rule
	// (FollowSymlinks): the one value Verify and Checksum pass down to
	// package variant and package shard.
	src     srcfs.FS
	withFS  bool
	require bool
	workers int
	piece   int64 // bytes of a tensor one job checks; 0: the default (tests set it)
	read    int64 // bytes read at once; 0: the default (tests set it)
}

func buildConfig(opts []Option) config {
	var c config
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return c
}

// WithFS makes the location a name of fsys (slash-separated, unrooted, see
// fs.ValidPath; "." is its root) instead of a path or a "SCHEME://"
// location: for a program that opened its own object-store client (package
// remote's NewS3FS) or a test's fstest.MapFS. Folders are listed with
// fs.ReadDir; files are read through their io.ReaderAt, or with ranged
// requests when fsys is a source.RangeFS.
func WithFS(fsys fs.FS) Option {
	return func(c *config) { c.src, c.withFS = c.src.WithFS(fsys), true }
}

// FollowSymlinks lets the files a folder or index resolves to be symbolic
// links that lead out of it: the project's one opt-in (see
// shard.WithFollowSymlinks), which a Hugging Face hub cache snapshot needs
// (snapshots/REV/FILE links to ../../blobs/HASH). Without it such a link is
// an InsecurePath problem and is not read. The location itself is
// always followed: the caller named it.
func FollowSymlinks() Option {
	return func(c *config) { c.src = c.src.Following(true) }
}

// RequireChecksums makes a safetensors file without checksums a
// NoChecksums problem (as ckpt.VerifyAlways refuses to load one).
func RequireChecksums() Option {
	return func(c *config) { c.require = true }
}

// WithWorkers sets how many pieces of tensor data are read and checked
// at once (default: the number of CPUs for local files, the source's
// RangeConfig.Concurrency for a source.RangeFS). Memory use is about
// workers times the piece size (4 MiB locally, the RangeConfig's Chunk
// for a RangeFS).
func WithWorkers(n int) Option {
	return func(c *config) { c.workers = n }
}

// withPieces sets the bytes of a tensor one job checks and the bytes it
// reads at once (the tests' hook, see export_test.go).
func withPieces(piece, read int64) Option {
	return func(c *config) { c.piece, c.read = piece, read }
}
