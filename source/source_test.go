package source

import (
	"context"
	"errors"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
)

// Registered schemes open through their Func, which sees the location as
// given; Registered lists them.
func TestRegister(t *testing.T) {
	mem := fstest.MapFS{"m/model.safetensors": {Data: []byte("x")}}
	var gotLoc string
	Register("memtest", func(_ context.Context, location string) (fs.FS, string, error) {
		gotLoc = location
		return mem, strings.TrimPrefix(location, "memtest://"), nil
	})
	fsys, name, err := Open(context.Background(), "memtest://m/model.safetensors")
	if err != nil || name != "m/model.safetensors" || gotLoc != "memtest://m/model.safetensors" {
		t.Fatalf("Open: %v, %q, %q", err, name, gotLoc)
	}
	if b, err := fs.ReadFile(fsys, name); err != nil || string(b) != "x" {
		t.Errorf("ReadFile: %q, %v", b, err)
	}
	if !slices.Contains(Registered(), "memtest") || !slices.IsSorted(Registered()) {
		t.Errorf("Registered %v", Registered())
	}
	// A later registration replaces the earlier one.
	Register("memtest", func(context.Context, string) (fs.FS, string, error) { return mem, "m", nil })
	if _, name, err := Open(context.Background(), "memtest://other"); err != nil || name != "m" {
		t.Errorf("replaced: %q, %v", name, err)
	}
}

// An invalid scheme or a nil Func is a programming error.
func TestRegisterPanics(t *testing.T) {
	ok := func(context.Context, string) (fs.FS, string, error) { return nil, "", nil }
	for _, tc := range []struct {
		scheme string
		open   Func
	}{{"", ok}, {"C", ok}, {"Up", ok}, {"a/b", ok}, {"9p", ok}, {"good", nil}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Register(%q, nil=%t) did not panic", tc.scheme, tc.open == nil)
				}
			}()
			Register(tc.scheme, tc.open)
		}()
	}
}

func TestScheme(t *testing.T) {
	for loc, want := range map[string]string{
		"s3://b/k": "s3", "HTTPS://h/x": "https", "git+ssh://h/r": "git+ssh", "C://x": "", "/a/b": "", "x": "",
		"a b://c": "", "": "", "://x": "", "dir/s3://x": "",
	} {
		if got := Scheme(loc); got != want {
			t.Errorf("Scheme(%q) = %q, want %q", loc, got, want)
		}
	}
}

// Paths pass through; every error is an *fs.PathError naming the
// location, wrapping ErrNoSource or the source's error.
func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	if fsys, name, err := Open(ctx, "dir/model.safetensors"); fsys != nil || name != "dir/model.safetensors" || err != nil {
		t.Errorf("path: %v, %q, %v", fsys, name, err)
	}
	boom := errors.New("no such store")
	Register("errtest", func(_ context.Context, location string) (fs.FS, string, error) {
		switch location {
		case "errtest://fail":
			return nil, "", boom
		case "errtest://missing":
			return nil, "", &fs.PathError{Op: "stat", Path: "missing", Err: fs.ErrNotExist}
		case "errtest://nilfs":
			return nil, ".", nil
		}
		return fstest.MapFS{}, "/abs", nil
	})
	for _, tc := range []struct {
		loc, msg string
		is       error
	}{
		{"s3://bucket/model", "open s3://bucket/model: no source is registered for s3:// locations (import github.com/ckpt-go/ckpt/remote to register it)", ErrNoSource},
		{"nope://x", "open nope://x: no source is registered for nope:// locations", ErrNoSource},
		{"errtest://fail", "open errtest://fail: no such store", boom},
		{"errtest://missing", "open errtest://missing: stat missing: file does not exist", fs.ErrNotExist},
		{"errtest://nilfs", "open errtest://nilfs: the errtest:// source returned no file system", nil},
		{"errtest://badname", `open errtest://badname: the errtest:// source returned an invalid name "/abs"`, nil},
	} {
		fsys, name, err := Open(ctx, tc.loc)
		var pe *fs.PathError
		if fsys != nil || name != "" || !errors.As(err, &pe) || pe.Path != tc.loc || pe.Op != "open" || err.Error() != tc.msg {
			t.Errorf("%s: %v, %q, %v", tc.loc, fsys, name, err)
		}
		if tc.is != nil && !errors.Is(err, tc.is) {
			t.Errorf("%s: %v is not %v", tc.loc, err, tc.is)
		}
	}
}
