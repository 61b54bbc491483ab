package ckpt

import (
	"slices"

	"github.com/ckpt-go/ckpt/quant"
)

// QuantWeight describes a weight kept quantized (Action "quantized"): its
// layout, element type, logical shape, stored data tensor and scales with
// their roles and blocks, in the order of t.Scales. Together with Bytes and
// the Scales' Bytes it is what quant.Weight.Dequantize takes, so that an
// executor can dequantize on its device exactly as the loader would on the
// CPU. It returns nil for every other tensor. The result is a copy: changing
// it changes nothing in t.
func (t *Tensor) QuantWeight() *quant.Weight {
	if t.q == nil {
		return nil
	}
	w := *t.q
	w.Shape = slices.Clone(w.Shape)
	w.Data.Shape = slices.Clone(w.Data.Shape)
	w.Scales = slices.Clone(w.Scales)
	for i := range w.Scales {
		w.Scales[i].Shape = slices.Clone(w.Scales[i].Shape)
	}
	return &w
}
