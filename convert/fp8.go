package convert

import (
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/quant"
)

// FP8 weights stored with scales: what a request for scales (Options.Scale,
// Options.ScaleFormat) means for them, per component.

// fp8Elem reports whether d is an FP8 element type.
func fp8Elem(d dtype.DType) bool {
	return d.IsFloat() && d.Bits() == 8
}

// sourceFormat is the format Run writes that a layout is, AutoScaleFormat
// for the layouts Run does not write.
func sourceFormat(l quant.Layout) ScaleFormat {
	switch l {
	case quant.DeepSeekFP8Block:
		return DeepSeek
	case quant.CompressedTensorsFP8:
		return CompressedTensors
	}
	return AutoScaleFormat
}

// scaleSuffix is the suffix of a weight's scale tensor in format f.
func (f ScaleFormat) scaleSuffix() string {
	if f == DeepSeek {
		return "_scale_inv"
	}
	return "_scale"
}

// reportString is the scale as TensorReport.Scale gives it: "tensor",
// "channel", "block:N".
func (s Scale) reportString() string {
	if s.Granularity != quant.PerBlock {
		return s.Granularity.String()
	}
	return s.String()
}

// request says what c's options ask for, for messages: "--fp8-scale
// block:32 --scale-format deepseek".
func (c *component) request() string {
	return "--fp8-scale " + c.scale.String() + " --scale-format " + c.format.String()
}

// resolveComponentScale sets c.format, c.scale and c.explicit: the format
// and scales of the component's new FP8 weights, and whether the options
// ask its stored FP8 weights for something else than what they are.
//
// AutoScaleFormat is DeepSeek's for a component stored in DeepSeek's
// layout (when it can store Options.Scale), compressed-tensors otherwise.
// With Options.Scale zero, a component whose FP8 weights share one grid
// that the format can store keeps it (so that --scale-format alone
// relabels); otherwise the format's default applies. A request is
// explicit when Options.Scale is set or Options.ScaleFormat is not the
// stored one.
func (r *runner) resolveComponentScale(c *component) error {
	o := &r.opts
	var ws []*quant.Weight
	layout := quant.None
	if c.scheme != nil {
		ws, layout = c.scheme.Weights, c.scheme.Layout
	}
	stored := sourceFormat(layout)
	f := o.ScaleFormat
	if f == AutoScaleFormat {
		f = CompressedTensors
		if g := o.Scale.Granularity; stored == DeepSeek && (g == 0 || g == quant.PerBlock || o.Scale.Unscaled) {
			f = DeepSeek
		}
	}
	c.format = f
	c.explicit = o.Scale != (Scale{}) || (o.ScaleFormat != AutoScaleFormat && o.ScaleFormat != stored)
	if o.Scale == (Scale{}) {
		for _, w := range ws {
			s, ok := storedGrid(w)
			if !ok || (f == DeepSeek && s.Granularity != quant.PerBlock) {
				continue
			}
			all := true
			for _, v := range ws {
				if fp8Elem(v.Elem) && !sameGrid(v, s) {
					all = false
					break
				}
			}
			if all {
				c.scale = s
				return nil
			}
		}
	}
	var err error
	c.scale, err = resolveScale(o.Scale, f)
	return err
}

// storedGrid returns the Scale that w's stored scales are, when they are
// one of its grids: one multiplying F32, F16 or BF16 scale per tensor, per
// output channel or per square block of a 2-D FP8 weight.
func storedGrid(w *quant.Weight) (Scale, bool) {
	if !fp8Elem(w.Elem) || len(w.Shape) != 2 || !storedScaleOK(w) {
		return Scale{}, false
	}
	sc := w.Scales[0]
	rows, cols := w.Shape[0], w.Shape[1]
	n := numElements(sc.Shape)
	switch {
	case w.Layout != quant.DeepSeekFP8Block && n == 1 && len(sc.Shape) <= 1:
		return Scale{Granularity: quant.PerTensor}, true
	case sc.Block == [2]int64{1, cols} && n == rows && rows > 1:
		return Scale{Granularity: quant.PerChannel}, true
	case len(sc.Shape) == 2 && sc.Block[0] == sc.Block[1]:
		return Scale{Granularity: quant.PerBlock, Block: sc.Block[0]}, true
	}
	return Scale{}, false
}

// cover is the block of a weight [rows, cols] that one scale element
// covers, clipped to the weight: two grids with the same cover split the
// weight alike.
func cover(b [2]int64, rows, cols int64) [2]int64 {
	return [2]int64{min(b[0], rows), min(b[1], cols)}
}

// sameGrid reports whether w's stored scale splits it as s would: then
// its codes and scale values are those of s's layout, under other names.
func sameGrid(w *quant.Weight, s Scale) bool {
	if len(w.Shape) != 2 || len(w.Scales) != 1 || s.Unscaled {
		return false
	}
	rows, cols := w.Shape[0], w.Shape[1]
	var b [2]int64
	switch s.Granularity {
	case quant.PerTensor:
		b = [2]int64{rows, cols}
	case quant.PerChannel:
		b = [2]int64{1, cols}
	case quant.PerBlock:
		b = [2]int64{s.Block, s.Block}
	default:
		return false
	}
	return cover(w.Scales[0].Block, rows, cols) == cover(b, rows, cols)
}

// relabels reports whether a stored FP8 weight goes into format f with
// scales s by keeping its codes and scale values: a weight stored with one
// multiplying scale (value = code × scale in every FP8 layout package quant
// reads with RoleScale or RoleScaleInv, DeepSeek's weight_scale_inv
// included) in a grid that splits it as s does, its codes in an element
// type the formats declare.
func relabels(w *quant.Weight, f ScaleFormat, s Scale) bool {
	if w.Elem != dtype.F8_E4M3 && w.Elem != dtype.F8_E5M2 {
		return false
	}
	if !storedScaleOK(w) {
		return false
	}
	if f == DeepSeek && s.Granularity != quant.PerBlock {
		return false
	}
	return sameGrid(w, s)
}

// storedScaleOK reports whether w has one multiplying scale in a dtype
// that widens exactly to F32.
func storedScaleOK(w *quant.Weight) bool {
	if w.Data.DType != w.Elem || len(w.Scales) != 1 {
		return false
	}
	sc := w.Scales[0]
	return (sc.Role == quant.RoleScale || sc.Role == quant.RoleScaleInv) &&
		(sc.DType == dtype.F32 || sc.DType == dtype.F16 || sc.DType == dtype.BF16)
}
