package ckpt

import "fmt"

// Arena is reusable owned memory for loads: the buffers of converted,
// dequantized and pread tensors are carved out of it instead of being
// allocated one by one. On Unix it is an anonymous mapping outside the Go
// heap: it is not zeroed by the runtime before being overwritten, the
// garbage collector never scans it, and Free returns it to the system at
// once.
//
// Pass an Arena to Load with IntoArena to reuse it across loads (steady
// state: nothing is allocated after the first load of the same size).
// Weights loaded into a caller's Arena must not be used after the next
// load into it or after Free. An Arena is not safe for concurrent loads.
type Arena struct {
	buf  []byte
	used int64
	anon bool // buf is an anonymous mapping
}

// NewArena returns an empty arena; it grows on first use.
func NewArena() *Arena { return &Arena{} }

// reset makes the arena hold at least size bytes, all free.
func (a *Arena) reset(size int64) error {
	a.used = 0
	if int64(len(a.buf)) >= size {
		return nil
	}
	if err := a.Free(); err != nil {
		return err
	}
	if size == 0 {
		return nil
	}
	if size < 0 || int64(int(size)) != size {
		return fmt.Errorf("arena of %d bytes", size)
	}
	buf, anon, err := allocOwned(size)
	if err != nil {
		return err
	}
	a.buf, a.anon = buf, anon
	return nil
}

// arenaAlign keeps every buffer cache-line aligned (and so aligned for
// every dtype).
const arenaAlign = 64

func alignUp(n int64) int64 { return (n + arenaAlign - 1) &^ (arenaAlign - 1) }

// take returns n bytes of the arena.
func (a *Arena) take(n int64) []byte {
	b := a.buf[a.used : a.used+n : a.used+n]
	a.used += alignUp(n)
	return b
}

// Free releases the arena's memory. The arena can be used again (it grows
// anew).
func (a *Arena) Free() error {
	if a.buf == nil {
		return nil
	}
	var err error
	if a.anon {
		err = freeOwned(a.buf)
	}
	a.buf, a.used, a.anon = nil, 0, false
	return err
}
