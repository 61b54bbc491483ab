package variant

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"

	"github.com/ckpt-go/ckpt/internal/safeopen"
	"github.com/ckpt-go/ckpt/internal/srcfs"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/shard"
)

// Layouts of a plan.
const (
	LayoutSingle        = "single"         // one X.safetensors / X.V.safetensors file
	LayoutSharded       = "sharded"        // an index and X[.V]-NNNNN-of-NNNNN.safetensors shards
	LayoutLegacySharded = "legacy-sharded" // diffusers' X-NNNNN-of-NNNNN.V.safetensors shards
)

// Plan says exactly which files to load for one component, which files were
// ignored and why, and what deserved a warning. File names are relative to
// Dir. When resolution fails, Error is set and Files is empty.
type Plan struct {
	// Component is the component's folder name (the folder's base name for
	// ResolveComponent).
	Component string `json:"component"`
	// Dir is the component's folder.
	Dir string `json:"dir"`
	// Variant is the variant whose files the plan loads ("" for untagged).
	// In a pipeline it can differ from the requested variant (see Fallback).
	Variant string `json:"variant"`
	// Fallback is set when a pipeline component had no weights for the
	// requested variant and the plan uses its untagged weights.
	Fallback bool `json:"fallback,omitempty"`
	// Format is the format of Files: FormatSafetensors, or FormatPyTorch
	// when the component's only weights for Variant are PyTorch ones
	// (empty when resolution failed). A plan never mixes formats.
	Format string `json:"format,omitempty"`
	// Layout is LayoutSingle, LayoutSharded or LayoutLegacySharded.
	Layout string `json:"layout"`
	// Index is the index file for sharded layouts.
	Index string `json:"index,omitempty"`
	// Files are the weights files to load, sorted.
	Files []string `json:"files"`
	// Ignored lists the weights-like files not loaded, with the reason.
	Ignored []Ignored `json:"ignored"`
	// Warnings explain choices the caller should know about.
	Warnings []string `json:"warnings"`
	// Error is set when the component could not be resolved.
	Error *PlanError `json:"error,omitempty"`

	err  error
	opts []shard.Option
	src  srcfs.FS
	kept *kept // the checkpoint resolution opened, for Open to hand over
}

// Option configures ResolveComponent and ResolvePipeline.
type Option func(*config)

type config struct {
	shardOpts []shard.Option
	src       srcfs.FS
}

// WithFS resolves folders of fsys instead of the operating system's: paths
// are then fs.FS names (slash-separated, unrooted; see fs.ValidPath), and
// the plans' files are opened from fsys (it is passed on to package shard
// with the source). Folders are listed with fs.ReadDir, so fsys must be
// able to list them (package remote's S3 file system can; plain HTTP
// cannot). A nil fsys is the operating system's.
func WithFS(fsys fs.FS) Option {
	return func(c *config) { c.src = c.src.WithFS(fsys) }
}

// WithSource sets where the files are and whether links may leave their
// folder, as one value (replacing what WithFS set before it); resolution
// and every shard.Open it makes use it. It is how the module's own
// packages pass the source their entry point built; srcfs.FS is internal,
// so other programs use WithFS and WithShardOptions(shard.WithFollowSymlinks()).
func WithSource(src srcfs.FS) Option {
	return func(c *config) { c.src = src }
}

// WithShardOptions passes options to shard.Open, both when resolution
// checks an index for completeness and when Plan.Open opens the planned
// files. shard.WithFollowSymlinks among them also applies to the files
// resolution itself reads (indexes, single files, model_index.json,
// component folders): pass it to resolve folders of the Hugging Face cache,
// whose files are symlinks into a blobs folder.
func WithShardOptions(opts ...shard.Option) Option {
	return func(c *config) { c.shardOpts = append(c.shardOpts, opts...) }
}

// buildConfig applies opts; the shard options it returns start with the
// source (shard.WithSource), followed by those given with
// WithShardOptions.
func buildConfig(opts []Option) config {
	var c config
	for _, o := range opts {
		o(&c)
	}
	c.shardOpts = append([]shard.Option{shard.WithSource(c.src)}, c.shardOpts...)
	return c
}

// Ignored is a file a plan does not load.
type Ignored struct {
	File   string `json:"file"`
	Reason string `json:"reason"`
}

// PlanError is the JSON form of a resolution error.
type PlanError struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

// Err returns the resolution error as an error value (nil on success).
func (p *Plan) Err() error { return p.err }

// Paths returns the full paths of Files.
func (p *Plan) Paths() []string {
	out := make([]string, len(p.Files))
	for i, f := range p.Files {
		out[i] = p.src.Join(p.Dir, f)
	}
	return out
}

// Entry returns the path of the file that opens the planned files as one
// checkpoint: the index of a sharded layout, the single file otherwise;
// "" when resolution failed. It is how a caller opens a PyTorch plan (with
// package torch), which Open does not.
func (p *Plan) Entry() string {
	if p.err != nil || len(p.Files) == 0 {
		return ""
	}
	return p.src.Join(p.Dir, cmp.Or(p.Index, p.Files[0]))
}

// CheckFiles reports whether files, the files a caller opened through
// Entry (paths or base names, in any order), are exactly the planned ones:
// when not, the folder changed after resolution, and the error is an
// ErrInvalidLayout ("plan changed") naming both lists. Open makes the same
// check.
func (p *Plan) CheckFiles(files []string) error {
	got := make([]string, 0, len(files))
	for _, f := range files {
		got = append(got, p.src.Base(f))
	}
	slices.Sort(got)
	if slices.Equal(got, p.Files) {
		return nil
	}
	return &Error{Kind: ErrInvalidLayout, Dir: p.Dir, File: p.Index,
		Msg: fmt.Sprintf("plan changed: planned %s, found %s", strings.Join(p.Files, ", "), strings.Join(got, ", "))}
}

// Open opens exactly the planned files as one checkpoint. It fails with the
// plan's own error when resolution failed, with ErrInvalidArgument for a
// PyTorch plan (open its Entry with package torch, and check what it
// opened with CheckFiles), and with ErrInvalidLayout ("plan changed") when
// the index now names other files than the planned ones. opts are added to the
// shard options given to the resolver (WithShardOptions).
//
// Resolution opened the planned files already, to check them. Without
// opts, the first Open hands that checkpoint over instead of opening them
// again, provided the files are unchanged since: the same index content
// (by its SHA-256), and every file with the same identity, size and
// modification time, its symlinks still allowed. Otherwise, and with opts,
// Open opens the files anew.
func (p *Plan) Open(opts ...shard.Option) (*shard.Checkpoint, error) {
	extra := slices.ContainsFunc(opts, func(o shard.Option) bool { return o != nil })
	opts = append(slices.Clone(p.opts), opts...)
	if p.err != nil {
		return nil, p.err
	}
	if len(p.Files) == 0 {
		return nil, &Error{Kind: ErrNoWeights, Dir: p.Dir, Msg: "the plan has no files"}
	}
	file := cmp.Or(p.Index, p.Files[0])
	if p.Format == FormatPyTorch {
		return nil, &Error{Kind: ErrInvalidArgument, Dir: p.Dir, File: file,
			Msg: "a PyTorch plan: its files are opened with package torch (Entry), not as safetensors"}
	}
	path := p.Entry()
	// The folder may have changed since resolution: the index or single
	// file must still keep to the symlink rule.
	if _, err := shard.ResolveFile(path, opts...); err != nil {
		p.kept.drop()
		return nil, fromShard(p.Dir, file, err)
	}
	var c *shard.Checkpoint
	if !extra {
		c = p.kept.take(p.src, opts)
	} else {
		p.kept.drop()
	}
	if c == nil {
		var err error
		if c, err = shard.Open(path, opts...); err != nil {
			return nil, err
		}
	}
	if err := p.CheckFiles(c.Files()); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (p *Plan) fail(err error) (*Plan, error) {
	p.kept.drop()
	p.kept = nil
	p.err = err
	p.Files = []string{}
	p.Format = ""
	p.Layout = ""
	p.Index = ""
	var e *Error
	kind := "error"
	if errors.As(err, &e) {
		kind = e.Kind.String()
	}
	p.Error = &PlanError{Kind: kind, Message: err.Error()}
	slices.SortFunc(p.Ignored, func(a, b Ignored) int { return strings.Compare(a.File, b.File) })
	return p, err
}

func (p *Plan) ignore(file, reason string) {
	p.Ignored = append(p.Ignored, Ignored{File: file, Reason: reason})
}

func (p *Plan) warn(format string, args ...any) {
	p.Warnings = append(p.Warnings, fmt.Sprintf(format, args...))
}

// folder is the scan of one folder.
type folder struct {
	dir   string
	cands []candidate
	other []string // weights-like files with unrecognized names

	shardOpts []shard.Option
	src       srcfs.FS
	library   string // the component's library in model_index.json ("" outside a pipeline)
}

// libPrefix is the weights prefix of format that the component's library
// loads: "model" ("pytorch_model" for PyTorch weights) for transformers,
// "diffusion_pytorch_model" for diffusers, "" otherwise.
func (f *folder) libPrefix(format string) string {
	i := slices.Index([]string{"transformers", "diffusers"}, f.library)
	if i < 0 {
		return ""
	}
	for _, fm := range formats {
		if fm.name == format {
			return fm.prefixes[i]
		}
	}
	return ""
}

func scan(src srcfs.FS, dir string) (*folder, error) {
	entries, err := src.ReadDir(dir)
	if err != nil {
		if st, serr := src.Stat(dir); serr == nil && !st.IsDir() {
			return nil, &Error{Kind: ErrInvalidArgument, Dir: dir, Msg: "a file, not a folder: variants are resolved in a component folder or a pipeline root"}
		}
		return nil, &Error{Kind: ErrNoWeights, Dir: dir, Msg: "read dir", Err: err}
	}
	f := &folder{dir: dir, src: src}
	for _, e := range entries {
		name := e.Name()
		isDir := e.IsDir()
		if e.Type()&fs.ModeSymlink != 0 {
			st, err := src.Stat(src.Join(dir, name))
			isDir = err == nil && st.IsDir()
		}
		// Folders are not weights, unless they have a weights file's
		// name: those, like FIFOs, devices and sockets with such a name,
		// stay candidates, so that checking them refuses them by name
		// (ErrNotRegular) rather than as if they were not there.
		if _, ok := classify(name); isDir && !ok {
			continue
		}
		if c, ok := classify(name); ok {
			f.cands = append(f.cands, c)
		} else if weightsLike(name) {
			f.other = append(f.other, name)
		}
	}
	return f, nil
}

// has reports whether the folder has weights tagged with variant v ("" for
// untagged) under any prefix.
func (f *folder) has(v string) bool {
	for _, c := range f.cands {
		if c.variant == v {
			return true
		}
	}
	return false
}

// variants lists the distinct variant tags present, sorted ("" excluded).
func (f *folder) variants() []string {
	var out []string
	for _, c := range f.cands {
		if c.variant != "" && !slices.Contains(out, c.variant) {
			out = append(out, c.variant)
		}
	}
	slices.Sort(out)
	return out
}

// ResolveComponent decides which files of the component folder dir to load
// for variant (the empty string for untagged weights). It understands, with
// X the weights prefix ("model" or "diffusion_pytorch_model"): single files
// X.safetensors / X.V.safetensors; indexes X.safetensors.index.json /
// X.safetensors.index.V.json with shards X-NNNNN-of-NNNNN.safetensors /
// X.V-NNNNN-of-NNNNN.safetensors; and diffusers' legacy variant layout,
// shards X-NNNNN-of-NNNNN.V.safetensors with index
// X.safetensors.index.V.json or X.safetensors.V.index.json (loaded, with a
// warning). Shards may also carry the swap names of package shard,
// X[.V]-NNNNN-of-NNNNN.swap-TOKEN.safetensors, under which shard.Write
// commits a set whose standard names are still taken by the previous set:
// an index naming them is current, and unreferenced ones are ignored.
//
// Rules: variant names match ^[A-Za-z0-9_]+$ and are case-sensitive. A plan
// for V uses only V-tagged files, a plan without a variant only untagged ones;
// an index that maps tensors to shards of another tag is an ErrInvalidLayout
// error ("variant mismatch"). Only the exact names above are candidates. A
// current-name index beats a legacy-name one. When a single file and an index
// are both complete (every shard present, every mapped tensor in its shard),
// the single file wins and the index is named in a warning; when only one is
// complete it is used, with a warning; when neither is, the error of the
// preferred candidate is returned. A component with no V-tagged weights fails
// with ErrVariantNotFound, whose message says whether untagged weights exist.
//
// PyTorch weights follow the same names and rules with ".bin" for
// ".safetensors" and "pytorch_model" for the prefix "model" (no swap
// names): for the variant chosen, safetensors weights win over PyTorch ones
// (never mixed), and a plan of PyTorch weights has Format FormatPyTorch.
//
// The plan is returned even on failure, with Error set, so that callers can
// report the ignored files; the error is also returned.
func ResolveComponent(dir, variant string, opts ...Option) (*Plan, error) {
	cfg := buildConfig(opts)
	p := newPlan(cfg.src.Base(cfg.src.Clean(dir)), dir, variant)
	p.opts, p.src = cfg.shardOpts, cfg.src
	if variant != "" && !ValidName(variant) {
		return p.fail(&Error{Kind: ErrInvalidArgument, Dir: dir, Msg: fmt.Sprintf("invalid variant: %q does not match ^[A-Za-z0-9_]+$", variant)})
	}
	f, err := scan(cfg.src, dir)
	if err != nil {
		return p.fail(err)
	}
	f.shardOpts = cfg.shardOpts
	return f.resolve(p)
}

func newPlan(component, dir, variant string) *Plan {
	return &Plan{Component: component, Dir: dir, Variant: variant, Files: []string{}, Ignored: []Ignored{}, Warnings: []string{}}
}

// outcome of checking one candidate.
type checked struct {
	c       candidate
	err     error // nil when complete
	shards  []string
	legacy  bool
	warns   []string
	unusedS map[string]bool
	kept    *kept // the checkpoint opened for the check, when complete
}

func (f *folder) resolve(p *Plan) (*Plan, error) {
	v := p.Variant
	for _, o := range f.other {
		p.ignore(o, "not a recognized weights file name")
	}
	// Which format? The first with weights for the variant: safetensors
	// weights win over PyTorch ones, and the two are never mixed.
	format := ""
	var fprefixes []string
	for _, fm := range formats {
		if slices.ContainsFunc(f.cands, func(c candidate) bool { return c.format == fm.name && c.variant == v }) {
			format, fprefixes = fm.name, fm.prefixes
			break
		}
	}
	// Which prefix?
	var withV []string
	for _, pre := range fprefixes {
		for _, c := range f.cands {
			if c.format == format && c.prefix == pre && c.variant == v {
				withV = append(withV, pre)
				break
			}
		}
	}
	if len(withV) == 0 {
		for _, c := range f.cands {
			p.ignore(c.name, ignoreReason(c, v, format))
		}
		return p.fail(f.notFound(v))
	}
	if lp := f.libPrefix(format); len(withV) > 1 && f.library != "" && slices.Contains(withV, lp) {
		// A pipeline component: model_index.json names its library, whose
		// loader reads only its own prefix.
		p.warn("%s weights exist for both prefixes %q and %q; using %q, the prefix of the component's library %s",
			describeVariant(v), withV[0], withV[1], lp, f.library)
		withV = []string{lp}
	}
	if len(withV) > 1 {
		for _, c := range f.cands {
			p.ignore(c.name, ignoreReason(c, v, format))
		}
		return p.fail(&Error{Kind: ErrInvalidLayout, Dir: f.dir,
			Msg: fmt.Sprintf("ambiguous prefix: %s weights exist for both prefixes %q and %q", describeVariant(v), withV[0], withV[1])})
	}
	prefix := withV[0]
	p.Format = format

	var single *candidate
	var indexes []candidate // current names first
	shards := make(map[string]candidate)
	for _, c := range f.cands {
		if c.format != format || c.prefix != prefix || c.variant != v {
			p.ignore(c.name, ignoreReason(c, v, format))
			continue
		}
		switch c.kind {
		case kindSingle:
			single = &c
		case kindIndex:
			indexes = append(indexes, c)
		case kindShard:
			shards[c.name] = c
		}
	}
	slices.SortStableFunc(indexes, func(a, b candidate) int {
		if a.legacy == b.legacy {
			return strings.Compare(a.name, b.name)
		}
		if !a.legacy {
			return -1
		}
		return 1
	})

	// Check the indexes: tags first (a hard error), then completeness.
	// The plan keeps the checkpoint of the candidate it uses; the others'
	// go.
	var idx []*checked
	var singleKept *kept
	defer func() {
		if singleKept != p.kept {
			singleKept.drop()
		}
		for _, ch := range idx {
			if ch.kept != p.kept {
				ch.kept.drop()
			}
		}
	}()
	for _, c := range indexes {
		ch, err := f.checkIndex(c, prefix, v)
		if err != nil {
			return p.fail(err)
		}
		idx = append(idx, ch)
	}
	var singleErr error
	if single != nil {
		singleKept, singleErr = f.checkSingle(single.name)
	}

	used := map[string]bool{}
	switch {
	case single != nil && singleErr == nil:
		p.Layout, p.Files = LayoutSingle, []string{single.name}
		p.kept = singleKept
		used[single.name] = true
		for _, ch := range idx {
			if ch.err == nil {
				p.warn("%s and %s are both complete; using the single file %s and ignoring the index %s", single.name, ch.c.name, single.name, ch.c.name)
				p.ignore(ch.c.name, "the complete single file "+single.name+" wins over an index")
			} else {
				p.warn("ignoring incomplete index %s: %v", ch.c.name, ch.err)
				p.ignore(ch.c.name, "incomplete: "+ch.err.Error())
			}
		}
	default:
		var chosen *checked
		for _, ch := range idx {
			if ch.err == nil {
				chosen = ch
				break
			}
		}
		if chosen == nil {
			// Nothing complete: report the preferred candidate's error,
			// listing the other candidates' failures in its message.
			var others []string
			var first error
			if single != nil {
				first = singleErr
			}
			for _, ch := range idx {
				if first == nil {
					first = ch.err
					continue
				}
				others = append(others, ch.c.name+" ("+ch.err.Error()+")")
			}
			if first == nil { // shards without any index or single file
				names := slices.Sorted(maps.Keys(shards))
				for _, s := range names {
					p.ignore(s, "shard without an index")
				}
				return p.fail(&Error{Kind: ErrInvalidLayout, Dir: f.dir, File: currentIndexName(format, prefix, v),
					Msg: fmt.Sprintf("missing index: %s shards exist but no index or single file", describeVariant(v))})
			}
			if single != nil {
				p.ignore(single.name, "incomplete: "+singleErr.Error())
			}
			for _, ch := range idx {
				p.ignore(ch.c.name, "incomplete: "+ch.err.Error())
			}
			for _, s := range slices.Sorted(maps.Keys(shards)) {
				p.ignore(s, "shard of an incomplete set")
			}
			e := *first.(*Error) // a copy: the candidate's error stays as it was
			if len(others) > 0 {
				e.Msg = strings.TrimPrefix(e.Msg+"; no complete candidate, also incomplete: "+strings.Join(others, "; "), "; ")
			}
			return p.fail(&e)
		}
		p.Index, p.Files = chosen.c.name, chosen.shards
		p.kept = chosen.kept
		p.Layout = LayoutSharded
		if chosen.legacy {
			p.Layout = LayoutLegacySharded
			p.warn("%s uses diffusers' legacy variant naming (shards like %s); the current format is %s with shards %s",
				chosen.c.name, chosen.shards[0], currentIndexName(format, prefix, v), currentShardName(format, prefix, v))
		}
		if chosen.c.legacy {
			p.warn("index %s has a legacy name; the current name is %s", chosen.c.name, currentIndexName(format, prefix, v))
		}
		p.Warnings = append(p.Warnings, chosen.warns...)
		used[chosen.c.name] = true
		for _, s := range chosen.shards {
			used[s] = true
		}
		if single != nil {
			p.warn("ignoring incomplete single file %s: %v", single.name, singleErr)
			p.ignore(single.name, "incomplete: "+singleErr.Error())
		}
		for _, ch := range idx {
			if ch == chosen {
				continue
			}
			switch {
			case ch.err != nil:
				p.warn("ignoring incomplete index %s: %v", ch.c.name, ch.err)
				p.ignore(ch.c.name, "incomplete: "+ch.err.Error())
			case !chosen.c.legacy && ch.c.legacy:
				p.warn("ignoring legacy-name index %s: the current-name index %s is used", ch.c.name, chosen.c.name)
				p.ignore(ch.c.name, "legacy-name index superseded by "+chosen.c.name)
			default:
				p.warn("ignoring index %s: %s is used", ch.c.name, chosen.c.name)
				p.ignore(ch.c.name, "another index, "+chosen.c.name+", is used")
			}
		}
	}
	for _, s := range slices.Sorted(maps.Keys(shards)) {
		if !used[s] {
			reason := "not referenced by the index used"
			if p.Layout == LayoutSingle {
				reason = "shard of an index that is not used"
			}
			if shards[s].swap != "" {
				reason += "; a swap-named shard left by an interrupted save"
			}
			p.ignore(s, reason)
		}
	}
	slices.SortFunc(p.Ignored, func(a, b Ignored) int { return strings.Compare(a.File, b.File) })
	return p, nil
}

// ignoreReason says why the candidate c is not loaded by a plan for
// variant v that loads weights of format ("" when there are none for v).
func ignoreReason(c candidate, v, format string) string {
	switch {
	case c.variant == v && c.format != format:
		return "PyTorch weights; the component's safetensors weights win over them (formats are never mixed)"
	case c.variant == v:
		return "weights of prefix " + c.prefix + ", not the one used"
	case v == "":
		return fmt.Sprintf("variant-tagged (%s); the plan loads untagged weights", c.variant)
	case c.variant == "":
		return fmt.Sprintf("untagged; the plan loads variant %s", v)
	default:
		return fmt.Sprintf("variant %s; the plan loads variant %s", c.variant, v)
	}
}

func (f *folder) notFound(v string) error {
	vs := f.variants()
	if v == "" {
		if len(vs) > 0 {
			return &Error{Kind: ErrVariantNotFound, Dir: f.dir,
				Msg: fmt.Sprintf("untagged not found: no untagged weights; variant-tagged weights exist for %s (pass a variant)", strings.Join(vs, ", "))}
		}
		return &Error{Kind: ErrNoWeights, Dir: f.dir, Msg: "no safetensors weights under the recognized names (model*.safetensors, diffusion_pytorch_model*.safetensors), nor PyTorch ones (pytorch_model*.bin, diffusion_pytorch_model*.bin)"}
	}
	var msg string
	switch {
	case f.has("") && len(vs) > 0:
		msg = fmt.Sprintf("no weights for variant %s; untagged weights exist, and variants %s", v, strings.Join(vs, ", "))
	case f.has(""):
		msg = fmt.Sprintf("no weights for variant %s; untagged weights exist", v)
	case len(vs) > 0:
		msg = fmt.Sprintf("no weights for variant %s and no untagged weights; variants present: %s", v, strings.Join(vs, ", "))
	default:
		msg = fmt.Sprintf("no weights for variant %s and no untagged weights: no safetensors weights at all, nor PyTorch ones", v)
	}
	return &Error{Kind: ErrVariantNotFound, Dir: f.dir, Msg: msg}
}

// checkSingle reports whether a single file is complete: it keeps to the
// symlink rule, is a regular file, and its header parses. When it is, the
// checkpoint opened to check it is returned too, for the plan to keep.
func (f *folder) checkSingle(name string) (*kept, error) {
	path := f.src.Join(f.dir, name)
	real, err := shard.ResolveFile(path, f.shardOpts...)
	if err != nil {
		return nil, fromShard(f.dir, name, err)
	}
	if c, _ := classify(name); c.format == FormatPyTorch {
		return nil, f.checkRegular(real, name, "")
	}
	// Open reads the header as the plan's Open would; only when it fails
	// is the header read again on its own, for this package's error.
	ck, k, openErr := openKept(f.src, path, false, f.shardOpts)
	if openErr == nil {
		if k == nil {
			ck.Close()
		}
		return k, nil
	}
	if err := f.readHeader(real); err != nil {
		if errors.Is(err, safetensors.ErrNotRegular) {
			return nil, &Error{Kind: ErrNotRegular, Dir: f.dir, File: name, Err: err}
		}
		return nil, &Error{Kind: ErrInvalidLayout, Dir: f.dir, File: name, Msg: "invalid weights", Err: err}
	}
	return nil, nil
}

// checkIndex validates an index's tags (errors returned directly: they are
// never tolerated) and its completeness (recorded in checked.err).
func (f *folder) checkIndex(c candidate, prefix, v string) (*checked, error) {
	ch := &checked{c: c}
	path := f.src.Join(f.dir, c.name)
	real, err := shard.ResolveFile(path, f.shardOpts...)
	if err != nil {
		ch.err = fromShard(f.dir, c.name, err)
		return ch, nil
	}
	if c.format == FormatPyTorch {
		return f.checkTorchIndex(ch, real, prefix, v)
	}
	// Open reads the index itself; only when it fails is the index read
	// again on its own, for the tag checks, which come first.
	ck, k, openErr := openKept(f.src, path, true, f.shardOpts)
	var ix *shard.Index
	if openErr == nil {
		if k == nil {
			defer ck.Close()
		}
		ix = ck.Index()
	} else {
		var err error
		if ix, err = f.readIndex(path); err != nil {
			ch.err = fromShard(f.dir, c.name, err)
			return ch, nil
		}
	}
	ch.shards = ix.Shards()
	if err := checkTags(f.dir, ch, prefix, v); err != nil {
		k.drop()
		return nil, err
	}
	if openErr != nil {
		ch.err = fromShard(f.dir, c.name, openErr)
		return ch, nil
	}
	for _, w := range ck.Warnings() {
		ch.warns = append(ch.warns, c.name+": "+w)
	}
	ch.kept = k
	return ch, nil
}

// checkTags checks the shard names of the index ch.c (ch.shards): each
// must be a weights file name of the index's format and prefix, tagged
// with the index's variant v; an index of current names mapping to legacy
// ones is noted (ch.legacy, a warning when it mixes both).
func checkTags(dir string, ch *checked, prefix, v string) error {
	var current, legacy int
	for _, s := range ch.shards {
		sc, ok := classify(s)
		if !ok || sc.format != ch.c.format || sc.prefix != prefix {
			return &Error{Kind: ErrInvalidLayout, Dir: dir, File: ch.c.name,
				Msg: fmt.Sprintf("foreign shard: maps tensors to %s, which is not a %s weights file name", s, prefix)}
		}
		if sc.variant != v || sc.kind == kindIndex {
			return &Error{Kind: ErrInvalidLayout, Dir: dir, File: ch.c.name,
				Msg: fmt.Sprintf("variant mismatch: this %s index maps tensors to %s, which is %s: refusing to mix", describeVariant(v), s, describeVariant(sc.variant))}
		}
		if sc.legacy {
			legacy++
		} else {
			current++
		}
	}
	ch.legacy = legacy > 0
	if legacy > 0 && current > 0 {
		ch.warns = append(ch.warns, fmt.Sprintf("index %s mixes current and legacy shard names", ch.c.name))
	}
	return nil
}

// checkTorchIndex checks the PyTorch index ch.c, read from real, by names
// only: its tags first (errors returned directly, as checkIndex's), then
// its completeness (in ch.err): every shard it names is a regular file of
// the folder under the symlink rule. The shards' contents are for the
// caller to read (package torch checks them whole when it opens them).
func (f *folder) checkTorchIndex(ch *checked, real, prefix, v string) (*checked, error) {
	shards, err := f.readTorchIndex(real, ch.c.name)
	if err != nil {
		ch.err = err
		return ch, nil
	}
	ch.shards = shards
	if err := checkTags(f.dir, ch, prefix, v); err != nil {
		return nil, err
	}
	for _, s := range shards {
		sreal, err := shard.ResolveFile(f.src.Join(f.dir, s), f.shardOpts...)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			ch.err = &Error{Kind: ErrMissingShard, Dir: f.dir, File: ch.c.name, Msg: "missing shard " + s, Err: err}
		case err != nil:
			ch.err = fromShard(f.dir, s, err)
		default:
			ch.err = f.checkRegular(sreal, s, ch.c.name)
		}
		if ch.err != nil {
			return ch, nil
		}
	}
	return ch, nil
}

// readTorchIndex reads the shard names of a PyTorch index (the distinct
// values of its "weight_map", sorted), bounded as a safetensors index is
// (shard.MaxIndexSize). It checks no more than it needs to name the
// files: package torch validates the index when it opens it.
func (f *folder) readTorchIndex(real, name string) ([]string, error) {
	data, err := f.src.ReadFile(real, shard.MaxIndexSize)
	if err != nil {
		var nr *safeopen.NotRegularError
		if errors.As(err, &nr) {
			return nil, &Error{Kind: ErrNotRegular, Dir: f.dir, File: name, Msg: safeopen.Describe(nr.Mode) + ", not a regular file"}
		}
		return nil, &Error{Kind: ErrInvalidLayout, Dir: f.dir, File: name, Msg: "invalid index", Err: err}
	}
	var doc struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, &Error{Kind: ErrInvalidLayout, Dir: f.dir, File: name, Msg: "invalid index", Err: err}
	}
	if len(doc.WeightMap) == 0 {
		return nil, &Error{Kind: ErrInvalidLayout, Dir: f.dir, File: name, Msg: "invalid index: no weight_map, or an empty one"}
	}
	shards := make(map[string]bool)
	for _, s := range doc.WeightMap {
		shards[s] = true
	}
	return slices.Sorted(maps.Keys(shards)), nil
}

// checkRegular checks that real, the resolved path of the folder's file
// name (a shard of index when index is set), is a regular file: a PyTorch
// file is checked by name and kind only, its contents are the caller's to
// read.
func (f *folder) checkRegular(real, name, index string) error {
	st, err := f.src.Stat(real)
	file := cmp.Or(index, name)
	if err != nil {
		if index != "" && errors.Is(err, fs.ErrNotExist) {
			return &Error{Kind: ErrMissingShard, Dir: f.dir, File: index, Msg: "missing shard " + name, Err: err}
		}
		return &Error{Kind: ErrInvalidLayout, Dir: f.dir, File: file, Msg: "invalid weights", Err: err}
	}
	if !st.Mode().IsRegular() {
		msg := safeopen.Describe(st.Mode()) + ", not a regular file"
		if index != "" {
			msg = "shard " + name + " is " + msg
		}
		return &Error{Kind: ErrNotRegular, Dir: f.dir, File: file, Msg: msg}
	}
	return nil
}

// readHeader reads the header of the safetensors file at path.
func (f *folder) readHeader(path string) error {
	var err error
	if fsys := f.src.FS(); fsys != nil {
		_, err = safetensors.ReadHeaderFS(fsys, path)
	} else {
		_, err = safetensors.ReadHeaderFile(path)
	}
	return err
}

// readIndex reads the index at path.
func (f *folder) readIndex(path string) (*shard.Index, error) {
	if fsys := f.src.FS(); fsys != nil {
		return shard.ReadIndexFS(fsys, path)
	}
	return shard.ReadIndex(path)
}

// fromShard maps a shard error (or shard.ResolveFile's) to this package's
// kinds, keeping it wrapped. A shard error of another kind is an
// ErrInvalidLayout whose message gives the shard error's kind
// (invalid_index, invalid_shard, ...).
func fromShard(dir, file string, err error) error {
	var se *shard.Error
	kind, tensor, msg := ErrInvalidLayout, "", ""
	if errors.As(err, &se) {
		tensor = se.Tensor
		switch se.Kind {
		case shard.ErrInsecurePath:
			kind = ErrInsecurePath
		case shard.ErrMissingShard:
			kind = ErrMissingShard
		case shard.ErrNotRegular:
			kind = ErrNotRegular
		}
	} else if c, ok := classify(file); ok && c.kind != kindIndex {
		// Not a shard error: ResolveFile's (a dangling link, a loop) on a
		// weights file.
		msg = "invalid weights"
	} else {
		msg = "invalid index"
	}
	return &Error{Kind: kind, Dir: dir, File: file, Tensor: tensor, Msg: msg, Err: err}
}
