package ckpt

import (
	"context"

	"github.com/ckpt-go/ckpt/dtype"
)

// loadInto loads one tensor into dst, as Item.Produce does, by its name
// (the tests' shorthand for finding the Item first).
func (m *Model) loadInto(ctx context.Context, name string, dst []byte) (*Tensor, error) {
	if dst == nil {
		dst = []byte{}
	}
	return m.loadOne(ctx, name, dst)
}

// Decide is the policy's decision for one tensor, as a Model's Items make
// it (the tests' way to ask the policy without a model).
func (p *Policy) Decide(component, name string, stored dtype.DType, quantized bool, shape []int64) Decision {
	return p.decide(&ruleTexts{}, component, name, stored, quantized, shape)
}
