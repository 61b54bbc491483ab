// Package testutil holds helpers shared by the tests of several ckpt
// packages. It is imported only from _test.go files.
package testutil

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
)

// Entries returns the names in dir, sorted by name, failing the test if the
// folder cannot be read. Tests use it to check that no temporary file is
// left behind.
func Entries(t testing.TB, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

// WriteSyntheticShards writes into dir one tiny safetensors file for each
// shard file of weightMap (tensor name -> shard file), holding that shard's
// tensors, in the order of names, as two-element BF16 tensors. It stands in
// for the real shards of a real index.
func WriteSyntheticShards(t testing.TB, dir string, names []string, weightMap map[string]string) {
	t.Helper()
	byShard := map[string][]ckpttest.Tensor{}
	for _, n := range names {
		byShard[weightMap[n]] = append(byShard[weightMap[n]], ckpttest.T(n, dtype.BF16, 2))
	}
	for s, ts := range byShard {
		if err := ckpttest.WriteFile(filepath.Join(dir, s), ts, nil); err != nil {
			t.Fatal(err)
		}
	}
}
