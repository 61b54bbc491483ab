package pathutil

import (
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
