//go:build linux

package dtype

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
)

// BenchmarkLoaderPattern reproduces the steady state of the root package's
// loader converting many small tensors: lpTensors BF16 tensors of 256 KiB
// (512 KiB of F32 output each) converted one call per tensor, one after
// another, into one large reused destination (the arena), in GB/s of INPUT
// bytes. Every variant has its baseline in the same run: "copy" copies the
// same input bytes, piece by piece, into the same destination offsets.
//
//	go test ./dtype -run '^$' -bench LoaderPattern -benchtime 4x -count 8
//
// Names: src/workers/op (each op right after its copy baseline, so that
// both see the same load on a shared machine).
//
//   - src "cold": the sources lie in one 256 MiB heap buffer last touched a
//     whole pass (768 MiB of traffic) earlier, so they come from memory;
//     "hot": every piece reads the same 256 KiB, which stays in the caches
//     (a source just written, such as a staging buffer); "mmap": a file in
//     the page cache, mapped and read straight from the mapping, its pages
//     mapped since the previous pass; "mmap-evict": the same, with
//     MADV_DONTNEED on each tensor's source pages after its conversion,
//     as the loader's evict does, so every pass faults them in again;
//     "mmap-evict4M": one MADV_DONTNEED per 16 tensors (4 MiB of source).
//   - op "copy": the baseline; "t512K": one Convert per tensor (512 KiB of
//     output, below ntMin); "c4M": one Convert per 4 MiB of output (8
//     tensors, the loader's chunkBytes); "t512K-stream": one Convert per
//     tensor with Options.Streaming set.
//   - workers "w1": one goroutine, "w2": two goroutines taking tensors from
//     a shared counter, like the loader's workers.
func BenchmarkLoaderPattern(b *testing.B) {
	lp := loaderPatternSetup(b)
	const (
		srcPiece = 256 << 10
		dstPiece = 2 * srcPiece
	)
	type source struct {
		name  string
		piece func(i int) []byte // the source of tensor i
		after func(i int)        // called after tensor i (nil: nothing)
	}
	sources := []source{
		{"cold", func(i int) []byte { return lp.src[i*srcPiece : (i+1)*srcPiece] }, nil},
		{"hot", func(i int) []byte { return lp.hot }, nil},
		{"mmap", func(i int) []byte { return lp.mapped[i*srcPiece : (i+1)*srcPiece] }, nil},
		{"mmap-evict", func(i int) []byte { return lp.mapped[i*srcPiece : (i+1)*srcPiece] },
			func(i int) { _ = syscall.Madvise(lp.mapped[i*srcPiece:(i+1)*srcPiece], syscall.MADV_DONTNEED) }},
		{"mmap-evict4M", func(i int) []byte { return lp.mapped[i*srcPiece : (i+1)*srcPiece] },
			func(i int) {
				if i%16 == 15 {
					_ = syscall.Madvise(lp.mapped[(i-15)*srcPiece:(i+1)*srcPiece], syscall.MADV_DONTNEED)
				}
			}},
	}
	// An op converts (or copies) the tensors [i, i+per) and returns how
	// many it did.
	type op struct {
		name string
		per  int // tensors per call
		fn   func(s source, i, k int)
	}
	conv := func(opts Options) func(s source, i, k int) {
		opts.Workers = 1
		return func(s source, i, k int) {
			if k == 1 {
				if _, err := Convert(lp.dst[i*dstPiece:(i+1)*dstPiece], F32, s.piece(i), BF16, opts); err != nil {
					panic(err)
				}
				return
			}
			// One call over k consecutive tensors: the heap and mapped
			// sources are contiguous; the hot one is the same piece k times.
			var src []byte
			switch s.name {
			case "cold":
				src = lp.src[i*srcPiece : (i+k)*srcPiece]
			case "hot":
				src = lp.hot8[:k*srcPiece]
			default:
				src = lp.mapped[i*srcPiece : (i+k)*srcPiece]
			}
			if _, err := Convert(lp.dst[i*dstPiece:(i+k)*dstPiece], F32, src, BF16, opts); err != nil {
				panic(err)
			}
		}
	}
	ops := []op{
		{"copy", 1, func(s source, i, _ int) { copy(lp.dst[i*dstPiece:], s.piece(i)) }},
		{"t512K", 1, conv(Options{})},
		{"c4M", 8, conv(Options{})},
		{"t512K-stream", 1, conv(Options{Streaming: true})},
	}
	for _, s := range sources {
		for _, w := range []int{1, 2} {
			for _, o := range ops {
				if s.name == "hot" && o.per > 1 {
					continue // 8 copies of the hot piece: not the same pattern
				}
				b.Run(fmt.Sprintf("%s/w%d/%s", s.name, w, o.name), func(b *testing.B) {
					pass := func() {
						var next atomic.Int64
						var wg sync.WaitGroup
						for range w {
							wg.Add(1)
							go func() {
								defer wg.Done()
								for {
									i := int(next.Add(int64(o.per))) - o.per
									if i >= lpTensors {
										return
									}
									o.fn(s, i, o.per)
									if s.after != nil {
										for j := i; j < i+o.per; j++ {
											s.after(j)
										}
									}
								}
							}()
						}
						wg.Wait()
					}
					pass() // steady state: the mapping's pages as a pass leaves them
					b.SetBytes(int64(lpTensors * srcPiece))
					b.ResetTimer()
					for range b.N {
						pass()
					}
				})
			}
		}
	}
}

// lpTensors is the number of tensors of BenchmarkLoaderPattern: 256 MiB
// of BF16 input, 512 MiB of F32 output.
const lpTensors = 1024

type loaderPatternData struct {
	src    []byte // lpTensors × 256 KiB of BF16 values
	hot    []byte // one 256 KiB piece
	hot8   []byte // 8 copies of hot, for the 4 MiB calls of the hot source
	dst    []byte // the arena: lpTensors × 512 KiB
	mapped []byte // src, from a mapped file in the page cache
}

var (
	lpOnce sync.Once
	lpData loaderPatternData
	lpErr  error
)

func loaderPatternSetup(b *testing.B) *loaderPatternData {
	lpOnce.Do(func() {
		const piece = 256 << 10
		one := benchInput(BF16, piece/2)
		d := &lpData
		d.src = make([]byte, lpTensors*piece)
		for i := 0; i < len(d.src); i += piece {
			copy(d.src[i:], one)
		}
		d.hot = one
		d.hot8 = make([]byte, 8*piece)
		for i := 0; i < len(d.hot8); i += piece {
			copy(d.hot8[i:], one)
		}
		d.dst = touched(2 * len(d.src))
		dir, err := os.MkdirTemp("", "dtype-bench")
		if err != nil {
			lpErr = err
			return
		}
		path := filepath.Join(dir, "src.bin")
		defer os.RemoveAll(dir) // the mapping outlives the name
		if err := os.WriteFile(path, d.src, 0o644); err != nil {
			lpErr = err
			return
		}
		f, err := os.Open(path)
		if err != nil {
			lpErr = err
			return
		}
		defer f.Close()
		d.mapped, lpErr = syscall.Mmap(int(f.Fd()), 0, len(d.src), syscall.PROT_READ, syscall.MAP_SHARED)
		runtime.GC() // no collection of the set-up garbage during the runs
	})
	if lpErr != nil {
		b.Fatal(lpErr)
	}
	return &lpData
}

// BenchmarkStreamingSizes converts the cold source of
// BenchmarkLoaderPattern into the same arena in calls of one output size
// each, with and without Options.Streaming, one goroutine, against copy
// of the same input bytes at the same offsets: where non-temporal stores
// start to pay for a streaming output.
//
//	go test ./dtype -run '^$' -bench StreamingSizes -benchtime 4x -count 6
func BenchmarkStreamingSizes(b *testing.B) {
	lp := loaderPatternSetup(b)
	for _, out := range []int{4 << 10, 32 << 10, 512 << 10} {
		in := out / 2
		n := len(lp.src) / in
		ops := []struct {
			name string
			fn   func(i int)
		}{
			{"copy", func(i int) { copy(lp.dst[i*out:], lp.src[i*in:(i+1)*in]) }},
			{"plain", func(i int) {
				_, _ = Convert(lp.dst[i*out:(i+1)*out], F32, lp.src[i*in:(i+1)*in], BF16, Options{Workers: 1})
			}},
			{"stream", func(i int) {
				_, _ = Convert(lp.dst[i*out:(i+1)*out], F32, lp.src[i*in:(i+1)*in], BF16, Options{Workers: 1, Streaming: true})
			}},
		}
		for _, o := range ops {
			b.Run(fmt.Sprintf("out%dK/%s", out>>10, o.name), func(b *testing.B) {
				b.SetBytes(int64(len(lp.src)))
				for range b.N {
					for i := range n {
						o.fn(i)
					}
				}
			})
		}
	}
}
