package ckpttest

import (
	"path/filepath"
	"testing"
)

// File writes tensors to model.safetensors in a new t.TempDir() and returns
// the file's path. It calls t.Fatal on error.
func File(t testing.TB, tensors ...Tensor) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), SingleName(TransformersPrefix, ""))
	if err := WriteFile(path, tensors, nil); err != nil {
		t.Fatal(err)
	}
	return path
}

// Dir writes every entry of weights (several variants or layouts side by
// side) into a new t.TempDir() and returns the folder. It calls t.Fatal on
// error.
func Dir(t testing.TB, weights ...Weights) string {
	t.Helper()
	dir := t.TempDir()
	for _, w := range weights {
		if _, err := WriteWeights(dir, w); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// NewPipeline writes p into a new t.TempDir() and returns the root folder.
// It calls t.Fatal on error.
func NewPipeline(t testing.TB, p Pipeline) string {
	t.Helper()
	root := t.TempDir()
	if err := WritePipeline(root, p); err != nil {
		t.Fatal(err)
	}
	return root
}

// Tensors is MustParseTensors for tests: it calls t.Fatal on a malformed spec.
func Tensors(t testing.TB, spec string) []Tensor {
	t.Helper()
	ts, err := ParseTensors(spec)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

// OpenFixture returns a path to a readable copy of the fixture at path. A
// file ending in ".zst" is decompressed into a new t.TempDir() (under its
// name without ".zst"); any other path is returned unchanged. It calls t.Fatal
// on error.
func OpenFixture(t testing.TB, path string) string {
	t.Helper()
	if filepath.Ext(path) != ".zst" {
		return path
	}
	out, err := Decompress(path, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return out
}
