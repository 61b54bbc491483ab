package shard

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/ckpt-go/ckpt/safetensors"
)

// WriteOption configures Write and WriteFrom.
type WriteOption func(*writeConfig)

type writeConfig struct {
	maxShard  int64
	err       error
	writeOpts []safetensors.WriteOption
	ops       fileOps // file system operations; replaced by tests to inject failures
}

// WithMaxShardSize sets the largest shard, in bytes of tensor data (headers
// are not counted, as in huggingface_hub). Use ParseSize for "5GB"-style
// strings. The default is DefaultMaxShardSize.
func WithMaxShardSize(n int64) WriteOption {
	return func(c *writeConfig) {
		if n <= 0 {
			c.err = &Error{Kind: ErrInvalidSize, Msg: fmt.Sprintf("max shard size %d is not positive", n)}
			return
		}
		c.maxShard = n
	}
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
	// variant that the new set replaced or removed.
	Replaced []string `json:"replaced,omitempty"`
	// Warnings report cleanup that failed after the commit succeeded (a
	// leftover backup file, for instance).
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
// limit gets a shard of its own. Shards are named
// PREFIX-00001-of-0000N.safetensors (PREFIX.V-00001-of-0000N.safetensors
// for variant V) and listed in PREFIX.safetensors.index.json
// (PREFIX.safetensors.index.V.json) with metadata.total_size; a set that
// fits one shard is written as PREFIX.safetensors (PREFIX.V.safetensors)
// with no index. metadata goes into every file's __metadata__.
//
// The whole set is committed atomically with respect to readers that follow
// the index (such as Open and package variant): every new file is first
// written under a hidden temporary name and fsynced; then the previous set's
// index (every current and legacy name for this prefix and variant) is moved
// aside, the previous files are moved aside or hard-linked to backups, the
// new shards are renamed into place and the new index (or single file) comes
// last; the folder is fsynced and the backups are deleted. So no reader ever
// sees the new index with missing or old shards (while the set is swapped,
// a reader may briefly find no index at all). On any failure the new files
// are removed and the previous set is restored. If the process dies in the
// middle, the previous set's files remain as hidden ".NAME.old-*" backups.
// Concurrent writers of the same set in the same folder are not coordinated;
// serialize them.
func WriteFrom(ctx context.Context, dir, prefix, variant string, specs []safetensors.TensorSpec, data func(name string) ([]byte, error), metadata map[string]string, opts ...WriteOption) (*WriteResult, error) {
	cfg := writeConfig{maxShard: DefaultMaxShardSize, ops: osOps{}}
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
		return nil, &Error{Kind: ErrInvalidVariant, Path: dir, Msg: fmt.Sprintf("variant %q does not match ^[A-Za-z0-9_]+$", variant)}
	}
	sizes := make([]int64, len(specs))
	seen := make(map[string]bool, len(specs))
	for i, s := range specs {
		if s.Name == "" || s.Name == "__metadata__" {
			return nil, &Error{Kind: ErrInvalidTensor, Path: dir, Tensor: s.Name, Msg: "invalid tensor name"}
		}
		if seen[s.Name] {
			return nil, &Error{Kind: ErrDuplicateTensor, Path: dir, Tensor: s.Name}
		}
		seen[s.Name] = true
		size, err := s.ByteLen()
		if err != nil {
			return nil, &Error{Kind: ErrInvalidTensor, Path: dir, Tensor: s.Name, Err: err}
		}
		sizes[i] = size
	}
	if len(specs) == 0 {
		return nil, &Error{Kind: ErrInvalidTensor, Path: dir, Msg: "no tensors to write"}
	}

	// Pack greedily, in order.
	var groups [][]int
	var cur []int
	var curSize, total int64
	for i, size := range sizes {
		if len(cur) > 0 && curSize+size > cfg.maxShard {
			groups = append(groups, cur)
			cur, curSize = nil, 0
		}
		cur = append(cur, i)
		curSize += size
		total += size
	}
	groups = append(groups, cur)

	res := &WriteResult{Dir: dir, WeightMap: make(map[string]string, len(specs)), TotalSize: total}
	n := len(groups)
	for i := range groups {
		if n == 1 {
			res.Files = append(res.Files, singleName(prefix, variant))
		} else {
			res.Files = append(res.Files, shardName(prefix, variant, i+1, n))
		}
	}
	if n > 1 {
		res.Index = indexName(prefix, variant)
	}

	tx := &commit{dir: dir, ops: cfg.ops}
	defer tx.abort() // a no-op after a successful commit

	for gi, g := range groups {
		if err := ctx.Err(); err != nil {
			return nil, &Error{Kind: ErrCanceled, Path: dir, Err: err}
		}
		gspecs := make([]safetensors.TensorSpec, len(g))
		for j, i := range g {
			gspecs[j] = specs[i]
			res.WeightMap[specs[i].Name] = res.Files[gi]
		}
		if err := tx.writeShard(ctx, res.Files[gi], gspecs, data, metadata, cfg.writeOpts); err != nil {
			return nil, err
		}
	}
	if n > 1 {
		doc := struct {
			Metadata  map[string]int64  `json:"metadata"`
			WeightMap map[string]string `json:"weight_map"`
		}{map[string]int64{"total_size": total}, res.WeightMap}
		b, err := json.MarshalIndent(doc, "", "  ")
		if err != nil {
			return nil, &Error{Kind: ErrWrite, Path: dir, Err: err}
		}
		if err := tx.writeFile(res.Index, append(b, '\n')); err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, &Error{Kind: ErrCanceled, Path: dir, Err: err}
	}
	old, err := previousSet(dir, prefix, variant)
	if err != nil {
		return nil, &Error{Kind: ErrWrite, Path: dir, Msg: "listing the previous set", Err: err}
	}
	replaced, warnings, err := tx.commit(old)
	if err != nil {
		return nil, err
	}
	res.Replaced, res.Warnings = replaced, warnings
	return res, nil
}

// writeShard streams one shard to a temporary file.
func (tx *commit) writeShard(ctx context.Context, name string, specs []safetensors.TensorSpec, data func(string) ([]byte, error), metadata map[string]string, opts []safetensors.WriteOption) error {
	f, err := tx.create(name)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	w, err := safetensors.NewWriter(bw, specs, metadata, opts...)
	if err != nil {
		return &Error{Kind: ErrWrite, Path: tx.dir, Shard: name, Err: err}
	}
	for _, s := range w.Order() {
		if err := ctx.Err(); err != nil {
			return &Error{Kind: ErrCanceled, Path: tx.dir, Shard: name, Err: err}
		}
		b, err := data(s.Name)
		if err != nil {
			return &Error{Kind: ErrWrite, Path: tx.dir, Shard: name, Tensor: s.Name, Msg: "fetching the data", Err: err}
		}
		want, _ := s.ByteLen() // checked by WriteFrom
		if int64(len(b)) != want {
			return &Error{Kind: ErrInvalidTensor, Path: tx.dir, Tensor: s.Name,
				Msg: fmt.Sprintf("data has %d bytes, %s%v needs %d", len(b), s.DType, s.Shape, want)}
		}
		if err := w.WriteTensor(s.Name, b); err != nil {
			return &Error{Kind: ErrWrite, Path: tx.dir, Shard: name, Tensor: s.Name, Err: err}
		}
	}
	if err := w.Close(); err != nil {
		return &Error{Kind: ErrWrite, Path: tx.dir, Shard: name, Err: err}
	}
	if err := bw.Flush(); err != nil {
		return &Error{Kind: ErrWrite, Path: tx.dir, Shard: name, Err: err}
	}
	return tx.finish(name)
}

var (
	variantRE = regexp.MustCompile(`^[A-Za-z0-9_]+$`)
	prefixRE  = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_-]*$`)
)

// checkPrefix accepts names such as "model" and "diffusion_pytorch_model":
// letters, digits, "_" and "-" (no dots, which would read as a variant).
func checkPrefix(prefix string) *Error {
	if !prefixRE.MatchString(prefix) {
		return &Error{Kind: ErrInvalidPrefix, Msg: fmt.Sprintf("prefix %q must match %s", prefix, prefixRE)}
	}
	return nil
}

func singleName(prefix, variant string) string {
	if variant == "" {
		return prefix + ".safetensors"
	}
	return prefix + "." + variant + ".safetensors"
}

func shardName(prefix, variant string, i, n int) string {
	if variant != "" {
		prefix += "." + variant
	}
	return fmt.Sprintf("%s-%05d-of-%05d.safetensors", prefix, i, n)
}

func indexName(prefix, variant string) string {
	if variant == "" {
		return prefix + ".safetensors.index.json"
	}
	return prefix + ".safetensors.index." + variant + ".json"
}

// previousSet lists the files in dir that belong to a set for prefix and
// variant in any naming (current or legacy), indexes first.
func previousSet(dir, prefix, variant string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, nil
		}
		return nil, err
	}
	q := regexp.QuoteMeta(prefix)
	var pats []string
	if variant == "" {
		pats = []string{q + `\.safetensors`, q + `\.safetensors\.index\.json`, q + `-\d{5,}-of-\d{5,}\.safetensors`}
	} else {
		v := regexp.QuoteMeta(variant)
		pats = []string{
			q + `\.` + v + `\.safetensors`,
			q + `\.safetensors\.index\.` + v + `\.json`,
			q + `\.safetensors\.` + v + `\.index\.json`,
			q + `\.` + v + `-\d{5,}-of-\d{5,}\.safetensors`,
			q + `-\d{5,}-of-\d{5,}\.` + v + `\.safetensors`,
		}
	}
	re := regexp.MustCompile(`^(?:` + strings.Join(pats, "|") + `)$`)
	var idx, rest []string
	for _, e := range entries {
		if !re.MatchString(e.Name()) || e.IsDir() {
			continue
		}
		if strings.HasSuffix(e.Name(), ".json") {
			idx = append(idx, e.Name())
		} else {
			rest = append(rest, e.Name())
		}
	}
	return append(idx, rest...), nil
}

// join is filepath.Join for a file in the output folder.
func (tx *commit) path(name string) string { return filepath.Join(tx.dir, name) }
