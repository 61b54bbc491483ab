package shard

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
)

// A shard swapped for a symlink leaving the folder after Open validated the
// set is refused when it is lazily opened, not followed.
func TestLazyOpenRechecksSymlinks(t *testing.T) {
	dir, index := writeSharded(t)
	c := mustOpen(t, index)
	defer c.Close()
	s2 := "model-00002-of-00002.safetensors"
	outside := t.TempDir()
	if err := os.Rename(filepath.Join(dir, s2), filepath.Join(outside, s2)); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, s2), filepath.Join(dir, s2)); err != nil {
		t.Skip("symlinks unsupported:", err)
	}
	var name string
	for _, n := range c.Names() {
		if _, file, _ := c.Info(n); filepath.Base(file) == s2 {
			name = n
			break
		}
	}
	if name == "" {
		t.Fatal("no tensor in the second shard")
	}
	_, err := c.Tensor(name)
	var e *Error
	if !errors.As(err, &e) || e.Kind != ErrInsecurePath || e.Shard != s2 {
		t.Fatalf("lazy open of an escaping symlink: %v", err)
	}
}

// A shard rewritten between Open and its first use with a header of the
// same size but other contents (two tensors' names swapped) is refused
// rather than read under the validated names.
func TestLazyOpenDetectsChangedHeader(t *testing.T) {
	ts := ckpttest.MustParseTensors("a:F32[4] b:F32[4] c:F16[2] d:F16[2]")
	dir := ckpttest.Dir(t, ckpttest.Weights{Shards: 2, Tensors: ts})
	c := mustOpen(t, filepath.Join(dir, "model.safetensors.index.json"))
	defer c.Close()
	s2 := filepath.Join(dir, "model-00002-of-00002.safetensors")
	swapped := []ckpttest.Tensor{ckpttest.T("d", dtype.F16, 2), ckpttest.T("c", dtype.F16, 2)}
	if err := ckpttest.WriteFile(s2, swapped, nil); err != nil {
		t.Fatal(err)
	}
	_, err := c.Tensor("c")
	var e *Error
	if !errors.As(err, &e) || e.Kind != ErrInvalidShard || !strings.Contains(err.Error(), "changed") {
		t.Fatalf("changed shard: %v", err)
	}
	if _, err := c.Tensor("a"); err != nil {
		t.Errorf("unchanged shard: %v", err)
	}
}
