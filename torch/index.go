package torch

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ckpt-go/ckpt/internal/pathutil"
	"github.com/ckpt-go/ckpt/internal/safeopen"
)

// MaxIndexSize is the largest index file Open accepts (64 MiB).
const MaxIndexSize = 64 << 20

// readerAtCloser is an opened file of a checkpoint.
type readerAtCloser interface {
	io.ReaderAt
	io.Closer
}

// openRegular opens path for reading without blocking on a FIFO or a
// device (safeopen.Open; for a file of cfg.fsys, stat-ed first where it
// can be) and returns it with its size, if it is a regular file.
func (cfg config) openRegular(path string) (readerAtCloser, int64, error) {
	notRegular := func(mode fs.FileMode) error {
		msg := "not a regular file"
		if mode.IsDir() {
			msg = "a folder, not a checkpoint file or index"
		}
		return &Error{Kind: ErrNotRegular, File: path, Msg: msg}
	}
	if cfg.fsys == nil {
		f, st, err := safeopen.Open(path)
		if nr := (*safeopen.NotRegularError)(nil); errors.As(err, &nr) {
			return nil, 0, notRegular(nr.Mode)
		} else if err != nil {
			return nil, 0, &Error{Kind: ErrIO, File: path, Msg: "open", Err: err}
		}
		return f, st.Size(), nil
	}
	if sfs, ok := cfg.fsys.(fs.StatFS); ok {
		st, err := sfs.Stat(path)
		if err != nil {
			return nil, 0, &Error{Kind: ErrIO, File: path, Msg: "stat", Err: err}
		}
		if !st.Mode().IsRegular() {
			return nil, 0, notRegular(st.Mode())
		}
	}
	f, err := cfg.fsys.Open(path)
	if err != nil {
		return nil, 0, &Error{Kind: ErrIO, File: path, Msg: "open", Err: err}
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, &Error{Kind: ErrIO, File: path, Msg: "stat", Err: err}
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, 0, notRegular(st.Mode())
	}
	ra, ok := f.(readerAtCloser)
	if !ok {
		f.Close()
		return nil, 0, &Error{Kind: ErrUnsupported, File: path, Msg: "the file system's files cannot be read at offsets (no io.ReaderAt)"}
	}
	return ra, st.Size(), nil
}

// join and dir are filepath's for the operating system, path's for an
// fs.FS.
func (cfg config) join(elem ...string) string {
	if cfg.fsys != nil {
		return path.Join(elem...)
	}
	return filepath.Join(elem...)
}

func (cfg config) dir(name string) string {
	if cfg.fsys != nil {
		return path.Dir(name)
	}
	return filepath.Dir(name)
}

// index is a parsed pytorch_model.bin.index.json.
type index struct {
	names     []string          // tensor names in file order
	weightMap map[string]string // tensor -> shard file name
	shards    []string          // shard names in order of first mention
}

// parseIndex reads {"metadata": ..., "weight_map": {tensor: shard, ...}}:
// other keys are ignored; the weight map must be a non-empty object of
// strings naming no tensor twice.
func parseIndex(data []byte) (*index, error) {
	bad := func(msg string, err error) error {
		return &Error{Kind: ErrInvalidFormat, Msg: "invalid index: " + msg, Err: err}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, bad("not a JSON object", err)
	}
	var ix *index
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, bad("invalid JSON", err)
		}
		key, _ := tok.(string)
		if key != "weight_map" {
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return nil, bad("invalid JSON", err)
			}
			continue
		}
		if ix != nil {
			return nil, bad(`"weight_map" appears twice`, nil)
		}
		if ix, err = parseWeightMap(dec); err != nil {
			return nil, err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, bad("invalid JSON", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, bad("data after the JSON object", err)
	}
	if ix == nil {
		return nil, bad(`no "weight_map"`, nil)
	}
	return ix, nil
}

func parseWeightMap(dec *json.Decoder) (*index, error) {
	bad := func(msg string, err error) error {
		return &Error{Kind: ErrInvalidFormat, Msg: "invalid index: " + msg, Err: err}
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, bad(`"weight_map" is not an object`, err)
	}
	ix := &index{weightMap: make(map[string]string)}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, bad("invalid JSON", err)
		}
		name := tok.(string) // object keys are strings
		tok, err = dec.Token()
		if err != nil {
			return nil, bad("invalid JSON", err)
		}
		shard, ok := tok.(string)
		if !ok {
			return nil, &Error{Kind: ErrInvalidFormat, Tensor: name, Msg: "invalid index: the shard is not a string"}
		}
		if name == "" {
			return nil, bad("an empty tensor name", nil)
		}
		if _, dup := ix.weightMap[name]; dup {
			return nil, &Error{Kind: ErrInvalidFormat, Tensor: name, Msg: "invalid index: the weight map lists the tensor twice"}
		}
		if err := checkShardName(shard); err != nil {
			e := err.(*Error)
			e.Tensor = name
			return nil, e
		}
		if !slices.Contains(ix.shards, shard) {
			ix.shards = append(ix.shards, shard)
		}
		ix.weightMap[name] = shard
		ix.names = append(ix.names, name)
	}
	if _, err := dec.Token(); err != nil {
		return nil, bad("invalid JSON", err)
	}
	if len(ix.names) == 0 {
		return nil, bad(`"weight_map" is empty`, nil)
	}
	return ix, nil
}

// checkShardName accepts a bare file name: no separators, "..", drive
// letter or control characters.
func checkShardName(name string) error {
	bad := func(k ErrorKind, msg string) error {
		return &Error{Kind: k, Msg: fmt.Sprintf("shard %q: %s", name, msg)}
	}
	if name == "" {
		return bad(ErrInvalidFormat, "invalid index: empty shard name")
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return bad(ErrInvalidFormat, "invalid index: control character in the shard name")
		}
	}
	switch {
	case strings.ContainsAny(name, `/\`):
		return bad(ErrInsecurePath, "the shard name is a path, not a bare file name")
	case strings.Contains(name, ".."):
		return bad(ErrInsecurePath, `the shard name contains ".."`)
	case strings.Contains(name, ":"):
		return bad(ErrInsecurePath, "the shard name contains a drive letter or stream separator")
	}
	return nil
}

// openIndex opens the shards of an index, each a bare file name in the
// index's folder, and checks each against the weight map.
func (cfg config) openIndex(path string) (*Checkpoint, error) {
	f, size, err := cfg.openRegular(path)
	if err != nil {
		return nil, err
	}
	if size > MaxIndexSize {
		f.Close()
		return nil, &Error{Kind: ErrInvalidFormat, File: path, Msg: fmt.Sprintf("invalid index: %d bytes, more than the %d an index may have", size, MaxIndexSize)}
	}
	data, err := io.ReadAll(io.NewSectionReader(f, 0, MaxIndexSize+1))
	f.Close()
	if err != nil {
		return nil, &Error{Kind: ErrIO, File: path, Msg: "read", Err: err}
	}
	if len(data) > MaxIndexSize {
		return nil, &Error{Kind: ErrInvalidFormat, File: path, Msg: fmt.Sprintf("invalid index: more than the %d bytes an index may have", MaxIndexSize)}
	}
	ix, err := parseIndex(data)
	if err != nil {
		return nil, withFile(err, path, "")
	}
	dir := cfg.dir(path)
	root := cmp.Or(cfg.symlinkRoot, dir)
	realRoot := ""
	c := &Checkpoint{path: path}
	var parts []*loaded
	closeAll := func() {
		for _, p := range parts {
			p.sf.closer.Close()
		}
	}
	for _, shard := range ix.shards {
		p := cfg.join(dir, shard)
		if err := cfg.checkShardPath(path, shard, p, root, &realRoot); err != nil {
			closeAll()
			return nil, err
		}
		sf, size, err := cfg.openRegular(p)
		if err != nil {
			closeAll()
			return nil, err
		}
		part, err := c.load(p, sf, size, sf)
		if err != nil {
			sf.Close()
			closeAll()
			return nil, err
		}
		parts = append(parts, part)
		if err := checkWeightMap(ix, shard, part); err != nil {
			closeAll()
			return nil, withFile(err, p, "")
		}
	}
	if err := c.finish(parts); err != nil {
		closeAll()
		return nil, err
	}
	return c, nil
}

// checkShardPath checks that the shard file p exists and, if it is a
// symlink, resolves inside root. *realRoot caches root with its symlinks
// resolved. The files of an fs.FS have no symlinks.
func (cfg config) checkShardPath(index, name, p, root string, realRoot *string) error {
	var st fs.FileInfo
	var err error
	if cfg.fsys != nil {
		st, err = fs.Stat(cfg.fsys, p)
	} else {
		st, err = os.Lstat(p)
	}
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return &Error{Kind: ErrMissingShard, File: index, Msg: fmt.Sprintf("shard %q not found in %s", name, cfg.dir(p)), Err: err}
		}
		return &Error{Kind: ErrIO, File: index, Msg: fmt.Sprintf("shard %q", name), Err: err}
	}
	if st.Mode()&fs.ModeSymlink == 0 {
		return nil
	}
	if *realRoot == "" {
		if *realRoot, err = filepath.EvalSymlinks(root); err != nil {
			return &Error{Kind: ErrIO, File: index, Msg: "cannot resolve the folder " + root, Err: err}
		}
	}
	target, err := filepath.EvalSymlinks(p)
	if err != nil {
		return &Error{Kind: ErrMissingShard, File: index, Msg: fmt.Sprintf("shard %q is a dangling symlink", name), Err: err}
	}
	if !pathutil.Within(*realRoot, target) {
		return &Error{Kind: ErrInsecurePath, File: index, Msg: fmt.Sprintf("shard %q is a symlink to %s, outside %s", name, target, root)}
	}
	return nil
}

// checkWeightMap checks that the shard holds exactly the tensors the index
// maps to it. Non-tensor values of a shard are not in a weight map.
func checkWeightMap(ix *index, shard string, part *loaded) error {
	have := make(map[string]bool, len(part.tensors))
	for _, t := range part.tensors {
		if got := ix.weightMap[t.name]; got != shard {
			msg := "the shard holds a tensor the index does not list"
			if got != "" {
				msg = fmt.Sprintf("the shard holds a tensor the index maps to %q", got)
			}
			return &Error{Kind: ErrInvalidFormat, Tensor: t.name, Msg: "index mismatch: " + msg}
		}
		have[t.name] = true
	}
	for _, name := range ix.names {
		if ix.weightMap[name] == shard && !have[name] {
			return &Error{Kind: ErrInvalidFormat, Tensor: name, Msg: "index mismatch: the index maps the tensor to this shard, which does not hold it"}
		}
	}
	return nil
}
