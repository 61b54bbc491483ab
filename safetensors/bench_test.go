package safetensors

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/ckpt-go/ckpt/dtype"
)

// manyTensors returns n small U8 tensors with realistic names.
func manyTensors(n int) []TensorData {
	out := make([]TensorData, n)
	data := []byte{1, 2, 3, 4}
	for i := range out {
		out[i] = TensorData{Name: fmt.Sprintf("model.layers.%d.self_attn.q_proj.weight", i), DType: dtype.U8, Shape: []int64{2, 2}, Data: data}
	}
	return out
}

func writeBenchFile(b *testing.B, tensors []TensorData) string {
	b.Helper()
	path := filepath.Join(b.TempDir(), "b.safetensors")
	if err := Save(context.Background(), path, tensors, map[string]string{"format": "pt"}); err != nil {
		b.Fatal(err)
	}
	return path
}

// benchOpenClose times Open and Close of path.
func benchOpenClose(b *testing.B, path string) {
	b.Helper()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		f, err := Open(path)
		if err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
}

// BenchmarkOpen: Open + Close as a function of the tensor count. The cost is
// the header parse; ns/op is the number to read, against a baseline that only
// opens the file, reads its header bytes and closes it.
func BenchmarkOpen(b *testing.B) {
	for _, n := range []int{1, 1000, 100000} {
		path := writeBenchFile(b, manyTensors(n))
		b.Run(fmt.Sprintf("tensors=%d", n), func(b *testing.B) {
			benchOpenClose(b, path)
		})
		b.Run(fmt.Sprintf("tensors=%d/baseline-read-header", n), func(b *testing.B) {
			h, err := ReadHeaderFile(path)
			if err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, h.DataOffset)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				fh, err := os.Open(path)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := fh.ReadAt(buf, 0); err != nil {
					b.Fatal(err)
				}
				fh.Close()
			}
		})
	}
}

// BenchmarkOpenFileSize: the same one-tensor header on a 4 MiB and a 4 GiB
// (sparse) file. Opening must not touch the data, so both cost the same.
func BenchmarkOpenFileSize(b *testing.B) {
	for _, size := range []int64{4 << 20, 4 << 30} {
		b.Run(fmt.Sprintf("size=%dMiB", size>>20), func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "s.safetensors")
			fh, err := os.Create(path)
			if err != nil {
				b.Fatal(err)
			}
			w, err := NewWriter(fh, []TensorSpec{{Name: "w", DType: dtype.BF16, Shape: []int64{size / 2}}}, nil)
			if err != nil {
				b.Fatal(err)
			}
			if err := fh.Truncate(w.Size()); err != nil {
				b.Fatal(err)
			}
			fh.Close()
			benchOpenClose(b, path)
		})
	}
}

// BenchmarkParseHeader: header parse throughput (MB/s of JSON), against a
// plain copy of the same bytes and encoding/json into generic maps.
func BenchmarkParseHeader(b *testing.B) {
	for _, n := range []int{1000, 100000} {
		raw, err := Serialize(manyTensors(n), map[string]string{"format": "pt"})
		if err != nil {
			b.Fatal(err)
		}
		f, _ := OpenBytes(raw)
		hdr := raw[8:f.Header().DataOffset]
		dataLen := f.Header().DataLen
		b.Run(fmt.Sprintf("tensors=%d/ckpt", n), func(b *testing.B) {
			b.SetBytes(int64(len(hdr)))
			for i := 0; i < b.N; i++ {
				if _, err := ParseHeader(hdr, dataLen); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("tensors=%d/baseline-copy", n), func(b *testing.B) {
			dst := make([]byte, len(hdr))
			b.SetBytes(int64(len(hdr)))
			for i := 0; i < b.N; i++ {
				copy(dst, hdr)
			}
		})
		b.Run(fmt.Sprintf("tensors=%d/encoding-json", n), func(b *testing.B) {
			b.SetBytes(int64(len(hdr)))
			for i := 0; i < b.N; i++ {
				var m map[string]any
				if err := json.Unmarshal(hdr, &m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkBytes: the cost of a zero-copy view, against slicing a []byte.
func BenchmarkBytes(b *testing.B) {
	path := writeBenchFile(b, []TensorData{{Name: "w", DType: dtype.F32, Shape: []int64{1 << 20}, Data: make([]byte, 4<<20)}})
	f, err := Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	t, _ := f.Tensor("w")
	b.Run("Tensor.Bytes", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := t.Bytes(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("File.Tensor+Bytes", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			t, _ := f.Tensor("w")
			if _, err := t.Bytes(); err != nil {
				b.Fatal(err)
			}
		}
	})
	buf := make([]byte, 8<<20)
	var sink []byte
	b.Run("baseline-reslice", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			sink = buf[i&1023 : 4<<20]
		}
	})
	_ = sink
}

// BenchmarkRead: reading a 64 MiB tensor raw (ReadTo) and converted
// BF16->F32 (ConvertTo) through pread into a reused buffer, through a fresh
// mapping (first touch faults every page), and through a warm mapping;
// baselines: copy and dtype.Convert of the same bytes already in memory.
// SetBytes counts source bytes.
func BenchmarkRead(b *testing.B) {
	const n = 32 << 20 // BF16 elements: 64 MiB
	src := make([]byte, 2*n)
	for i := range src {
		src[i] = byte(i*31) & 0x3f // finite values
	}
	path := writeBenchFile(b, []TensorData{{Name: "w", DType: dtype.BF16, Shape: []int64{n}, Data: src}})
	raw := make([]byte, 2*n)
	f32 := make([]byte, 4*n)
	copy(raw, src) // touch the destinations before any timer
	for i := range f32 {
		f32[i] = 1
	}
	open := func(b *testing.B, opts ...OpenOption) (*File, *Tensor) {
		f, err := Open(path, opts...)
		if err != nil {
			b.Fatal(err)
		}
		t, _ := f.Tensor("w")
		return f, t
	}
	// steady times read on one open file; one untimed read first warms the
	// scratch pool (pread) or faults the mapping in (mmap).
	steady := func(b *testing.B, mode ReadMode, read func(*Tensor) error) {
		f, t := open(b, WithReadMode(mode))
		defer f.Close()
		read(t)
		b.SetBytes(2 * n)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := read(t); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, c := range []struct {
		name, baseline string
		base           func(*testing.B)
		read           func(*Tensor) error
	}{
		{"raw", "baseline-copy", func(*testing.B) { copy(raw, src) }, func(t *Tensor) error { return t.ReadTo(raw) }},
		{"bf16-f32", "baseline-convert-in-memory", func(b *testing.B) {
			if _, err := dtype.Convert(f32, dtype.F32, src, dtype.BF16, dtype.Options{}); err != nil {
				b.Fatal(err)
			}
		}, func(t *Tensor) error { _, err := t.ConvertTo(dtype.F32, f32, dtype.Options{}); return err }},
	} {
		b.Run(c.name+"/"+c.baseline, func(b *testing.B) {
			b.SetBytes(2 * n)
			for i := 0; i < b.N; i++ {
				c.base(b)
			}
		})
		b.Run(c.name+"/pread", func(b *testing.B) { steady(b, ReadPread, c.read) })
		b.Run(c.name+"/mmap-fresh", func(b *testing.B) {
			b.SetBytes(2 * n)
			for i := 0; i < b.N; i++ {
				f, t := open(b, WithReadMode(ReadMapped))
				if err := c.read(t); err != nil {
					b.Fatal(err)
				}
				f.Close()
			}
		})
		b.Run(c.name+"/mmap-warm", func(b *testing.B) { steady(b, ReadMapped, c.read) })
	}
}

// BenchmarkSave: writing a 64 MiB file atomically (fsync included) against
// a plain os.WriteFile of the same bytes without fsync.
func BenchmarkSave(b *testing.B) {
	data := make([]byte, 64<<20)
	for i := range data {
		data[i] = byte(i)
	}
	in := []TensorData{{Name: "w", DType: dtype.F32, Shape: []int64{16 << 20}, Data: data}}
	dir := b.TempDir()
	b.Run("Save", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for i := 0; i < b.N; i++ {
			if err := Save(context.Background(), filepath.Join(dir, "s.safetensors"), in, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("baseline-WriteFile", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for i := 0; i < b.N; i++ {
			if err := os.WriteFile(filepath.Join(dir, "w.bin"), data, 0o644); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Serialize", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for i := 0; i < b.N; i++ {
			if _, err := Serialize(in, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkFloat32s: the per-tensor API a user writes first, Tensor.Float32s
// for every tensor of one mapped file in a loop (1,000 BF16 tensors of
// 256 KiB, issue 19 item 6), against ConvertTo into one reused buffer (the
// same conversions without allocating) in the same run.
func BenchmarkFloat32s(b *testing.B) {
	const tensors, elems = 1000, 128 << 10 // 256 KiB of BF16 each
	src := make([]byte, 2*elems)
	for i := range src {
		src[i] = byte(i*31) & 0x3f // finite values
	}
	td := make([]TensorData, tensors)
	for i := range td {
		td[i] = TensorData{Name: fmt.Sprintf("model.layers.%d.weight", i), DType: dtype.BF16, Shape: []int64{elems / 1024, 1024}, Data: src}
	}
	path := writeBenchFile(b, td)
	f, err := Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	b.Run("Float32s", func(b *testing.B) {
		b.SetBytes(tensors * 2 * elems)
		for range b.N {
			for _, t := range f.Tensors() {
				if _, err := t.Float32s(); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("ConvertTo-one-buffer", func(b *testing.B) {
		buf := make([]byte, 4*elems)
		b.SetBytes(tensors * 2 * elems)
		for range b.N {
			for _, t := range f.Tensors() {
				if _, err := t.ConvertTo(dtype.F32, buf, dtype.Options{}); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
