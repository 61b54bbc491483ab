//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package safetensors

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"testing/fstest"

	"github.com/ckpt-go/ckpt/internal/testutil"
)

// Open, ReadHeaderFile and OpenFS refuse what is not a regular file, by
// name and without blocking: a FIFO with no writer used to block them for
// ever, and /dev/zero to be read as a 0-byte file.
func TestSpecialFilesRefused(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.safetensors")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skip(err)
	}
	zero := filepath.Join(dir, "zero.safetensors")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Skip(err)
	}
	folder := filepath.Join(dir, "folder.safetensors")
	os.Mkdir(folder, 0o755)
	for path, what := range map[string]string{fifo: "FIFO", zero: "character device", folder: "folder"} {
		name := filepath.Base(path)
		for op, fn := range map[string]func() error{
			"Open":           func() error { _, err := Open(path); return err },
			"ReadHeaderFile": func() error { _, err := ReadHeaderFile(path); return err },
			"OpenFS":         func() error { _, err := OpenFS(os.DirFS(dir), name); return err },
		} {
			err := testutil.Within(t, op+" "+name, fn)
			e := wantKind(t, err, ErrNotRegular)
			if !strings.Contains(e.File, name) || !strings.Contains(err.Error(), what) {
				t.Errorf("%s %s: %v", op, name, err)
			}
		}
	}
	// An fs.FS that says a file is a FIFO: refused before it is opened.
	mfs := fstest.MapFS{"p.safetensors": &fstest.MapFile{Mode: fs.ModeNamedPipe}}
	_, err := OpenFS(mfs, "p.safetensors")
	wantKind(t, err, ErrNotRegular)
}
