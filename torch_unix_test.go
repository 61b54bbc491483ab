//go:build unix

package ckpt

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/shard"
)

// TestTorchFIFO: a FIFO named like a PyTorch file, or as the weights of a
// component folder, is refused at once: opening it does not wait for a
// writer.
func TestTorchFIFO(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{filepath.Join(dir, "x.bin"), filepath.Join(dir, "folder", "pytorch_model.bin")} {
		writePT(t, filepath.Dir(p), "keep", nil)
		if err := syscall.Mkfifo(p, 0o644); err != nil {
			t.Skip("no FIFOs:", err)
		}
	}
	for _, p := range []string{filepath.Join(dir, "x.bin"), filepath.Join(dir, "folder")} {
		done := make(chan error, 1)
		go func() {
			_, err := Open(p)
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, safetensors.ErrNotRegular) || !errors.Is(err, ErrResolve) {
				t.Errorf("%s: %v", p, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: Open blocks on a FIFO", p)
		}
	}
}

// TestTorchSymlinks: a component folder's PyTorch file, and an index's
// shard, that are symbolic links out of their folder are refused
// (ErrInsecurePath) unless WithFollowSymlinks allows them.
func TestTorchSymlinks(t *testing.T) {
	views, storages := ptFixture(t)
	dir := t.TempDir()
	real := writePT(t, dir, "blobs/abc", torchArchive(t, views, storages, false))
	for _, p := range []string{"folder/pytorch_model.bin", "sharded/pytorch_model-00001-of-00001.bin"} {
		writePT(t, dir, filepath.Join(filepath.Dir(p), "keep"), nil)
		if err := os.Symlink(real, filepath.Join(dir, p)); err != nil {
			t.Skip("no symlinks:", err)
		}
	}
	var wm []string
	for _, v := range views {
		wm = append(wm, `"`+v.Name+`": "pytorch_model-00001-of-00001.bin"`)
	}
	index := writePT(t, dir, "sharded/pytorch_model.bin.index.json", []byte(`{"weight_map": {`+strings.Join(wm, ", ")+`}}`))
	for _, p := range []string{filepath.Join(dir, "folder"), index} {
		if _, err := Open(p); !errors.Is(err, shard.ErrInsecurePath) || !errors.Is(err, ErrResolve) {
			t.Errorf("%s: %v", p, err)
		}
		if w := mustLoad(t, mustOpen(t, p, WithFollowSymlinks())); w.Len() != len(views) {
			t.Errorf("%s: %d tensors", p, w.Len())
		}
	}
}
