// Package pathutil holds the path containment check that keeps a checkpoint's
// files (shards, indexes, pipeline components) inside the folder that was
// opened.
package pathutil

import (
	"path/filepath"
	"strings"
)

// Within reports whether path is root or inside it. Both must already be
// cleaned and resolved (symbolic links evaluated): Within only compares
// names.
func Within(root, path string) bool {
	rel, err := filepath.Rel(root, path)
	if err != nil {
		return false
	}
	return rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// Resolve evaluates the symbolic links of path, a name inside the folder
// dir, and reports whether what it leads to is still inside dir (whose own
// links are evaluated too, so a folder reached through a link is fine).
// real is the resolved path; err is filepath.EvalSymlinks' error for a
// missing file, a dangling link or a loop.
func Resolve(dir, path string) (real string, inside bool, err error) {
	real, err = filepath.EvalSymlinks(path)
	if err != nil {
		return "", false, err
	}
	realDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", false, err
	}
	absReal, err := filepath.Abs(real)
	if err != nil {
		return "", false, err
	}
	absDir, err := filepath.Abs(realDir)
	if err != nil {
		return "", false, err
	}
	return real, Within(absDir, absReal), nil
}
