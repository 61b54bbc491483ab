package convert

import (
	"context"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/source"
)

// TestRunFromRegisteredSource converts from a location of a registered
// source: a folder is told from a file as ckpt.Open tells them apart (by
// the name in the source's file system), its configs are copied from that
// file system, and a file location converts as a file.
func TestRunFromRegisteredSource(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	src := ckpttest.Dir(t, ckpttest.Weights{Tensors: llama(rng, dtype.F32)})
	if err := os.WriteFile(filepath.Join(src, "config.json"), []byte(`{"model_type": "llama", "torch_dtype": "float32"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	root, folder := filepath.Dir(src), filepath.Base(src)
	source.Register("convertfs", func(_ context.Context, location string) (fs.FS, string, error) {
		name := strings.TrimPrefix(location, "convertfs://")
		if name == "" {
			name = "."
		}
		return os.DirFS(root), name, nil
	})

	dst := filepath.Join(t.TempDir(), "out")
	run(t, "convertfs://"+folder, dst, Options{Policy: ckpt.Policy{Default: target(t, "bf16")}})
	cfg, err := os.ReadFile(filepath.Join(dst, "config.json"))
	if err != nil || !strings.Contains(string(cfg), `"bfloat16"`) {
		t.Errorf("config.json from the source's file system: %s, %v", cfg, err)
	}
	_, infos, _ := readAll(t, filepath.Join(dst, "model.safetensors"))
	if infos["lm_head.weight"].DType != dtype.BF16 {
		t.Errorf("folder source: %v", infos["lm_head.weight"])
	}

	out := filepath.Join(t.TempDir(), "w.safetensors")
	run(t, "convertfs://"+folder+"/model.safetensors", out, Options{Policy: ckpt.Policy{Default: target(t, "f16")}})
	_, infos, _ = readAll(t, out)
	if infos["lm_head.weight"].DType != dtype.F16 {
		t.Errorf("file source: %v", infos["lm_head.weight"])
	}
}
