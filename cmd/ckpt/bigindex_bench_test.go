package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/safetensors"
)

// BenchmarkBigFolder runs validate and inspect on a folder whose index maps
// 1,000,000 tiny tensors (F32 [1], "layers.N.w") to one shard, and on the
// index itself. Baselines in the same run: the same commands on a single
// file with the same 1,000,000-tensor header (the folder's shard).
func BenchmarkBigFolder(b *testing.B) {
	if testing.Short() {
		b.Skip("writes a 1,000,000-tensor fixture")
	}
	const n = 1_000_000
	dir := b.TempDir()
	ts := make([]safetensors.TensorData, n)
	wm := make(map[string]string, n)
	const shard = "model-00001-of-00001.safetensors"
	data := make([]byte, 4)
	for i := range ts {
		ts[i] = safetensors.TensorData{Name: fmt.Sprintf("layers.%d.w", i), DType: dtype.F32, Shape: []int64{1}, Data: data}
		wm[ts[i].Name] = shard
	}
	file := filepath.Join(dir, shard)
	if err := safetensors.Save(context.Background(), file, ts, nil); err != nil {
		b.Fatal(err)
	}
	index := filepath.Join(dir, "model.safetensors.index.json")
	if err := ckpttest.WriteIndex(index, wm, map[string]any{"total_size": 4 * n}); err != nil {
		b.Fatal(err)
	}
	ts, wm = nil, nil
	for _, tc := range []struct{ name, cmd, path string }{
		{"validate/baseline=file", "validate", file},
		{"validate/dir", "validate", dir},
		{"validate/index", "validate", index},
		{"inspect/baseline=file", "inspect", file},
		{"inspect/dir", "inspect", dir},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for range b.N {
				if code := run(&env{stdout: io.Discard, stderr: os.Stderr}, []string{tc.cmd, tc.path}); code != 0 {
					b.Fatalf("%s %s: exit status %d", tc.cmd, tc.path, code)
				}
			}
		})
	}
}
