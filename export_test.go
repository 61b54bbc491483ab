package ckpt

import "context"

// loadInto loads one tensor into dst, as Item.Produce does, by its name
// (the tests' shorthand for finding the Item first).
func (m *Model) loadInto(ctx context.Context, name string, dst []byte) (*Tensor, error) {
	if dst == nil {
		dst = []byte{}
	}
	return m.loadOne(ctx, name, dst)
}
