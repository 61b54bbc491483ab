package testutil

import (
	"os"
	"path/filepath"
	"testing"
)

// Fixtures returns the folder of shared fixtures called name:
// ../shared/fixtures/name next to the module root (the first folder holding
// go.mod above the working folder). It skips t when the folder lacks
// marker, a file every copy of it holds.
func Fixtures(t testing.TB, name, marker string) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Skip(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Skip("module root not found")
		}
		dir = parent
	}
	d := filepath.Join(dir, "..", "shared", "fixtures", name)
	if _, err := os.Stat(filepath.Join(d, marker)); err != nil {
		t.Skipf("fixtures/%s not available: %v", name, err)
	}
	return d
}
