package shard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"github.com/ckpt-go/ckpt/internal/atomicfile"
	"github.com/ckpt-go/ckpt/internal/setname"
	"github.com/ckpt-go/ckpt/internal/setwrite"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/sink"
)

// WriteOption configures Write and WriteFrom.
type WriteOption func(*writeConfig)

type writeConfig struct {
	maxShard  int64
	shardOf   func(name string) int // WithShards; nil packs by maxShard
	err       error
	writeOpts []safetensors.WriteOption
	order     func([]safetensors.TensorSpec)
	wrap      func(sink.Sink) sink.Sink // set by tests: wraps the folder's sink to observe or fail its operations
}

// WithMaxShardSize sets the largest shard, in bytes of tensor data (headers
// are not counted, as in huggingface_hub). Use ParseSize for "5GB"-style
// strings. The default is DefaultMaxShardSize.
func WithMaxShardSize(n int64) WriteOption {
	return func(c *writeConfig) {
		if n <= 0 {
			c.err = &Error{Kind: ErrInvalidArgument, Msg: fmt.Sprintf("invalid size: max shard size %d is not positive", n)}
			return
		}
		c.maxShard = n
	}
}

// WithShards places each tensor in the shard shardOf gives it instead of
// packing tensors by size: shardOf(name) is the tensor's shard number. The
// shards come in increasing order of number, each holding its tensors in
// the order given; a number no tensor has makes no shard, so the set has
// as many shards as distinct numbers (one writes PREFIX[.V].safetensors,
// with no index). A converter keeps a source's sharding with it: each
// tensor in the shard its source tensor came from. It replaces the
// packing of WithMaxShardSize, whatever the order of the options.
func WithShards(shardOf func(name string) int) WriteOption {
	return func(c *writeConfig) { c.shardOf = shardOf }
}

// WithWriteOptions passes options to safetensors.NewWriter for every shard.
func WithWriteOptions(opts ...safetensors.WriteOption) WriteOption {
	return func(c *writeConfig) { c.writeOpts = append(c.writeOpts, opts...) }
}

// WriteResult describes a committed set.
type WriteResult struct {
	// Dir is the output folder.
	Dir string `json:"dir"`
	// Index is the index file's name, "" when a single file was written.
	Index string `json:"index,omitempty"`
	// Files are the safetensors file names, in shard order.
	Files []string `json:"files"`
	// WeightMap maps each tensor to its file name.
	WeightMap map[string]string `json:"weight_map"`
	// TotalSize is the bytes of tensor data written.
	TotalSize int64 `json:"total_size"`
	// Replaced lists the files of the previous set for the same prefix and
	// variant (in any naming) that the new set replaced or removed.
	Replaced []string `json:"replaced,omitempty"`
	// Leftovers lists the hidden files that interrupted earlier saves of
	// the same set left (".NAME.tmp-*" temporaries, ".NAME.old-*"
	// backups) and that this save removed.
	Leftovers []string `json:"leftovers,omitempty"`
	// Warnings report cleanup that failed after the commit succeeded (a
	// leftover file that could not be removed, for instance).
	Warnings []string `json:"warnings,omitempty"`
}

// Write writes tensors as a checkpoint set in dir, atomically; see
// WriteFrom, which it calls with the tensors' Data.
func Write(ctx context.Context, dir, prefix, variant string, tensors []safetensors.TensorData, metadata map[string]string, opts ...WriteOption) (*WriteResult, error) {
	specs := make([]safetensors.TensorSpec, len(tensors))
	data := make(map[string][]byte, len(tensors))
	for i, t := range tensors {
		specs[i] = safetensors.TensorSpec{Name: t.Name, DType: t.DType, Shape: t.Shape}
		data[t.Name] = t.Data
	}
	return WriteFrom(ctx, dir, prefix, variant, specs, func(name string) ([]byte, error) { return data[name], nil }, metadata, opts...)
}

// WriteFrom writes a checkpoint set in dir, fetching each tensor's bytes
// from data only when that tensor is written, so memory stays bounded by the
// largest tensor. Tensors are packed greedily in the given order into shards
// of at most the max shard size (WithMaxShardSize); a tensor larger than the
// limit gets a shard of its own (WithShards places them instead). Shards are named
// PREFIX-00001-of-0000N.safetensors (PREFIX.V-00001-of-0000N.safetensors
// for variant V) and listed in PREFIX.safetensors.index.json
// (PREFIX.safetensors.index.V.json) with metadata.total_size; a set that
// fits one shard is written as PREFIX.safetensors (PREFIX.V.safetensors)
// with no index. metadata goes into every file's __metadata__, except
// its checksum keys (safetensors.ChecksumPrefix): each goes into the file
// that holds its tensor only, as a claim the data written must match
// (ErrWrite wrapping a *safetensors.ChecksumError otherwise; a key naming
// no tensor of the set is ErrInvalidArgument). Every file carries the
// CRC-32C of each of its tensors (safetensors.NewWriter), unless
// WithWriteOptions(safetensors.WithoutChecksums()). The new set
// replaces the previous set of the same prefix and variant in every naming
// (current and diffusers' legacy names); other prefixes, variants and files
// are left alone.
//
// The replacement is crash-atomic: if the process is killed at any instant,
// every reader that opens the folder afterwards — package variant, Open on
// the index or on the single file, transformers or diffusers, with no
// repair run first — loads either the complete previous set or the complete
// new one. The protocol:
//
//  1. Take the set's lock, ".PREFIX[.V].safetensors.lock" (see below), and
//     remove the temporary files that killed saves of the set left.
//  2. Write each new file under a hidden temporary name,
//     ".NAME.tmp-DIGITS", fsync it and rename (or, for a name that must be
//     new, hard-link) it into place; the folder is fsynced once all of them
//     are (a barrier of sink.Dir's Batched mode: each later step makes its
//     changes durable the same way before the next one starts). A
//     sharded set's shards go to their standard names when no file has any
//     of those names, and otherwise to swap names
//     PREFIX[.V]-00001-of-0000N.swap-TOKEN.safetensors (TOKEN is 12 random
//     hex digits), so that no file of the previous set changes; no reader
//     follows them yet.
//  3. The entry point is put in place the same way: the index, which names
//     exactly these files, switches every reader that follows the index; a
//     single file PREFIX[.V].safetensors every reader that prefers a single
//     file to an index (package variant, transformers).
//  4. The previous set's other entry point is removed (its single file
//     when the new set has an index: it would shadow the new index for
//     readers that prefer single files; its index otherwise), then its
//     indexes, shards, and hidden leftovers of earlier saves.
//  5. A set committed under swap names is moved to its standard names: the
//     shards are hard-linked to them, a second index naming them is renamed
//     over the index (another atomic switch), and the swap names are
//     removed. Where hard links are unsupported the set keeps its swap
//     names, with a warning; the next save uses the standard names again.
//
// This is the protocol of every writer of shard sets (internal/setwrite),
// through the folder's sink here and through an object store's in package
// convert.
//
// So a save never changes or removes a file of the previous set before the
// new set is complete and switched in; no reader ever finds an index with
// missing shards, or no set at all. A kill can leave unreferenced files:
// temporaries, shards that no index names, and, when killed between the
// switch of one kind of reader and the other's (steps 3 and 4), a single
// file next to a complete index (readers that prefer one or the other then
// disagree on which of the two sets they load, each getting a complete
// one). The next save of the set removes them; Leftovers lists
// them meanwhile. On any failure up to the switch the new files are
// removed and the previous set is untouched (ErrCommit). The removal of the
// previous single file or index that would shadow the new set is part of
// the switch: if it fails, the new files are removed again, or, where the
// previous state cannot be restored that way, ErrCommit says which readers
// load which set. Failures to remove the rest of the previous set are
// reported in WriteResult.Warnings.
//
// The lock (an advisory flock) is held for the whole save: concurrent saves
// of one set, in this process or others, are serialized, the second waiting
// until ctx is done. Because of it a save removes only temporaries that no
// live save owns. safetensors.Save to PREFIX[.V].safetensors takes the same
// lock. On platforms without flock (Windows, for instance) saves are not
// serialized and hidden leftovers are left in place.
func WriteFrom(ctx context.Context, dir, prefix, variant string, specs []safetensors.TensorSpec, data func(name string) ([]byte, error), metadata map[string]string, opts ...WriteOption) (*WriteResult, error) {
	write := func(s safetensors.TensorSpec, w io.Writer) error {
		b, err := data(s.Name)
		if err != nil {
			return &Error{Kind: ErrWrite, Path: dir, Tensor: s.Name, Msg: "fetching the data", Err: err}
		}
		want, _ := s.ByteLen() // checked by writeSet
		if int64(len(b)) != want {
			return &Error{Kind: ErrInvalidArgument, Path: dir, Tensor: s.Name,
				Msg: fmt.Sprintf("invalid tensor: data has %d bytes, %s%v needs %d", len(b), s.DType, s.Shape, want)}
		}
		_, err = w.Write(b)
		return err
	}
	return writeSet(ctx, dir, prefix, variant, specs, write, metadata, opts)
}

// writeSet is WriteFrom and WriteStream: write streams each tensor's bytes
// into w.
func writeSet(ctx context.Context, dir, prefix, variant string, specs []safetensors.TensorSpec, write func(safetensors.TensorSpec, io.Writer) error, metadata map[string]string, opts []WriteOption) (*WriteResult, error) {
	cfg := writeConfig{maxShard: DefaultMaxShardSize}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.err != nil {
		cfg.err.(*Error).Path = dir
		return nil, cfg.err
	}
	if err := checkPrefix(prefix); err != nil {
		err.Path = dir
		return nil, err
	}
	if variant != "" && !variantRE.MatchString(variant) {
		return nil, &Error{Kind: ErrInvalidArgument, Path: dir, Msg: fmt.Sprintf("invalid variant: variant %q does not match ^[A-Za-z0-9_]+$", variant)}
	}
	seen := make(map[string]bool, len(specs))
	for _, s := range specs {
		if s.Name == "" || s.Name == "__metadata__" {
			return nil, &Error{Kind: ErrInvalidArgument, Path: dir, Tensor: s.Name, Msg: "invalid tensor: invalid tensor name"}
		}
		if seen[s.Name] {
			return nil, &Error{Kind: ErrInvalidArgument, Path: dir, Tensor: s.Name, Msg: "duplicate tensor"}
		}
		seen[s.Name] = true
		if _, err := s.ByteLen(); err != nil {
			return nil, &Error{Kind: ErrInvalidArgument, Path: dir, Tensor: s.Name, Msg: "invalid tensor", Err: err}
		}
	}
	if len(specs) == 0 {
		return nil, &Error{Kind: ErrInvalidArgument, Path: dir, Msg: "invalid tensor: no tensors to write"}
	}
	if k := setwrite.CheckClaims(metadata, specs); k != "" {
		return nil, &Error{Kind: ErrInvalidArgument, Path: dir, Tensor: strings.TrimPrefix(k, safetensors.ChecksumPrefix),
			Msg: "invalid tensor: the metadata names a checksum (" + k + ") for a tensor that is not written"}
	}

	if err := ctx.Err(); err != nil {
		return nil, &Error{Kind: ErrWrite, Path: dir, Msg: "canceled", Err: err}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, &Error{Kind: ErrWrite, Path: dir, Err: err}
	}
	lock, err := atomicfile.LockTarget(ctx, dir, setname.SingleName(prefix, variant))
	if err != nil {
		if ctx.Err() != nil {
			return nil, &Error{Kind: ErrWrite, Path: dir, Msg: "canceled waiting for another save of the set", Err: err}
		}
		return nil, &Error{Kind: ErrWrite, Path: dir, Msg: "taking the lock", Err: err}
	}
	defer lock.Unlock()
	var dest sink.Sink = sink.NewDir(dir).Batched()
	if cfg.wrap != nil {
		dest = cfg.wrap(dest)
	}
	set := &setwrite.Set{Sink: dest, Prefix: prefix, Variant: variant, Specs: specs, Write: write, Metadata: metadata,
		Opts: cfg.writeOpts, MaxShard: cfg.maxShard, ShardOf: cfg.shardOf, Replace: true, Locked: lock.Exclusive(), Order: cfg.order}
	r, err := setwrite.Commit(ctx, set)
	if err != nil {
		return nil, setErr(ctx, dir, err)
	}
	return &WriteResult{Dir: dir, Index: r.Index, Files: r.Files, WeightMap: r.WeightMap, TotalSize: r.Total,
		Replaced: r.Replaced, Leftovers: r.Leftovers, Warnings: r.Warnings}, nil
}

// setErr is the *Error of a failure of setwrite.Commit.
func setErr(ctx context.Context, dir string, err error) error {
	var e *setwrite.Error
	if !errors.As(err, &e) {
		return &Error{Kind: ErrWrite, Path: dir, Err: err}
	}
	switch e.Stage {
	case setwrite.StageList:
		return &Error{Kind: ErrWrite, Path: dir, Msg: e.Msg, Err: e.Err}
	case setwrite.StageCommit, setwrite.StageSwitch:
		return &Error{Kind: ErrCommit, Path: dir, Msg: strings.TrimPrefix(e.Name+": "+e.Msg, ": "), Err: e.Err}
	case setwrite.StageSpec:
		return &Error{Kind: ErrInvalidArgument, Path: dir, Tensor: e.Name, Msg: "invalid tensor: " + e.Msg, Err: e.Err}
	}
	var te *setwrite.TensorError
	var le *setwrite.LengthError
	canceled := ctx.Err() != nil && (errors.Is(e.Err, context.Canceled) || errors.Is(e.Err, context.DeadlineExceeded))
	switch {
	case errors.As(e.Err, &te):
		var se *Error
		if errors.As(te.Err, &se) {
			if se.Shard == "" {
				se.Shard = e.Name
			}
			return se
		}
		if canceled {
			return &Error{Kind: ErrWrite, Path: dir, Shard: e.Name, Tensor: te.Tensor, Msg: "canceled", Err: te.Err}
		}
		return &Error{Kind: ErrWrite, Path: dir, Shard: e.Name, Tensor: te.Tensor, Err: te.Err}
	case errors.As(e.Err, &le):
		return &Error{Kind: ErrInvalidArgument, Path: dir, Shard: e.Name, Tensor: le.Spec.Name, Msg: "invalid tensor: " + le.Error()}
	case canceled:
		return &Error{Kind: ErrWrite, Path: dir, Shard: e.Name, Msg: "canceled", Err: e.Err}
	}
	return &Error{Kind: ErrWrite, Path: dir, Shard: e.Name, Msg: e.Msg, Err: e.Err}
}

var (
	variantRE   = regexp.MustCompile(`^[A-Za-z0-9_]+$`)
	prefixRE    = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_-]*$`)
	shardTailRE = regexp.MustCompile(setname.NN + `$`)
)

// checkPrefix accepts names such as "model" and "diffusion_pytorch_model":
// letters, digits, "_" and "-" (no dots, which would read as a variant),
// not ending like a shard number ("-00001-of-00002"), which would make the
// set's single file read as a shard of a shorter prefix.
func checkPrefix(prefix string) *Error {
	if !prefixRE.MatchString(prefix) {
		return &Error{Kind: ErrInvalidPrefix, Msg: fmt.Sprintf("prefix %q must match %s", prefix, prefixRE)}
	}
	if shardTailRE.MatchString(prefix) {
		return &Error{Kind: ErrInvalidPrefix, Msg: fmt.Sprintf("prefix %q ends like a shard number", prefix)}
	}
	return nil
}
