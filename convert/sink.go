package convert

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ckpt-go/ckpt/internal/atomicfile"
	"github.com/ckpt-go/ckpt/sink"
	"github.com/ckpt-go/ckpt/source"
)

// openSink opens location for writing (sink.Open): a folder path, or a
// location of a registered scheme. Its errors are *Error of kind
// ErrTarget; a scheme without a registered sink says what to import.
func openSink(ctx context.Context, location string) (sink.Sink, error) {
	if location == "" {
		return nil, &Error{Kind: ErrTarget, Msg: "no location given"}
	}
	s, err := sink.Open(ctx, location)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) && pe.Path == location {
			err = pe.Err // Path names the location
		}
		if errors.Is(err, sink.ErrNoSink) {
			return nil, &Error{Kind: ErrTarget, Path: location, Msg: err.Error()}
		}
		return nil, &Error{Kind: ErrTarget, Path: location, Err: err}
	}
	return s, nil
}

// lockDir takes the lock of target in the folder of a Dir sink (created if
// needed), as shard.WriteFrom does.
func lockDir(ctx context.Context, d *sink.Dir, target string) (*atomicfile.Lock, error) {
	if err := os.MkdirAll(d.Root(), 0o755); err != nil {
		return nil, err
	}
	return atomicfile.LockTarget(ctx, d.Root(), target)
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
