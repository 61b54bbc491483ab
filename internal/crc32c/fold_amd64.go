//go:build amd64 && !purego

package crc32c

import (
	"hash/crc32"

	"golang.org/x/sys/cpu"

	"github.com/ckpt-go/ckpt/internal/cpuid"
)

// The folding constants, read by fold_amd64.s. The CRC works in the
// bit-reflected order: a 16-byte block loaded into a register holds the
// polynomial whose x^127 coefficient is bit 0 of its first byte, so its
// low quadword H holds the higher 64 coefficients and its high quadword L
// the lower: A = H·x^64 + L. Moving A forward over d bits (A·x^d, modulo
// P) is H·x^(d+64) + L·x^d. A constant K is stored as a 33-bit reflected
// value, bits.Reverse32(K)<<1 (bit j holds the x^(32-j) coefficient); the
// carry-less product of H and it, read as a reflected 128-bit register, is
// H·K·x^32 (degree below 128, so nothing is lost). Hence the constant
// that multiplies H is x^(d+32) mod P and the one that multiplies L is
// x^(d-32) mod P: the sum of both products is A·x^d modulo P. Each pair
// is 16 bytes: the H constant in the low quadword, the L constant in the
// high one, so that PCLMULQDQ $0x00 multiplies H by its constant and
// $0x11 L by its. TestFoldConstants recomputes every entry from the
// polynomial.
var foldK = [14]uint64{
	0x0dcb17aa4, 0x0b9e02b86, // d = 2048: four 512-bit accumulators, 256 bytes ahead
	0x06992cea2, 0x00d3b6092, // d = 1024: four 256-bit accumulators, 128 bytes ahead
	k512H, k512L, // d = 512: one 64-byte step (four 128-bit blocks)
	0x01c291d04, 0x1d82c63da, // d = 384: 48 bytes (lane 0 of a 512-bit register onto lane 3)
	0x1384aa63a, 0x0ba4fc28e, // d = 256: 32 bytes (lane 1 onto lane 3; one 256-bit step)
	0x0f20c0dfe, 0x14cd00bd6, // d = 128: 16 bytes (lane 2 onto lane 3; one block)
	0, 0, // lane 3 stays: the 512-bit load of d = 384..128 reads this as zero
}

// foldKIEEE is foldK for the IEEE polynomial (crc32.IEEE: zip's CRC-32).
var foldKIEEE = [14]uint64{
	0x11542778a, 0x1322d1430, // d = 2048
	0x1e88ef372, 0x14a7fe880, // d = 1024
	0x154442bd4, 0x1c6e41596, // d = 512
	0x03db1ecdc, 0x174359406, // d = 384
	0x0f1da05aa, 0x15a546366, // d = 256
	0x1751997d0, 0x0ccaa009e, // d = 128
	0, 0,
}

// foldConsts returns the folding constants of the polynomial (its
// reflected form): foldK or foldKIEEE.
func foldConsts(rev uint32) *[14]uint64 {
	if rev == crc32.IEEE {
		return &foldKIEEE
	}
	return &foldK
}

// reduceCastagnoli returns the CRC-32C register of the 16 bytes lo, hi
// (little-endian) from a zero start: two crc32 instructions.
func reduceCastagnoli(lo, hi uint64) uint32

// castagnoliReduce is the Castagnoli polynomial's 16-byte reduction with
// the crc32 instruction, which the kernels already require (SSE4.2).
var castagnoliReduce = reduceCastagnoli

// foldK's entries by distance, in units of a pair (16 bytes).
const (
	k2048 = iota
	k1024
	k512
	k384
	k256
	k128
	kZero
)

// foldAVX512 folds four 512-bit accumulators (256 bytes per round) with
// VPCLMULQDQ on ZMM registers; len(p) is a multiple of 16 and at least 64.
//
//go:noescape
func foldAVX512(reg uint32, p []byte, k *[14]uint64) (lo, hi uint64)

// foldAVX2 folds four 256-bit accumulators (128 bytes per round) with
// VPCLMULQDQ on YMM registers; len(p) is a multiple of 16 and at least 64.
//
//go:noescape
func foldAVX2(reg uint32, p []byte, k *[14]uint64) (lo, hi uint64)

// foldSSE folds four 128-bit accumulators (64 bytes per round) with
// PCLMULQDQ; len(p) is a multiple of 16 and at least 64.
//
//go:noescape
func foldSSE(reg uint32, p []byte, k *[14]uint64) (lo, hi uint64)

var (
	avx512Kernel = &kernel{name: "avx512", min: 128, fold: foldAVX512}
	avx2Kernel   = &kernel{name: "avx2", min: 128, fold: foldAVX2}
	sseKernel    = &kernel{name: "pclmulqdq", min: 128, fold: foldSSE}
)

// Which kernels can run. foldAVX512: AVX-512 F (whose check by x/sys/cpu
// includes the OS saving the ZMM state) and VPCLMULQDQ. foldAVX2:
// VPCLMULQDQ on YMM registers (AVX2, the OS saving the YMM state, which
// x/sys/cpu's AVX2 includes). foldSSE: PCLMULQDQ. All three end with the
// SSE4.2 crc32 instruction; the VEX forms also use PCLMULQDQ on XMM.
var (
	hasAVX512 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VPCLMULQDQ && cpu.X86.HasAVX2 && cpu.X86.HasPCLMULQDQ && cpu.X86.HasSSE42
	hasAVX2   = cpu.X86.HasAVX2 && cpuid.HasVPCLMULQDQ() && cpu.X86.HasPCLMULQDQ && cpu.X86.HasSSE42
	hasSSE    = cpu.X86.HasPCLMULQDQ && cpu.X86.HasSSE42
)

// best is the fastest kernel this CPU runs (nil: none).
var best = func() *kernel {
	if k := kernels(); len(k) > 0 {
		return k[0]
	}
	return nil
}()

// bestIEEE is the fastest kernel for the IEEE polynomial (nil: none), a
// VPCLMULQDQ one: hash/crc32 already folds the IEEE polynomial with
// PCLMULQDQ on 128-bit registers, as foldSSE would.
var bestIEEE = func() *kernel {
	if best != sseKernel {
		return best
	}
	return nil
}()

// kernels lists the folding kernels this CPU can run, fastest first.
func kernels() []*kernel {
	var ks []*kernel
	if hasAVX512 {
		ks = append(ks, avx512Kernel)
	}
	if hasAVX2 {
		ks = append(ks, avx2Kernel)
	}
	if hasSSE {
		ks = append(ks, sseKernel)
	}
	return ks
}

// FoldsYMM and FoldsZMM report whether this CPU folds with VPCLMULQDQ on
// YMM registers, and on ZMM registers (AVX-512), as the kernels here do:
// kernels of other packages that fold as they read pick the same widths.
func FoldsYMM() bool { return hasAVX2 }

// FoldsZMM: see FoldsYMM.
func FoldsZMM() bool { return hasAVX512 }
