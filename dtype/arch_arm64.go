//go:build arm64 && !purego

package dtype

import "math"

// Vector fast paths in arch_arm64.s (ASIMD, which every arm64 CPU has). See
// vecRun for the contract.

//go:noescape
func bf16ToF32NEON(dst, src []byte, acc *[32]byte) int

//go:noescape
func f16ToF32NEON(dst, src []byte, acc *[32]byte) int

//go:noescape
func e5m2ToF32NEON(dst, src []byte, acc *[32]byte) int

//go:noescape
func f8ToF32NEON(dst, src []byte, acc *[32]byte, p *f8NeonParams) int

//go:noescape
func f32ToE4M3NEON(dst, src []byte, acc *[32]byte, p *f8EncodeParams, cnt *[4]uint32) int

//go:noescape
func f32ToE5M2NEON(dst, src []byte, acc *[32]byte, p *f8EncodeParams, cnt *[4]uint32) int

//go:noescape
func f32ToBF16NEON(dst, src []byte, acc *[32]byte, cnt *[4]uint32) int

//go:noescape
func f32ToF16NEON(dst, src []byte, acc *[32]byte, cnt *[4]uint32) int

// sumKernelFor returns nil: no arm64 kernel folds a CRC as it converts.
func sumKernelFor(from, to DType, fallback kernel) sumKernel { return nil }

// vecKernelFor returns the vector kernel for the pair that falls back to
// fallback for special values and tails, or nil when there is none.
func vecKernelFor(from, to DType, fallback kernel) kernel {
	if fallback == nil {
		return nil
	}
	v := &vecKernel{fallback: fallback}
	switch {
	case from == BF16 && to == F32:
		v.run, v.inSize, v.outSize, v.block, v.accMax = widenNEON(bf16ToF32NEON), 2, 4, 16, maxAbsBF16
	case from == F16 && to == F32:
		v.run, v.inSize, v.outSize, v.block, v.accMax = widenNEON(f16ToF32NEON), 2, 4, 16, maxAbsF16
	case from == F8_E5M2 && to == F32:
		v.run, v.inSize, v.outSize, v.block = widenNEON(e5m2ToF32NEON), 1, 4, 32
		v.accMax = f8Layouts[F8_E5M2].maxAbs
	case to == F32 && f8NeonTable[from] != nil:
		p := f8NeonTable[from]
		v.run, v.inSize, v.outSize, v.block = widenNEON(func(dst, src []byte, acc *[32]byte) int {
			return f8ToF32NEON(dst, src, acc, p)
		}), 1, 4, 32
		v.accMax = f8Layouts[from].maxAbs
	case from == F32 && (to == F8_E4M3 || to == F8_E5M2):
		p, f := f8Encoders[to], f32ToE4M3NEON
		if to == F8_E5M2 {
			f = f32ToE5M2NEON
		}
		v.run = narrowNEON(func(dst, src []byte, acc *[32]byte, cnt *[4]uint32) int {
			return f(dst, src, acc, p, cnt)
		})
		v.inSize, v.outSize, v.block, v.accMax = 4, 1, 16, maxAbsF32
	case from == F32 && to == BF16:
		v.run, v.inSize, v.outSize, v.block, v.accMax = narrowNEON(f32ToBF16NEON), 4, 2, 16, maxAbsF32
	case from == F32 && to == F16:
		v.run, v.inSize, v.outSize, v.block, v.accMax = narrowNEON(f32ToF16NEON), 4, 2, 16, maxAbsF32
	default:
		return nil
	}
	return v.convert
}

// widenNEON adapts a fast path without underflow to vecRun.
func widenNEON(f func(dst, src []byte, acc *[32]byte) int) vecRun {
	return func(dst, src []byte, acc *[32]byte, _ bool) (int, int) { return f(dst, src, acc), 0 }
}

// narrowNEON adapts a fast path that counts underflow per lane to vecRun.
func narrowNEON(f func(dst, src []byte, acc *[32]byte, cnt *[4]uint32) int) vecRun {
	return func(dst, src []byte, acc *[32]byte, _ bool) (int, int) {
		var cnt [4]uint32
		n := f(dst, src, acc, &cnt)
		return n, int(cnt[0]) + int(cnt[1]) + int(cnt[2]) + int(cnt[3])
	}
}

// f8NeonParams is the constant block of f8ToF32NEON: codes whose magnitude
// (magMask) is above magLimit, or equal to codeSpecial, are left to the
// portable kernel; the others read as binary16 after an exponent shift,
// times scale.
type f8NeonParams struct {
	magMask     [16]uint8
	magLimit    [16]uint8
	codeSpecial [16]uint8
	scale       [4]float32
}

// f8NeonTable holds the parameters for the layouts with a sign and a 4-bit
// exponent, computed once (read-only afterwards).
var f8NeonTable = func() map[DType]*f8NeonParams {
	m := map[DType]*f8NeonParams{}
	for _, d := range []DType{F8_E4M3, F8_E4M3FNUZ} {
		l := f8Layouts[d]
		p := new(f8NeonParams)
		for i := range 16 {
			p.magMask[i] = l.magMask
			p.magLimit[i] = l.magSpecial - 1
			p.codeSpecial[i] = l.codeSpecial
		}
		for i := range 4 {
			p.scale[i] = float32(math.Ldexp(1, 15-(127-l.scaleExp)))
		}
		m[d] = p
	}
	return m
}()
