package cpu

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
)

func randF32(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(r.NormFloat64())
		if s[i] == 0 {
			s[i] = 0.5
		}
	}
	return s
}

// The blocked, parallel product equals the triple loop bit for bit, for
// sizes around every tile edge and any number of workers.
func TestGemmEqualsNaive(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, sz := range [][3]int{{1, 1, 1}, {3, 5, 7}, {4, 4, 4}, {33, 65, 257}, {31, 63, 255}, {64, 128, 513}, {5, 130, 1000}, {1, 300, 64}} {
		m, n, k := sz[0], sz[1], sz[2]
		x, w := randF32(r, m*k), randF32(r, n*k)
		want := make([]float32, m*n)
		naiveGemm(x, w, want, m, n, k)
		for _, workers := range []int{1, 2, 7} {
			got := make([]float32, m*n)
			if err := gemm(context.Background(), x, w, got, m, n, k, workers); err != nil {
				t.Fatal(err)
			}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("%v workers %d: y[%d] = %v, naive %v", sz, workers, i, got[i], want[i])
				}
			}
		}
	}
}

func TestGemmCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	y := make([]float32, 64*64)
	if err := gemm(ctx, make([]float32, 64*64), make([]float32, 64*64), y, 64, 64, 64, 2); err != context.Canceled {
		t.Fatalf("gemm = %v", err)
	}
}

// BenchmarkGemm reports GFLOP/s (2·M·N·K per op) of the blocked product
// with all workers and with one, against the naive triple loop in the
// same run.
func BenchmarkGemm(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, sz := range [][3]int{{1, 4096, 4096}, {64, 1024, 1024}, {256, 1024, 1024}} {
		m, n, k := sz[0], sz[1], sz[2]
		x, w, y := randF32(r, m*k), randF32(r, n*k), make([]float32, m*n)
		flop := 2 * float64(m) * float64(n) * float64(k)
		report := func(b *testing.B) {
			b.ReportMetric(flop*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		}
		name := fmt.Sprintf("%dx%dx%d", m, n, k)
		b.Run(name+"/blocked", func(b *testing.B) {
			for range b.N {
				clear(y)
				if err := gemm(context.Background(), x, w, y, m, n, k, 0x7fff); err != nil {
					b.Fatal(err)
				}
			}
			report(b)
		})
		b.Run(name+"/blocked-1worker", func(b *testing.B) {
			for range b.N {
				clear(y)
				if err := gemm(context.Background(), x, w, y, m, n, k, 1); err != nil {
					b.Fatal(err)
				}
			}
			report(b)
		})
		b.Run(name+"/naive", func(b *testing.B) {
			for range b.N {
				naiveGemm(x, w, y, m, n, k)
			}
			report(b)
		})
	}
}
