//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package shard

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ckpt-go/ckpt/internal/testutil"
)

// The reproducer: an index whose shard is a FIFO used to block
// Open for ever.
func TestOpenFIFOShard(t *testing.T) {
	dir := t.TempDir()
	index := filepath.Join(dir, "model.safetensors.index.json")
	os.WriteFile(index, []byte(`{"weight_map":{"w":"model-00001-of-00001.safetensors"}}`), 0o644)
	if err := syscall.Mkfifo(filepath.Join(dir, "model-00001-of-00001.safetensors"), 0o644); err != nil {
		t.Skip(err)
	}
	err := testutil.Within(t, "Open", func() error { _, err := Open(index); return err })
	var e *Error
	if !errors.As(err, &e) || e.Kind != ErrNotRegular || e.Shard != "model-00001-of-00001.safetensors" || e.Path != index ||
		!strings.Contains(err.Error(), "FIFO") {
		t.Fatalf("got %v", err)
	}
}

// A FIFO, or /dev/zero through a link, as the index or the file given to
// Open is refused as not regular, before anything is read.
func TestOpenSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "model.safetensors.index.json")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skip(err)
	}
	single := filepath.Join(dir, "model.safetensors")
	syscall.Mkfifo(single, 0o644)
	zero := filepath.Join(dir, "zero.safetensors.index.json")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Skip(err)
	}
	for _, p := range []string{fifo, single, zero} {
		err := testutil.Within(t, "Open "+p, func() error { _, err := Open(p); return err })
		if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), p) {
			t.Errorf("Open(%s): %v", p, err)
		}
		if strings.HasSuffix(p, ".json") {
			_, err := ReadIndex(p)
			if !errors.Is(err, ErrNotRegular) {
				t.Errorf("ReadIndex(%s): %v", p, err)
			}
		}
	}
}

// A shard swapped for a FIFO after Open validated the set is refused when
// it is lazily opened, without blocking.
func TestLazyOpenRefusesFIFO(t *testing.T) {
	dir, index := writeSharded(t)
	c := mustOpen(t, index)
	defer c.Close()
	s2 := filepath.Join(dir, "model-00002-of-00002.safetensors")
	os.Remove(s2)
	if err := syscall.Mkfifo(s2, 0o644); err != nil {
		t.Skip(err)
	}
	err := testutil.Within(t, "lazy open", func() error { return readEvery(c) })
	var e *Error
	if !errors.As(err, &e) || e.Kind != ErrNotRegular || e.Shard != filepath.Base(s2) {
		t.Fatalf("got %v", err)
	}
}

// ResolveFile applies the symlink rule: links out of the folder are
// refused unless WithFollowSymlinks.
func TestResolveFile(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(t.TempDir(), "blob")
	os.WriteFile(out, nil, 0o644)
	link := filepath.Join(dir, "model.safetensors")
	if err := os.Symlink(out, link); err != nil {
		t.Skip(err)
	}
	_, err := ResolveFile(link)
	var e *Error
	if !errors.As(err, &e) || e.Kind != ErrInsecurePath || e.Path != link {
		t.Fatalf("got %v", err)
	}
	real, err := ResolveFile(link, WithFollowSymlinks())
	if err != nil || real != out {
		t.Fatalf("with the opt-in: %q, %v", real, err)
	}
	if _, err := ResolveFile(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing: %v", err)
	}
}
