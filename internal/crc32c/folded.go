package crc32c

// Folding outside this package: a kernel that reads bytes for another
// purpose (package dtype's conversions) can fold their CRC from the
// registers it loads, 64 bytes at a time, and leave the result here.

// Step is how many bytes a reader that converts or copies bytes and then
// sums them handles at a time: its source and output stay in a core's L2
// cache between the two (192 KiB), and it is a whole number of elements of
// every dtype (3-byte groups of FP6 included).
const Step = 3 << 16

// Fold64Pair returns the pair of constants that moves a 128-bit remainder
// 64 bytes (512 bits) forward, laid out as the folding kernels here read
// it: x^(512+32) mod P, which multiplies the low quadword, then
// x^(512-32) mod P, which multiplies the high one (see foldK).
func Fold64Pair() [2]uint64 { return [2]uint64{k512H, k512L} }

// The pair for d = 512 (foldK holds it too; TestFoldConstants recomputes
// it from the polynomial).
const (
	k512H = 0x0740eef02
	k512L = 0x09e4addf8
)

// Folded returns the CRC-32C (as Checksum gives it) of n bytes, n a
// multiple of 64, that a kernel folded into state: four 128-bit
// remainders, one per 16-byte lane of a 64-byte block, starting from zero
// (state all zero for n = 0), each moved 64 bytes forward with
// Fold64Pair's constants and xored with the lane of the next block.
//
// Such a state is congruent, modulo P, to the bytes folded into it, so it
// gives the same CRC register from a zero register: the register of the
// state's own 64 bytes, Update(0xFFFFFFFF, state) (a zero register is the
// complement of 0xFFFFFFFF). Checksum starts from the register
// 0xFFFFFFFF instead, and CRCs are affine in their start: the difference
// is 0xFFFFFFFF carried over n bytes, which Combine computes.
func Folded(state *[64]byte, n int64) uint32 {
	if n <= 0 {
		return 0
	}
	return Combine(0xFFFFFFFF, Update(0xFFFFFFFF, state[:]), n)
}
