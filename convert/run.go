package convert

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/safeopen"
	"github.com/ckpt-go/ckpt/internal/srcfs"
	"github.com/ckpt-go/ckpt/internal/sysmem"
	"github.com/ckpt-go/ckpt/quant"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/shard"
	"github.com/ckpt-go/ckpt/sink"
	"github.com/ckpt-go/ckpt/source"
)

// Metadata keys Run adds to every file's __metadata__ (besides the
// source's, which it keeps but for its checksums and MetaSourceCRC32C
// keys, which describe other files; "format": "pt", which transformers
// requires, when the source has none; and the checksums of the tensors
// written, safetensors.ChecksumPrefix).
const (
	// MetaSource is the base name of the source Run read.
	MetaSource = "ckpt.convert.source"
	// MetaPolicy is the dtype policy, as the CLI's flags spell it.
	MetaPolicy = "ckpt.convert.policy"
	// MetaScale is the FP8 quantization ("channel compressed-tensors",
	// "block:128 deepseek", "none"), when Run quantized.
	MetaScale = "ckpt.convert.fp8_scale"
	// MetaQuantizationConfig is the key of the quantization_config JSON text
	// that makes a bare quantized file self-describing (package quant reads
	// it when no config.json declares one).
	MetaQuantizationConfig = "quantization_config"
	// MetaSourceCRC32C prefixes the provenance key Run writes, into every
	// output file of a component, for each source weights file that names
	// checksums: MetaSourceCRC32C+NAME (NAME the file's base name) holds the
	// CRC-32C of the whole source file, 8 lowercase hex digits, as `crc32c`
	// tools and S3's full-object CRC-32C compute it. It is combined from the
	// CRC of the file's header and the checksums that header names, so that
	// it is known before the output is written and costs no second read; Run
	// checks every tensor it reads against those checksums, so the digest
	// names the bytes that were read. It is not written with VerifyNever,
	// nor for source files without checksums (ckpt checksum adds them).
	MetaSourceCRC32C = "ckpt.convert.source_crc32c."
)

// maxConfigSize bounds the config.json Run reads and rewrites.
const maxConfigSize = 16 << 20

// component is one weights set to write.
type component struct {
	name    string // "" for the only component of a file or folder
	label   string // the name rules and Options.Policy.Components use
	srcDir  string
	store   *loaderStore
	scheme  *quant.Scheme
	items   []*ckpt.Item // the loader's decision for each logical tensor, in load order (openItems)
	outDir  string
	prefix  string
	variant string
	single  string // an output file whose name no set can have, written alone
	tasks   []*task
	shardOf map[string]int // each output tensor's shard, for the source's sharding (sourceShards); nil to pack by size
	byName  map[string]*task
	meta    map[string]string
	qconfig json.RawMessage // the quantization config written (new or kept)
	newQ    bool            // weights were quantized here
	dropQ   bool            // the source's quantization no longer applies
	config  string          // the source config.json to rewrite ("" for none)

	format   ScaleFormat // of new FP8 weights (never AutoScaleFormat)
	scale    Scale       // of new FP8 weights, resolved
	explicit bool        // the options ask stored FP8 weights for other scales

	digests map[string]uint32 // the source files' digests, for provenance (checkSources)
}

type runner struct {
	ctx     context.Context
	opts    Options
	policy  ckpt.Policy // opts.Policy with NarrowLinearOnly set
	src     string
	dst     string
	rep     *Report
	comps   []*component
	workers int
	scratch []*scratch // one per worker, reused by every pass
	chunk   int64
	convert dtype.Options

	progMu  sync.Mutex
	done    int64
	total   int64
	phase   string
	read    atomic.Int64
	written int64

	// sink is where the output goes when dst is a location of a
	// registered sink (s3://...); components' outDir and single are then
	// names in it. nil for paths.
	sink     sink.Sink
	destFile string // the file name dst ends with, for a file source

	// srcFS is the file system of a src of a registered source
	// (s3://...), srcRoot src's name in it; nil for paths.
	srcFS   fs.FS
	srcRoot string

	rawPool sync.Pool // *[]byte: stored bytes of converting reads (partTensor)

	closeItems func() // closes the Model of the components' Items (openItems)
}

// Run converts the checkpoint src into dst and reports what it did.
//
// src is anything ckpt.Open accepts: a safetensors file, a shard index, a
// component folder or a pipeline root (Options.SourceVariant picks a
// precision variant). It may also be a PyTorch checkpoint, which ckpt.Open
// reads with package torch: a .bin, .pt, .pth or .ckpt file, a
// pytorch_model.bin.index.json, or a component folder holding only such
// weights. Nothing of it is executed (a forbidden pickle global fails
// before anything is written), its tensors are read through the loader's
// Parts like any other's, tied names are written once and recorded under
// torch.AliasesKey (as are a safetensors source's: see ckpt.Open; a tied
// name whose target would make it differ from its kept tensor, or that
// would be quantized with scales, fails with ErrCast naming both before
// anything is written), and the output is named
// model.safetensors (diffusion_pytorch_model.safetensors, X.safetensors
// for X.pt; model-0000k-of-0000n.safetensors for the shards of
// pytorch_model-0000k-of-0000n.bin). A file converts to a file: dst is the
// output file (a name such as "model.safetensors" or
// "model.bf16.safetensors" is a set, any other name a single file), or a
// folder that receives the source's file name. A folder or pipeline
// converts to a folder with the same layout: each component's weights
// named as the source names them (its prefix) and sharded as the source
// is (the same number of shards, each tensor in the shard of its source
// tensor, the index rewritten; Options.MaxShardSize re-shards by size),
// every other regular file copied (configs, tokenizers, schedulers;
// weights of other formats and variants are left out and listed in
// Report.Skipped, the weights converted are not), config.json rewritten
// when the quantization changes. With Options.Variant set, the weights are named as that
// precision variant; when dst is the source folder itself, they are
// written beside the source's (model.bf16.safetensors,
// X.V-0000k-of-0000n.safetensors with X.safetensors.index.V.json), config
// files untouched, so that a later variant resolution finds them. Without
// a variant, dst equal to the source converts in place: the source's set
// is replaced atomically once the new one is complete (it is read until
// then).
//
// Each tensor's target is the loader's decision (its ckpt.Item) under
// Options.Policy, with ckpt.Policy.NarrowLinearOnly set: an 8-bit or
// narrower default or component target applies only to the 2-D weights of
// linear layers (ckpt.LinearWeight). To F8_E4M3 or F8_E5M2 such a weight is quantized
// with F32 scales (Options.Scale, Options.ScaleFormat) and the component
// gets the matching quantization_config, in config.json and in every
// file's __metadata__; Scale.Unscaled casts plainly instead. A source
// weight in a scaled layout (DeepSeek FP8, compressed-tensors, ModelOpt,
// MXFP4, ...) is copied with its scales when its target is "stored", or
// its element type and Options.Scale and ScaleFormat ask for nothing else
// (the report's warnings say so); dequantized (through package quant, one
// rounding) to a wider float target; relabelled (codes and scale values
// bit for bit under the names and config of Options.ScaleFormat) when the
// requested scales split it as its stored ones do; and dequantized and
// quantized anew to any other FP8 target with scales (see Options.Scale).
// Its scales, markers and activation scales go when none of the
// component's weights stays in the layout.
//
// Every component is written for the library that owns it, as the
// pipeline's model_index.json lists it ([library, class]) or its
// config.json says (_diffusers_version): transformers reads both
// quantization_configs Run writes, diffusers neither, so a diffusers
// component that would get one is refused before anything is written
// (ErrCast, "unreadable", naming it) unless Options.AllowCkptOnlyQuant. In a
// pipeline, a default target of 8 bits or fewer does not apply to VAEs
// (Autoencoder*, VQModel, a component named vae) and image encoders
// (*VisionModel*, image_encoder): their tensors stay as stored, and the
// report says why, unless a component target or a rule names them.
//
// dst may also be a location of a registered sink (s3://BUCKET/PREFIX with
// package remote imported): a folder, or for a file source a location
// ending in ".safetensors". Each set is then uploaded shard by shard and
// its index last (nothing partial is
// ever visible, uploads are aborted on failure or cancellation), configs
// and other files after; weights already there are replaced only with
// Options.Overwrite (ErrExists before anything is written otherwise); a
// set is replaced only while its index (or single file) is still the
// version seen before its shards were written (If-Match on S3): of two
// Runs replacing it at once, the later one fails with ErrConflict and
// removes its new shards.
//
// src may be a location of a registered source too (s3://BUCKET/PREFIX,
// a folder, a pipeline root, an index or a file): the loader reads its
// weights with ranged reads, and its configs and other files are read
// through the source's file system (source.Open) and copied.
//
// Tensors are converted piece by piece (Options.ChunkBytes) by
// Options.Workers goroutines, read through the loader's Parts with pread
// into reused buffers (nothing of the source stays mapped), so memory does
// not grow with the model. Every set is committed atomically by the shard
// sets' one protocol: on any error, or when ctx is canceled, the previous
// output is intact and no temporary file is left.
//
// Every output file names the CRC-32C of each of its tensors (see
// MetaSourceCRC32C for what is written and why), and the source is
// verified as it is read, under Options.Policy.Verify (ckpt.Verify): by
// default every tensor of a source file that names checksums is checked
// on the read that converts it, and a mismatch fails Run before the set
// is committed with an ErrSource error matching ckpt.ErrChecksum and
// wrapping a *safetensors.ChecksumError that names the source file, the
// tensor and its bytes; VerifyAlways also refuses, before anything is
// written, a source file that names no checksums; VerifyNever checks
// nothing. A PyTorch source is verified against the CRC-32 its archive
// records for each storage record: a tensor whose bytes are its record's
// as it is read, a view of part of its storage (or transposed, or of a
// big-endian archive) only with VerifyAlways, which reads its record
// (see package ckpt).
//
// Errors are *Error values: ErrOption, ErrSource (also a file that cannot
// be copied), ErrTarget (the destination, and writing it), ErrExists,
// ErrConflict, ErrCast (also a component its library would not read),
// ErrOverflow (Options.FailOnOverflow), ErrVerify. A canceled ctx gives an
// ErrTarget that says "write: canceled" and matches context.Canceled (or
// DeadlineExceeded).
func Run(ctx context.Context, src, dst string, opts Options) (*Report, error) {
	r := &runner{ctx: ctx, opts: opts, src: src, dst: dst, rep: &Report{Source: src, Dest: dst, Variant: opts.Variant}}
	if err := r.check(); err != nil {
		return nil, err
	}
	srcs, err := r.openSource()
	if err != nil {
		return nil, err
	}
	defer func() {
		if r.closeItems != nil {
			r.closeItems()
		}
	}()
	copies, err := r.plan(srcs)
	if err != nil {
		return nil, err
	}
	for _, c := range r.comps {
		if err := r.writeComponent(c); err != nil {
			return r.rep, err
		}
	}
	if err := r.finishFiles(copies); err != nil {
		return r.rep, err
	}
	r.rep.BytesRead = r.read.Load()
	r.rep.BytesWritten = r.written
	for _, c := range r.comps {
		for _, t := range c.tasks {
			r.rep.Tensors = append(r.rep.Tensors, *t.rep)
		}
	}
	r.rep.summarize()
	if opts.Verify {
		if err := r.verify(); err != nil {
			return r.rep, err
		}
		r.rep.Verified = true
	}
	return r.rep, nil
}

// check validates the options.
func (r *runner) check() error {
	o := &r.opts
	bad := func(field, msg string) error { return &Error{Kind: ErrOption, Field: field, Msg: msg} }
	for _, v := range []struct{ field, v string }{{"Variant", o.Variant}, {"SourceVariant", o.SourceVariant}} {
		if v.v != "" && !variantRE.MatchString(v.v) {
			return bad(v.field, fmt.Sprintf("variant %q must match ^[A-Za-z0-9_]+$", v.v))
		}
	}
	if o.MaxShardSize < 0 {
		return bad("MaxShardSize", fmt.Sprintf("%d is negative", o.MaxShardSize))
	}
	if o.Workers < 0 {
		return bad("Workers", fmt.Sprintf("%d is negative", o.Workers))
	}
	if o.ChunkBytes < 0 || (o.ChunkBytes > 0 && o.ChunkBytes < 4096) {
		return bad("ChunkBytes", fmt.Sprintf("%d: at least 4096 bytes (0 for the default)", o.ChunkBytes))
	}
	targets := map[string]ckpt.Target{"Policy.Default": o.Policy.Default}
	for k, t := range o.Policy.Components {
		targets["Policy.Components["+k+"]"] = t
	}
	for i, ru := range o.Policy.Rules {
		targets[fmt.Sprintf("Policy.Rules[%d]", i)] = ru.Target
	}
	for field, t := range targets {
		if d, ok := t.DType(); ok && (!d.Valid() || d.Bits() == 0) {
			return bad(field, fmt.Sprintf("unknown dtype %v", d))
		}
	}
	r.policy = o.Policy
	r.policy.NarrowLinearOnly = true
	if o.ScaleFormat < AutoScaleFormat || o.ScaleFormat > DeepSeek {
		return bad("ScaleFormat", fmt.Sprintf("unknown format %d", int(o.ScaleFormat)))
	}
	if _, err := resolveScale(o.Scale, cmp.Or(o.ScaleFormat, CompressedTensors)); err != nil {
		return err // each component resolves its own (resolveComponentScale)
	}
	r.workers = o.Workers
	if r.workers == 0 {
		r.workers = runtime.GOMAXPROCS(0)
	}
	r.chunk = cmp.Or(o.ChunkBytes, 8<<20)
	r.scratch = make([]*scratch, r.workers)
	for i := range r.scratch {
		r.scratch[i] = new(scratch)
	}
	r.convert = dtype.Options{Saturate: o.Policy.Saturate, Workers: 1}
	return nil
}

// srcComponent is one component of the source: its stored tensors, its
// detected scaled layout, and the file name its weights are named after.
type srcComponent struct {
	label  string // the component's name, for rules and Options.Policy.Components
	dir    string
	naming string // the source's index or single file name
}

// openSource opens the source with the loader (safetensors files and
// PyTorch checkpoints alike). It checks the options that name components.
func (r *runner) openSource() ([]srcComponent, error) {
	srcs, err := r.openLoader()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, s := range srcs {
		names = append(names, s.label)
	}
	for k := range r.opts.Policy.Components {
		if !slices.Contains(names, k) {
			return nil, &Error{Kind: ErrOption, Field: "Policy.Components", Component: k, Msg: "no such component; the model has " + strings.Join(names, ", ")}
		}
	}
	for _, ru := range r.opts.Policy.Rules {
		if ru.Component != "" && !slices.Contains(names, ru.Component) {
			return nil, &Error{Kind: ErrOption, Field: "Policy.Rules", Component: ru.Component, Msg: "rule " + ru.String() + " names no component of the model"}
		}
	}
	return srcs, nil
}

// source is the one value that says where the source's files are (srcFS,
// nil for the operating system's) and whether links may leave their folder
// (Options.FollowSymlinks): every resolution of the source's files reads
// the symlink rule from it.
func (r *runner) source() srcfs.FS {
	return srcfs.Of(r.srcFS).Following(r.opts.FollowSymlinks)
}

// ckptSourceOptions are the source's rule as ckpt.Open takes it (Open
// opens the location itself).
func (r *runner) ckptSourceOptions() []ckpt.Option {
	if r.source().Follow() {
		return []ckpt.Option{ckpt.WithFollowSymlinks()}
	}
	return nil
}

// loaderOptions are the options the source is opened with: its files'
// rule, the variant asked for, no budget (convert streams), pread (nothing
// of the source stays mapped) and the policy's verification.
func (r *runner) loaderOptions() []ckpt.Option {
	copts := append(r.ckptSourceOptions(), ckpt.WithVariant(r.opts.SourceVariant), ckpt.WithBudget(-1),
		ckpt.WithReadStrategy("pread"))
	if v := r.opts.Policy.Verify; v == ckpt.VerifyNever || v == ckpt.VerifyAlways {
		copts = append(copts, ckpt.WithVerify(v))
	}
	return copts
}

// openLoader opens the source with the loader, as stored, for what is
// known before the policy is final (protectComponent adds to it): its
// components, their folders and the names their files follow. openItems
// then opens it with that policy.
func (r *runner) openLoader() ([]srcComponent, error) {
	m, err := ckpt.Open(r.src, r.loaderOptions()...)
	if err != nil {
		return nil, r.sourceErr(err)
	}
	defer m.Close()
	p, err := m.Plan()
	if err != nil {
		return nil, &Error{Kind: ErrSource, Path: r.src, Err: err}
	}
	var srcs []srcComponent
	for _, cp := range p.Components {
		cs, err := m.Contents(cp.Name)
		if err != nil {
			return nil, &Error{Kind: ErrSource, Path: r.src, Component: cp.Name, Err: err}
		}
		if len(cs.Files) == 0 {
			return nil, &Error{Kind: ErrSource, Path: r.src, Component: cp.Name, Msg: "no weights files"}
		}
		// The source's naming: from its index, or its single file (a
		// PyTorch file's safetensors name).
		naming := filepath.Base(cs.Files[0])
		if cs.Index != "" {
			naming = filepath.Base(cs.Index)
		}
		srcs = append(srcs, srcComponent{label: cp.Name, dir: cp.Dir, naming: torchNaming(naming)})
	}
	return srcs, nil
}

// sourceErr is the error of a source the loader does not open: ErrOption
// when an option does not apply to it (Options.SourceVariant for a
// PyTorch file, which has no variants), else ErrSource.
func (r *runner) sourceErr(err error) error {
	kind := ErrSource
	if errors.Is(err, ckpt.ErrOption) {
		kind = ErrOption
	}
	return &Error{Kind: kind, Path: r.src, Err: err}
}

// openItems opens the source again, with the final policy (the caller's
// and the rules protectComponent added), and gives each component the
// loader's Items, which say how each of its tensors loads (buildTasks
// writes them), and its stored tensors (Model.Contents) read through that
// Model. The Model is closed with the run (closeItems).
func (r *runner) openItems(comps []*component) error {
	m, err := ckpt.Open(r.src, append(r.loaderOptions(), ckpt.WithPolicy(r.policy))...)
	if err != nil {
		var le *ckpt.Error
		if errors.As(err, &le) && errors.Is(le.Kind, ckpt.ErrTarget) {
			// A target the tensor cannot take (a complex tensor to a
			// real dtype, a dequantization to an integer, elements
			// that do not fill whole bytes): the loader's refusal,
			// under convert's name of the component.
			comp := ""
			for _, c := range comps {
				if c.label == le.Component {
					comp = c.name
				}
			}
			return &Error{Kind: ErrCast, Path: r.src, Component: comp, Tensor: le.Tensor, Msg: le.Msg, Err: le.Err}
		}
		return r.sourceErr(err)
	}
	r.closeItems = func() { m.Close() }
	items, err := m.Items()
	if err != nil {
		return &Error{Kind: ErrSource, Path: r.src, Err: err}
	}
	for _, c := range comps {
		cs, err := m.Contents(c.label)
		if err != nil {
			return &Error{Kind: ErrSource, Path: r.src, Component: c.label, Err: err}
		}
		c.store, c.scheme = newLoaderStore(cs, &r.rawPool), cs.Scheme
		for _, it := range items {
			if it.Component == c.label {
				c.items = append(c.items, it)
			}
		}
	}
	return nil
}

// plan resolves the destination of every component, builds the tasks and
// lists the files to copy, refusing what cannot be done before anything is
// written.
func (r *runner) plan(srcs []srcComponent) ([]copyFile, error) {
	if err := r.openSourceFS(); err != nil {
		return nil, err
	}
	// A folder or pipeline root rather than a file, as ckpt.Open tells
	// them apart (one rule: srcfs.FS.IsFolder).
	root := r.src
	if r.srcFS != nil {
		root = r.srcRoot
	}
	dirSrc := srcfs.Of(r.srcFS).IsFolder(root)
	pipeline := false
	if dirSrc {
		pipeline = r.srcExists(".", "model_index.json")
	}
	remoteDst := source.Scheme(r.dst) != ""
	beside := dirSrc && !remoteDst && samePath(r.src, r.dst)
	if remoteDst {
		if err := r.openDest(dirSrc); err != nil {
			return nil, err
		}
	}
	if dirSrc && !beside && !remoteDst {
		if st, err := os.Stat(r.dst); err == nil && !st.IsDir() {
			return nil, &Error{Kind: ErrTarget, Path: r.dst, Msg: "a folder converts to a folder, and this is a file"}
		}
		if nested(r.src, r.dst) {
			return nil, &Error{Kind: ErrTarget, Path: r.dst, Msg: "the destination folder and the source folder " + r.src + " contain one another"}
		}
	}
	owners := r.owners(srcs, dirSrc, pipeline)
	comps := make([]*component, len(srcs))
	for i, cp := range srcs {
		c := &component{label: cp.label, srcDir: cp.dir}
		if pipeline {
			c.name = cp.label
		}
		r.protectComponent(c, owners[cp.label], pipeline)
		comps[i] = c
	}
	// The policy is final: every tensor's decision is the loader's, made
	// with it.
	if err := r.openItems(comps); err != nil {
		return nil, err
	}
	for i, cp := range srcs {
		c := comps[i]
		if err := r.resolveComponentScale(c); err != nil {
			return nil, err
		}
		srcName := cp.naming
		prefix, svariant, ok := weightsName(srcName)
		if !ok {
			prefix, svariant = "model", ""
		}
		c.prefix, c.variant = prefix, cmp.Or(r.opts.Variant, svariant)
		switch {
		case beside:
			c.outDir = cp.dir
		case dirSrc:
			rel, err := r.srcRel(cp.dir)
			if err != nil || !pipeline {
				rel = "."
			}
			c.outDir = filepath.Join(r.dst, rel)
			if r.sink != nil {
				c.outDir = path.Clean(filepath.ToSlash(rel))
			}
		case r.sink != nil:
			if err := r.remoteFileDest(c, srcName, ok); err != nil {
				return nil, err
			}
		default:
			if err := r.fileDest(c, srcName, ok); err != nil {
				return nil, err
			}
		}
		if dirSrc && !beside && r.srcFS != nil {
			if rel, err := r.srcRel(cp.dir); err == nil && r.srcExists(rel, "config.json") {
				c.config = joinLocation(r.src, path.Join(rel, "config.json"))
			}
		} else if dirSrc && !beside {
			cfg := filepath.Join(cp.dir, "config.json")
			if _, err := os.Lstat(cfg); err == nil {
				c.config = cfg
			}
		}
		if err := r.buildTasks(c); err != nil {
			return nil, err
		}
		if r.opts.MaxShardSize == 0 {
			c.shardOf = sourceShards(c)
		}
		if beside {
			if err := r.besideConfig(c); err != nil {
				return nil, err
			}
		}
		r.comps = append(r.comps, c)
	}
	if err := r.checkOwners(owners); err != nil {
		return nil, err
	}
	if r.sink != nil {
		if err := r.checkRemoteDest(); err != nil {
			return nil, err
		}
	}
	if !dirSrc || beside {
		return nil, nil
	}
	// Files to copy, checked now: configs that are rewritten and
	// hf_quant_config.json of quantization that no longer applies are
	// handled otherwise.
	special := map[string]string{}
	for _, c := range r.comps {
		rel, _ := r.srcRel(c.srcDir)
		if c.config != "" {
			special[filepath.Join(rel, "config.json")] = ""
		}
		if c.newQ || c.dropQ {
			special[filepath.Join(rel, "hf_quant_config.json")] = "the quantization it declares no longer applies"
		}
	}
	skip := func(rel string) (bool, string) {
		why, ok := special[rel]
		return ok, why
	}
	if r.srcFS != nil {
		copies, skipped, err := scanSourceCopies(r.srcFS, r.srcRoot, r.src, skip)
		r.rep.Skipped = r.leftOut(skipped)
		return copies, err
	}
	copies, skipped, err := scanCopies(r.src, r.source(), skip)
	if err != nil {
		return nil, err
	}
	r.rep.Skipped = r.leftOut(skipped)
	return copies, nil
}

// fileDest resolves the destination of a file source.
func (r *runner) fileDest(c *component, srcName string, srcOK bool) error {
	d := r.dst
	st, err := os.Stat(d)
	isDir := (err == nil && st.IsDir()) || strings.HasSuffix(d, string(filepath.Separator)) || strings.HasSuffix(d, "/")
	switch {
	case isDir:
		c.outDir = d
		if !srcOK {
			c.single = filepath.Join(d, srcName)
		}
	case err == nil && !st.Mode().IsRegular():
		return &Error{Kind: ErrTarget, Path: d, Msg: "not a regular file or a folder"}
	default:
		c.outDir = filepath.Dir(d)
		base := filepath.Base(d)
		prefix, variant, ok := weightsName(base)
		switch {
		case ok:
			c.prefix = prefix
			c.variant = cmp.Or(r.opts.Variant, variant)
			if r.opts.Variant != "" && variant != "" && variant != r.opts.Variant {
				return &Error{Kind: ErrTarget, Path: d, Msg: fmt.Sprintf("the file name says variant %q, the options %q", variant, r.opts.Variant)}
			}
		case strings.HasSuffix(base, ".json"):
			return &Error{Kind: ErrTarget, Path: d, Msg: "not an index name PREFIX.safetensors.index[.V].json"}
		default:
			if r.opts.Variant != "" {
				return &Error{Kind: ErrTarget, Path: d, Msg: fmt.Sprintf("a variant needs a file named PREFIX.%s.safetensors", r.opts.Variant)}
			}
			c.single = d
		}
	}
	return nil
}

// besideConfig refuses to write FP8 weights beside a source whose
// config.json declares a quantization the loader would apply to them.
func (r *runner) besideConfig(c *component) error {
	if !c.newQ {
		return nil
	}
	b, err := r.readConfig(filepath.Join(c.srcDir, "config.json"))
	if err != nil || b == nil {
		return err
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(b, &obj) == nil {
		for _, k := range []string{"quantization_config", "compression_config"} {
			if _, ok := obj[k]; ok {
				return &Error{Kind: ErrTarget, Path: c.srcDir, Component: c.name,
					Msg: "config.json declares a " + k + ", which readers would apply to the new FP8 variant too; convert into another folder"}
			}
		}
	}
	return nil
}

// readConfig reads a config file under the folder's symlink rule; nil when
// it does not exist.
func (r *runner) readConfig(path string) ([]byte, error) {
	if r.srcFS != nil {
		return r.readSourceConfig(path)
	}
	real, err := shard.ResolveFile(path, shard.WithSource(r.source()))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, &Error{Kind: ErrSource, Path: path, Err: err}
	}
	b, err := safeopen.ReadFile(real, maxConfigSize)
	if err != nil {
		return nil, &Error{Kind: ErrSource, Path: path, Err: err}
	}
	return b, nil
}

// writeComponent writes one component's set.
func (r *runner) writeComponent(c *component) error {
	if err := r.observe(c); err != nil {
		return err
	}
	specs := make([]safetensors.TensorSpec, len(c.tasks))
	var total int64
	for i, t := range c.tasks {
		specs[i] = t.spec
		total += t.rep.Bytes
	}
	r.progMu.Lock()
	r.phase, r.done, r.total = "write", 0, total
	r.progMu.Unlock()
	var pl *pipeline
	defer func() {
		if pl != nil {
			pl.stop()
		}
	}()
	start := func(order []safetensors.TensorSpec) {
		ts := make([]*task, len(order))
		for i, s := range order {
			ts[i] = c.byName[s.Name]
		}
		pl = newPipeline(r.ctx, ts, r.scratch, max(4*r.chunk, int64(2*r.workers)*r.chunk), r.chunk, r.convert)
	}
	write := func(s safetensors.TensorSpec, w io.Writer) error {
		return r.writeTensor(pl, c, c.byName[s.Name], w)
	}
	cr := ComponentReport{Name: c.name, Dir: c.outDir, Quantization: c.qconfig, SourceCRC32C: sourceDigests(c)}
	if r.sink != nil {
		if err := r.writeRemote(c, &cr, specs, total, write, start); err != nil {
			return err
		}
	} else if c.single != "" {
		var max int64 = shard.DefaultMaxShardSize
		if r.opts.MaxShardSize > 0 {
			max = r.opts.MaxShardSize
		}
		if total > max {
			return &Error{Kind: ErrTarget, Path: c.single, Msg: fmt.Sprintf("%s of tensors is more than the largest shard (%s), and a file of this name cannot be one of a set of shards: name it PREFIX.safetensors", sysmem.FormatSize(total), sysmem.FormatSize(max))}
		}
		if err := os.MkdirAll(filepath.Dir(c.single), 0o755); err != nil {
			return &Error{Kind: ErrTarget, Path: c.single, Msg: "write", Err: err}
		}
		fw, err := safetensors.Create(r.ctx, c.single, specs, c.meta)
		if err != nil {
			return r.writeErr(c.single, c, err)
		}
		defer fw.Close()
		start(fw.Order())
		for {
			s, w, err := fw.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				return r.writeErr(c.single, c, err)
			}
			if err := write(s, w); err != nil {
				return r.writeErr(c.single, c, err)
			}
		}
		if err := fw.Commit(); err != nil {
			return r.writeErr(c.single, c, err)
		}
		cr.Dir, cr.Files = filepath.Dir(c.single), []string{filepath.Base(c.single)}
	} else {
		wopts := []shard.WriteOption{shard.WithOrder(start)}
		if c.shardOf != nil {
			wopts = append(wopts, shard.WithShards(func(name string) int { return c.shardOf[name] }))
		} else if r.opts.MaxShardSize > 0 {
			wopts = append(wopts, shard.WithMaxShardSize(r.opts.MaxShardSize))
		}
		res, err := shard.WriteStream(r.ctx, c.outDir, c.prefix, c.variant, specs, write, c.meta, wopts...)
		if err != nil {
			return r.writeErr(c.outDir, c, err)
		}
		cr.Files, cr.Index = res.Files, res.Index
		r.rep.Warnings = append(r.rep.Warnings, res.Warnings...)
	}
	r.rep.Components = append(r.rep.Components, cr)
	return nil
}

// writeErr wraps a failure to write a set, keeping this package's errors
// (an overflow, a source read) as they are.
func (r *runner) writeErr(path string, c *component, err error) error {
	var ce *Error
	if errors.As(err, &ce) {
		return ce
	}
	if r.ctx.Err() != nil {
		return &Error{Kind: ErrTarget, Path: path, Component: c.name, Msg: "write: canceled", Err: withCtxErr(r.ctx.Err(), err)}
	}
	return &Error{Kind: ErrTarget, Path: path, Component: c.name, Msg: "write", Err: err}
}

// writeTensor writes one tensor's pieces, in order, from the pipeline.
func (r *runner) writeTensor(pl *pipeline, c *component, t *task, w io.Writer) error {
	if t == nil {
		return &Error{Kind: ErrTarget, Component: c.name, Msg: "write: the writer asked for a tensor that was not declared"}
	}
	rep := t.rep
	crc := uint32(0)
	for i, np := int64(0), t.pieces(); i < np; i++ {
		pc, err := pl.next()
		if err != nil {
			if ce := r.ctx.Err(); ce != nil {
				return &Error{Kind: ErrTarget, Component: c.name, Tensor: t.spec.Name, Msg: "write: canceled", Err: ce}
			}
			return err
		}
		if pc.t != t {
			pl.release(pc)
			return &Error{Kind: ErrTarget, Component: c.name, Tensor: t.spec.Name, Msg: "write: pieces out of order: got " + pc.t.spec.Name}
		}
		ps := &pc.ps
		rep.NaN += ps.nan
		rep.Inf += ps.inf
		rep.Overflow += ps.st.Overflow
		rep.Saturated += ps.st.Saturated
		rep.Underflow += ps.st.Underflow
		rep.MaxAbs = max(rep.MaxAbs, ps.st.MaxAbs)
		rep.MaxAbsErr = max(rep.MaxAbsErr, ps.maxAbsErr)
		rep.MaxRelErr = max(rep.MaxRelErr, ps.rel)
		rep.sse += ps.sse
		rep.ssq += ps.ss
		r.read.Add(ps.read)
		if r.opts.FailOnOverflow && rep.Narrowed && ps.st.Overflow+ps.nan+ps.inf > 0 {
			pl.release(pc)
			return &Error{Kind: ErrOverflow, Component: c.name, Tensor: t.spec.Name,
				Msg: fmt.Sprintf("%s to %s: %d values overflowed, %d became NaN, %d became Inf (FailOnOverflow); nothing was committed", rep.From, rep.To, rep.Overflow, rep.NaN, rep.Inf)}
		}
		if r.opts.Verify {
			crc = safetensors.UpdateChecksum(crc, pc.out)
		}
		if _, err := w.Write(pc.out); err != nil {
			pl.release(pc)
			return err
		}
		n := int64(len(pc.out))
		pl.release(pc)
		r.written += n
		r.progress(c, t.spec.Name, n)
	}
	rep.crc = crc
	if rep.ssq > 0 {
		rep.RMSRelErr = math.Sqrt(rep.sse / rep.ssq)
	}
	if t.q != nil && t.kind != kScale {
		rep.MaxAbs = float64(t.q.AbsMax())
	}
	if t.kind == kDequant || t.kind == kRequant {
		t.dropViews() // copies made for pread files
	}
	return nil
}

// progress reports n more bytes done.
func (r *runner) progress(c *component, tensor string, n int64) {
	if r.opts.Progress == nil {
		return
	}
	r.progMu.Lock()
	defer r.progMu.Unlock()
	r.done += n
	r.opts.Progress(ckpt.Progress{Phase: r.phase, Done: r.done, Total: r.total, Component: c.name, Tensor: tensor})
}

// observe runs the first pass of FP8 quantization: every row of the
// weights to quantize, for their scales.
func (r *runner) observe(c *component) error {
	var ts []*task
	var total int64
	for _, t := range c.tasks {
		if t.kind == kQuant || t.kind == kRequant {
			ts = append(ts, t)
			total += t.rows * t.cols * int64(t.src.DType().Bits()) / 8
		}
	}
	if len(ts) == 0 {
		return nil
	}
	r.progMu.Lock()
	r.phase, r.done, r.total = "scales", 0, total
	r.progMu.Unlock()
	var next atomic.Int64
	errs := make([]error, r.workers)
	var wg sync.WaitGroup
	for wi := range r.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := r.scratch[wi]
			for {
				i := next.Add(1) - 1
				if i >= int64(len(ts)) || errs[wi] != nil {
					return
				}
				t := ts[i]
				for first := int64(0); first < t.rows; first += t.per {
					if err := r.ctx.Err(); err != nil {
						errs[wi] = &Error{Kind: ErrTarget, Component: c.name, Tensor: t.spec.Name, Msg: "write: canceled", Err: err}
						return
					}
					n := min(t.per, t.rows-first)
					x := grow(sc.f32, n*t.cols)
					sc.f32 = x
					var ps pieceStats
					var err error
					if t.kind == kQuant {
						err = t.readRows(first, n, x, &ps)
					} else if err = t.fetchScales(); err == nil {
						ps.read = t.storedBytes(first, n)
						err = t.dequantRows(r.ctx, dtype.Float32Bytes(x), dtype.F32, first, n, &sc.raw)
					}
					if err == nil {
						err = t.q.Observe(first, x)
					}
					if err != nil {
						errs[wi] = err
						return
					}
					r.read.Add(ps.read)
					r.progress(c, t.spec.Name, ps.read)
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	for _, t := range ts {
		t.q.Scales()
	}
	return nil
}

// finishFiles writes the rewritten configs and copies the other files.
func (r *runner) finishFiles(copies []copyFile) error {
	for _, c := range r.comps {
		if c.config == "" {
			continue
		}
		b, err := r.readConfig(c.config)
		if err != nil {
			return err
		}
		if b == nil {
			continue
		}
		set := map[string]json.RawMessage{}
		var del []string
		switch {
		case c.newQ:
			set["quantization_config"] = c.qconfig
			del = append(del, "compression_config")
		case c.dropQ:
			del = append(del, "quantization_config", "compression_config")
		}
		if d, ok := r.opts.Policy.Default.DType(); ok && torchDTypeName(d) != "" {
			var obj map[string]json.RawMessage
			if json.Unmarshal(b, &obj) == nil {
				q, _ := json.Marshal(torchDTypeName(d))
				for _, k := range []string{"torch_dtype", "dtype"} {
					if v, ok := obj[k]; ok && len(v) > 0 && v[0] == '"' {
						set[k] = q
					}
				}
			}
		}
		out, err := editConfig(b, set, del)
		if err != nil {
			return &Error{Kind: ErrSource, Path: c.config, Msg: "config.json is not a JSON object", Err: err}
		}
		if r.sink != nil {
			name := path.Join(c.outDir, "config.json")
			if err := writeSinkFile(r.ctx, r.sink, name, out, false); err != nil {
				return sinkErr(r.ctx, r.sink.Location(name), -1, err)
			}
			for i := range r.rep.Components {
				if r.rep.Components[i].Dir == r.sink.Location(c.outDir) {
					r.rep.Components[i].Config = r.sink.Location(name)
				}
			}
			r.rep.Copied = append(r.rep.Copied, name)
			continue
		}
		path := filepath.Join(c.outDir, "config.json")
		if err := writeAtomic(r.ctx, path, func(w io.Writer) error { _, err := w.Write(out); return err }); err != nil {
			return err
		}
		for i := range r.rep.Components {
			if r.rep.Components[i].Dir == c.outDir {
				r.rep.Components[i].Config = path
			}
		}
		r.rep.Copied = append(r.rep.Copied, relTo(r.dst, path))
	}
	for _, f := range copies {
		if err := r.ctx.Err(); err != nil {
			return &Error{Kind: ErrTarget, Path: r.dst, Msg: "write: canceled", Err: err}
		}
		if f.fsys != nil {
			if err := r.copyFromSource(f); err != nil {
				return err
			}
		} else if r.sink != nil {
			if err := copyToSink(r.ctx, r.sink, f.real, filepath.ToSlash(f.rel)); err != nil {
				return err
			}
		} else if err := copyInto(r.ctx, f.real, filepath.Join(r.dst, f.rel)); err != nil {
			return err
		}
		r.rep.Copied = append(r.rep.Copied, f.rel)
	}
	slices.Sort(r.rep.Copied)
	return nil
}

func relTo(root, p string) string {
	if rel, err := filepath.Rel(root, p); err == nil {
		return rel
	}
	return p
}
