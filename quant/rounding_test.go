package quant

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ckpt-go/ckpt/dtype"
)

// usualRound is what `(w.float() * s).to(target)` computes from the float32
// product p32: a second rounding, to the target (refRound of a float32 is a
// single rounding of that float32, which float64 holds exactly).
func usualRound(p32 float32, to dtype.DType) float64 { return refRound(float64(p32), to) }

// TestSingleRoundingVersusUsual compares ckpt's single rounding of the
// exact product with the usual two roundings (product in float32, then to
// BF16 or F16), and counts how often they differ: over random scales, and
// over scales built so that the float32 product lands on a midpoint of the
// target, where the second rounding's tie goes to even whatever side of the
// midpoint the exact product was on. ckpt must be the correctly rounded one
// every time, through Dequantize.
func TestSingleRoundingVersusUsual(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))

	// Random scales: every E4M3 code times 16384 random F32 scales.
	for _, to := range []dtype.DType{dtype.BF16, dtype.F16} {
		diff, total := 0, 0
		for k := 0; k < 16384; k++ {
			s := randScale(rng, true)
			for c := 0; c < 256; c++ {
				q := refE4M3(byte(c))
				if math.IsNaN(q) {
					continue
				}
				total++
				if !sameValue(usualRound(float32(float32(q)*s), to), refRound(q*float64(s), to)) {
					diff++
				}
			}
		}
		t.Logf("E4M3 × random F32 scale -> %s: %d of %d products differ from float32-then-%s", to, diff, total, to)
	}

	// Built scales: s = float32(m / q) for a midpoint m of the target.
	// Checked through Dequantize on a [n, 1] tensor with per-row scales.
	for _, to := range []dtype.DType{dtype.BF16, dtype.F16} {
		mbits := map[dtype.DType]int{dtype.BF16: 7, dtype.F16: 10}[to]
		const n = 4096
		data := make([]byte, n)
		sc := make([]float32, n)
		for i := range data {
			data[i] = byte(0x31 + 2*rng.IntN(7)) // E4M3 1.125·2^-1 .. 1.875·2^-1, odd mantissas
			mid := math.Ldexp(float64(1<<(mbits+1)|2*rng.IntN(1<<mbits)|1), -mbits-1+rng.IntN(8))
			sc[i] = float32(mid / refE4M3(data[i]))
		}
		w := &Weight{Name: "w", Shape: []int64{n, 1}, Elem: dtype.F8_E4M3, Data: st("w", dtype.F8_E4M3, n, 1),
			Scales: []Scale{{Role: RoleScale, Stored: st("s", dtype.F32, n, 1), Block: [2]int64{1, 1}}}}
		exact := func(i int) float64 { return refE4M3(data[i]) * float64(sc[i]) }
		checkDequant(t, w, data, [][]byte{f32Bytes(sc)}, exact) // ckpt is correctly rounded
		diff := 0
		for i := range data {
			if !sameValue(usualRound(float32(float32(refE4M3(data[i]))*sc[i]), to), refRound(exact(i), to)) {
				diff++
			}
		}
		t.Logf("E4M3 × built F32 scale -> %s: %d of %d products differ from float32-then-%s", to, diff, n, to)
		if diff == 0 {
			t.Errorf("%s: the built scales should show double-rounding differences", to)
		}
	}

	// The dividing layout (compressed-tensors NVFP4): (e2m1 × fp8 scale) ÷
	// global, one float64 quotient rounded once, against the float32
	// quotient rounded again; global = float32(p / midpoint).
	const n = 4096
	codes := make([]byte, n)
	bs := make([]byte, n)
	gs := make([]float32, n)
	for i := range codes {
		codes[i] = byte(3 + 2*rng.IntN(3)) // 1.5, 3, 6: two significant bits
		bs[i] = byte(0x30 + rng.IntN(16))  // E4M3 0.5 .. 1.875
		p := refE2M1(codes[i]) * refE4M3(bs[i])
		mid := math.Ldexp(float64(1<<8|2*rng.IntN(1<<7)|1), -8+rng.IntN(8))
		gs[i] = float32(p / mid)
	}
	diff := 0
	for i := range codes {
		p := refE2M1(codes[i]) * refE4M3(bs[i])
		if !sameValue(usualRound(float32(float32(p)/gs[i]), dtype.BF16), refRound(p/float64(gs[i]), dtype.BF16)) {
			diff++
		}
	}
	// Through Dequantize: one row per element, each with its own block scale
	// and global scale, as a [1, 16] NVFP4 tensor would have.
	for i := 0; i < 256; i++ {
		w := &Weight{Name: "w", Shape: []int64{1, 16}, Elem: dtype.F4, Data: st("w", dtype.U8, 1, 8),
			Scales: []Scale{
				{Role: RoleScale, Stored: st("s", dtype.F8_E4M3, 1, 1), Block: [2]int64{1, 16}},
				{Role: RoleGlobalScale, Stored: st("g", dtype.F32, 1), Block: [2]int64{1, 16}},
			}}
		packed := pack4(append(make([]byte, 0, 16), codes[i], codes[i], 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))
		checkDequant(t, w, packed, [][]byte{{bs[i]}, f32Bytes(gs[i : i+1])}, func(j int) float64 {
			return refE2M1(byte(packed[j/2]>>(4*(j%2))&15)) * refE4M3(bs[i]) / float64(gs[i])
		})
	}
	t.Logf("E2M1 × E4M3 ÷ built F32 global -> BF16: %d of %d quotients differ from float32-then-BF16", diff, n)
	if diff == 0 {
		t.Errorf("the built global scales should show double-rounding differences")
	}
}
