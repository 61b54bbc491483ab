package safeopen

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	os.WriteFile(p, []byte("hello"), 0o644)
	if b, err := ReadFile(p, 5); err != nil || string(b) != "hello" {
		t.Fatalf("%q, %v", b, err)
	}
	_, err := ReadFile(p, 4)
	var tl *TooLargeError
	if !errors.Is(err, ErrTooLarge) || !errors.As(err, &tl) || tl.Size != 5 || tl.Max != 4 || !strings.Contains(err.Error(), p) {
		t.Fatalf("over the limit: %v", err)
	}
	if _, err := ReadFile(filepath.Join(dir, "missing"), 5); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing: %v", err)
	}
	_, _, err = Open(dir)
	var nr *NotRegularError
	if !errors.Is(err, ErrNotRegular) || !errors.As(err, &nr) || !nr.Mode.IsDir() || !strings.Contains(err.Error(), "a folder") {
		t.Fatalf("folder: %v", err)
	}
}

func TestDescribe(t *testing.T) {
	for mode, want := range map[fs.FileMode]string{
		0: "a regular file", fs.ModeDir: "a folder", fs.ModeNamedPipe: "a named pipe (FIFO)",
		fs.ModeDevice | fs.ModeCharDevice: "a character device", fs.ModeDevice: "a block device",
		fs.ModeSocket: "a socket", fs.ModeSymlink: "a symbolic link", fs.ModeIrregular: "an irregular file",
	} {
		if got := Describe(mode); got != want {
			t.Errorf("Describe(%v) = %q, want %q", mode, got, want)
		}
	}
}
