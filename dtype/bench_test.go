package dtype

import (
	"encoding/binary"
	"math"
	"math/rand"
	"testing"

	"github.com/x448/float16"
)

// Benchmarks of the casts, in GB/s of INPUT bytes (b.SetBytes(len(src))).
// BenchmarkCopy is the baseline: a plain copy of the same number of input
// bytes, measured in the same run. Buffers are allocated and touched before
// the timer and reused (steady state).
//
//	go test ./dtype/ -run '^$' -bench 'Copy|Cast|X448' -count 5
//
// Sub-benchmark names: cast/size/kernel, where kernel is "copy" (the
// baseline again, right before the cast, so that both see the same load on a
// shared machine), "vec-w1" (Convert with the vector kernel when this build
// has one, one goroutine), "vec-wN" (Convert, default Workers) or
// "generic-w1" (the portable kernel alone).

var benchSizes = []struct {
	name  string
	bytes int // input bytes
}{
	{"64KiB", 64 << 10},
	{"64MiB", 64 << 20},
}

var benchCasts = []struct {
	from, to DType
	opts     Options
}{
	{BF16, F32, Options{}},
	{F16, F32, Options{}},
	{F8_E4M3, F32, Options{}},
	{F8_E5M2, F32, Options{}},
	{F32, BF16, Options{}},
	{F32, F16, Options{}},
	{F32, F8_E4M3, Options{}},
	{F32, F8_E4M3, Options{Saturate: true}},
	{F32, F8_E5M2, Options{}},
}

// touched returns a slice of n bytes whose pages have been written.
func touched(n int) []byte {
	b := make([]byte, n)
	for i := 0; i < n; i += 4096 {
		b[i] = 1
	}
	return b
}

// benchInput returns n elements of d holding tensor-like values: normally
// distributed F32 rounded (saturating) to d.
func benchInput(d DType, n int) []byte {
	r := rand.New(rand.NewSource(1))
	f := make([]uint32, n)
	for i := range f {
		f[i] = math.Float32bits(float32(r.NormFloat64()))
	}
	raw := u32Bytes(f)
	if d == F32 {
		return raw
	}
	out := touched(n * d.Bits() / 8)
	var st Stats
	genericKernel(F32, d)(out, raw, Options{Saturate: true}, &st)
	return out
}

func BenchmarkCopy(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(sz.name, func(b *testing.B) {
			src, dst := touched(sz.bytes), touched(sz.bytes)
			b.SetBytes(int64(sz.bytes))
			b.ResetTimer()
			for range b.N {
				copy(dst, src)
			}
		})
	}
}

func castName(from, to DType, opts Options) string {
	s := from.String() + "to" + to.String()
	if opts.Saturate {
		s += "sat"
	}
	return s
}

func BenchmarkCast(b *testing.B) {
	for _, c := range benchCasts {
		b.Run(castName(c.from, c.to, c.opts), func(b *testing.B) {
			for _, sz := range benchSizes {
				n := sz.bytes * 8 / c.from.Bits()
				var src, dst, cp []byte
				setup := func() {
					if src == nil {
						src = benchInput(c.from, n)
						dst = touched(n * c.to.Bits() / 8)
						cp = touched(len(src))
					}
				}
				run := func(name string, conv func() error) {
					b.Run(sz.name+"/"+name, func(b *testing.B) {
						setup()
						if err := conv(); err != nil {
							b.Fatal(err)
						}
						b.SetBytes(int64(len(src)))
						b.ResetTimer()
						for range b.N {
							_ = conv()
						}
					})
				}
				// The baseline next to each cast, so that both see the same
				// load on a shared machine.
				run("copy", func() error { copy(cp, src); return nil })
				opts1 := c.opts
				opts1.Workers = 1
				run("vec-w1", func() error { _, err := Convert(dst, c.to, src, c.from, opts1); return err })
				run("vec-wN", func() error { _, err := Convert(dst, c.to, src, c.from, c.opts); return err })
				g := genericKernel(c.from, c.to)
				run("generic-w1", func() error { var st Stats; g(dst, src, c.opts, &st); return nil })
			}
		})
	}
}

// BenchmarkX448 is the peer for F16: the per-element loop of
// github.com/x448/float16 over the same input.
func BenchmarkX448(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run("F16toF32/"+sz.name, func(b *testing.B) {
			n := sz.bytes / 2
			src := benchInput(F16, n)
			dst := make([]float32, n)
			for i := range dst {
				dst[i] = 1 // touched before the timer, like the other buffers
			}
			b.SetBytes(int64(len(src)))
			b.ResetTimer()
			for range b.N {
				for i := range dst {
					dst[i] = float16.Frombits(uint16(src[2*i]) | uint16(src[2*i+1])<<8).Float32()
				}
			}
		})
		b.Run("F32toF16/"+sz.name, func(b *testing.B) {
			n := sz.bytes / 4
			raw := benchInput(F32, n)
			src := make([]float32, n)
			for i := range src {
				src[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
			}
			dst := touched(2 * n)
			b.SetBytes(int64(4 * n))
			b.ResetTimer()
			for range b.N {
				for i, f := range src {
					h := float16.Fromfloat32(f).Bits()
					dst[2*i], dst[2*i+1] = byte(h), byte(h>>8)
				}
			}
		})
	}
}
