package ckpt

import (
	"context"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
)

// BenchmarkLoadDequant loads a DeepSeek block-FP8 weight of 64 MiB (8192 ×
// 8192, 128 × 128 blocks) dequantized to BF16 into a reused arena, mapped
// and with pread, against a copy of its 128 MiB of output in the same run.
// MB/s are of stored bytes.
func BenchmarkLoadDequant(b *testing.B) {
	const rows, cols, block = 8192, 8192, 128
	dir := filepath.Join(os.TempDir(), "ckpt-bench-dequant")
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		os.RemoveAll(dir)
		os.MkdirAll(dir, 0o755)
		codes := make([]byte, rows*cols)
		for i := range codes {
			codes[i] = byte(i*13) & 0x7e
		}
		sc := make([]byte, 4*(rows/block)*(cols/block))
		for i := 0; i < len(sc); i += 4 {
			binary.LittleEndian.PutUint32(sc[i:], math.Float32bits(float32(i%61+1)/64))
		}
		if err := ckpttest.WriteFile(filepath.Join(dir, "model.safetensors"), []ckpttest.Tensor{
			{Name: "w.weight", DType: dtype.F8_E4M3, Shape: []int64{rows, cols}, Data: codes},
			{Name: "w.weight_scale_inv", DType: dtype.F32, Shape: []int64{rows / block, cols / block}, Data: sc},
		}, nil); err != nil {
			b.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"quantization_config":{"quant_method":"fp8","weight_block_size":[128,128]}}`), 0o644)
	}
	for _, s := range []readStrategy{readMmap, readPread} {
		b.Run(s.string()+"/ckpt", func(b *testing.B) {
			m, err := Open(dir, WithDType(To(dtype.BF16)), WithReadStrategy(s.string()), WithBudget(-1))
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			a := NewArena()
			defer a.Free()
			w, err := m.Load(context.Background(), IntoArena(a))
			if err != nil {
				b.Fatal(err)
			}
			w.Close()
			b.SetBytes(rows * cols)
			b.ResetTimer()
			for range b.N {
				w, err := m.Load(context.Background(), IntoArena(a))
				if err != nil {
					b.Fatal(err)
				}
				w.Close()
			}
		})
	}
	b.Run("copy-of-output", func(b *testing.B) {
		src, dst := make([]byte, 2*rows*cols), make([]byte, 2*rows*cols)
		b.SetBytes(rows * cols)
		for range b.N {
			copy(dst, src)
		}
	})
}
