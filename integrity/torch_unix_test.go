//go:build unix

package integrity_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/ckpt-go/ckpt/integrity"
)

// TestTorchFIFO: a FIFO named like PyTorch weights, in a folder, behind
// an index and named directly, is refused as NotRegular without blocking.
func TestTorchFIFO(t *testing.T) {
	dir := torchSharded(t)
	p := filepath.Join(dir, tshard2)
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Skip("no FIFOs:", err)
	}
	for _, loc := range []string{dir, filepath.Join(dir, tindex), p} {
		rep := verify(t, loc)
		if len(rep.Problems) != 1 || rep.Problems[0].Kind != integrity.NotRegular || rep.Problems[0].File != tshard2 {
			t.Errorf("%s: %v", loc, messages(rep))
		}
	}
}
