package ckpt

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/safetensors"
)

// Target is what a tensor should be loaded as: a dtype, "as stored", or
// "quantized" (a scaled low-precision weight kept narrow with its scales
// attached, for executors that dequantize on the device). The zero Target
// is "not set": the next level of the policy decides.
type Target struct {
	dt   dtype.DType
	mode targetMode
}

type targetMode uint8

const (
	modeUnset targetMode = iota
	modeDType
	modeAsStored
	modeQuantized
)

// AsStored keeps each tensor in its stored dtype; a scaled low-precision
// weight stays quantized with its scales attached.
var AsStored = Target{mode: modeAsStored}

// Quantized keeps scaled low-precision weights narrow with their scales
// attached (see Tensor.Scales); other tensors are loaded as stored.
var Quantized = Target{mode: modeQuantized}

// To returns the target "convert to d". Scaled low-precision weights are
// dequantized when d differs from their element type.
func To(d dtype.DType) Target { return Target{dt: d, mode: modeDType} }

// ParseTarget parses a target: a dtype name as dtype.Parse accepts it
// ("F32", "bf16", "torch.float8_e4m3fn", ...), "stored" (also "as-stored",
// "as_stored") or "quantized" (also "keep-quantized").
func ParseTarget(s string) (Target, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "stored", "as-stored", "as_stored", "asstored":
		return AsStored, nil
	case "quantized", "keep-quantized", "keep_quantized":
		return Quantized, nil
	}
	d, err := dtype.Parse(s)
	if err != nil {
		return Target{}, &Error{Kind: ErrTarget, Msg: fmt.Sprintf("%q is not a dtype, \"stored\" or \"quantized\"", s), Err: err}
	}
	return To(d), nil
}

// IsSet reports whether the target says something (the zero Target does
// not).
func (t Target) IsSet() bool { return t.mode != modeUnset }

// DType returns the dtype of a To target, and false for the others.
func (t Target) DType() (dtype.DType, bool) { return t.dt, t.mode == modeDType }

// String returns the target as ParseTarget reads it ("F32", "stored",
// "quantized"; "" for the zero Target).
func (t Target) String() string {
	switch t.mode {
	case modeDType:
		return t.dt.String()
	case modeAsStored:
		return "stored"
	case modeQuantized:
		return "quantized"
	}
	return ""
}

// MarshalText implements encoding.TextMarshaler.
func (t Target) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// Rule sets the target of the tensors whose names match Pattern, in the
// components named by Component ("" for every component). Rules are tried
// in order; the first match decides.
type Rule struct {
	Component string
	Pattern   Pattern
	Target    Target
	// Note, when set, says why a program added the rule; a Decision made
	// by the rule gives it as its Rule instead of the rule's number and
	// spelling (package convert's safe defaults are rules of this kind).
	Note string
}

// String returns the rule as the CLI's --keep flag spells it.
func (r Rule) String() string {
	return scoped(r.Component, r.Pattern.String()+"="+r.Target.String())
}

// scoped prefixes s with "component/" when component is set, as the CLI's
// --keep and --split flags spell a rule or a split for one component.
func scoped(component, s string) string {
	if component != "" {
		return component + "/" + s
	}
	return s
}

// parseScoped parses "[COMPONENT/]PATTERN=VALUE", as the CLI's --keep and
// --split flags take a rule or a split, up to VALUE, which it returns
// unparsed. what and form name the flag's values in the error for a
// missing "=" ("rule", "PATTERN=TARGET").
func parseScoped(s, what, form string) (comp string, p Pattern, value string, err error) {
	lhs, value, ok := strings.Cut(s, "=")
	if !ok {
		return "", Pattern{}, "", &Error{Kind: ErrOption, Msg: fmt.Sprintf("%s %q is not %s", what, s, form)}
	}
	if c, rest, ok := strings.Cut(lhs, "/"); ok {
		if c == "" {
			return "", Pattern{}, "", &Error{Kind: ErrOption, Msg: fmt.Sprintf("%s %q: no component before \"/\" (COMPONENT/%s, or %s for every component)", what, s, form, form)}
		}
		comp, lhs = c, rest
	}
	p, err = ParsePattern(lhs)
	return comp, p, value, err
}

// ParseRule parses "PATTERN=TARGET" or "COMPONENT/PATTERN=TARGET", as the
// CLI's --keep flag takes it.
func ParseRule(s string) (Rule, error) {
	comp, p, rhs, err := parseScoped(s, "rule", "PATTERN=TARGET")
	if err != nil {
		return Rule{}, err
	}
	t, err := ParseTarget(rhs)
	if err != nil {
		return Rule{}, err
	}
	return Rule{Component: comp, Pattern: p, Target: t}, nil
}

// Policy chooses the dtype of every tensor. Precedence: the first
// matching Rule, then the component's target, then Default; with none of
// them set, the stored dtype.
//
// Integer and bool tensors (and complex ones) are never cast by a
// component target or by Default: only a Rule that matches them can change
// their dtype. Packed low-precision storage (U8 holding FP4 pairs, E8M0
// scales) belongs to a quantized weight, which the policy sees under its
// logical name with its element type (F8_E4M3, F4): it is not an integer
// tensor.
//
// The same Policy value configures the loader (WithPolicy) and package
// convert (convert.Options.Policy). The loader is the one place the choice
// is made: each tensor's Decision is its Item's (Model.Items), which Load,
// Plan, convert and the executors all read.
type Policy struct {
	// Default is the target of every tensor no rule or component target
	// decides (the lowest level).
	Default Target
	// Components sets the targets of whole components of a pipeline, by
	// name; it takes precedence over Default.
	Components map[string]Target
	// Rules are per-tensor rules tried first, in order: the first whose
	// component and pattern match decides, whatever the tensor is (a rule
	// may cast an integer tensor or narrow an embedding).
	Rules []Rule
	// NarrowLinearOnly limits a component or default dtype target of 8
	// bits or fewer (F8_E4M3, F4, ...) to the tensors LinearWeight takes
	// for the 2-D weights of linear layers: norms, biases, embeddings,
	// output heads and other tensors stay as stored, and the Decision
	// says "not a linear layer's 2-D weight: default F8_E4M3 not applied".
	// Rules are not limited. Package convert's Run always applies its
	// policy with NarrowLinearOnly set; the loader applies it as given.
	NarrowLinearOnly bool
	// Verify says which tensors' checksums are checked as their bytes are
	// read (see safetensors.ChecksumPrefix): by default every tensor whose
	// file names checksums. A rank's part of a tensor (WithRank) is
	// verified only with VerifyAlways, which then also reads the rest of
	// the tensor (the checksum covers all of it); so is a PyTorch view of
	// its storage, whose record's CRC-32 covers the storage as stored
	// (VerifyAlways reads the record); the plan says per tensor.
	Verify Verify
	// Saturate makes narrowing conversions clamp values beyond the
	// target's range to ±max instead of overflowing to Inf or NaN
	// (dtype.Options.Saturate), in a load and in package convert alike.
	Saturate bool
}

// Verify chooses which tensors a load (and convert, and the executors'
// uploads) checks against the checksums their files name.
type Verify uint8

const (
	// VerifyPresent checks every tensor of a file that names checksums,
	// and reads files without them as they are (the default).
	VerifyPresent Verify = iota
	// VerifyAlways is VerifyPresent that also refuses a file without
	// checksums (ErrChecksum): for pipelines that only take checkpoints
	// whose integrity can be proven.
	VerifyAlways
	// VerifyNever checks nothing.
	VerifyNever
)

// String returns "present", "always" or "never".
func (v Verify) String() string {
	switch v {
	case VerifyPresent:
		return "present"
	case VerifyAlways:
		return "always"
	case VerifyNever:
		return "never"
	}
	return "Verify(" + strconv.Itoa(int(v)) + ")"
}

// ErrChecksum matches a tensor whose bytes differ from the checksum its
// file names (a *safetensors.ChecksumError, which names the file, the
// tensor and its bytes), damaged checksums in a header, and, with
// VerifyAlways, a file that names none. It is safetensors.ErrChecksum:
// one condition for every package.
var ErrChecksum error = safetensors.ErrChecksum

// Decision is what the policy decided for one tensor, and why.
type Decision struct {
	Target Target
	// Rule says which level decided, in words: "rule 2 **.norm.*=F32",
	// `component "transformer"=F8_E4M3`, "default F32", "no target: as
	// stored", "integer tensor: default F32 not applied", "not a linear
	// layer's 2-D weight: default F8_E4M3 not applied".
	Rule string
}

// ruleTexts keeps the Rule texts of one component's decisions under one
// policy, each written once rather than once per tensor.
type ruleTexts struct {
	rules         []string // "rule I R" by rule index ("": not yet)
	level, linear string
	kinds         [3]string // "KIND tensor: LEVEL not applied": integer, bool, complex
}

// text returns *s, writing it with f first when it is empty.
func (rt *ruleTexts) text(s *string, f func() string) string {
	if *s == "" {
		*s = f()
	}
	return *s
}

// decide applies the policy to one tensor: component is the name of its
// component (as Model.Components names it), name its logical name, stored its stored dtype (a quantized weight's
// element type), quantized says it is a scaled low-precision weight
// (never an integer tensor), and shape is its logical shape, which only
// NarrowLinearOnly looks at.
//
// The first Rule whose component and pattern match decides. Otherwise the
// component's target, or else Default, applies; with neither set the
// tensor is loaded as stored. A target that is not a dtype (AsStored,
// Quantized) applies to every tensor. A dtype target is not applied to an
// integer, bool or complex tensor that is not quantized, and, with
// NarrowLinearOnly, a dtype target of 8 bits or fewer is not applied to a
// tensor LinearWeight does not take for a linear layer's weight: the
// Decision is then AsStored, and its Rule says which target was not
// applied and why.
// rt keeps the rule texts of one component's decisions.
func (p *Policy) decide(rt *ruleTexts, component, name string, stored dtype.DType, quantized bool, shape []int64) Decision {
	for i, r := range p.Rules {
		if r.Component != "" && r.Component != component {
			continue
		}
		if r.Pattern.Match(name) {
			if r.Note != "" {
				return Decision{Target: r.Target, Rule: r.Note}
			}
			if rt.rules == nil {
				rt.rules = make([]string, len(p.Rules))
			}
			return Decision{Target: r.Target, Rule: rt.text(&rt.rules[i], func() string { return fmt.Sprintf("rule %d %s", i+1, r.String()) })}
		}
	}
	t := p.Default
	ct, ok := p.Components[component]
	if ok && ct.IsSet() {
		t = ct
	}
	level := func() string {
		return rt.text(&rt.level, func() string {
			if ok && ct.IsSet() {
				return fmt.Sprintf("component %q=%s", component, ct)
			}
			return "default " + p.Default.String()
		})
	}
	if !t.IsSet() {
		return Decision{Target: AsStored, Rule: "no target: as stored"}
	}
	d, isDType := t.DType()
	if !isDType {
		return Decision{Target: t, Rule: level()}
	}
	if !quantized && !stored.IsFloat() {
		i := 0 // rt.kinds' index of kindWord(stored)
		switch stored.Kind() {
		case dtype.KindBool:
			i = 1
		case dtype.KindComplex:
			i = 2
		}
		return Decision{Target: AsStored, Rule: rt.text(&rt.kinds[i], func() string { return fmt.Sprintf("%s tensor: %s not applied", kindWord(stored), level()) })}
	}
	if p.NarrowLinearOnly && d.Bits() <= 8 && !LinearWeight(name, shape) {
		return Decision{Target: AsStored, Rule: rt.text(&rt.linear, func() string { return fmt.Sprintf("not a linear layer's 2-D weight: %s not applied", level()) })}
	}
	return Decision{Target: t, Rule: level()}
}

// LinearWeight reports whether a tensor is taken for the weight of a linear
// layer, which an 8-bit or narrower default target quantizes (see
// Policy.NarrowLinearOnly): a 2-D tensor named P.weight whose module P is
// not an embedding (a part containing "embed" or "bias", as T5's
// relative_attention_bias table, a part ending in "_emb", or wte, wpe,
// shared, codebook), not an output head (lm_head, embed_out) and not a
// normalization layer (a part containing "norm", or ln_*). Rules can
// quantize any tensor regardless.
//
// It judges by name alone: a model whose linear layers are of another
// class than nn.Linear (GPT-2's Conv1D) is for the caller to know; package
// convert keeps those from FP8 by model type.
func LinearWeight(name string, shape []int64) bool {
	if len(shape) != 2 || !strings.HasSuffix(name, ".weight") {
		return false
	}
	module := strings.TrimSuffix(name, ".weight")
	for _, p := range strings.Split(module, ".") {
		l := strings.ToLower(p)
		switch {
		case strings.Contains(l, "embed"), strings.Contains(l, "bias"), strings.HasSuffix(l, "_emb"),
			strings.Contains(l, "norm"), strings.HasPrefix(l, "ln_"),
			l == "wte", l == "wpe", l == "shared", l == "codebook", l == "lm_head", l == "ln":
			return false
		}
	}
	return true
}

func kindWord(d dtype.DType) string {
	switch d.Kind() {
	case dtype.KindBool:
		return "bool"
	case dtype.KindComplex:
		return "complex"
	default:
		return "integer"
	}
}

// KeepNormsAndBiasesF32 returns rules that keep normalization layers and
// biases in F32 whatever the component or default target is: the explicit
// form of what transformers' _keep_in_fp32_modules does per model class.
// They match, anywhere in a name:
//
//   - every bias ("**.bias");
//   - the parameters of modules whose name is a norm: "norm", "norm1",
//     "norm2", ... ("norm[0-9]*"), names ending in "norm" ("layernorm",
//     "input_layernorm", "rmsnorm", "q_norm"-style "*_norm"), names starting
//     with "norm_" ("norm_q", "norm_out"), "*_norm_*", "ln_*" and "ln_f"
//     (GPT-2 style), and "*layer_norm*" ("final_layer_norm").
//
// Put them first in Policy.Rules so that they win over later rules. A
// tensor they match that is stored in F32 stays a zero-copy view.
func KeepNormsAndBiasesF32() []Rule {
	pats := []string{
		"**.bias",
		"**.*norm.*",
		"**.norm[0-9]*.*",
		"**.norm_*.*",
		"**.*_norm_*.*",
		"**.ln_*.*",
		"**.*layer_norm*.*",
	}
	rules := make([]Rule, len(pats))
	for i, s := range pats {
		rules[i] = Rule{Pattern: MustParsePattern(s), Target: To(dtype.F32)}
	}
	return rules
}
