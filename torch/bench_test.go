package torch

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// benchZip is a 1024x1024 F32 storage viewed as itself ("w") and
// transposed ("wt").
func benchZip() []byte {
	const n = 1024
	pkl := stateDict(ts{name: "w", storage: "FloatStorage", key: "0", numel: n * n, shape: []int64{n, n}, stride: []int64{n, 1}},
		ts{name: "wt", storage: "FloatStorage", key: "0", numel: n * n, shape: []int64{n, n}, stride: []int64{1, n}})
	return torchZip("archive/", pkl, "little", map[string][]byte{"0": seq(n * n)})
}

func BenchmarkTensorWriteTo(b *testing.B) {
	data := benchZip()
	c, err := openBytes(b, data)
	if err != nil {
		b.Fatal(err)
	}
	for _, name := range []string{"w", "wt"} {
		t, _ := c.Tensor(name)
		b.Run(fmt.Sprintf("%s/contiguous=%v", name, t.Contiguous()), func(b *testing.B) {
			b.SetBytes(t.ByteLen())
			for range b.N {
				if _, err := t.WriteTo(io.Discard); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkUnpickle parses the pickle of a 2000-tensor state dict.
func BenchmarkUnpickle(b *testing.B) {
	var tensors []ts
	for i := range 2000 {
		tensors = append(tensors, ts{name: fmt.Sprintf("model.layers.%d.mlp.weight", i), storage: "BFloat16Storage",
			key: fmt.Sprint(i), numel: 4096 * 4096, shape: []int64{4096, 4096}, stride: []int64{4096, 1}})
	}
	pkl := stateDict(tensors...)
	b.SetBytes(int64(len(pkl)))
	for range b.N {
		root, _, err := unpickle(pkl, defaultLimits)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := flatten(root, maxFlatten); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWriteSafetensors converts the 8 MiB of benchZip to a file. The
// baseline, write-fsync, writes the same number of bytes (the storage
// twice) to a plain file and fsyncs it: what any durable write costs.
func BenchmarkWriteSafetensors(b *testing.B) {
	data := benchZip()
	dir := b.TempDir()
	c, err := NewReader(bytes.NewReader(data), int64(len(data)), "bench.pt")
	if err != nil {
		b.Fatal(err)
	}
	const size = 2 * 1024 * 1024 * 4
	storage := seq(1024 * 1024)
	b.Run("write-fsync", func(b *testing.B) {
		b.SetBytes(size)
		for range b.N {
			f, err := os.Create(filepath.Join(dir, "plain"))
			if err != nil {
				b.Fatal(err)
			}
			for range 2 {
				if _, err := f.Write(storage); err != nil {
					b.Fatal(err)
				}
			}
			if err := f.Sync(); err != nil {
				b.Fatal(err)
			}
			if err := f.Close(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("convert", func(b *testing.B) {
		out := filepath.Join(dir, "x.safetensors")
		b.SetBytes(size)
		for range b.N {
			if err := WriteSafetensors(context.Background(), c, out); err != nil {
				b.Fatal(err)
			}
		}
	})
}
