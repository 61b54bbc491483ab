package variant_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/variant"
)

// TestComponents: the components model_index.json lists, as
// ResolvePipeline reads it (null pairs and config values left out, folders
// without weights kept), and its errors.
func TestComponents(t *testing.T) {
	tensors := ckpttest.Tensors(t, "a:F32[2]")
	root := ckpttest.NewPipeline(t, ckpttest.Pipeline{
		Components: []ckpttest.Component{
			{Name: "unet", Weights: []ckpttest.Weights{{Prefix: ckpttest.DiffusersPrefix, Tensors: tensors}}},
			{Name: "tokenizer", Library: "transformers", Class: "CLIPTokenizer"},
			{Name: "stray", Unlisted: true, Weights: []ckpttest.Weights{{Tensors: tensors}}},
		},
		Null: []string{"safety_checker"},
	})
	names, err := variant.Components(root)
	if err != nil || !slices.Equal(names, []string{"tokenizer", "unet"}) {
		t.Fatalf("Components = %v, %v", names, err)
	}
	if _, err := variant.Components(t.TempDir()); !errors.Is(err, variant.ErrNoWeights) || !strings.Contains(err.Error(), ": model index missing") {
		t.Errorf("no model_index.json: %v", err)
	}
	if err := os.WriteFile(filepath.Join(root, variant.ModelIndex), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := variant.Components(root); !errors.Is(err, variant.ErrInvalidLayout) || !strings.Contains(err.Error(), ": model index invalid") {
		t.Errorf("invalid model_index.json: %v", err)
	}
}
