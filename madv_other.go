//go:build unix && !linux

package ckpt

func adviseHuge([]byte) {}
