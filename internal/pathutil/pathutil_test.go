package pathutil

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWithin(t *testing.T) {
	root := filepath.FromSlash("/a/b")
	for p, want := range map[string]bool{
		"/a/b":        true,
		"/a/b/c":      true,
		"/a/b/c/../d": true,
		"/a/b/..c":    true, // a name that starts with two dots
		"/a":          false,
		"/a/bc":       false,
		"/a/b/../c":   false,
		"/x/y":        false,
	} {
		if got := Within(root, filepath.Clean(filepath.FromSlash(p))); got != want {
			t.Errorf("Within(%q, %q) = %v, want %v", root, p, got, want)
		}
	}
	if Within("/a", "a") { // relative against absolute: filepath.Rel fails
		t.Error("a relative path is within an absolute root")
	}
}

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	out := t.TempDir()
	for name, target := range map[string]string{
		"in":      "blob",
		"out":     filepath.Join(out, "blob"),
		"up":      filepath.Join("..", filepath.Base(out), "blob"),
		"chained": "in",
	} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Skip("symlinks unsupported:", err)
		}
	}
	os.WriteFile(filepath.Join(dir, "blob"), nil, 0o644)
	os.WriteFile(filepath.Join(out, "blob"), nil, 0o644)
	// The folder itself reached through a link: its files are inside.
	linkedDir := filepath.Join(t.TempDir(), "linked")
	if err := os.Symlink(dir, linkedDir); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dir, name string
		inside    bool
	}{
		{dir, "blob", true}, {dir, "in", true}, {dir, "chained", true},
		{dir, "out", false}, {dir, "up", false},
		{linkedDir, "in", true}, {linkedDir, "out", false},
	} {
		real, inside, err := Resolve(c.dir, filepath.Join(c.dir, c.name))
		if err != nil || inside != c.inside {
			t.Errorf("Resolve(%s, %s) = %q, %v, %v; want inside %v", c.dir, c.name, real, inside, err, c.inside)
		}
	}
	if _, _, err := Resolve(dir, filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing file resolved")
	}
}
