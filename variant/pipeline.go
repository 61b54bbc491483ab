package variant

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/ckpt-go/ckpt/internal/safeopen"
	"github.com/ckpt-go/ckpt/internal/srcfs"
	"github.com/ckpt-go/ckpt/shard"
)

// ModelIndex is the file that lists a diffusers pipeline's components.
const ModelIndex = "model_index.json"

// maxModelIndex bounds the size of model_index.json (real ones are < 2 KiB).
const maxModelIndex = 1 << 20

// PipelinePlan is the plan for a whole pipeline: one Plan per component
// that has weights.
type PipelinePlan struct {
	// Root is the pipeline folder.
	Root string `json:"root"`
	// Variant is the requested variant.
	Variant string `json:"variant"`
	// Components are the plans of the components with weights, sorted by
	// name. A component that failed has its Error set.
	Components []*Plan `json:"components"`
	// Warnings are pipeline-level warnings (fallbacks to untagged weights
	// are also listed here, naming the component).
	Warnings []string `json:"warnings"`
	// Ignored lists root files and folders that are not loaded, and
	// components without weights.
	Ignored []Ignored `json:"ignored"`
	// Error is set when the pipeline as a whole could not be resolved
	// (model_index.json missing or invalid, no component with the variant).
	// Component failures are in each component's Error.
	Error *PlanError `json:"error,omitempty"`
}

// Failed reports whether the pipeline or any component failed.
func (pp *PipelinePlan) Failed() bool {
	if pp.Error != nil {
		return true
	}
	for _, c := range pp.Components {
		if c.Error != nil {
			return true
		}
	}
	return false
}

// Component returns the plan of the named component, or nil.
func (pp *PipelinePlan) Component(name string) *Plan {
	for _, c := range pp.Components {
		if c.Component == name {
			return c
		}
	}
	return nil
}

func (pp *PipelinePlan) fail(err error) (*PipelinePlan, error) {
	var e *Error
	kind := "error"
	if errors.As(err, &e) {
		kind = e.Kind.String()
	}
	pp.Error = &PlanError{Kind: kind, Message: err.Error()}
	return pp, err
}

// ResolvePipeline resolves every component of the diffusers pipeline in
// root for variant. model_index.json lists the components (keys whose value
// is a [library, class] pair; [null, null] entries are absent components);
// folders it does not list are ignored, and weights files directly in root
// never stand in for a component's own folder. A component without weights
// for the variant falls back to its untagged weights, with a warning naming
// it; it is an ErrVariantNotFound error ("no component has variant") if no
// component has the variant (or none has weights at all). Components without any weights
// files (tokenizers, schedulers) are listed in Ignored. When a component
// folder holds weights for the variant under both prefixes, the one its
// library loads is used, with a warning ("model" for transformers,
// "diffusion_pytorch_model" for diffusers); for another library that stays
// an ErrInvalidLayout error ("ambiguous prefix").
//
// The plan is returned even on failure. The error is the pipeline's error,
// or the components' errors joined.
func ResolvePipeline(root, variant string, opts ...Option) (*PipelinePlan, error) {
	cfg := buildConfig(opts)
	pp := &PipelinePlan{Root: root, Variant: variant, Components: []*Plan{}, Warnings: []string{}, Ignored: []Ignored{}}
	if variant != "" && !ValidName(variant) {
		return pp.fail(&Error{Kind: ErrInvalidArgument, Dir: root, Msg: fmt.Sprintf("invalid variant: %q does not match ^[A-Za-z0-9_]+$", variant)})
	}
	names, libs, err := readModelIndex(cfg.src, root, cfg.shardOpts)
	if err != nil {
		return pp.fail(err)
	}
	listed := make(map[string]bool, len(names))
	for _, n := range names {
		listed[n] = true
	}
	entries, err := cfg.src.ReadDir(root)
	if err != nil {
		return pp.fail(&Error{Kind: ErrNoWeights, Dir: root, Msg: "read dir", Err: err})
	}
	for _, e := range entries {
		n := e.Name()
		switch {
		case e.IsDir() && !listed[n]:
			pp.Ignored = append(pp.Ignored, Ignored{File: n + "/", Reason: "folder not listed in " + ModelIndex})
		case !e.IsDir() && n != ModelIndex && (weightsLike(n) || isCandidate(n)):
			pp.Ignored = append(pp.Ignored, Ignored{File: n, Reason: "in the pipeline root; components load only from their own folders"})
		}
	}

	// Scan the components.
	type comp struct {
		name string
		f    *folder
		plan *Plan
	}
	var comps []*comp
	var errs []error
	// failed records a component that cannot be resolved; its plan carries
	// err.
	failed := func(p *Plan, err error) {
		p.fail(err)
		pp.Components = append(pp.Components, p)
		errs = append(errs, err)
	}
	for _, n := range names {
		dir := cfg.src.Join(root, n)
		p := newPlan(n, dir, variant)
		p.opts, p.src = cfg.shardOpts, cfg.src
		if err := checkComponentName(n); err != nil {
			err.Dir = root
			failed(p, err)
			continue
		}
		st, err := cfg.src.Stat(dir)
		if err != nil || !st.IsDir() {
			e := &Error{Kind: ErrNoWeights, Dir: root, File: n, Msg: "component missing: listed in " + ModelIndex + " but there is no such folder"}
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				e.Err = err
			}
			failed(p, e)
			continue
		}
		if _, err := shard.ResolveFile(dir, cfg.shardOpts...); err != nil {
			e := &Error{Kind: ErrInsecurePath, Dir: root, File: n, Err: err}
			if !errors.Is(err, shard.ErrInsecurePath) {
				e.Kind, e.Msg = ErrNoWeights, "component missing: cannot resolve the component folder"
			}
			failed(p, e)
			continue
		}
		f, err := scan(cfg.src, dir)
		if err != nil {
			failed(p, err)
			continue
		}
		if len(f.cands) == 0 {
			if len(f.other) > 0 {
				pp.Warnings = append(pp.Warnings, fmt.Sprintf("component %s has no safetensors or PyTorch weights under the recognized names (ignored: %s)", n, strings.Join(f.other, ", ")))
				pp.Ignored = append(pp.Ignored, Ignored{File: n + "/", Reason: "no safetensors or PyTorch weights under the recognized names"})
			} else {
				pp.Ignored = append(pp.Ignored, Ignored{File: n + "/", Reason: "no weights files"})
			}
			continue
		}
		f.shardOpts = cfg.shardOpts
		f.library = libs[n]
		c := &comp{name: n, f: f, plan: p}
		comps = append(comps, c)
		pp.Components = append(pp.Components, p)
	}

	if variant != "" {
		found := false
		for _, c := range comps {
			found = found || c.f.has(variant)
		}
		if !found {
			var avail []string
			for _, c := range comps {
				vs := c.f.variants()
				desc := "none"
				if len(vs) > 0 {
					desc = strings.Join(vs, ", ")
				}
				avail = append(avail, c.name+": "+desc)
			}
			msg := fmt.Sprintf("no component has variant %s (variants per component: %s)", variant, strings.Join(avail, "; "))
			if len(comps) == 0 {
				msg = fmt.Sprintf("no component has variant %s: no component folder has safetensors or PyTorch weights", variant)
			}
			pp.Components = []*Plan{}
			return pp.fail(&Error{Kind: ErrVariantNotFound, Dir: root, Msg: "no component has variant: " + msg})
		}
	}
	for _, c := range comps {
		if variant != "" && !c.f.has(variant) && c.f.has("") {
			c.plan.Variant = ""
			c.plan.Fallback = true
			msg := fmt.Sprintf("component %s has no %s weights; using its untagged weights", c.name, variant)
			c.plan.Warnings = append(c.plan.Warnings, msg)
			pp.Warnings = append(pp.Warnings, msg)
		}
		if _, err := c.f.resolve(c.plan); err != nil {
			errs = append(errs, err)
		}
	}
	slices.SortFunc(pp.Ignored, func(a, b Ignored) int { return strings.Compare(a.File, b.File) })
	return pp, errors.Join(errs...)
}

// Resolve resolves path as a pipeline when it holds a model_index.json, and
// as a single component otherwise (the PipelinePlan then has one component).
func Resolve(path, variant string, opts ...Option) (*PipelinePlan, error) {
	src := buildConfig(opts).src
	if _, err := src.Stat(src.Join(path, ModelIndex)); err == nil {
		return ResolvePipeline(path, variant, opts...)
	}
	p, err := ResolveComponent(path, variant, opts...)
	pp := &PipelinePlan{Root: path, Variant: variant, Components: []*Plan{p}, Warnings: []string{}, Ignored: []Ignored{}}
	return pp, err
}

// Components returns the names of the components that model_index.json
// in the pipeline folder root lists, sorted, read by the rules of
// ResolvePipeline: keys whose value is a [library, class] pair that is not
// [null, null]. model_index.json keeps to the symlink rule (see
// WithShardOptions) and must be a regular file of at most 1 MiB; its
// errors are those of ResolvePipeline (ErrNoWeights "model index missing",
// ErrInvalidLayout "model index invalid", ErrInsecurePath, ErrNotRegular). The names are as
// listed: that each is a bare folder name is for the caller to check. It
// is for tools that visit every component's files whatever their
// variants (package integrity).
func Components(root string, opts ...Option) ([]string, error) {
	cfg := buildConfig(opts)
	names, _, err := readModelIndex(cfg.src, root, cfg.shardOpts)
	return names, err
}

func isCandidate(name string) bool {
	_, ok := classify(name)
	return ok
}

// readModelIndex returns the sorted names of the components model_index.json
// lists with a non-null [library, class] pair, and each one's library (when
// it is a string). model_index.json keeps to the symlink rule
// (shard.ResolveFile with opts) and must be a regular file of at most
// maxModelIndex bytes, checked before it is read.
func readModelIndex(src srcfs.FS, root string, opts []shard.Option) ([]string, map[string]string, error) {
	path := src.Join(root, ModelIndex)
	real, err := shard.ResolveFile(path, opts...)
	if err != nil {
		switch {
		case errors.Is(err, shard.ErrInsecurePath):
			return nil, nil, &Error{Kind: ErrInsecurePath, Dir: root, File: ModelIndex, Err: err}
		case errors.Is(err, fs.ErrNotExist):
			return nil, nil, &Error{Kind: ErrNoWeights, Dir: root, File: ModelIndex, Msg: "model index missing: not a pipeline folder"}
		}
		return nil, nil, &Error{Kind: ErrInvalidLayout, Dir: root, File: ModelIndex, Msg: "model index invalid", Err: err}
	}
	data, err := src.ReadFile(real, maxModelIndex)
	if err != nil {
		var nr *safeopen.NotRegularError
		var tl *safeopen.TooLargeError
		switch {
		case errors.As(err, &nr):
			return nil, nil, &Error{Kind: ErrNotRegular, Dir: root, File: ModelIndex, Msg: safeopen.Describe(nr.Mode) + ", not a regular file"}
		case errors.As(err, &tl):
			return nil, nil, &Error{Kind: ErrInvalidLayout, Dir: root, File: ModelIndex, Msg: fmt.Sprintf("model index invalid: %d bytes, larger than %d", tl.Size, maxModelIndex)}
		}
		return nil, nil, &Error{Kind: ErrInvalidLayout, Dir: root, File: ModelIndex, Msg: "model index invalid", Err: err}
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, nil, &Error{Kind: ErrInvalidLayout, Dir: root, File: ModelIndex, Msg: "model index invalid", Err: err}
	}
	if doc == nil {
		return nil, nil, &Error{Kind: ErrInvalidLayout, Dir: root, File: ModelIndex, Msg: "model index invalid: not a JSON object"}
	}
	var names []string
	libs := make(map[string]string)
	for k, raw := range doc {
		if strings.HasPrefix(k, "_") {
			continue
		}
		var pair []any
		if !bytes.HasPrefix(bytes.TrimSpace(raw), []byte("[")) || json.Unmarshal(raw, &pair) != nil || len(pair) != 2 {
			continue // a config value, not a component
		}
		if pair[0] == nil || pair[1] == nil {
			continue // an absent optional component
		}
		names = append(names, k)
		if lib, ok := pair[0].(string); ok {
			libs[k] = lib
		}
	}
	slices.Sort(names)
	return names, libs, nil
}

func checkComponentName(n string) *Error {
	if n == "" || n == "." || strings.ContainsAny(n, `/\:`) || strings.Contains(n, "..") || strings.ContainsFunc(n, func(r rune) bool { return r < 0x20 }) {
		return &Error{Kind: ErrInsecurePath, File: n, Msg: "component name in " + ModelIndex + " is not a bare folder name"}
	}
	return nil
}

// Open opens the named component's planned files.
func (pp *PipelinePlan) Open(component string, opts ...shard.Option) (*shard.Checkpoint, error) {
	p := pp.Component(component)
	if p == nil {
		return nil, &Error{Kind: ErrNoWeights, Dir: pp.Root, File: component, Msg: "component missing: no such component in the plan"}
	}
	return p.Open(opts...)
}
