package convert

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/testutil"
)

// skippedPaths returns the paths of rep.Skipped, sorted.
func skippedPaths(rep *Report) []string {
	var out []string
	for _, s := range rep.Skipped {
		out = append(out, s.Path)
	}
	slices.Sort(out)
	return out
}

// Skipped lists the weights of other variants and formats, and only
// those: never the files converted; a single-file folder skips nothing.
func TestRunSkippedOnlyOtherWeights(t *testing.T) {
	rng := rand.New(rand.NewPCG(45, 46))
	src := ckpttest.Dir(t,
		ckpttest.Weights{Tensors: llama(rng, dtype.F32), Shards: 3},
		ckpttest.Weights{Variant: "fp16", Tensors: llama(rng, dtype.F16), Shards: 2})
	os.WriteFile(filepath.Join(src, "pytorch_model.bin"), []byte("not read"), 0o644)
	os.WriteFile(filepath.Join(src, "config.json"), []byte(`{}`), 0o644)
	rep := run(t, src, filepath.Join(t.TempDir(), "out"), Options{Policy: ckpt.Policy{Default: target(t, "BF16")}})
	want := []string{"model.fp16-00001-of-00002.safetensors", "model.fp16-00002-of-00002.safetensors", "model.safetensors.index.fp16.json", "pytorch_model.bin"}
	if got := skippedPaths(rep); !slices.Equal(got, want) {
		t.Errorf("skipped %v, want %v", got, want)
	}
	if s := rep.String(); !strings.Contains(s, "left out 4 files not converted or copied: ") {
		t.Errorf("report %q", s)
	}
	// The fp16 variant: the untagged files are left out instead.
	rep = run(t, src, filepath.Join(t.TempDir(), "out16"), Options{SourceVariant: "fp16"})
	want = []string{"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors", "model.safetensors.index.json", "pytorch_model.bin"}
	if got := skippedPaths(rep); !slices.Equal(got, want) {
		t.Errorf("fp16: skipped %v, want %v", got, want)
	}
	if got := rep.Components[0].Files; !slices.Equal(got, []string{"model.fp16-00001-of-00002.safetensors", "model.fp16-00002-of-00002.safetensors"}) {
		t.Errorf("fp16: wrote %v", got)
	}

	// A single file, in a folder or alone: one file, nothing skipped.
	single := ckpttest.Dir(t, ckpttest.Weights{Tensors: llama(rng, dtype.F32)})
	dst := filepath.Join(t.TempDir(), "single")
	rep = run(t, single, dst, Options{Policy: ckpt.Policy{Default: target(t, "BF16")}})
	if len(rep.Skipped) != 0 || !slices.Equal(testutil.Entries(t, dst), []string{"model.safetensors"}) || strings.Contains(rep.String(), "left out") {
		t.Errorf("single-file folder: skipped %v, output %v", rep.Skipped, testutil.Entries(t, dst))
	}
	dst = t.TempDir() + string(filepath.Separator)
	rep = run(t, filepath.Join(single, "model.safetensors"), dst, Options{Policy: ckpt.Policy{Default: target(t, "F32")}})
	if len(rep.Skipped) != 0 || !slices.Equal(testutil.Entries(t, dst), []string{"model.safetensors"}) {
		t.Errorf("single file: skipped %v, output %v", rep.Skipped, testutil.Entries(t, dst))
	}
}
