//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package safeopen

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/ckpt-go/ckpt/internal/testutil"
)

// A FIFO without a writer, and character devices, are refused at once; a
// regular file opened through a link reads normally (O_NONBLOCK cleared).
func TestSpecial(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skip(err)
	}
	for path, mode := range map[string]fs.FileMode{fifo: fs.ModeNamedPipe, "/dev/zero": fs.ModeDevice | fs.ModeCharDevice} {
		err := testutil.Within(t, "ReadFile "+path, func() error { _, err := ReadFile(path, 1<<30); return err })
		var nr *NotRegularError
		if !errors.As(err, &nr) || nr.Mode != mode || nr.Path != path {
			t.Errorf("%s: %v", path, err)
		}
	}
	p := filepath.Join(dir, "f")
	os.WriteFile(p, []byte("data"), 0o644)
	os.Symlink(p, filepath.Join(dir, "link"))
	f, st, err := Open(filepath.Join(dir, "link"))
	if err != nil || st.Size() != 4 {
		t.Fatal(st, err)
	}
	defer f.Close()
	var blocking bool
	rc, _ := f.SyscallConn()
	rc.Control(func(fd uintptr) {
		flags, _, _ := syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_GETFL, 0)
		blocking = flags&syscall.O_NONBLOCK == 0
	})
	if !blocking {
		t.Error("O_NONBLOCK left set")
	}
}
