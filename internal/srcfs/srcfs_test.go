package srcfs

import (
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"
)

func TestIsFolder(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"model", "odd.safetensors", "odd.json"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "w.safetensors"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "plain"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	mfs := fstest.MapFS{
		"model/w.safetensors":          {},
		"odd.safetensors/x":            {},
		"odd.json/x":                   {},
		"w.safetensors":                {},
		"model.safetensors.index.json": {},
	}
	for _, c := range []struct {
		fs   FS
		name string
		want bool
	}{
		{Of(nil), filepath.Join(dir, "model"), true},
		{Of(nil), dir, true},
		// Named like a file: not a folder, even when it is one (Open
		// then says what is wrong with it).
		{Of(nil), filepath.Join(dir, "odd.safetensors"), false},
		{Of(nil), filepath.Join(dir, "odd.json"), false},
		{Of(nil), filepath.Join(dir, "w.safetensors"), false},
		{Of(nil), filepath.Join(dir, "plain"), false},
		{Of(nil), filepath.Join(dir, "missing"), false},
		{Of(mfs), "model", true},
		{Of(mfs), ".", true},
		{Of(mfs), "odd.safetensors", false},
		{Of(mfs), "odd.json", false},
		{Of(mfs), "w.safetensors", false},
		{Of(mfs), "model.safetensors.index.json", false},
		{Of(mfs), "missing", false},
	} {
		if got := c.fs.IsFolder(c.name); got != c.want {
			t.Errorf("IsFolder(%q) (OS %v) = %v, want %v", c.name, c.fs.IsOS(), got, c.want)
		}
	}
}
