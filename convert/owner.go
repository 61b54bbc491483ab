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
	library string // "diffusers", "transformers", ... ("" when unknown)
	class   string
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
			}
			if b, err := r.readConfig(cfg); err == nil && b != nil && json.Unmarshal(b, &c) == nil {
				switch {
				case o.library != "":
				case c.Diffusers != nil:
					o.library = libDiffusers
				case c.Transformers != nil || len(c.Architectures) > 0:
					o.library = libTransformers
				}
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

// narrowDefault is the pipeline-wide default's dtype when it is 8 bits or
// fewer.
func narrowDefault(p *ckpt.Policy) (dtype.DType, bool) {
	d, ok := p.Default.DType()
	return d, ok && d.Bits() <= 8
}

// protectComponent keeps a VAE or an image encoder that no component
// target names out of the policy's narrow default: it adds a rule, after
// the caller's, that keeps the component's tensors as stored and says why.
// The caller's rules still decide first, and a component target
// (--component vae=F8_E4M3) forces the default on it.
func (r *runner) protectComponent(c *component, o owner, pipeline bool) {
	d, narrow := narrowDefault(&r.opts.Policy)
	if !pipeline || !narrow {
		return
	}
	if _, named := r.opts.Policy.Components[c.label]; named {
		return
	}
	if !keptByDefault(c.label, o) {
		return
	}
	note := fmt.Sprintf("VAEs and image encoders are not quantized by a pipeline-wide %s default (--component %s=%s forces it)", d, c.label, d)
	r.policy.Rules = append(slices.Clip(r.policy.Rules), ckpt.Rule{Component: c.label, Pattern: ckpt.MustParsePattern("**"), Target: ckpt.AsStored, Note: note})
	r.rep.Warnings = append(r.rep.Warnings, fmt.Sprintf("%s: kept as stored: %s", c.label, note))
}

// checkOwners refuses, before anything is written, components that would
// carry a quantization_config the library that owns them does not read,
// unless Options.AllowCkptOnlyQuant says to write them anyway (with a
// warning).
func (r *runner) checkOwners(owners map[string]owner) error {
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
	return &Error{Kind: ErrUnreadable, Component: c.label, Msg: fmt.Sprintf(
		"a %s %s: its FP8 weights would carry a %s quantization_config, which %s does not read%s (it reads bitsandbytes, gguf, torchao, quanto and modelopt quantization); nothing was written. Keep it unquantized with --component %s=BF16 or =stored (Options.Policy.Components), or write it anyway with --allow-ckpt-only-quant (Options.AllowCkptOnlyQuant): for ckpt and vLLM; %s will not load it",
		o.library, cmp.Or(o.class, "model"), c.format, o.library, also, c.label, o.library)}
}
