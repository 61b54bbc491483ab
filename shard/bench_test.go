package shard

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/safetensors"
)

// benchTensors returns n BF16 tensors of size bytes each, filled (touched)
// before any timer starts.
func benchTensors(n int, size int64) ([]safetensors.TensorData, int64) {
	ts := make([]safetensors.TensorData, n)
	for i := range ts {
		d := make([]byte, size)
		for j := range d {
			d[j] = byte(i + j)
		}
		ts[i] = safetensors.TensorData{Name: fmt.Sprintf("layers.%d.weight", i), DType: dtype.BF16, Shape: []int64{size / 2}, Data: d}
	}
	return ts, int64(n) * size
}

// BenchmarkWrite writes 64 MiB as 4 shards + index with the atomic set
// commit (temporary files, fsync, renames). Baseline: the same bytes written
// to one file with a single fsync.
func BenchmarkWrite(b *testing.B) {
	ts, total := benchTensors(16, 4<<20)
	dir := b.TempDir()
	b.Run("baseline=write+fsync", func(b *testing.B) {
		b.SetBytes(total)
		p := filepath.Join(dir, "baseline.bin")
		for range b.N {
			f, err := os.Create(p)
			if err != nil {
				b.Fatal(err)
			}
			for _, t := range ts {
				if _, err := f.Write(t.Data); err != nil {
					b.Fatal(err)
				}
			}
			if err := f.Sync(); err != nil {
				b.Fatal(err)
			}
			f.Close()
		}
	})
	b.Run("shard.Write", func(b *testing.B) {
		b.SetBytes(total)
		for range b.N {
			if _, err := Write(context.Background(), dir, "model", "", ts, nil, WithMaxShardSize(16<<20)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkReadAll reads every tensor of a 4-shard, 64 MiB checkpoint into
// reused buffers through the Checkpoint (lookup, lazy shard, ReadTo).
// Baseline: a plain copy of the same number of bytes in memory.
func BenchmarkReadAll(b *testing.B) {
	ts, total := benchTensors(16, 4<<20)
	dir := b.TempDir()
	res, err := Write(context.Background(), dir, "model", "", ts, nil, WithMaxShardSize(16<<20))
	if err != nil {
		b.Fatal(err)
	}
	bufs := make([][]byte, len(ts))
	for i := range bufs {
		bufs[i] = make([]byte, len(ts[i].Data))
		copy(bufs[i], ts[i].Data) // touch
	}
	b.Run("baseline=copy", func(b *testing.B) {
		b.SetBytes(total)
		for range b.N {
			for i := range ts {
				copy(bufs[i], ts[i].Data)
			}
		}
	})
	b.Run("Checkpoint.ReadTo", func(b *testing.B) {
		c, err := Open(filepath.Join(dir, res.Index))
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		names := c.Names()
		b.SetBytes(total)
		b.ResetTimer()
		for range b.N {
			for i, n := range names {
				t, err := c.Tensor(n)
				if err != nil {
					b.Fatal(err)
				}
				if err := t.ReadTo(bufs[i]); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}

// BenchmarkOpen validates an 8-shard index of 512 tensors: the index, every
// shard's header and every mapping (no tensor data is read). Baseline:
// reading the same 8 headers with safetensors.ReadHeaderFile alone.
func BenchmarkOpen(b *testing.B) {
	ts := make([]safetensors.TensorData, 512)
	for i := range ts {
		ts[i] = safetensors.TensorData{Name: fmt.Sprintf("model.layers.%d.mlp.weight", i), DType: dtype.F32, Shape: []int64{4}, Data: make([]byte, 16)}
	}
	dir := b.TempDir()
	res, err := Write(context.Background(), dir, "model", "", ts, nil, WithMaxShardSize(1024))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("baseline=ReadHeaderFile", func(b *testing.B) {
		for range b.N {
			for _, f := range res.Files {
				if _, err := safetensors.ReadHeaderFile(filepath.Join(dir, f)); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("Open", func(b *testing.B) {
		for range b.N {
			c, err := Open(filepath.Join(dir, res.Index))
			if err != nil {
				b.Fatal(err)
			}
			c.Close()
		}
	})
}

// BenchmarkOpenTouch opens a 2-shard index of 10,000 tensors and looks up
// every tensor (which opens both shards lazily), then closes it: what a
// loader does before reading data. Baseline in the same run: parsing the
// two shard headers once each with safetensors.ReadHeaderFile, the least
// any reader must do.
func BenchmarkOpenTouch(b *testing.B) {
	ts := make([]safetensors.TensorData, 10_000)
	data := make([]byte, 64)
	for i := range ts {
		ts[i] = safetensors.TensorData{Name: fmt.Sprintf("model.layers.%d.mlp.experts.%d.weight", i/64, i%64), DType: dtype.BF16, Shape: []int64{4, 8}, Data: data}
	}
	dir := b.TempDir()
	res, err := Write(context.Background(), dir, "model", "", ts, nil, WithMaxShardSize(int64(len(ts)*len(data)/2)))
	if err != nil {
		b.Fatal(err)
	}
	if len(res.Files) != 2 {
		b.Fatalf("%d shards, want 2", len(res.Files))
	}
	b.Run("baseline=ReadHeaderFile", func(b *testing.B) {
		for range b.N {
			for _, f := range res.Files {
				if _, err := safetensors.ReadHeaderFile(filepath.Join(dir, f)); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("Open+Tensor", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			c, err := Open(filepath.Join(dir, res.Index))
			if err != nil {
				b.Fatal(err)
			}
			for _, name := range c.Names() {
				if _, err := c.Tensor(name); err != nil {
					b.Fatal(err)
				}
			}
			c.Close()
		}
	})
}

// writeBigIndex writes n tiny tensors (F32 [1], "layers.N.w") into one
// shard of dir and an index listing all of them (keys sorted, indent 2,
// as transformers writes it). It returns the index's and the shard's paths.
func writeBigIndex(tb testing.TB, dir string, n int) (index, file string) {
	tb.Helper()
	ts := make([]safetensors.TensorData, n)
	data := make([]byte, 4)
	for i := range ts {
		ts[i] = safetensors.TensorData{Name: fmt.Sprintf("layers.%d.w", i), DType: dtype.F32, Shape: []int64{1}, Data: data}
	}
	const shard = "model-00001-of-00001.safetensors"
	file = filepath.Join(dir, shard)
	if err := safetensors.Save(context.Background(), file, ts, nil); err != nil {
		tb.Fatal(err)
	}
	names := make([]string, n)
	for i := range ts {
		names[i] = ts[i].Name
	}
	slices.Sort(names)
	var b strings.Builder
	fmt.Fprintf(&b, "{\n  \"metadata\": {\n    \"total_size\": %d\n  },\n  \"weight_map\": {", 4*n)
	for i, name := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "\n    %q: %q", name, shard)
	}
	b.WriteString("\n  }\n}\n")
	index = filepath.Join(dir, "model.safetensors.index.json")
	if err := os.WriteFile(index, []byte(b.String()), 0o644); err != nil {
		tb.Fatal(err)
	}
	return index, file
}

// BenchmarkBigIndex reads and opens an index of 1,000,000 tiny tensors over
// one shard (a 56 MiB index; nothing but names and offsets). Baseline in
// the same run: opening that shard alone with safetensors.Open, a single
// file with a 1,000,000-tensor header, which Open must read too.
func BenchmarkBigIndex(b *testing.B) {
	if testing.Short() {
		b.Skip("writes a 1,000,000-tensor fixture")
	}
	index, file := writeBigIndex(b, b.TempDir(), 1_000_000)
	b.Run("baseline=safetensors.Open", func(b *testing.B) {
		for range b.N {
			f, err := safetensors.Open(file)
			if err != nil {
				b.Fatal(err)
			}
			f.Close()
		}
	})
	b.Run("ReadIndex", func(b *testing.B) {
		for range b.N {
			if _, err := ReadIndex(index); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Open", func(b *testing.B) {
		for range b.N {
			c, err := Open(index)
			if err != nil {
				b.Fatal(err)
			}
			if c.Len() != 1_000_000 {
				b.Fatalf("%d tensors", c.Len())
			}
			c.Close()
		}
	})
}
