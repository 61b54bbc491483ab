package shard

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"

	"github.com/ckpt-go/ckpt/ckpttest"
)

// dirMapFS copies the regular files of dir into a MapFS under prefix.
func dirMapFS(t *testing.T, dir, prefix string) fstest.MapFS {
	t.Helper()
	m := fstest.MapFS{}
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		m[prefix+"/"+e.Name()] = &fstest.MapFile{Data: b}
	}
	return m
}

// Open with WithFS reads an index, its shards and a single file from the
// fs.FS, with the checks and errors of local paths.
func TestOpenFS(t *testing.T) {
	dir := ckpttest.Dir(t, ckpttest.Weights{Shards: 3, Tensors: sample, Metadata: map[string]string{"format": "pt"}})
	for name, fsys := range map[string]fs.FS{"mapfs": dirMapFS(t, dir, "m"), "dirfs": os.DirFS(filepath.Dir(dir))} {
		prefix := "m"
		if name == "dirfs" {
			prefix = filepath.Base(dir)
		}
		c, err := Open(prefix+"/model.safetensors.index.json", WithFS(fsys))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if c.Len() != len(sample) || len(c.Files()) != 3 || c.Files()[0] != prefix+"/model-00001-of-00003.safetensors" || c.Metadata()["format"] != "pt" {
			t.Errorf("%s: Len %d Files %v", name, c.Len(), c.Files())
		}
		for _, tt := range c.Tensors() {
			wantBytes(t, tt)
		}
		if c.Err() != nil {
			t.Error(c.Err())
		}
		c.Close()
		single, err := Open(prefix+"/model-00002-of-00003.safetensors", WithFS(fsys))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, tt := range single.Tensors() {
			wantBytes(t, tt)
		}
		single.Close()
	}
	m := dirMapFS(t, dir, "m")
	delete(m, "m/model-00002-of-00003.safetensors")
	if _, err := Open("m/model.safetensors.index.json", WithFS(m)); !errors.Is(err, ErrMissingShard) {
		t.Errorf("missing shard: %v", err)
	}
	if _, err := Open("m", WithFS(m)); !unsupportedPath.Matches(err) {
		t.Errorf("folder: %v", err)
	}
	if _, err := Open("m/nope.safetensors", WithFS(m)); !errors.Is(err, ErrMissingShard) {
		t.Errorf("missing file: %v", err)
	}
	if _, err := ReadIndexFS(m, "m/model.safetensors.index.json"); err != nil {
		t.Error(err)
	}
	m["big.json"] = &fstest.MapFile{Data: make([]byte, MaxIndexSize+1)}
	if _, err := ReadIndexFS(m, "big.json"); !indexTooLarge.Matches(err) {
		t.Errorf("large index: %v", err)
	}
}
