//go:build amd64 && !purego

package dtype

import (
	"github.com/ckpt-go/ckpt/internal/cpuid"
	"github.com/ckpt-go/ckpt/internal/crc32c"
)

// Vector fast paths in arch_amd64.s. See vecRun for the contract. They run
// when the CPU has AVX2 (and F16C for F16 and the FP8 decoders through
// binary16); the purego build tag leaves them out.

// bf16ToF32AVX2 and f16ToF32AVX2 also fold the CRC-32C of the source
// blocks they convert into state with the pair k (see sumRun): in one ZMM
// register with fold foldZMM (AVX-512), in two YMM registers with
// foldYMM; with foldNone k and state are not read.
//
//go:noescape
func bf16ToF32AVX2(dst, src []byte, acc *[32]byte, nt bool, k *[2]uint64, state *[64]byte, fold uint8) int

//go:noescape
func f16ToF32AVX2(dst, src []byte, acc *[32]byte, nt bool, k *[2]uint64, state *[64]byte, fold uint8) int

// The folds of the widenings.
const (
	foldNone uint8 = iota
	foldYMM
	foldZMM
)

// widening is the signature of the widenings.
type widening func(dst, src []byte, acc *[32]byte, nt bool, k *[2]uint64, state *[64]byte, fold uint8) int

// plain is a widening that folds nothing, as a vecRun.
func plain(f widening) vecRun {
	return func(dst, src []byte, acc *[32]byte, nt bool) (int, int) {
		return f(dst, src, acc, nt, nil, nil, foldNone), 0
	}
}

//go:noescape
func f32ToF16AVX2(dst, src []byte, acc *[32]byte, nt bool) (n, under int)

//go:noescape
func f32ToBF16AVX2(dst, src []byte, acc *[32]byte, nt bool) (n, under int)

//go:noescape
func f32ToF8AVX2(dst, src []byte, acc *[32]byte, p *f8EncodeParams, nt bool) (n, under int)

//go:noescape
func f8ToF32AVX2(dst, src []byte, acc *[32]byte, p *f8DecodeParams, nt bool) int

// e4m3ToF32F16C and e5m2ToF32F16C read only the magnitude mask and the
// first special magnitude from p; E4M3's rebias table is in the assembly.
//
//go:noescape
func e4m3ToF32F16C(dst, src []byte, acc *[32]byte, p *f8DecodeParams, nt bool) int

// e4m3fnuzToF32F16C reads the magnitude mask and the special code from p.
//
//go:noescape
func e4m3fnuzToF32F16C(dst, src []byte, acc *[32]byte, p *f8DecodeParams, nt bool) int

//go:noescape
func e5m2ToF32F16C(dst, src []byte, acc *[32]byte, p *f8DecodeParams, nt bool) int

// hasAVX2 and hasF16C tell which fast paths this CPU can run. They are set
// once at start-up and never change.
var hasAVX2, hasF16C = detectX86()

// hasVPCLMULQDQ tells whether the summing widenings can run: carry-less
// multiplication on YMM registers beside AVX2; hasAVX512Fold whether they
// fold in ZMM registers (AVX-512). Package crc32c decides both, for its
// own kernels too.
var (
	hasVPCLMULQDQ = hasAVX2 && crc32c.FoldsYMM()
	hasAVX512Fold = hasVPCLMULQDQ && crc32c.FoldsZMM()
)

// pickSum returns the widening f as a summing kernel, folding as this CPU
// does best: in ZMM registers with AVX-512, in YMM ones with VPCLMULQDQ
// alone; nil without VPCLMULQDQ.
func pickSum(f widening) sumRun {
	if !hasVPCLMULQDQ {
		return nil
	}
	if hasAVX512Fold {
		return folding(f, foldZMM)
	}
	return folding(f, foldYMM)
}

// folding is the widening f folding as fold says, as a sumRun.
func folding(f widening, fold uint8) sumRun {
	return func(dst, src []byte, acc *[32]byte, nt bool, k *[2]uint64, state *[64]byte) int {
		return f(dst, src, acc, nt, k, state, fold)
	}
}

// detectX86 reads the CPU features the fast paths need: AVX2 (with the YMM
// state enabled by the OS) and POPCNT, and F16C for the paths through
// binary16. golang.org/x/sys/cpu does not report F16C, so CPUID is read
// directly (internal/cpuid).
func detectX86() (avx2, f16c bool) {
	maxID, _, _, _ := cpuid.CPUID(0, 0)
	if maxID < 7 {
		return false, false
	}
	_, _, ecx1, _ := cpuid.CPUID(1, 0)
	const popcnt, osxsave, avx, f16cBit = 1 << 23, 1 << 27, 1 << 28, 1 << 29
	if ecx1&popcnt == 0 || ecx1&osxsave == 0 || ecx1&avx == 0 || cpuid.XGETBV0()&6 != 6 {
		return false, false
	}
	_, ebx7, _, _ := cpuid.CPUID(7, 0)
	avx2 = ebx7&(1<<5) != 0
	return avx2, avx2 && ecx1&f16cBit != 0
}

// vecKernelFor returns the vector kernel for the pair that falls back to
// fallback for special values and tails, or nil when this CPU has none.
func vecKernelFor(from, to DType, fallback kernel) kernel {
	if v := newVecKernel(from, to, fallback); v != nil {
		return v.convert
	}
	return nil
}

// sumKernelFor returns the summing vector kernel for the pair (see
// sumKernel), or nil when this CPU has none.
func sumKernelFor(from, to DType, fallback kernel) sumKernel {
	if v := newVecKernel(from, to, fallback); v != nil && v.sum != nil {
		return v.convertSum
	}
	return nil
}

// newVecKernel returns the vector kernel of the pair, or nil.
func newVecKernel(from, to DType, fallback kernel) *vecKernel {
	if !hasAVX2 || fallback == nil {
		return nil
	}
	v := &vecKernel{fallback: fallback, block: 32, ntAlign: 32}
	switch {
	case from == BF16 && to == F32:
		v.run, v.inSize, v.outSize, v.accMax = plain(bf16ToF32AVX2), 2, 4, maxAbsBF16
		v.sum = pickSum(bf16ToF32AVX2)
	case from == F16 && to == F32 && hasF16C:
		v.run, v.inSize, v.outSize, v.accMax = plain(f16ToF32AVX2), 2, 4, maxAbsF16
		v.sum = pickSum(f16ToF32AVX2)
	case from == F32 && to == BF16:
		v.run, v.inSize, v.outSize, v.accMax = f32ToBF16AVX2, 4, 2, maxAbsF32
	case from == F32 && to == F16 && hasF16C:
		v.run, v.inSize, v.outSize, v.accMax = f32ToF16AVX2, 4, 2, maxAbsF32
	case from == F32 && f8Encoders[to] != nil:
		p := f8Encoders[to]
		v.run = func(dst, src []byte, acc *[32]byte, nt bool) (int, int) { return f32ToF8AVX2(dst, src, acc, p, nt) }
		v.inSize, v.outSize, v.accMax = 4, 1, maxAbsF32
	case to == F32:
		l, ok := f8Layouts[from]
		if !ok {
			return nil
		}
		v.inSize, v.outSize = 1, 4
		v.accMax = l.maxAbs
		switch p := f8DecodeTable[from]; {
		case hasF16C && from == F8_E5M2:
			v.run = func(dst, src []byte, acc *[32]byte, nt bool) (int, int) {
				return e5m2ToF32F16C(dst, src, acc, p, nt), 0
			}
		case hasF16C && from == F8_E4M3:
			// Its special codes are all special magnitudes, which the
			// cheaper check of e4m3ToF32F16C finds, and its table is
			// E4M3's.
			v.run = func(dst, src []byte, acc *[32]byte, nt bool) (int, int) {
				return e4m3ToF32F16C(dst, src, acc, p, nt), 0
			}
		case hasF16C && from == F8_E4M3FNUZ:
			v.run = func(dst, src []byte, acc *[32]byte, nt bool) (int, int) {
				return e4m3fnuzToF32F16C(dst, src, acc, p, nt), 0
			}
		default:
			v.run = func(dst, src []byte, acc *[32]byte, nt bool) (int, int) { return f8ToF32AVX2(dst, src, acc, p, nt), 0 }
		}
	default:
		return nil
	}
	return v
}
