package quant

import (
	"math/rand/v2"
	"testing"

	"github.com/ckpt-go/ckpt/dtype"
)

// BenchmarkDequantize measures Dequantize of a 4096×4096 weight (16.8M
// elements) per layout, to BF16 unless named, on one goroutine and on
// GOMAXPROCS; bytes/s count the output. "convert-fp8-bf16" is the plain
// dtype.Convert of the same FP8 data without any scale, as a baseline.
func BenchmarkDequantize(b *testing.B) {
	const out, in = 4096, 4096
	rng := rand.New(rand.NewPCG(1, 1))
	fp8 := make([]byte, out*in)
	for i := range fp8 {
		fp8[i] = byte(rng.UintN(256)) &^ 0x40 // finite, moderate values
	}
	fp4 := fp8[:out*in/2]
	f32s := func(n int) []byte { return f32Bytes(randF32s(rng, n, false)) }
	e4m3 := func(n int) []byte { // positive normal E4M3 scales
		s := make([]byte, n)
		for i := range s {
			s[i] = byte(0x30 + rng.IntN(16))
		}
		return s
	}
	cases := []struct {
		name   string
		w      *Weight
		data   []byte
		scales [][]byte
		to     dtype.DType
	}{
		{"deepseek-block128", &Weight{Name: "w", Shape: []int64{out, in}, Elem: dtype.F8_E4M3,
			Scales: []Scale{{Role: RoleScaleInv, Stored: st("s", dtype.F32, out/128, in/128), Block: [2]int64{128, 128}}}},
			fp8, [][]byte{f32s(out / 128 * in / 128)}, dtype.BF16},
		{"fp8-per-tensor-f32", &Weight{Name: "w", Shape: []int64{out, in}, Elem: dtype.F8_E4M3,
			Scales: []Scale{{Role: RoleScale, Stored: st("s", dtype.F32), Block: [2]int64{out, in}}}},
			fp8, [][]byte{f32s(1)}, dtype.F32},
		{"fbgemm-rowwise", &Weight{Name: "w", Shape: []int64{out, in}, Elem: dtype.F8_E4M3,
			Scales: []Scale{{Role: RoleScale, Stored: st("s", dtype.F32, out, 1), Block: [2]int64{1, in}}}},
			fp8, [][]byte{f32s(out)}, dtype.BF16},
		{"ct-nvfp4", &Weight{Name: "w", Shape: []int64{out, in}, Elem: dtype.F4,
			Scales: []Scale{
				{Role: RoleScale, Stored: st("s", dtype.F8_E4M3, out, in/16), Block: [2]int64{1, 16}},
				{Role: RoleGlobalScale, Stored: st("g", dtype.F32, 1), Block: [2]int64{out, in}}}},
			fp4, [][]byte{e4m3(out * in / 16), f32s(1)}, dtype.BF16},
		{"modelopt-nvfp4", &Weight{Name: "w", Shape: []int64{out, in}, Elem: dtype.F4,
			Scales: []Scale{
				{Role: RoleScale, Stored: st("s", dtype.F8_E4M3, out, in/16), Block: [2]int64{1, 16}},
				{Role: RoleScale2, Stored: st("g", dtype.F32), Block: [2]int64{out, in}}}},
			fp4, [][]byte{e4m3(out * in / 16), f32s(1)}, dtype.BF16},
		{"mxfp4", &Weight{Name: "w", Shape: []int64{out, in}, Elem: dtype.F4,
			Scales: []Scale{{Role: RoleE8M0, Stored: st("s", dtype.U8, out, in/32), Block: [2]int64{1, 32}}}},
			fp4, [][]byte{e4m3(out * in / 32)}, dtype.BF16},
	}
	for _, workers := range []int{1, 0} {
		suffix := "/workers=1"
		if workers == 0 {
			suffix = "/workers=max"
		}
		for _, c := range cases {
			dst := make([]byte, out*in*c.to.Bits()/8)
			b.Run(c.name+suffix, func(b *testing.B) {
				b.SetBytes(int64(len(dst)))
				for i := 0; i < b.N; i++ {
					if _, err := c.w.Dequantize(dst, c.to, c.data, c.scales, dtype.Options{Workers: workers}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		dst := make([]byte, out*in*2)
		b.Run("convert-fp8-bf16"+suffix, func(b *testing.B) {
			b.SetBytes(int64(len(dst)))
			for i := 0; i < b.N; i++ {
				if _, err := dtype.Convert(dst, dtype.BF16, fp8, dtype.F8_E4M3, dtype.Options{Workers: workers}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
