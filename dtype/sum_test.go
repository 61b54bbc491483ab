package dtype

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ckpt-go/ckpt/internal/crc32c"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ConvertSum gives Convert's output and Stats and hash/crc32's CRC-32C of
// the source, for every pair, at lengths around the vector blocks and the
// steps, from any starting CRC, with special values that send runs of
// blocks to the portable kernel (the summing kernels' state must skip
// them exactly), with non-temporal stores and split across goroutines.
func TestConvertSum(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	lengths := []int{0, 1, 7, 8, 31, 32, 33, 64, 100, 1000, 4096 + 24, 200 << 10 / 2, (1 << 20) + 40}
	check := func(name string, to, from DType, src []byte, opts Options) {
		t.Helper()
		n, err := from.Elements(len(src))
		if err != nil {
			return
		}
		tb, err := to.ByteLen(int64(n))
		if err != nil {
			return
		}
		want, got := make([]byte, tb), make([]byte, tb)
		wst, werr := Convert(want, to, src, from, opts)
		start := rng.Uint32()
		gst, crc, gerr := ConvertSum(got, to, src, from, opts, start)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("%s: Convert %v, ConvertSum %v", name, werr, gerr)
		}
		if werr != nil {
			if crc != start {
				t.Errorf("%s: failed, yet the CRC moved", name)
			}
			return
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: output differs from Convert's", name)
		}
		if !statsEqual(gst, wst) {
			t.Errorf("%s: Stats %+v, Convert's %+v", name, gst, wst)
		}
		if w := crc32.Update(start, castagnoli, src); crc != w {
			t.Errorf("%s: CRC %08x, want %08x", name, crc, w)
		}
	}
	for _, from := range Builtins() {
		for _, to := range []DType{F32, BF16, F16, F8_E4M3, I32} {
			for _, n := range lengths {
				if n > 4096 && !(to == F32 && (from == BF16 || from == F16)) {
					continue // the long ones for the summing kernels
				}
				nb, err := from.ByteLen(int64(n))
				if err != nil {
					continue
				}
				src := make([]byte, nb)
				for i := range src {
					src[i] = byte(rng.Uint32())
				}
				if from == BOOL {
					for i := range src {
						src[i] &= 1
					}
				}
				check(fmt.Sprintf("%v->%v n=%d", from, to, n), to, from, src, Options{Workers: 1})
			}
		}
	}
	// The summing widenings: finite values with runs of Inf and NaN at
	// block boundaries and inside blocks, at offsets that leave the
	// output unaligned, streaming and in parallel.
	for _, from := range []DType{BF16, F16} {
		for _, n := range []int{64, 96, 4096, 100000, 700000} {
			src := make([]byte, 2*n+2)
			for i := 0; i < n+1; i++ {
				x := float32(rng.NormFloat64())
				var h uint16
				if from == BF16 {
					h = uint16(math.Float32bits(x) >> 16)
				} else {
					h = f16Bits(x)
				}
				binary.LittleEndian.PutUint16(src[2*i:], h)
			}
			special := uint16(0x7f80) // BF16 +Inf
			if from == F16 {
				special = 0x7c00
			}
			for _, at := range []int{0, 31, 32, 33, 95, 2000, 2001, n - 1} {
				if at < n {
					binary.LittleEndian.PutUint16(src[2*at:], special|uint16(at&1)) // Inf, or NaN at odd positions
				}
			}
			for run := 0; run < 300 && 3000+run < n; run++ {
				binary.LittleEndian.PutUint16(src[2*(3000+run):], special+1)
			}
			for _, opts := range []Options{{Workers: 1}, {Workers: 1, Streaming: true}, {Workers: 3}} {
				for _, off := range []int{0, 2} {
					check(fmt.Sprintf("%v n=%d off=%d %+v", from, n, off, opts), F32, from, src[off:off+2*n], opts)
				}
			}
		}
	}
}

// f16Bits rounds x to binary16 bits (finite, in range).
func f16Bits(x float32) uint16 {
	var b [2]byte
	EncodeFloat32(b[:], F16, []float32{x}, Options{})
	return binary.LittleEndian.Uint16(b[:])
}

// statsEqual compares Stats, NaN maxima alike.
func statsEqual(a, b Stats) bool {
	return fmt.Sprintf("%+v", a) == fmt.Sprintf("%+v", b)
}

// BenchmarkConvertSum: converting BF16 to F32 and summing the source, with
// the summing kernel (where the CPU has one), against Convert followed by
// a CRC of the same steps (what a reader did before) and Convert alone,
// in the same run; 192 KiB of source per call, in cache, as the loader
// converts a step, and 32 MiB, from memory.
func BenchmarkConvertSum(b *testing.B) {
	for _, kib := range []int{192, 32 << 10} {
		n := kib << 10 / 2
		src := make([]byte, 2*n)
		for i := range n {
			binary.LittleEndian.PutUint16(src[2*i:], uint16(math.Float32bits(float32(i%1000)/7)>>16))
		}
		dst := make([]byte, 4*n)
		opts := Options{Workers: 1}
		b.Run(fmt.Sprintf("%dKiB/ConvertSum", kib), func(b *testing.B) {
			b.SetBytes(int64(len(src)))
			for range b.N {
				ConvertSum(dst, F32, src, BF16, opts, 0)
			}
		})
		b.Run(fmt.Sprintf("%dKiB/baseline=Convert+CRC", kib), func(b *testing.B) {
			b.SetBytes(int64(len(src)))
			for range b.N {
				var crc uint32
				for lo := 0; lo < len(src); lo += crc32c.Step {
					hi := min(len(src), lo+crc32c.Step)
					Convert(dst[2*lo:2*hi], F32, src[lo:hi], BF16, opts)
					crc = crc32c.Update(crc, src[lo:hi])
				}
			}
		})
		b.Run(fmt.Sprintf("%dKiB/baseline=Convert", kib), func(b *testing.B) {
			b.SetBytes(int64(len(src)))
			for range b.N {
				Convert(dst, F32, src, BF16, opts)
			}
		})
	}
}
