//go:build unix

package torch

import (
	"errors"
	"path/filepath"
	"syscall"
	"testing"
)

// TestOpenFIFO: a FIFO where a checkpoint or shard should be is refused at
// once; opening it does not block waiting for a writer.
func TestOpenFIFO(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "pytorch_model.bin")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skip("no FIFOs:", err)
	}
	if _, err := Open(fifo); !errors.Is(err, ErrNotRegular) {
		t.Errorf("checkpoint: %v", err)
	}
	idx := writeFile(t, dir, "pytorch_model.bin.index.json", []byte(`{"weight_map": {"a": "pytorch_model.bin"}}`))
	if _, err := Open(idx); !errors.Is(err, ErrNotRegular) {
		t.Errorf("shard: %v", err)
	}
	fifoIdx := filepath.Join(dir, "fifo.index.json")
	if err := syscall.Mkfifo(fifoIdx, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(fifoIdx); !errors.Is(err, ErrNotRegular) {
		t.Errorf("index: %v", err)
	}
}
