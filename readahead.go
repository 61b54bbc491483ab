package ckpt

import (
	"context"
	"sync/atomic"

	"github.com/ckpt-go/ckpt/internal/pagecache"
)

// Read-ahead for the verification of zero-copy views.
//
// A verified load of views reads their bytes only to sum them (checkPiece):
// each worker maps a piece's pages in one call and sums them. From the
// disk, each piece's read then waits for the disk and the sum waits for the
// read, and the disk idles while the workers sum. A read-ahead goroutine
// maps the view pieces' pages in load order, up to readAheadBytes past
// the first piece no worker has taken, so that the disk reads while the
// workers sum and each worker finds its pages mapped (a verified load of
// 1 GiB from the disk that then touches every byte: 1.19× an unverified
// one without it, 1.11× with it, medians of 8, BenchmarkVerifiedLoad
// view-touch-cold). In the page cache it costs nothing measurable: the
// mapping is work the workers would do anyway.

// readAheadBytes is how far ahead of the workers the read-ahead maps the
// pages of the views a load verifies.
const readAheadBytes = 32 << 20

// viewCheck reports whether p reads a zero-copy view's bytes only to
// verify them: the pieces the read-ahead maps.
func viewCheck(p *piece) bool { return p.sj.kind == partCheck && p.sj.mapped && !p.sj.rest }

// readsViews reports whether work has pieces the read-ahead maps.
func readsViews(work []piece) bool {
	for i := range work {
		if viewCheck(&work[i]) {
			return true
		}
	}
	return false
}

// readAhead maps the pages of the view pieces of work ahead of the
// workers (next is the first piece no worker has taken; took says it
// moved), until stop is closed or ctx ends.
func readAhead(ctx context.Context, work []piece, next *atomic.Int64, took, stop <-chan struct{}) {
	size := func(j int) int64 {
		if p := &work[j]; viewCheck(p) {
			return p.n
		}
		return 0
	}
	mapAhead(ctx, len(work), size, readAheadBytes, next, took, stop, func(j int) error {
		p := &work[j]
		view, err := p.sj.st.Bytes()
		if err == nil {
			pagecache.Populate(view[p.first:p.first+p.n], false) // a truncated file fails its worker's read, not this
		}
		return err
	})
}

// mapAhead calls fetch(j), in order, for each of the n pieces whose
// size(j) is not zero and that no worker has taken yet (j ≥ next), as
// soon as the bytes of such pieces from next up to j are under window;
// it waits for took otherwise. It returns when the pieces are done, fetch
// fails, stop is closed or ctx ends.
func mapAhead(ctx context.Context, n int, size func(int) int64, window int64, next *atomic.Int64, took, stop <-chan struct{}, fetch func(int) error) {
	at := make([]int64, n+1) // at[k]: the bytes of the pieces before k
	for k := range n {
		at[k+1] = at[k] + size(k)
	}
	for j := range n {
		if size(j) == 0 {
			continue
		}
		for {
			taken := min(next.Load(), int64(n))
			if int64(j) < taken {
				break // a worker has it already
			}
			if at[j]-at[taken] < window {
				if fetch(j) != nil {
					return
				}
				break
			}
			select {
			case <-took:
			case <-stop:
				return
			case <-ctx.Done():
				return
			}
		}
	}
}
