package main

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/shard"
	"github.com/ckpt-go/ckpt/variant"
)

// checkpointTarget is what a path on the command line names: a single
// safetensors file, an index JSON, or a folder holding one component.
type checkpointTarget struct {
	path string
	kind string // "file", "index" or "folder"
	ckpt *shard.Checkpoint
}

// openTarget opens path as a checkpoint: a .safetensors file, a
// *.safetensors.index*.json, or a folder resolved with the variant rules.
func openTarget(path, variantName string) (*checkpointTarget, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	t := &checkpointTarget{path: path, kind: "file"}
	switch {
	case st.IsDir():
		t.kind = "folder"
		plan, err := variant.ResolveComponent(path, variantName)
		if err != nil {
			return nil, err
		}
		t.ckpt, err = plan.Open()
	case strings.HasSuffix(path, ".json"):
		t.kind = "index"
		t.ckpt, err = shard.Open(path)
	default:
		t.ckpt, err = shard.Open(path)
	}
	if err != nil {
		return nil, err
	}
	return t, nil
}

func (t *checkpointTarget) Close() error {
	if t.ckpt != nil {
		return t.ckpt.Close()
	}
	return nil
}

// relTo returns path relative to base when it is inside it, and the base
// name when path is base itself.
func relTo(base, path string) string {
	if filepath.Clean(base) == filepath.Clean(path) {
		return filepath.Base(path)
	}
	if r, err := filepath.Rel(base, path); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return path
}

// errorInfo is the JSON form of an error: its kind (the typed error's kind
// name), the tensor or file it concerns, and the message.
type errorInfo struct {
	Kind    string `json:"kind"`
	File    string `json:"file,omitempty"`
	Tensor  string `json:"tensor"`
	Message string `json:"message"`
}

func describeError(err error) *errorInfo {
	if err == nil {
		return nil
	}
	info := &errorInfo{Kind: "error", Message: err.Error()}
	var se *safetensors.Error
	var he *shard.Error
	var ve *variant.Error
	switch {
	case errors.As(err, &se):
		// The file format's own error is the most precise: report it
		// rather than the wrappers around it.
		info.Kind, info.File, info.Tensor, info.Message = se.Kind.String(), se.File, se.Tensor, se.Error()
	case errors.As(err, &he):
		info.Kind, info.File, info.Tensor = he.Kind.String(), cmp.Or(he.Shard, he.Path), he.Tensor
	case errors.As(err, &ve):
		info.Kind, info.File, info.Tensor = ve.Kind.String(), cmp.Or(ve.File, ve.Dir), ve.Tensor
	case os.IsNotExist(err):
		info.Kind = "not_found"
	}
	return info
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
