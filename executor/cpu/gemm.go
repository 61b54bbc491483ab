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

// tile computes rows i0..i1 and columns j0..j1 of y.
func tile(x, w, y []float32, i0, i1, j0, j1, n, k int) {
	for k0 := 0; k0 < k; k0 += tileK {
		k1 := min(k0+tileK, k)
		i := i0
		for ; i+4 <= i1; i += 4 {
			j := j0
			for ; j+4 <= j1; j += 4 {
				micro4x4(x, w, y, i, j, k0, k1, n, k)
			}
			for ; j < j1; j++ {
				for ii := i; ii < i+4; ii++ {
					y[ii*n+j] = dot(y[ii*n+j], x[ii*k+k0:ii*k+k1], w[j*k+k0:j*k+k1])
				}
			}
		}
		for ; i < i1; i++ {
			xi := x[i*k+k0 : i*k+k1]
			j := j0
			for ; j+4 <= j1; j += 4 {
				micro1x4(xi, w, y[i*n+j:i*n+j+4], j, k0, k1, k)
			}
			for ; j < j1; j++ {
				y[i*n+j] = dot(y[i*n+j], xi, w[j*k+k0:j*k+k1])
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

// micro4x4 adds four rows of x (i..i+3) times four rows of W (j..j+3) over
// k0..k1 into y, sixteen accumulators held in registers.
func micro4x4(x, w, y []float32, i, j, k0, k1, n, k int) {
	l := k1 - k0
	x0 := x[i*k+k0:][:l]
	x1 := x[(i+1)*k+k0:][:l]
	x2 := x[(i+2)*k+k0:][:l]
	x3 := x[(i+3)*k+k0:][:l]
	w0 := w[j*k+k0:][:l]
	w1 := w[(j+1)*k+k0:][:l]
	w2 := w[(j+2)*k+k0:][:l]
	w3 := w[(j+3)*k+k0:][:l]
	y0 := y[i*n+j:][:4]
	y1 := y[(i+1)*n+j:][:4]
	y2 := y[(i+2)*n+j:][:4]
	y3 := y[(i+3)*n+j:][:4]
	c00, c01, c02, c03 := y0[0], y0[1], y0[2], y0[3]
	c10, c11, c12, c13 := y1[0], y1[1], y1[2], y1[3]
	c20, c21, c22, c23 := y2[0], y2[1], y2[2], y2[3]
	c30, c31, c32, c33 := y3[0], y3[1], y3[2], y3[3]
	for p := range l {
		a0, a1, a2, a3 := x0[p], x1[p], x2[p], x3[p]
		b0, b1, b2, b3 := w0[p], w1[p], w2[p], w3[p]
		c00 += float32(a0 * b0)
		c01 += float32(a0 * b1)
		c02 += float32(a0 * b2)
		c03 += float32(a0 * b3)
		c10 += float32(a1 * b0)
		c11 += float32(a1 * b1)
		c12 += float32(a1 * b2)
		c13 += float32(a1 * b3)
		c20 += float32(a2 * b0)
		c21 += float32(a2 * b1)
		c22 += float32(a2 * b2)
		c23 += float32(a2 * b3)
		c30 += float32(a3 * b0)
		c31 += float32(a3 * b1)
		c32 += float32(a3 * b2)
		c33 += float32(a3 * b3)
	}
	y0[0], y0[1], y0[2], y0[3] = c00, c01, c02, c03
	y1[0], y1[1], y1[2], y1[3] = c10, c11, c12, c13
	y2[0], y2[1], y2[2], y2[3] = c20, c21, c22, c23
	y3[0], y3[1], y3[2], y3[3] = c30, c31, c32, c33
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
