package safeopen

import (
	"errors"
	"io"
	"io/fs"
	"testing"
	"testing/fstest"
)

// opensFS is a file system that counts its opens, and hides fs.StatFS
// unless stat is set.
type opensFS struct {
	fsys  fstest.MapFS
	opens int
}

func (o *opensFS) Open(name string) (fs.File, error) { o.opens++; return o.fsys.Open(name) }

type statOpensFS struct{ *opensFS }

func (s statOpensFS) Stat(name string) (fs.FileInfo, error) { return s.fsys.Stat(name) }

func TestOpenFS(t *testing.T) {
	m := fstest.MapFS{
		"w.bin":  {Data: []byte("weights")},
		"pipe":   {Mode: fs.ModeNamedPipe},
		"dir/in": {Data: []byte("x")},
	}
	for _, stat := range []bool{false, true} {
		o := &opensFS{fsys: m}
		var fsys fs.FS = o
		if stat {
			fsys = statOpensFS{o}
		}
		f, st, err := OpenFS(fsys, "w.bin")
		if err != nil || st.Size() != 7 || !st.Mode().IsRegular() {
			t.Fatalf("stat %v: w.bin: %v, %v", stat, st, err)
		}
		if b, err := io.ReadAll(f); err != nil || string(b) != "weights" {
			t.Errorf("stat %v: read %q, %v", stat, b, err)
		}
		f.Close()
		for _, name := range []string{"pipe", "dir"} {
			o.opens = 0
			f, _, err := OpenFS(fsys, name)
			var nr *NotRegularError
			if f != nil || !errors.As(err, &nr) || nr.Path != name || !errors.Is(err, ErrNotRegular) {
				t.Errorf("stat %v: %s: %v, want a NotRegularError naming it", stat, name, err)
			}
			// With fs.StatFS, what is not a regular file is never opened.
			if stat && o.opens != 0 {
				t.Errorf("stat %v: %s opened %d times", stat, name, o.opens)
			}
		}
		if _, _, err := OpenFS(fsys, "missing"); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("stat %v: missing: %v, want fs.ErrNotExist", stat, err)
		}
	}
}
