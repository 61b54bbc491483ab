package convert

import (
	"cmp"
	"encoding/json"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/dtype"
)

// owner is the library that loads a component, and the component's class,
// as model_index.json lists it (["diffusers", "UNet2DConditionModel"]) or
// its config.json says (_diffusers_version, _class_name, architectures).
type owner struct {
	library   string // "diffusers", "transformers", ... ("" when unknown)
	class     string
	modelType string // config.json's model_type ("" when not read)
}

// conv1D reports whether the owner's linear layers are Conv1D modules
// (transformers' GPT-2 family: weights stored [in, out], c_attn, q_attn,
// c_proj and c_fc; CLVP's MLP): compressed-tensors and transformers' FP8
// loading quantize nn.Linear modules only, so an FP8 weight of such a
// layer would load as its codes taken for values, without an error.
func (o owner) conv1D() bool {
	switch o.modelType {
	case "gpt2", "openai-gpt", "imagegpt", "decision_transformer", "clvp":
		return true
	}
	for _, p := range []string{"GPT2", "OpenAIGPT", "ImageGPT", "DecisionTransformer", "Clvp"} {
		if strings.HasPrefix(o.class, p) {
			return true
		}
	}
	return false
}

// conv1DModules are the modules of the Conv1D models (owner.conv1D) that
// are Conv1D layers.
var conv1DModules = []string{"c_attn", "q_attn", "c_proj", "c_fc"}

// isConv1DWeight reports whether name is the weight of a Conv1D module.
func isConv1DWeight(name string) bool {
	m, ok := strings.CutSuffix(name, ".weight")
	return ok && slices.Contains(conv1DModules, m[strings.LastIndexByte(m, '.')+1:])
}

// Libraries by how they read the quantization_config Run writes.
const (
	libDiffusers    = "diffusers"
	libTransformers = "transformers"
)

// readsQuantConfig reports whether the library loads a component whose
// config.json carries a quantization_config Run writes. transformers reads
// both, compressed-tensors and "fp8" (DeepSeek); diffusers reads neither
// (its quantizers are bitsandbytes, gguf, torchao, quanto and modelopt,
// none of them a layout of F32 weight_scale tensors). Other and unknown
// libraries are not refused: ckpt cannot tell what they read.
func readsQuantConfig(library string) bool {
	return library != libDiffusers
}

// owners returns the owner of each component of the source: from the
// pipeline's model_index.json, or else from the component's config.json.
// A file source has no owners.
func (r *runner) owners(srcs []srcComponent, dirSrc, pipeline bool) map[string]owner {
	out := map[string]owner{}
	if !dirSrc {
		return out
	}
	var index map[string]json.RawMessage
	if pipeline {
		if b, err := r.readConfig(joinLocation(r.src, "model_index.json")); err == nil && b != nil {
			_ = json.Unmarshal(b, &index)
		}
	}
	for _, cp := range srcs {
		var o owner
		var pair []*string
		if raw, ok := index[cp.label]; ok && json.Unmarshal(raw, &pair) == nil && len(pair) == 2 && pair[0] != nil && pair[1] != nil {
			o = owner{library: *pair[0], class: *pair[1]}
		}
		if o.library == "" || o.class == "" {
			cfg := filepath.Join(cp.dir, "config.json")
			if r.srcFS != nil {
				rel, err := r.srcRel(cp.dir)
				if err != nil {
					out[cp.label] = o
					continue
				}
				cfg = joinLocation(r.src, path.Join(rel, "config.json"))
			}
			var c struct {
				Diffusers     *string  `json:"_diffusers_version"`
				Class         string   `json:"_class_name"`
				Transformers  *string  `json:"transformers_version"`
				Architectures []string `json:"architectures"`
				ModelType     string   `json:"model_type"`
			}
			if b, err := r.readConfig(cfg); err == nil && b != nil && json.Unmarshal(b, &c) == nil {
				switch {
				case o.library != "":
				case c.Diffusers != nil:
					o.library = libDiffusers
				case c.Transformers != nil || len(c.Architectures) > 0:
					o.library = libTransformers
				}
				o.modelType = c.ModelType
				if o.class == "" {
					o.class = c.Class
					if o.class == "" && len(c.Architectures) > 0 {
						o.class = c.Architectures[0]
					}
				}
			}
		}
		out[cp.label] = o
	}
	return out
}

// keptByDefault reports whether a pipeline-wide default of 8 bits or
// fewer leaves a component alone: VAEs (AutoencoderKL and the other
// Autoencoder* classes, VQModel) and image encoders (CLIPVisionModel*,
// SiglipVisionModel and other *VisionModel* classes, a component named
// image_encoder or vae) lose too much to FP8 for what they weigh.
func keptByDefault(name string, o owner) bool {
	cls := o.class
	return strings.HasPrefix(cls, "Autoencoder") || cls == "VQModel" || strings.Contains(cls, "VisionModel") ||
		name == "vae" || name == "image_encoder"
}

// narrow returns t's dtype when t is a dtype of 8 bits or fewer.
func narrow(t ckpt.Target) (dtype.DType, bool) {
	d, ok := t.DType()
	return d, ok && d.Bits() <= 8
}

// protectComponent adds the safe defaults of c to the policy, as rules
// after the caller's (which still decide first), each saying why:
//   - a VAE or an image encoder of a pipeline that no component target
//     names is kept out of a narrow pipeline-wide default (a component
//     target, --component vae=F8_E4M3, forces it);
//   - the Conv1D layers of a GPT-2-like model are kept out of any narrow
//     target: no loader of the format quantizes them (owner.conv1D).
func (r *runner) protectComponent(c *component, o owner, pipeline bool) {
	keep := func(note string, patterns ...string) {
		rules := slices.Clip(r.policy.Rules)
		for _, p := range patterns {
			rules = append(rules, ckpt.Rule{Component: c.label, Pattern: ckpt.MustParsePattern(p), Target: ckpt.AsStored, Note: note})
		}
		r.policy.Rules = rules
		r.rep.Warnings = append(r.rep.Warnings, fmt.Sprintf("%s: kept as stored: %s", cmp.Or(c.label, "weights"), note))
	}
	pol := &r.opts.Policy
	if d, ok := narrow(pol.Default); pipeline && ok && keptByDefault(c.label, o) {
		if _, named := pol.Components[c.label]; !named {
			keep(fmt.Sprintf("VAEs and image encoders are not quantized by a pipeline-wide %s default (--component %s=%s forces it)", d, c.label, d), "**")
		}
	}
	target := pol.Default // the component's target, or else the default
	if ct, ok := pol.Components[c.label]; ok && ct.IsSet() {
		target = ct
	}
	if d, ok := narrow(target); ok && o.conv1D() {
		var pats []string
		for _, m := range conv1DModules {
			pats = append(pats, "**."+m+".weight")
		}
		keep(fmt.Sprintf("the %s layers of a %s are Conv1D modules, which transformers does not load as %s (it quantizes nn.Linear only and would read the codes as values)",
			strings.Join(conv1DModules, ", "), cmp.Or(o.class, o.modelType), d), pats...)
	}
}

// checkOwners refuses, before anything is written, components that would
// carry a quantization_config the library that owns them does not read,
// unless Options.AllowCkptOnlyQuant says to write them anyway (with a
// warning).
func (r *runner) checkOwners(owners map[string]owner) error {
	if err := r.checkMisread(owners); err != nil {
		return err
	}
	var bad []*component
	for _, c := range r.comps {
		if c.newQ && !readsQuantConfig(owners[c.label].library) {
			bad = append(bad, c)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	if r.opts.AllowCkptOnlyQuant {
		for _, c := range bad {
			r.rep.Warnings = append(r.rep.Warnings, fmt.Sprintf("%s: written with a %s quantization_config for ckpt and vLLM (AllowCkptOnlyQuant): %s will not load it", c.label, c.format, owners[c.label].library))
		}
		return nil
	}
	c, o := bad[0], owners[bad[0].label]
	also := ""
	if len(bad) > 1 {
		var names []string
		for _, b := range bad[1:] {
			names = append(names, b.label)
		}
		also = " (nor " + strings.Join(names, ", ") + ")"
	}
	return &Error{Kind: ErrCast, Component: c.label, Msg: fmt.Sprintf(
		"unreadable: a %s %s: its FP8 weights would carry a %s quantization_config, which %s does not read%s (it reads bitsandbytes, gguf, torchao, quanto and modelopt quantization); nothing was written. Keep it unquantized with --component %s=BF16 or =stored (Options.Policy.Components), or write it anyway with --allow-ckpt-only-quant (Options.AllowCkptOnlyQuant): for ckpt and vLLM; %s will not load it",
		o.library, cmp.Or(o.class, "model"), c.format, o.library, also, c.label, o.library)}
}

// checkMisread looks, before anything is written, for FP8 weights that
// transformers reads but would load with wrong values:
//   - a Conv1D layer quantized by a rule (owner.conv1D): transformers reads
//     its codes as values. Refused unless Options.AllowCkptOnlyQuant says
//     to write it anyway (with a warning).
//   - DeepSeek's format with a block that does not divide a weight's rows
//     or columns: transformers 5.23 dequantizes it on a CPU with a block
//     of (dimension / scale count), not weight_block_size, so the rows and
//     columns after the first partial block take the wrong scales (or the
//     load fails). The layout is DeepSeek's own (its checkpoints have such
//     weights) and loads right on a GPU: a warning says so.
func (r *runner) checkMisread(owners map[string]owner) error {
	for _, c := range r.comps {
		o := owners[c.label]
		if !c.newQ || o.library != libTransformers {
			continue
		}
		var conv, partial []string
		for _, t := range c.tasks {
			if t.rep.ScaleTensor == "" {
				continue // not a scaled FP8 weight written here
			}
			name, shape := t.spec.Name, t.spec.Shape
			if o.conv1D() && isConv1DWeight(name) {
				conv = append(conv, name)
			}
			if c.format == DeepSeek && len(shape) == 2 && (shape[0]%c.scale.Block != 0 || shape[1]%c.scale.Block != 0) {
				partial = append(partial, fmt.Sprintf("%s %v", name, shape))
			}
		}
		label := cmp.Or(c.label, "weights")
		if len(partial) > 0 {
			if len(partial) > 3 {
				partial = append(partial[:3], fmt.Sprintf("… (%d more)", len(partial)-3))
			}
			r.rep.Warnings = append(r.rep.Warnings, fmt.Sprintf("%s: %d FP8 weights do not divide into blocks of %d (%s): transformers dequantizes DeepSeek-format weights on a CPU with a block of (dimension / scale count), not weight_block_size, and loads them there with the wrong scales (on a GPU they load right); --scale-format compressed-tensors is read right everywhere",
				label, len(partial), c.scale.Block, strings.Join(partial, ", ")))
		}
		if len(conv) == 0 {
			continue
		}
		msg := fmt.Sprintf("%d tensors (%s) are weights of Conv1D layers of a %s, which transformers does not load as FP8: it quantizes nn.Linear only and would read the codes as values",
			len(conv), strings.Join(conv[:min(len(conv), 3)], ", "), cmp.Or(o.class, o.modelType))
		if r.opts.AllowCkptOnlyQuant {
			r.rep.Warnings = append(r.rep.Warnings, fmt.Sprintf("%s: written anyway (AllowCkptOnlyQuant), for ckpt and vLLM: %s", label, msg))
			continue
		}
		return &Error{Kind: ErrCast, Component: c.label, Msg: "unreadable: " + msg + "; nothing was written. Keep them as stored (drop the rule that quantizes them), or write them anyway with --allow-ckpt-only-quant (Options.AllowCkptOnlyQuant), for ckpt and vLLM"}
	}
	return nil
}
