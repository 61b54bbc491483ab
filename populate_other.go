//go:build !linux

package ckpt

// populate is advice that only Linux takes (madv_linux.go).
func populate([]byte) {}
