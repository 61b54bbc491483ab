package shard

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// A shard swapped for a symlink leaving the folder after Open validated the
// set is refused when it is lazily opened, not followed.
func TestLazyOpenRechecksSymlinks(t *testing.T) {
	dir, index := writeSharded(t)
	c, err := Open(index)
	if err != nil {
		t.Fatal(err)
	}
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
	_, err = c.Tensor(name)
	var e *Error
	if !errors.As(err, &e) || e.Kind != ErrInsecurePath || e.Shard != s2 {
		t.Fatalf("lazy open of an escaping symlink: %v", err)
	}
}
