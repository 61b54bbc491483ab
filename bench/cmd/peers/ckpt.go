package main

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/shard"
)

// loadAllAsF32 loads every tensor of the checkpoint at path (a safetensors
// file or a shard index) converted to F32 with the loader, on all cores:
// ckpt.Open with an F32 target, then Load, which converts in 4 MiB pieces
// (tensors in parallel and large tensors split; small tensors in batches)
// straight from the mappings into one arena. It returns the outputs in load
// order, as the Rust peer collects its outputs (the names stay with the
// Weights, as the Rust peer's stay with its views). The slices alias the
// loaded weights, which stay alive for the rest of the process.
func loadAllAsF32(path string) ([][]float32, error) {
	m, err := ckpt.Open(path, ckpt.WithDType(ckpt.To(dtype.F32)), ckpt.WithBudget(-1))
	if err != nil {
		return nil, err
	}
	defer m.Close()
	w, err := m.Load(context.Background())
	if err != nil {
		return nil, err
	}
	out := make([][]float32, 0, w.Len())
	for _, t := range w.All() {
		out = append(out, f32s(t.Bytes()))
	}
	return out, nil
}

// f32s views b (F32 bytes, 4-aligned) as float32s.
func f32s(b []byte) []float32 {
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}

func f32Bytes(v []float32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 4*len(v))
}

// copyAll is the baseline of the conversion cases: the same source bytes
// copied from the mapped files into freshly allocated buffers (one per
// tensor, as a load allocates them), on all cores, in work items of at most
// 4 MiB so that one large tensor is split too. It returns the buffers.
func copyAll(path string) ([][]byte, error) {
	c, err := shard.Open(path)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	items, outs, err := copyItems(c)
	if err != nil {
		return nil, err
	}
	runCopy(items)
	return outs, nil
}

// copyItem is one piece of copyAll's work.
type copyItem struct {
	src, dst []byte
}

// copyItems allocates one buffer per tensor of c and cuts the copy into
// pieces of at most 4 MiB.
func copyItems(c *shard.Checkpoint) ([]copyItem, [][]byte, error) {
	names := c.Names()
	var items []copyItem
	outs := make([][]byte, len(names))
	for i, n := range names {
		t, err := c.Tensor(n)
		if err != nil {
			return nil, nil, err
		}
		src, err := t.Bytes()
		if err != nil {
			return nil, nil, err
		}
		outs[i] = make([]byte, len(src))
		for off := 0; off < len(src); off += 4 << 20 {
			end := min(off+4<<20, len(src))
			items = append(items, copyItem{src[off:end], outs[i][off:end]})
		}
	}
	return items, outs, nil
}

// runCopy copies every item, on all cores.
func runCopy(items []copyItem) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(items) {
					return
				}
				copy(items[i].dst, items[i].src)
			}
		}()
	}
	wg.Wait()
}

// openTouch is ckpt's side of the open case: open the checkpoint and look
// every tensor up (which opens every shard), then close it. It returns the
// number of tensors and their bytes.
func openTouch(path string) (int, int64, error) {
	c, err := shard.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	var total int64
	n := 0
	for _, name := range c.Names() {
		t, err := c.Tensor(name)
		if err != nil {
			return 0, 0, err
		}
		total += t.ByteLen()
		n++
	}
	return n, total, nil
}

// shardFiles returns the files of the checkpoint at path: the index's
// shards in its folder, or path itself.
func shardFiles(path string) ([]string, error) {
	if !strings.HasSuffix(path, ".json") {
		return []string{path}, nil
	}
	ix, err := shard.ReadIndex(path)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, s := range ix.Shards() {
		files = append(files, filepath.Join(filepath.Dir(path), s))
	}
	return files, nil
}

// readRaw is the baseline of the open case: read the index (if any) and
// every shard's header bytes (files, from shardFiles, listed before the
// timer), without parsing anything: what any reader must do at least.
func readRaw(path string, files []string) error {
	if strings.HasSuffix(path, ".json") {
		if _, err := os.ReadFile(path); err != nil {
			return err
		}
	}
	for _, p := range files {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		var lenBuf [8]byte
		if _, err := f.ReadAt(lenBuf[:], 0); err != nil {
			f.Close()
			return err
		}
		buf := make([]byte, min(binary.LittleEndian.Uint64(lenBuf[:]), safetensors.MaxHeaderSize))
		_, err = f.ReadAt(buf, 8)
		f.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// checksum is the sampled checksum all implementations print: the wrapping
// sum of the bits of every 1021st element and of the last.
func checksum(v []float32) uint64 {
	var c uint64
	for i := 0; i < len(v); i += 1021 {
		c += uint64(*(*uint32)(unsafe.Pointer(&v[i])))
	}
	if len(v) > 0 {
		c += uint64(*(*uint32)(unsafe.Pointer(&v[len(v)-1])))
	}
	return c
}

// bytesChecksum is checksum over raw BF16 source bytes widened to F32 bits
// (bf16 << 16), for the copy baseline's self-check.
func bytesChecksum(b []byte) uint64 {
	var c uint64
	n := len(b) / 2
	for i := 0; i < n; i += 1021 {
		c += uint64(uint32(b[2*i])|uint32(b[2*i+1])<<8) << 16
	}
	if n > 0 {
		c += uint64(uint32(b[2*n-2])|uint32(b[2*n-1])<<8) << 16
	}
	return c
}
