//go:build !linux

package ckpt

import "testing"

// dropCache is for Linux only (bench_verify_linux_test.go).
func dropCache(b *testing.B, path string) { b.Skip("dropping the page cache is for Linux only") }
