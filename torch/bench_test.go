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

// BenchmarkGatherTranspose gathers the transposed view of benchZip ("wt",
// 4 MiB of F32) from its storage in memory: "tiled" is the gather WriteTo
// and ReadAt use (whole rows several at a time, a block of columns at a
// time), "rows" the baseline of one row at a time (gatherRows), in the
// same run.
func BenchmarkGatherTranspose(b *testing.B) {
	c, err := openBytes(b, benchZip())
	if err != nil {
		b.Fatal(err)
	}
	t, _ := c.Tensor("wt")
	src := seq(1024 * 1024) // the storage, from the view's first element
	want, err := t.Bytes()
	if err != nil {
		b.Fatal(err)
	}
	for _, g := range []struct {
		name   string
		gather func(dst []byte)
	}{
		{"tiled", func(dst []byte) { t.gather(dst, src, 0, 0) }},
		{"rows", func(dst []byte) { gatherRows(t, dst, src) }},
	} {
		dst := make([]byte, t.ByteLen())
		g.gather(dst)
		if !bytes.Equal(dst, want) {
			b.Fatalf("%s: the gathered bytes differ from Bytes", g.name)
		}
		b.Run(g.name, func(b *testing.B) {
			b.SetBytes(t.ByteLen())
			for range b.N {
				g.gather(dst)
			}
		})
	}
}

// gatherRows gathers a 2-d view one row at a time, each a strided run of
// the storage src (from the view's first element): the gather without
// gatherTile, the baseline of BenchmarkGatherTranspose.
func gatherRows(t *Tensor, dst, src []byte) {
	isz := int64(t.dt.Bits() / 8)
	rowB := t.shape[1] * isz
	for i := range t.shape[0] {
		gatherRun(dst[i*rowB:(i+1)*rowB], src[i*t.stride[0]*isz:], t.stride[1]*isz, isz)
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
