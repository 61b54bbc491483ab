package ckpt

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// TestMapAhead: the read-ahead fetches, in order, the pieces it is asked
// to, never more than the window past the first piece no worker has
// taken, skips the pieces workers took, and returns when stopped.
func TestMapAhead(t *testing.T) {
	const mib = 1 << 20
	sizes := []int64{4 * mib, 0, 4 * mib, 4 * mib, 4 * mib, 0, 4 * mib, 4 * mib, 4 * mib, 4 * mib}
	var next atomic.Int64
	took, stop := make(chan struct{}, 1), make(chan struct{})
	fetched := make(chan int, len(sizes))
	done := make(chan struct{})
	go func() {
		defer close(done)
		mapAhead(context.Background(), len(sizes), func(j int) int64 { return sizes[j] }, 10*mib, &next, took, stop,
			func(j int) error { fetched <- j; return nil })
	}()
	got := func(want ...int) {
		t.Helper()
		var have []int
		for range want {
			select {
			case j := <-fetched:
				have = append(have, j)
			case <-time.After(10 * time.Second):
				t.Fatalf("fetched %v, then nothing; want %v", have, want)
			}
		}
		select {
		case j := <-fetched:
			t.Fatalf("fetched %v and %d; want only %v", have, j, want)
		case <-time.After(20 * time.Millisecond):
		}
		if !slices.Equal(have, want) {
			t.Fatalf("fetched %v, want %v", have, want)
		}
	}
	// With next at piece 0: pieces 0, 2 and 3 (8 MiB before 3, under the
	// 10 MiB window; 12 MiB before 4 is not).
	got(0, 2, 3)
	// Workers take pieces 0..6: 4 and 6 are theirs; 7, 8 and 9 (8 MiB
	// from 7 before it) are within the window.
	next.Store(7)
	took <- struct{}{}
	got(7, 8, 9)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("mapAhead did not return after its last piece")
	}

	// Stopped while it waits for the workers.
	next.Store(0)
	fetched = make(chan int, len(sizes))
	done = make(chan struct{})
	go func() {
		defer close(done)
		mapAhead(context.Background(), len(sizes), func(j int) int64 { return sizes[j] }, 4*mib, &next, took, stop,
			func(j int) error { fetched <- j; return nil })
	}()
	got(0)
	close(stop)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("mapAhead did not return when stopped")
	}
}
