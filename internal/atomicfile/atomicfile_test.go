package atomicfile

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/internal/testutil"
)

// replacing writes "old" to f.bin (with the given mode) in a new folder and
// starts replacing it.
func replacing(t *testing.T, mode os.FileMode) (dir, path string, f *File) {
	t.Helper()
	dir = t.TempDir()
	path = filepath.Join(dir, "f.bin")
	if err := os.WriteFile(path, []byte("old"), mode); err != nil {
		t.Fatal(err)
	}
	f, err := Create(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	return dir, path, f
}

// intact checks that path still holds "old" and is alone in dir: no
// temporary file is left.
func intact(t *testing.T, dir, path string) {
	t.Helper()
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Fatal("target changed")
	}
	if got := testutil.Entries(t, dir); len(got) != 1 {
		t.Fatalf("stray files %v", got)
	}
}

func TestCommitReplaces(t *testing.T) {
	dir, path, f := replacing(t, 0o600)
	if base := filepath.Base(f.Name()); !strings.HasPrefix(base, ".f.bin.tmp-") || filepath.Dir(f.Name()) != dir {
		t.Fatalf("temp name %q", f.Name())
	}
	if f.Path() != path || f.f == nil {
		t.Fatal("accessors")
	}
	if _, err := f.Write([]byte("new")); err != nil {
		t.Fatal(err)
	}
	// Until Commit the old content is visible.
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Fatal("target changed before Commit")
	}
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "new" {
		t.Fatalf("content %q", b)
	}
	st, _ := os.Stat(path)
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want the old file's 0600", st.Mode().Perm())
	}
	if got := testutil.Entries(t, dir); len(got) != 1 {
		t.Fatalf("stray files %v", got)
	}
	if err := f.Abort(); err != nil {
		t.Fatal("Abort after Commit:", err)
	}
	if err := f.Commit(); !errors.Is(err, ErrDone) {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("x")); !errors.Is(err, ErrDone) {
		t.Fatal(err)
	}
}

func TestNewFileMode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "n")
	f, err := Create(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(path)
	if st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v", st.Mode().Perm())
	}
}

func TestAbortLeavesNothing(t *testing.T) {
	dir, path, f := replacing(t, 0o644)
	f.Write([]byte("partial"))
	if err := f.Abort(); err != nil {
		t.Fatal(err)
	}
	if err := f.Abort(); err != nil {
		t.Fatal(err)
	}
	intact(t, dir, path)
	if err := f.Commit(); !errors.Is(err, ErrDone) {
		t.Fatal(err)
	}
}

// A failed commit (here: the temporary file was closed under it, as a
// failing disk would) removes the temporary file and keeps the target.
func TestCommitFailure(t *testing.T) {
	dir, path, f := replacing(t, 0o644)
	f.f.Close()
	if _, err := f.Write([]byte("x")); err == nil {
		t.Fatal("write to closed file succeeded")
	}
	if err := f.Commit(); err == nil {
		t.Fatal("commit succeeded")
	}
	intact(t, dir, path)
}

func TestCreateErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Create(context.Background(), filepath.Join(dir, "missing", "f")); err == nil {
		t.Fatal("missing directory accepted")
	}
	if _, err := Create(context.Background(), dir+"/"); err == nil {
		t.Fatal("directory path accepted")
	}
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	if _, err := Create(context.Background(), filepath.Join(dir, "sub")); err == nil {
		t.Fatal("directory target accepted")
	}
	if os.Geteuid() != 0 {
		ro := filepath.Join(dir, "ro")
		os.Mkdir(ro, 0o555)
		if _, err := Create(context.Background(), filepath.Join(ro, "f")); err == nil {
			t.Fatal("read-only directory accepted")
		}
	}
}
