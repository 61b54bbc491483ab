package sink_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/sink"
)

func TestOpen(t *testing.T) {
	ctx := context.Background()
	_, err := sink.Open(ctx, "nosuch://b/p")
	var pe *fs.PathError
	if !errors.As(err, &pe) || pe.Path != "nosuch://b/p" || !errors.Is(err, sink.ErrNoSink) {
		t.Fatalf("unregistered scheme: %v", err)
	}
	if _, err := sink.Open(ctx, "s3://b/p"); err == nil || !strings.Contains(err.Error(), "import github.com/ckpt-go/ckpt/remote") {
		t.Errorf("s3 without remote: %v", err)
	}
	if _, err := sink.Open(ctx, ""); !errors.Is(err, fs.ErrInvalid) {
		t.Errorf("empty location: %v", err)
	}
	want := errors.New("refused")
	sink.Register("sinktest", func(context.Context, string) (sink.Sink, error) { return nil, want })
	if _, err := sink.Open(ctx, "sinktest://x"); !errors.Is(err, want) {
		t.Errorf("registered function's error: %v", err)
	}
	dir := t.TempDir()
	s, err := sink.Open(ctx, dir)
	if d, ok := s.(*sink.Dir); err != nil || !ok || d.Root() != dir {
		t.Errorf("a path: %T %v", s, err)
	}
	defer func() {
		if recover() == nil {
			t.Error("Register of an invalid scheme did not panic")
		}
	}()
	sink.Register("C", func(context.Context, string) (sink.Sink, error) { return nil, nil })
}

func TestDir(t *testing.T) {
	ctx := context.Background()
	root := filepath.Join(t.TempDir(), "out")
	s := sink.NewDir(root)
	if es, err := fs.ReadDir(s.FS(), "."); err != nil || len(es) != 0 {
		t.Fatalf("missing folder: %v %v", es, err)
	}
	write := func(name string, exclusive bool, body string) error {
		f, err := s.Create(ctx, name, exclusive)
		if err != nil {
			return err
		}
		f.Write([]byte(body))
		return f.Close()
	}
	if err := write("a/b.txt", true, "one"); err != nil {
		t.Fatal(err)
	}
	if err := write("a/b.txt", true, "two"); !errors.Is(err, fs.ErrExist) {
		t.Errorf("exclusive create of a taken name: %v", err)
	}
	if err := write("a/b.txt", false, "three"); err != nil {
		t.Fatal(err)
	}
	if b, _ := fs.ReadFile(s.FS(), "a/b.txt"); string(b) != "three" {
		t.Errorf("read %q", b)
	}
	f, _ := s.Create(ctx, "c.txt", false)
	f.Write([]byte("x"))
	f.Abort()
	if es, _ := os.ReadDir(root); len(es) != 1 {
		t.Errorf("after Abort: %v", es)
	}
	if err := s.Remove(ctx, "a/b.txt"); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(ctx, "a/b.txt"); err != nil {
		t.Errorf("removing a missing file: %v", err)
	}
	if _, err := s.Create(ctx, "../x", false); !errors.Is(err, fs.ErrInvalid) {
		t.Errorf("invalid name: %v", err)
	}
	if got := sink.NewDir(root).Location("a/b"); got != filepath.Join(root, "a", "b") {
		t.Errorf("Location = %q", got)
	}
}

func TestDirPatchable(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	s := sink.NewDir(root)
	f, err := s.Create(ctx, "a/x.bin", false)
	if err != nil {
		t.Fatal(err)
	}
	p, ok := f.(sink.Patchable)
	if !ok {
		t.Fatalf("%T is not sink.Patchable", f)
	}
	if err := p.Reserve(4); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Write([]byte("0000-body")); err != nil {
		t.Fatal(err)
	}
	if _, err := p.WriteAt([]byte("head"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "a", "x.bin")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("visible before Close: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "a", "x.bin")); err != nil || string(b) != "head-body" {
		t.Errorf("file %q, %v", b, err)
	}
	if _, err := p.WriteAt([]byte("x"), 0); err == nil {
		t.Error("WriteAt after Close")
	}
}

// A Batched Dir's changes are visible when they return and made durable
// by Sync, which reports a folder it cannot sync as sink.ErrNotDurable; a Dir
// that is not batched has nothing to sync.
func TestDirBatched(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	if err := sink.NewDir(root).Sync(ctx); err != nil {
		t.Fatalf("Sync of a Dir that is not batched: %v", err)
	}
	d := sink.NewDir(filepath.Join(root, "m")).Batched()
	f, err := d.Create(ctx, "sub/a.bin", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("abc")); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Link(ctx, "sub/a.bin", "sub/b.bin"); err != nil {
		t.Fatal(err)
	}
	if err := d.Remove(ctx, "sub/a.bin"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "m", "sub", "b.bin")); err != nil || string(b) != "abc" {
		t.Fatalf("after the changes: %q, %v", b, err)
	}
	if err := d.Sync(ctx); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	if err := d.Sync(ctx); err != nil {
		t.Fatalf("a second Sync, nothing changed: %v", err)
	}
	f, err = d.Create(ctx, "sub/c.bin", false)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(root, "m")); err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(ctx); !errors.Is(err, sink.ErrNotDurable) {
		t.Fatalf("Sync of a folder gone: %v, want sink.ErrNotDurable", err)
	}
}
