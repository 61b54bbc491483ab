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
	"strings"

	"github.com/ckpt-go/ckpt/internal/safeopen"
	"github.com/ckpt-go/ckpt/internal/setname"
	"github.com/ckpt-go/ckpt/internal/setwrite"
	"github.com/ckpt-go/ckpt/internal/sysmem"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/sink"
	"github.com/ckpt-go/ckpt/source"
)

// openDest opens a destination of a registered sink: a folder, or, for a
// file source and a location ending in ".safetensors", the file of that
// name in its parent folder.
func (r *runner) openDest(dirSrc bool) error {
	loc := r.dst
	if !dirSrc && strings.HasSuffix(loc, ".safetensors") {
		i := strings.LastIndexByte(loc, '/')
		if i < 0 || i < len(source.Scheme(loc))+3 {
			return &Error{Kind: ErrTarget, Path: r.dst, Msg: "no folder above the file"}
		}
		loc, r.destFile = loc[:i], loc[i+1:]
	}
	dest, err := openSink(r.ctx, loc)
	if err != nil {
		return err
	}
	r.sink = dest
	return nil
}

// remoteFileDest is fileDest for a destination of a sink.
func (r *runner) remoteFileDest(c *component, srcName string, srcOK bool) error {
	c.outDir = "."
	if r.destFile == "" {
		if !srcOK {
			c.single = srcName
		}
		return nil
	}
	base := r.destFile
	prefix, variant, ok := weightsName(base)
	switch {
	case ok:
		c.prefix = prefix
		c.variant = cmpOr(r.opts.Variant, variant)
		if r.opts.Variant != "" && variant != "" && variant != r.opts.Variant {
			return &Error{Kind: ErrTarget, Path: r.dst, Msg: fmt.Sprintf("the file name says variant %q, the options %q", variant, r.opts.Variant)}
		}
	case r.opts.Variant != "":
		return &Error{Kind: ErrTarget, Path: r.dst, Msg: fmt.Sprintf("a variant needs a file named PREFIX.%s.safetensors", r.opts.Variant)}
	default:
		c.single = base
	}
	return nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// checkRemoteDest refuses, before anything is written, a destination that
// holds weights of a set to write, unless Options.Overwrite.
func (r *runner) checkRemoteDest() error {
	if r.opts.Overwrite {
		return nil
	}
	fsys := r.sink.FS()
	for _, c := range r.comps {
		var taken []string
		single := cmpOr(c.single, setname.SingleName(c.prefix, c.variant))
		if c.single != "" {
			if _, err := fs.Stat(fsys, path.Join(c.outDir, c.single)); err == nil {
				taken = []string{c.single}
			}
		} else {
			var err error
			if taken, err = setwrite.Existing(fsys, c.outDir, c.prefix, c.variant); err != nil {
				return &Error{Kind: ErrTarget, Path: r.sink.Location(c.outDir), Component: c.name, Msg: "listing the destination", Err: err}
			}
		}
		if len(taken) > 0 {
			return &Error{Kind: ErrExists, Path: r.sink.Location(path.Join(c.outDir, taken[0])), Component: c.name,
				Msg: "the destination " + takenMsg(taken, single, "Options.Overwrite (ckpt convert --overwrite)")}
		}
	}
	return nil
}

// writeRemote writes one component's set through the sink.
func (r *runner) writeRemote(c *component, cr *ComponentReport, specs []safetensors.TensorSpec, total int64, write func(safetensors.TensorSpec, io.Writer) error, start func([]safetensors.TensorSpec)) error {
	cr.Dir = r.sink.Location(c.outDir)
	maxShard := maxShardOr(r.opts.MaxShardSize)
	if c.single != "" {
		where := r.sink.Location(path.Join(c.outDir, c.single))
		if total > maxShard {
			return &Error{Kind: ErrTarget, Path: where, Msg: fmt.Sprintf("%s of tensors is more than the largest shard (%s), and a file of this name cannot be one of a set of shards: name it PREFIX.safetensors", sysmem.FormatSize(total), sysmem.FormatSize(maxShard))}
		}
		order, err := setwrite.Order([][]safetensors.TensorSpec{specs}, c.meta)
		if err != nil {
			return &Error{Kind: ErrInvalid, Path: where, Component: c.name, Msg: "header", Err: err}
		}
		start(order)
		if err := writeSinkFileSet(r.ctx, r.sink, c.outDir, c.single, specs, write, c.meta); err != nil {
			var ce *Error
			if errors.As(err, &ce) && ce.Kind == ErrConflict {
				ce.Component = c.name
			}
			return r.writeErr(where, c, err)
		}
		cr.Files = []string{c.single}
		return nil
	}
	set := &setwrite.Set{Sink: r.sink, Dir: c.outDir, Prefix: c.prefix, Variant: c.variant, Specs: specs, Write: write,
		Metadata: c.meta, MaxShard: maxShard, Replace: r.opts.Overwrite, Order: start}
	if c.shardOf != nil {
		set.ShardOf = func(name string) int { return c.shardOf[name] }
	}
	res, err := writeSinkSet(r.ctx, set)
	if err != nil {
		return r.writeErr(cr.Dir, c, err)
	}
	cr.Files, cr.Index = res.Files, res.Index
	r.rep.Warnings = append(r.rep.Warnings, res.Warnings...)
	return nil
}

// copyToSink copies the local file src to name in sink.
func copyToSink(ctx context.Context, dest sink.Sink, src, name string) error {
	in, _, err := safeopen.Open(src)
	if err != nil {
		return &Error{Kind: ErrSource, Path: src, Msg: "copy", Err: err}
	}
	defer in.Close()
	f, err := dest.Create(ctx, name, false)
	if err != nil {
		return sinkErr(ctx, dest.Location(name), -1, err)
	}
	if _, err := io.Copy(f, in); err != nil {
		f.Abort()
		return sinkErr(ctx, dest.Location(name), -1, err)
	}
	if err := f.Close(); err != nil {
		f.Abort()
		return sinkErr(ctx, dest.Location(name), -1, err)
	}
	return nil
}

// openSourceFS opens the file system of a src of a registered source
// (s3://...), for what Run reads beside the weights the loader reads:
// model_index.json, the configs and the files copied. A path leaves srcFS
// nil.
func (r *runner) openSourceFS() error {
	if source.Scheme(r.src) == "" {
		return nil
	}
	fsys, name, err := source.Open(r.ctx, r.src)
	if err != nil {
		return &Error{Kind: ErrSource, Err: err} // a *fs.PathError naming the location
	}
	r.srcFS, r.srcRoot = fsys, name
	return nil
}

// srcExists reports whether the file rel/name (slash-separated, relative
// to src) exists in a source of either kind.
func (r *runner) srcExists(rel, name string) bool {
	if r.srcFS == nil {
		_, err := os.Stat(filepath.Join(r.src, filepath.FromSlash(rel), name))
		return err == nil
	}
	st, err := fs.Stat(r.srcFS, path.Join(r.srcRoot, rel, name))
	return err == nil && st.Mode().IsRegular()
}

// srcRel returns the folder dir (a component's) relative to src. For a
// source with a scheme, dir is a location under src or, as the loader's
// plan gives a component's folder, a name in srcFS.
func (r *runner) srcRel(dir string) (string, error) {
	if r.srcFS == nil {
		return filepath.Rel(r.src, dir)
	}
	root := strings.TrimSuffix(r.src, "/")
	if source.Scheme(dir) == "" {
		root = r.srcRoot
	}
	if root == "." && fs.ValidPath(dir) {
		return dir, nil
	}
	d := strings.TrimSuffix(dir, "/")
	switch {
	case d == root:
		return ".", nil
	case strings.HasPrefix(d, root+"/"):
		return path.Clean(d[len(root)+1:]), nil
	}
	return "", fmt.Errorf("%s is not under %s", dir, r.src)
}

// readSourceConfig is readConfig for a source with a scheme: loc is the
// location of the config; nil when it does not exist.
func (r *runner) readSourceConfig(loc string) ([]byte, error) {
	rel, err := r.srcRel(loc)
	if err != nil {
		return nil, &Error{Kind: ErrSource, Path: loc, Err: err}
	}
	b, err := safeopen.ReadFileFS(r.srcFS, path.Join(r.srcRoot, rel), maxConfigSize)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, &Error{Kind: ErrSource, Path: loc, Err: err}
	}
	return b, nil
}

// scanSourceCopies is scanCopies for a source with a scheme: the files
// under root of fsys (loc is root's location, for messages).
func scanSourceCopies(fsys fs.FS, root, loc string, skip func(rel string) (bool, string)) ([]copyFile, []SkippedFile, error) {
	var files []copyFile
	var skipped []SkippedFile
	var walk func(dir, rel string, depth int) error
	walk = func(dir, rel string, depth int) error {
		if depth > 32 {
			return &Error{Kind: ErrSource, Path: joinLocation(loc, rel), Msg: "copy: folders nested more than 32 deep"}
		}
		ents, err := fs.ReadDir(fsys, dir)
		if err != nil {
			return &Error{Kind: ErrSource, Path: joinLocation(loc, rel), Err: err}
		}
		for _, e := range ents {
			name := e.Name()
			r := path.Join(rel, name)
			if w, why := isWeightsFile(name); w {
				skipped = append(skipped, SkippedFile{Path: filepath.FromSlash(r), Reason: why})
				continue
			}
			if s, why := skip(filepath.FromSlash(r)); s {
				if why != "" {
					skipped = append(skipped, SkippedFile{Path: filepath.FromSlash(r), Reason: why})
				}
				continue
			}
			switch {
			case e.IsDir():
				if err := walk(path.Join(dir, name), r, depth+1); err != nil {
					return err
				}
			case e.Type().IsRegular():
				files = append(files, copyFile{real: joinLocation(loc, r), rel: filepath.FromSlash(r), fsys: fsys, name: path.Join(dir, name)})
			default:
				return &Error{Kind: ErrSource, Path: joinLocation(loc, r), Msg: "copy: not a regular file"}
			}
		}
		return nil
	}
	if err := walk(root, ".", 0); err != nil {
		return nil, nil, err
	}
	return files, skipped, nil
}

// copyFromSource copies a file of a source with a scheme to the
// destination.
func (r *runner) copyFromSource(f copyFile) error {
	in, err := f.fsys.Open(f.name)
	if err != nil {
		return &Error{Kind: ErrSource, Path: f.real, Msg: "copy", Err: err}
	}
	defer in.Close()
	if r.sink != nil {
		name := filepath.ToSlash(f.rel)
		out, err := r.sink.Create(r.ctx, name, false)
		if err != nil {
			return sinkErr(r.ctx, r.sink.Location(name), -1, err)
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Abort()
			return sinkErr(r.ctx, r.sink.Location(name), -1, err)
		}
		if err := out.Close(); err != nil {
			out.Abort()
			return sinkErr(r.ctx, r.sink.Location(name), -1, err)
		}
		return nil
	}
	dst := filepath.Join(r.dst, f.rel)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return &Error{Kind: ErrTarget, Path: filepath.Dir(dst), Msg: "write", Err: err}
	}
	return writeAtomic(r.ctx, dst, func(w io.Writer) error {
		_, err := io.Copy(w, in)
		return err
	})
}
