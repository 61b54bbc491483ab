package ckpttest

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// File writes tensors to model.safetensors in a new t.TempDir() and returns
// the file's path. It calls t.Fatal on error.
func File(t testing.TB, tensors ...Tensor) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), SingleName(TransformersPrefix, ""))
	if err := WriteFile(path, tensors, nil); err != nil {
		t.Fatal(err)
	}
	return path
}

// Dir writes every entry of weights (several variants or layouts side by
// side) into a new t.TempDir() and returns the folder. It calls t.Fatal on
// error.
func Dir(t testing.TB, weights ...Weights) string {
	t.Helper()
	dir := t.TempDir()
	for _, w := range weights {
		if _, err := WriteWeights(dir, w); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// NewPipeline writes p into a new t.TempDir() and returns the root folder.
// It calls t.Fatal on error.
func NewPipeline(t testing.TB, p Pipeline) string {
	t.Helper()
	root := t.TempDir()
	if err := WritePipeline(root, p); err != nil {
		t.Fatal(err)
	}
	return root
}

// Tensors is MustParseTensors for tests: it calls t.Fatal on a malformed spec.
func Tensors(t testing.TB, spec string) []Tensor {
	t.Helper()
	ts, err := ParseTensors(spec)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

// OpenFixture returns a path to a readable copy of the fixture at path, so
// that fixtures kept in testdata/ may be stored zstd-compressed:
//
//   - a file ending in ".zst" is decompressed into a new t.TempDir() (under
//     its name without ".zst");
//   - a path that does not exist, when path+".zst" does, is that compressed
//     file decompressed: tests name the fixture as it will be read, whether
//     or not the repository stores it compressed;
//   - a folder (a sharded set, a pipeline) holding any ".zst" file is copied
//     into a new t.TempDir() with every ".zst" file decompressed and the
//     other regular files copied as they are, keeping the layout; symlinks
//     and other special files are not copied;
//   - any other path is returned unchanged.
//
// It calls t.Fatal on error.
func OpenFixture(t testing.TB, path string) string {
	t.Helper()
	out, err := openFixture(path, t.TempDir)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func openFixture(path string, tempDir func() string) (string, error) {
	if filepath.Ext(path) == ".zst" {
		return Decompress(path, tempDir())
	}
	st, err := os.Stat(path)
	if err != nil {
		if _, zerr := os.Stat(path + ".zst"); errors.Is(err, fs.ErrNotExist) && zerr == nil {
			return Decompress(path+".zst", tempDir())
		}
		return path, nil
	}
	if !st.IsDir() || !hasZst(path) {
		return path, nil
	}
	dst := filepath.Join(tempDir(), filepath.Base(filepath.Clean(path)))
	return dst, copyFixtureDir(path, dst)
}

// hasZst reports whether the folder tree at dir holds a ".zst" file.
func hasZst(dir string) bool {
	found := false
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && filepath.Ext(p) == ".zst" {
			found = true
			return fs.SkipAll
		}
		return nil
	})
	return found
}

// copyFixtureDir copies the tree src to dst, decompressing ".zst" files.
func copyFixtureDir(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return &Error{Op: "copy fixture", Path: p, Err: err}
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return &Error{Op: "copy fixture", Path: p, Err: err}
		}
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			if err := os.MkdirAll(target, 0o755); err != nil {
				return &Error{Op: "copy fixture", Path: target, Err: err}
			}
		case !d.Type().IsRegular():
			// Symlinks and special files are not part of a fixture copy.
		case filepath.Ext(p) == ".zst":
			if _, err := Decompress(p, filepath.Dir(target)); err != nil {
				return err
			}
		default:
			if err := copyFile(p, target); err != nil {
				return &Error{Op: "copy fixture", Path: p, Err: err}
			}
		}
		return nil
	})
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
