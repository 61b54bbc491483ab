package ckpt

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/safetensors"
)

// BenchmarkTinyTensors measures the loader's per-tensor bookkeeping: a file
// of 100,000 BF16 tensors of 4×4 opened and loaded as F32 (each iteration
// a fresh Open, and steady state: one Model loaded again and again into a
// reused Arena), its Plan, against parsing the same header with
// safetensors.Open in the same run (the least any reader does per tensor).
func BenchmarkTinyTensors(b *testing.B) {
	path := filepath.Join(os.TempDir(), "ckpt-bench-tiny", "model.safetensors")
	if _, err := os.Stat(path); err != nil {
		os.MkdirAll(filepath.Dir(path), 0o755)
		ts := make([]ckpttest.Tensor, 100000)
		for i := range ts {
			ts[i] = ckpttest.Tensor{Name: fmt.Sprintf("layers.%d.w", i), DType: dtype.BF16, Shape: []int64{4, 4}, Data: make([]byte, 32)}
		}
		if err := ckpttest.WriteFile(path, ts, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("open+load", func(b *testing.B) {
		a := NewArena()
		defer a.Free()
		for range b.N {
			m, err := Open(path, WithDType(To(dtype.F32)), WithBudget(-1))
			if err != nil {
				b.Fatal(err)
			}
			w, err := m.Load(context.Background(), IntoArena(a))
			if err != nil {
				b.Fatal(err)
			}
			w.Close()
			m.Close()
		}
	})
	b.Run("load-steady", func(b *testing.B) {
		a := NewArena()
		defer a.Free()
		m, err := Open(path, WithDType(To(dtype.F32)), WithBudget(-1))
		if err != nil {
			b.Fatal(err)
		}
		defer m.Close()
		for range b.N {
			w, err := m.Load(context.Background(), IntoArena(a))
			if err != nil {
				b.Fatal(err)
			}
			w.Close()
		}
	})
	b.Run("plan", func(b *testing.B) {
		m, err := Open(path, WithDType(To(dtype.F32)), WithBudget(-1))
		if err != nil {
			b.Fatal(err)
		}
		defer m.Close()
		for range b.N {
			if _, err := m.Plan(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("safetensors.Open", func(b *testing.B) {
		for range b.N {
			f, err := safetensors.Open(path)
			if err != nil {
				b.Fatal(err)
			}
			f.Close()
		}
	})
	b.Run("open", func(b *testing.B) {
		for range b.N {
			m, err := Open(path, WithDType(To(dtype.F32)), WithBudget(-1))
			if err != nil {
				b.Fatal(err)
			}
			m.Close()
		}
	})
}
