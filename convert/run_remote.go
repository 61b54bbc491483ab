package convert

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/internal/safeopen"
	"github.com/ckpt-go/ckpt/safetensors"
)

// openDest opens a destination of a registered sink: a folder, or, for a
// file source and a location ending in ".safetensors", the file of that
// name in its parent folder.
func (r *runner) openDest(dirSrc bool) error {
	loc := r.dst
	if !dirSrc && strings.HasSuffix(loc, ".safetensors") {
		i := strings.LastIndexByte(loc, '/')
		if i < 0 || i < len(ckpt.SchemeOf(loc))+3 {
			return &Error{Kind: ErrTarget, Path: r.dst, Msg: "no folder above the file"}
		}
		loc, r.destFile = loc[:i], loc[i+1:]
	}
	sink, err := OpenSink(r.ctx, loc)
	if err != nil {
		return err
	}
	r.sink = sink
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
		if c.single != "" {
			if _, err := fs.Stat(fsys, path.Join(c.outDir, c.single)); err == nil {
				taken = []string{c.single}
			}
		} else {
			var err error
			if taken, err = existingSet(fsys, c.outDir, newSetNames(c.prefix, c.variant)); err != nil {
				return &Error{Kind: ErrTarget, Path: r.sink.Location(c.outDir), Component: c.name, Msg: "listing the destination", Err: err}
			}
		}
		if len(taken) > 0 {
			return &Error{Kind: ErrExists, Path: r.sink.Location(path.Join(c.outDir, taken[0])), Component: c.name,
				Msg: "the destination holds weights already: Options.Overwrite (ckpt convert --overwrite) replaces them"}
		}
	}
	return nil
}

// writeRemote writes one component's set through the sink.
func (r *runner) writeRemote(c *component, cr *ComponentReport, specs []safetensors.TensorSpec, total int64, write func(safetensors.TensorSpec, io.Writer) error, start func([]safetensors.TensorSpec)) error {
	cr.Dir = r.sink.Location(c.outDir)
	maxShard := maxShardOr(r.opts.MaxShardSize)
	set := &sinkSet{sink: r.sink, dir: c.outDir, prefix: c.prefix, variant: c.variant, specs: specs, write: write,
		metadata: c.meta, maxShard: maxShard, overwrite: r.opts.Overwrite, order: start}
	if c.single != "" {
		where := r.sink.Location(path.Join(c.outDir, c.single))
		if total > maxShard {
			return &Error{Kind: ErrTarget, Path: where, Msg: fmt.Sprintf("%s of tensors is more than the largest shard (%s), and a file of this name cannot be one of a set of shards: name it PREFIX.safetensors", ckpt.FormatSize(total), ckpt.FormatSize(maxShard))}
		}
		w, err := safetensors.NewWriter(io.Discard, specs, c.meta)
		if err != nil {
			return &Error{Kind: ErrHeader, Path: where, Component: c.name, Err: err}
		}
		start(w.Order())
		// One file replaces its previous version in one step: exclusive
		// where there was none, else (on a ConditionalSink) only while it
		// is the version seen now.
		excl, ver := true, ""
		if _, err := fs.Stat(r.sink.FS(), path.Join(c.outDir, c.single)); err == nil {
			var gone bool
			if ver, gone, err = seenVersion(r.ctx, r.sink, set.name(c.single)); err != nil {
				return &Error{Kind: ErrTarget, Path: where, Component: c.name, Msg: "reading the version of the file to replace", Err: err}
			}
			excl = gone
		}
		if err := set.writeShard(r.ctx, c.single, specs, excl, ver); err != nil {
			if errors.Is(err, fs.ErrExist) {
				return &Error{Kind: ErrConflict, Path: where, Component: c.name, Msg: "another writer wrote or replaced this file meanwhile; it was not replaced", Err: err}
			}
			return r.writeErr(where, c, err)
		}
		cr.Files = []string{c.single}
		return nil
	}
	res, err := writeSinkSet(r.ctx, set)
	if err != nil {
		return r.writeErr(cr.Dir, c, err)
	}
	cr.Files, cr.Index = res.files, res.index
	r.rep.Warnings = append(r.rep.Warnings, res.warnings...)
	return nil
}

// copyToSink copies the local file src to name in sink.
func copyToSink(ctx context.Context, sink Sink, src, name string) error {
	in, _, err := safeopen.Open(src)
	if err != nil {
		return &Error{Kind: ErrCopy, Path: src, Err: err}
	}
	defer in.Close()
	f, err := sink.Create(ctx, name, false)
	if err != nil {
		return sinkErr(ctx, sink.Location(name), -1, err)
	}
	if _, err := io.Copy(f, in); err != nil {
		f.Abort()
		return sinkErr(ctx, sink.Location(name), -1, err)
	}
	if err := f.Close(); err != nil {
		f.Abort()
		return sinkErr(ctx, sink.Location(name), -1, err)
	}
	return nil
}
