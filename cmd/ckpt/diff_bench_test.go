package main

import (
	"bytes"
	"encoding/binary"
	"io"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
)

// BenchmarkDiff compares two 64 MiB checkpoints (an F32 tensor against
// the same values in F32, then in BF16) that differ in one element; bytes/s
// counts A's bytes. The baseline, cmp, reads both files with pread in
// 1 MiB pieces and compares the bytes, as cmp(1) does.
func BenchmarkDiff(b *testing.B) {
	const n = 16 << 20
	dir := b.TempDir()
	data := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(float32(i%4096)))
	}
	a := filepath.Join(dir, "a.safetensors")
	if err := ckpttest.WriteFile(a, []ckpttest.Tensor{{Name: "w", DType: dtype.F32, Shape: []int64{n}, Data: data}}, nil); err != nil {
		b.Fatal(err)
	}
	bf := make([]byte, 2*n)
	if _, err := dtype.Convert(bf, dtype.BF16, data, dtype.F32, dtype.Options{}); err != nil {
		b.Fatal(err)
	}
	binary.LittleEndian.PutUint32(data[4*(n-1):], math.Float32bits(-1))
	same := filepath.Join(dir, "b.safetensors")
	if err := ckpttest.WriteFile(same, []ckpttest.Tensor{{Name: "w", DType: dtype.F32, Shape: []int64{n}, Data: data}}, nil); err != nil {
		b.Fatal(err)
	}
	other := filepath.Join(dir, "c.safetensors")
	if err := ckpttest.WriteFile(other, []ckpttest.Tensor{{Name: "w", DType: dtype.BF16, Shape: []int64{n}, Data: bf}}, nil); err != nil {
		b.Fatal(err)
	}
	b.Run("cmp", func(b *testing.B) {
		b.SetBytes(4 * n)
		x, y := make([]byte, 1<<20), make([]byte, 1<<20)
		for range b.N {
			fa, err := os.Open(a)
			if err != nil {
				b.Fatal(err)
			}
			fb, err := os.Open(same)
			if err != nil {
				b.Fatal(err)
			}
			differ := false
			for off := int64(0); ; off += 1 << 20 {
				na, _ := fa.ReadAt(x, off)
				nb, _ := fb.ReadAt(y, off)
				if !bytes.Equal(x[:na], y[:nb]) {
					differ = true
				}
				if na < len(x) {
					break
				}
			}
			fa.Close()
			fb.Close()
			if !differ {
				b.Fatal("no difference found")
			}
		}
	})
	for _, c := range []struct{ name, b string }{{"F32-F32", same}, {"F32-BF16", other}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(4 * n)
			for range b.N {
				if code := run(&env{stdout: io.Discard, stderr: io.Discard}, []string{"diff", a, c.b}); code != 1 {
					b.Fatalf("exit %d", code)
				}
			}
		})
	}
}
