package cpu

import (
	"context"
	"sync"
	"sync/atomic"
)

// Tile sizes of the blocked product: a task is tileM rows of x by tileN
// rows of W; within it the K dimension is walked in chunks of tileK so that
// the rows in use stay in the L1/L2 caches.
const (
	tileM = 32
	tileN = 64
	tileK = 256
)

// gemm computes y[i·n+j] = Σₖ x[i·k+kk]·w[j·k+kk] in float32, adding the
// products in increasing kk, for y holding zeros: the result is the same
// as naiveGemm's bit for bit, whatever the tiling and the number of
// workers. Each product is rounded to float32 before it is added (no fused
// multiply-add), so that the result does not depend on the processor.
// Tasks (tiles of y) are shared by up to workers goroutines; ctx is checked
// between tasks.
func gemm(ctx context.Context, x, w, y []float32, m, n, k, workers int) error {
	tm, tn := (m+tileM-1)/tileM, (n+tileN-1)/tileN
	tasks := tm * tn
	if tasks == 0 || k == 0 {
		return ctx.Err()
	}
	workers = max(1, min(workers, tasks))
	var next atomic.Int64
	var wg sync.WaitGroup
	run := func() {
		defer wg.Done()
		for {
			if ctx.Err() != nil {
				return
			}
			t := int(next.Add(1) - 1)
			if t >= tasks {
				return
			}
			i0, j0 := (t%tm)*tileM, (t/tm)*tileN
			tile(x, w, y, i0, min(i0+tileM, m), j0, min(j0+tileN, n), n, k)
		}
	}
	wg.Add(workers)
	for range workers - 1 {
		go run()
	}
	run()
	wg.Wait()
	return ctx.Err()
}

// tile computes rows i0..i1 and columns j0..j1 of y. For each chunk of
// K, four rows of W (4 KiB) stay in L1 while every row of x in the tile
// passes over them; four accumulators per row of x is what the Go compiler
// keeps in registers best (measured: 1×4 runs about twice as fast as 2×4
// or 4×4 register tiles, which spill).
func tile(x, w, y []float32, i0, i1, j0, j1, n, k int) {
	for k0 := 0; k0 < k; k0 += tileK {
		k1 := min(k0+tileK, k)
		j := j0
		for ; j+4 <= j1; j += 4 {
			for i := i0; i < i1; i++ {
				micro1x4(x[i*k+k0:i*k+k1], w, y[i*n+j:i*n+j+4], j, k0, k1, k)
			}
		}
		for ; j < j1; j++ {
			wj := w[j*k+k0 : j*k+k1]
			for i := i0; i < i1; i++ {
				y[i*n+j] = dot(y[i*n+j], x[i*k+k0:i*k+k1], wj)
			}
		}
	}
}

// dot returns acc + Σ a[i]·b[i], in order, in float32.
func dot(acc float32, a, b []float32) float32 {
	b = b[:len(a)]
	for i, v := range a {
		acc += float32(v * b[i])
	}
	return acc
}

// micro1x4 adds one row of x times four rows of W (j..j+3) over k0..k1.
func micro1x4(xi, w, yi []float32, j, k0, k1, k int) {
	l := k1 - k0
	xi = xi[:l]
	w0 := w[j*k+k0:][:l]
	w1 := w[(j+1)*k+k0:][:l]
	w2 := w[(j+2)*k+k0:][:l]
	w3 := w[(j+3)*k+k0:][:l]
	yi = yi[:4]
	c0, c1, c2, c3 := yi[0], yi[1], yi[2], yi[3]
	for p, a := range xi {
		c0 += float32(a * w0[p])
		c1 += float32(a * w1[p])
		c2 += float32(a * w2[p])
		c3 += float32(a * w3[p])
	}
	yi[0], yi[1], yi[2], yi[3] = c0, c1, c2, c3
}

// naiveGemm is the triple loop gemm is measured against and must equal.
func naiveGemm(x, w, y []float32, m, n, k int) {
	for i := range m {
		for j := range n {
			var acc float32
			for p := range k {
				acc += float32(x[i*k+p] * w[j*k+p])
			}
			y[i*n+j] = acc
		}
	}
}
