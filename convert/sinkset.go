package convert

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/ckpt-go/ckpt/internal/setname"
	"github.com/ckpt-go/ckpt/internal/setwrite"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/shard"
	"github.com/ckpt-go/ckpt/sink"
)

// setNames are the names of the set of one prefix and variant (package
// setname's rules): its single file and index, and which files of a folder
// belong to it in any naming (current and legacy indexes, standard,
// swap-named and legacy shards).
type setNames struct {
	prefix, variant string
	single, index   string
}

func newSetNames(prefix, variant string) setNames {
	return setNames{prefix: prefix, variant: variant, single: setname.SingleName(prefix, variant), index: setname.IndexName(prefix, variant)}
}

// member reports whether name is a file of the set.
func (n setNames) member(name string) bool { return setname.Member(name, n.prefix, n.variant) }

// sinkSet is a weights set to write through a Sink.
type sinkSet struct {
	sink            sink.Sink
	dir             string // the set's folder in the sink ("." for its root)
	prefix, variant string
	specs           []safetensors.TensorSpec
	write           func(safetensors.TensorSpec, io.Writer) error
	metadata        map[string]string
	maxShard        int64
	shardOf         func(name string) int // each tensor's shard (shard.WithShards); nil packs by maxShard
	overwrite       bool
	order           func([]safetensors.TensorSpec)
}

// sinkSetResult describes a set written through a Sink.
type sinkSetResult struct {
	files    []string // in shard order, relative to the set's folder
	index    string   // "" for a single file
	total    int64
	replaced []string
	warnings []string
}

func (s *sinkSet) name(n string) string {
	if s.dir == "." || s.dir == "" {
		return n
	}
	return path.Join(s.dir, n)
}

// existingSet lists the files of the set of prefix and variant in the
// folder dir of the sink.
func existingSet(fsys fs.FS, dir string, names setNames) ([]string, error) {
	es, err := fs.ReadDir(fsys, dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range es {
		if !e.IsDir() && names.member(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// takenMsg says what the files prev of a set in a folder are, for a
// writer refused for them, and that remedy replaces them: a set, or shards
// without an index or single file (a write that did not finish).
func takenMsg(prev []string, names setNames, remedy string) string {
	if slices.ContainsFunc(prev, func(f string) bool { return f == names.single || strings.HasSuffix(f, ".json") }) {
		return fmt.Sprintf("holds weights of this set already (%s): %s replaces them", prev[0], remedy)
	}
	return fmt.Sprintf("holds shards of this set without their index (%s), left by a write that did not finish (killed?): no reader loads them; %s replaces them", prev[0], remedy)
}

// writeSinkSet writes a set through a sink.Sink, so that a reader never sees a
// partial one: the shards under names no reader follows yet (their
// standard names when the folder holds no file of the set, else swap
// names), then the index, written last in one request (exclusive when the
// folder had none, so that an index written meanwhile by someone else is
// never replaced: ErrConflict; on a sink.Conditional, replacing only the
// version of the previous index seen before the shards were written, so
// that of two writers replacing a set at once the second fails with
// ErrConflict, its new shards removed), then the previous set's single file or
// index that would shadow the new set is removed, then the rest of the
// previous set. A set that fits one shard is one file, PREFIX[.V].safetensors,
// whose upload replaces a previous one in one step (exclusive where there
// was none, else conditional on its version as the index is). A folder that holds a
// set already is refused (ErrExists) unless overwrite is set. On failure
// or cancellation the file being written is aborted and the new files are
// removed: the previous set is untouched.
func writeSinkSet(ctx context.Context, s *sinkSet) (*sinkSetResult, error) {
	where := s.sink.Location(s.dir)
	names := newSetNames(s.prefix, s.variant)
	prev, err := existingSet(s.sink.FS(), s.dir, names)
	if err != nil {
		return nil, &Error{Kind: ErrTarget, Path: where, Msg: "listing the folder", Err: err}
	}
	if len(prev) > 0 && !s.overwrite {
		return nil, &Error{Kind: ErrExists, Path: where, Msg: "the location " + takenMsg(prev, names, "the overwrite option")}
	}
	sizes := make([]int64, len(s.specs))
	var total int64
	for i, sp := range s.specs {
		n, err := sp.ByteLen()
		if err != nil {
			return nil, &Error{Kind: ErrShape, Path: where, Tensor: sp.Name, Err: err}
		}
		sizes[i], total = n, total+n
	}
	if k := setwrite.CheckClaims(s.metadata, s.specs); k != "" {
		return nil, &Error{Kind: ErrMetadata, Path: where, Field: k, Msg: "a checksum for a tensor that is not written"}
	}
	groups := setwrite.Pack(sizes, s.maxShard)
	if s.shardOf != nil {
		shardOf := make([]int, len(s.specs))
		for i, sp := range s.specs {
			shardOf[i] = s.shardOf(sp.Name)
		}
		groups = setwrite.Assign(shardOf)
	}
	gspecs := setwrite.Split(s.specs, groups)
	n := len(gspecs)
	token := ""
	if n > 1 && len(prev) > 0 {
		if token, err = randomToken(); err != nil {
			return nil, &Error{Kind: ErrWrite, Path: where, Err: err}
		}
	}
	// The entry point readers follow, replaced last: exclusive where the
	// folder had none, else (on a sink.Conditional) only while it is still
	// the version seen now.
	entry := names.index
	if n == 1 {
		entry = names.single
	}
	entryExcl, entryVersion := !slices.Contains(prev, entry), ""
	if !entryExcl {
		if entryVersion, entryExcl, err = sink.SeenVersion(ctx, s.sink, s.name(entry)); err != nil {
			return nil, &Error{Kind: ErrTarget, Path: s.sink.Location(s.name(entry)), Msg: "reading the version of the file to replace", Err: err}
		}
	}
	res := &sinkSetResult{total: total}
	for gi := range gspecs {
		if n == 1 {
			res.files = append(res.files, names.single)
		} else {
			f := setname.ShardName(s.prefix, s.variant, gi+1, n)
			if token != "" {
				f = setname.SwapName(f, token)
			}
			res.files = append(res.files, f)
		}
	}
	if n > 1 {
		res.index = names.index
	}
	if s.order != nil {
		order, err := setwrite.Order(gspecs, s.metadata)
		if err != nil {
			return nil, &Error{Kind: ErrHeader, Path: where, Err: err}
		}
		s.order(order)
	}

	var written []string // new files in place, removed again on failure
	fail := func(err error) (*sinkSetResult, error) {
		for _, f := range written {
			if slices.Contains(prev, f) {
				continue // replaced in one step: the previous file is gone
			}
			s.sink.Remove(context.WithoutCancel(ctx), s.name(f))
		}
		return nil, err
	}
	weightMap := map[string]string{}
	for gi, gs := range gspecs {
		name := res.files[gi]
		// Shards under their standard names (a new set) are written
		// exclusively: a writer racing for the same names never replaces
		// another's shard, nor removes it when it fails. Swap names are
		// this writer's alone. A single file is the set's entry point:
		// where none was, it is written exclusively too.
		excl, ver := token == "", ""
		if n == 1 {
			excl, ver = entryExcl, entryVersion
		}
		if err := s.writeShard(ctx, name, gs, excl, ver); err != nil {
			if errors.Is(err, fs.ErrExist) {
				return fail(&Error{Kind: ErrConflict, Path: s.sink.Location(s.name(name)), Msg: "another writer wrote or replaced this file meanwhile; it was not replaced", Err: err})
			}
			return fail(err)
		}
		written = append(written, name)
		for _, sp := range gs {
			weightMap[sp.Name] = name
		}
		at("sink-shard")
	}
	if n > 1 {
		b, err := setwrite.IndexJSON(total, weightMap)
		if err != nil {
			return fail(&Error{Kind: ErrWrite, Path: where, Err: err})
		}
		if err := ctx.Err(); err != nil {
			return fail(&Error{Kind: ErrWrite, Path: where, Msg: "canceled", Err: err})
		}
		if err := writeSinkFileIf(ctx, s.sink, s.name(names.index), b, entryExcl, entryVersion); err != nil {
			if errors.Is(err, fs.ErrExist) {
				return fail(&Error{Kind: ErrConflict, Path: s.sink.Location(s.name(names.index)), Msg: "another writer wrote or replaced the index meanwhile; it was not replaced, and this save's new shards were removed", Err: err})
			}
			return fail(sinkErr(ctx, s.sink.Location(s.name(names.index)), -1, err))
		}
	}
	at("sink-indexed")
	// The switch for readers that prefer the other entry point.
	shadow := names.single
	if n == 1 {
		shadow = names.index
	}
	if slices.Contains(prev, shadow) {
		if err := s.sink.Remove(ctx, s.name(shadow)); err != nil {
			return nil, &Error{Kind: ErrCommit, Path: s.sink.Location(s.name(shadow)), Err: err,
				Msg: "the new set is in place, but this file of the previous set could not be removed: readers that prefer it still load the previous set"}
		}
		res.replaced = append(res.replaced, shadow)
	}
	for _, f := range prev {
		if f == shadow || slices.Contains(res.files, f) || f == res.index {
			if f != shadow {
				res.replaced = append(res.replaced, f)
			}
			continue
		}
		if err := s.sink.Remove(ctx, s.name(f)); err != nil {
			res.warnings = append(res.warnings, fmt.Sprintf("could not remove %s of the previous set: %v", s.sink.Location(s.name(f)), err))
			continue
		}
		res.replaced = append(res.replaced, f)
	}
	return res, nil
}

// writeShard streams one file of the set.
// With a version, it replaces only that version of name (sink.CreateIf).
func (s *sinkSet) writeShard(ctx context.Context, name string, specs []safetensors.TensorSpec, exclusive bool, version string) error {
	where := s.sink.Location(s.name(name))
	f, err := sink.CreateIf(ctx, s.sink, s.name(name), exclusive, version)
	if err != nil {
		return sinkErr(ctx, where, -1, err)
	}
	err = setwrite.Stream(ctx, f, specs, s.write, s.metadata)
	var te *setwrite.TensorError
	var le *setwrite.LengthError
	if errors.As(err, &te) {
		err = te.Err // the data function's own error
	} else if errors.As(err, &le) {
		err = &Error{Kind: ErrWrite, Path: where, Tensor: le.Spec.Name, Msg: le.Error()}
	}
	if err == nil {
		err = f.Close()
	}
	if err != nil {
		f.Abort()
		var ce *Error
		if errors.As(err, &ce) {
			return ce
		}
		if errors.Is(err, fs.ErrExist) {
			return err
		}
		return sinkErr(ctx, where, -1, err)
	}
	return nil
}

// maxShardOr is the shard size limit: n, or package shard's default.
func maxShardOr(n int64) int64 {
	if n > 0 {
		return n
	}
	return shard.DefaultMaxShardSize
}
