package ckpt

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/shard"
)

// benchCheckpoint writes a multi-shard BF16 checkpoint of about mib MiB
// (CKPT_BENCH_LOAD_MIB overrides) made of tensors of the given size, once
// per process.
func benchCheckpoint(b *testing.B, mib, tensorKiB int) (index string, bytes int64) {
	b.Helper()
	if s := os.Getenv("CKPT_BENCH_LOAD_MIB"); s != "" {
		mib, _ = strconv.Atoi(s)
	}
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("ckpt-bench-load-%d-%d", mib, tensorKiB))
	index = filepath.Join(dir, "model.safetensors.index.json")
	elems := int64(tensorKiB) << 10 / 2
	n := int64(mib) << 20 / (elems * 2)
	if _, err := os.Stat(index); err != nil {
		os.RemoveAll(dir)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		var ts []ckpttest.Tensor
		for i := range n {
			data := make([]byte, elems*2)
			for j := range data {
				data[j] = byte(j*7 + int(i))
			}
			for j := 1; j < len(data); j += 2 {
				data[j] &= 0x7e // finite BF16
			}
			ts = append(ts, ckpttest.Tensor{Name: fmt.Sprintf("layers.%d.weight", i), DType: dtype.BF16, Shape: []int64{elems}, Data: data})
		}
		if _, err := ckpttest.WriteWeights(dir, ckpttest.Weights{Shards: 4, Tensors: ts}); err != nil {
			b.Fatal(err)
		}
	}
	return index, n * elems * 2
}

// BenchmarkLoad loads a 4-shard BF16 checkpoint as F32 with all cores into
// a reused arena (steady state), against a parallel copy of the same
// source bytes from the same mappings into a reused buffer in the same
// run. MB/s are of source bytes.
func BenchmarkLoad(b *testing.B) {
	for _, c := range []struct {
		name      string
		mib, kib  int
		toDType   dtype.DType
		converted bool
	}{
		{"bf16-f32/256MiB-4MiB-tensors", 256, 4096, dtype.F32, true},
		{"bf16-f32/256MiB-256KiB-tensors", 256, 256, dtype.F32, true},
		{"bf16-stored/256MiB-4MiB-tensors", 256, 4096, dtype.BF16, false},
	} {
		index, n := benchCheckpoint(b, c.mib, c.kib)
		b.Run(c.name+"/ckpt", func(b *testing.B) {
			m, err := Open(index, WithDType(To(c.toDType)), WithBudget(-1))
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			a := NewArena()
			defer a.Free()
			w, err := m.Load(context.Background(), IntoArena(a)) // warm: mappings faulted in, arena grown
			if err != nil {
				b.Fatal(err)
			}
			w.Close()
			b.SetBytes(n)
			b.ResetTimer()
			for range b.N {
				w, err := m.Load(context.Background(), IntoArena(a))
				if err != nil {
					b.Fatal(err)
				}
				w.Close()
			}
		})
		if !c.converted {
			continue
		}
		b.Run(c.name+"/parallel-copy", func(b *testing.B) {
			ck, err := shard.Open(index)
			if err != nil {
				b.Fatal(err)
			}
			defer ck.Close()
			var srcs [][]byte
			for _, t := range ck.Tensors() {
				v, err := t.Bytes()
				if err != nil {
					b.Fatal(err)
				}
				srcs = append(srcs, v)
			}
			dsts := make([][]byte, len(srcs))
			for i, s := range srcs {
				dsts[i] = make([]byte, len(s))
			}
			copyAll := func() {
				var wg sync.WaitGroup
				var next sync.Mutex
				i := 0
				for range runtime.GOMAXPROCS(0) {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for {
							next.Lock()
							k := i
							i++
							next.Unlock()
							if k >= len(srcs) {
								return
							}
							copy(dsts[k], srcs[k])
						}
					}()
				}
				wg.Wait()
			}
			copyAll()
			b.SetBytes(n)
			b.ResetTimer()
			for range b.N {
				copyAll()
			}
		})
	}
}
