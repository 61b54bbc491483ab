package convert

import (
	"fmt"
	"math"
	"strings"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/dtype"
)

// decision is the policy's target for one tensor and the level that
// decided, in words, as the loader's plan says it.
type decision struct {
	target ckpt.Target
	rule   string
}

// decide applies Options' policy to one logical tensor: the first matching
// rule, then the component's target, then DType; with none, as stored. A
// component or default target is not applied to integer, bool or complex
// tensors, and an 8-bit or narrower one only to linear layers' 2-D weights.
func (o *Options) decide(component, name string, stored dtype.DType, quantized bool, shape []int64) decision {
	for i, r := range o.Rules {
		if r.Component != "" && r.Component != component {
			continue
		}
		if r.Pattern.Match(name) {
			return decision{r.Target, fmt.Sprintf("rule %d %s", i+1, r.String())}
		}
	}
	t, level := o.DType, "default "+o.DType.String()
	if ct, ok := o.Components[component]; ok && ct.IsSet() {
		t, level = ct, fmt.Sprintf("component %q=%s", component, ct)
	}
	if !t.IsSet() {
		return decision{ckpt.AsStored, "no target: as stored"}
	}
	d, isDType := t.DType()
	if !isDType {
		return decision{t, level}
	}
	if !quantized && !stored.IsFloat() {
		return decision{ckpt.AsStored, fmt.Sprintf("%s tensor: %s not applied", kindWord(stored), level)}
	}
	if d.Bits() <= 8 && !LinearWeight(name, shape) {
		return decision{ckpt.AsStored, fmt.Sprintf("not a linear layer's 2-D weight: %s not applied", level)}
	}
	return decision{t, level}
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

// LinearWeight reports whether a tensor is taken for the weight of a linear
// layer, which an 8-bit or narrower default target quantizes: a 2-D tensor
// named P.weight whose module P is not an embedding (a part containing
// "embed", or wte, wpe, shared), not an output head (lm_head, embed_out) and
// not a normalization layer (a part containing "norm", or ln_*). Rules can
// quantize any tensor regardless.
func LinearWeight(name string, shape []int64) bool {
	if len(shape) != 2 || !strings.HasSuffix(name, ".weight") {
		return false
	}
	module := strings.TrimSuffix(name, ".weight")
	for _, p := range strings.Split(module, ".") {
		l := strings.ToLower(p)
		switch {
		case strings.Contains(l, "embed"), strings.Contains(l, "norm"), strings.HasPrefix(l, "ln_"),
			l == "wte", l == "wpe", l == "shared", l == "lm_head", l == "ln":
			return false
		}
	}
	return true
}

// numeric describes a float dtype's values for deciding whether a cast is
// exact: p significant bits, the smallest positive value, the largest
// finite value.
type numeric struct {
	p        int
	min, max float64
}

var numerics = map[dtype.DType]numeric{
	dtype.F64:         {53, 0x1p-1074, math.MaxFloat64},
	dtype.F32:         {24, 0x1p-149, math.MaxFloat32},
	dtype.BF16:        {8, 0x1p-133, 0x1.fep127},
	dtype.F16:         {11, 0x1p-24, 65504},
	dtype.F8_E4M3:     {4, 0x1p-9, 448},
	dtype.F8_E5M2:     {3, 0x1p-16, 57344},
	dtype.F8_E4M3FNUZ: {4, 0x1p-10, 240},
	dtype.F8_E5M2FNUZ: {3, 0x1p-17, 57344},
	dtype.F8_E8M0:     {1, 0x1p-127, 0x1p127},
	dtype.F6_E2M3:     {4, 0.125, 7.5},
	dtype.F6_E3M2:     {3, 0.0625, 28},
	dtype.F4:          {2, 0.5, 6},
}

// exact reports whether every value of from is a value of to, so that the
// cast loses nothing and the report has nothing to say about it.
func exact(from, to dtype.DType) bool {
	if from == to {
		return true
	}
	f, ok1 := numerics[from]
	t, ok2 := numerics[to]
	if ok1 && ok2 {
		// E8M0 has no zero and no sign; the FNUZ types no -0 and no
		// infinity; F4 and F6 no infinity and no NaN.
		fi, ti := from.Info(), to.Info()
		if to == dtype.F8_E8M0 || (fi.HasNegZero && !ti.HasNegZero) || (fi.HasInf && !ti.HasInf) || (fi.HasNaN && !ti.HasNaN) {
			return false
		}
		return t.p >= f.p && t.min <= f.min && t.max >= f.max
	}
	if !ok2 {
		return false // to an integer, bool, complex or registered type
	}
	switch from {
	case dtype.BOOL, dtype.U8, dtype.I8:
		return t.p >= 8 && t.max >= 255
	case dtype.I16, dtype.U16:
		return t.p >= 16 && t.max >= 65535
	case dtype.I32, dtype.U32:
		return t.p >= 32
	}
	return false
}
