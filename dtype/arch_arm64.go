//go:build arm64 && !purego

package dtype

// Vector fast paths in arch_arm64.s (ASIMD, which every arm64 CPU has). See
// vecRun for the contract.

//go:noescape
func bf16ToF32NEON(dst, src []byte, acc *[32]byte) int

//go:noescape
func f16ToF32NEON(dst, src []byte, acc *[32]byte) int

//go:noescape
func e5m2ToF32NEON(dst, src []byte, acc *[32]byte) int

//go:noescape
func f32ToBF16NEON(dst, src []byte, acc *[32]byte, cnt *[4]uint32) int

//go:noescape
func f32ToF16NEON(dst, src []byte, acc *[32]byte, cnt *[4]uint32) int

// archKernel returns a vectorized kernel for the pair, or nil when there is
// none and the portable kernel must be used.
func archKernel(from, to DType) kernel {
	return vecKernelFor(from, to, genericKernel(from, to))
}

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
		l := f8Layouts[F8_E5M2]
		v.run, v.inSize, v.outSize, v.block = widenNEON(e5m2ToF32NEON), 1, 4, 32
		v.accMax = func(acc *[32]byte) float64 { return l.value(accMaxU8(acc)) }
	case from == F32 && to == BF16:
		v.run, v.inSize, v.outSize, v.block, v.accMax = narrowNEON(f32ToBF16NEON), 4, 2, 16, maxAbsF32
	case from == F32 && to == F16:
		v.run, v.inSize, v.outSize, v.block, v.accMax = narrowNEON(f32ToF16NEON), 4, 2, 16, maxAbsF32
	default:
		return nil
	}
	return v.kernel()
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
