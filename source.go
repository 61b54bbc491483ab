package ckpt

import (
	"github.com/ckpt-go/ckpt/quant"
	"github.com/ckpt-go/ckpt/shard"
)

// Checkpoint returns the stored tensors of one component as package shard
// opened them (every stored tensor under its stored name, scales and
// markers included, with the files' metadata), for tools that re-encode a
// checkpoint tensor by tensor instead of loading it (package convert).
// The Checkpoint belongs to the Model: do not close it; it is valid until
// the Model is closed. An unknown component is ErrNotFound.
func (m *Model) Checkpoint(component string) (*shard.Checkpoint, error) {
	c, err := m.sourceComponent(component)
	if err != nil {
		return nil, err
	}
	return c.ck, nil
}

// Scheme returns what package quant detected in one component's tensors
// and configs: its scaled low-precision weights, the scales they consume,
// and what was left unexplained. It is shared: do not modify it.
func (m *Model) Scheme(component string) (*quant.Scheme, error) {
	c, err := m.sourceComponent(component)
	if err != nil {
		return nil, err
	}
	return c.scheme, nil
}

func (m *Model) sourceComponent(name string) (*modelComponent, error) {
	if err := m.checkOpen(); err != nil {
		return nil, err
	}
	c := m.component(name)
	if c == nil {
		return nil, &Error{Kind: ErrNotFound, Path: m.path, Component: name, Msg: "no such component"}
	}
	return c, nil
}
