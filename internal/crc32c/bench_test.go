package crc32c

import (
	"fmt"
	"hash/crc32"
	"testing"
)

// BenchmarkUpdate times each kernel this CPU has and hash/crc32 on the
// same buffer, for each polynomial, in one run: 4 KiB and 192 KiB (a loader step, in the
// caches), 4 MiB (about L2/L3) and 64 MiB (memory).
func BenchmarkUpdate(b *testing.B) {
	benchSizes(b, []int{4 << 10, 192 << 10, 4 << 20, 64 << 20})
}

// BenchmarkShort times the short lengths around the kernels' minimum
// (kernel.min): where folding starts to pay.
func BenchmarkShort(b *testing.B) {
	benchSizes(b, []int{64, 128, 256, 512, 1024, 2048, 3072})
}

func benchSizes(b *testing.B, sizes []int) {
	for _, n := range sizes {
		buf := make([]byte, n)
		for i := range buf {
			buf[i] = byte(i*7 + i>>8)
		}
		run := func(name string, fn func(uint32, []byte) uint32) {
			b.Run(fmt.Sprintf("size=%s/%s", sizeName(n), name), func(b *testing.B) {
				b.SetBytes(int64(n))
				var crc uint32
				for b.Loop() {
					crc = fn(crc, buf)
				}
			})
		}
		for _, pl := range polys {
			tab := crc32.MakeTable(pl.p.rev)
			run(pl.name+"/baseline=hash/crc32", func(crc uint32, p []byte) uint32 { return crc32.Update(crc, tab, p) })
			for _, k := range kernels() {
				run(pl.name+"/kernel="+k.name, func(crc uint32, p []byte) uint32 { return update(crc, p, k, pl.p) })
			}
		}
	}
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}
