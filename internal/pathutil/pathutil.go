// Package pathutil holds the path containment check that keeps a checkpoint's
// files (shards, pipeline components) inside the folder that was opened.
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
