// Package crc32c computes CRC-32C (the Castagnoli polynomial, as in
// hash/crc32 with crc32.Castagnoli), and the IEEE polynomial's CRC-32 (zip's,
// crc32.IEEE), faster than hash/crc32 on long inputs where the CPU can
// multiply polynomials over GF(2): on amd64, VPCLMULQDQ on 512-bit
// registers (AVX-512) or on 256-bit ones (AVX2: AMD Zen 3, Intel Alder
// Lake), else, for CRC-32C, PCLMULQDQ on 128-bit ones.
//
// hash/crc32 runs the SSE4.2 crc32 instruction on three interleaved
// streams for CRC-32C: one instruction per 8 bytes, one per cycle at best;
// for the IEEE polynomial it folds with PCLMULQDQ on 128-bit registers.
// The kernels here fold on wider registers: they keep several 128-bit
// remainders of the input and move each one forward over the bytes that
// follow it with two carry-less multiplications by constants x^k mod P,
// adding (xor) the next input to it, so that many 16-byte blocks are
// taken per cycle; at the end the one remaining 128-bit value is reduced
// to the 32-bit register (two crc32 instructions for CRC-32C, a table for
// the IEEE polynomial). The two polynomials share the kernels and differ
// only in their constants. Inputs shorter than a few hundred bytes, the
// last bytes that do not fill a 16-byte block, other architectures and
// the purego build tag use hash/crc32.
package crc32c

import "hash/crc32"

// Checksum returns the CRC-32C of b.
func Checksum(b []byte) uint32 { return Update(0, b) }

// Update returns the CRC-32C of the bytes whose CRC-32C is crc followed by
// b: the same as crc32.Update(crc, crc32.MakeTable(crc32.Castagnoli), b).
func Update(crc uint32, b []byte) uint32 { return update(crc, b, best, castagnoli) }

// UpdateIEEE is Update for the CRC-32 of the IEEE polynomial: the same as
// crc32.Update(crc, crc32.IEEETable, b), with the same folding kernels
// (hash/crc32 folds it with PCLMULQDQ on 128-bit registers only).
func UpdateIEEE(crc uint32, b []byte) uint32 { return update(crc, b, bestIEEE, ieee) }

// polynomial is what the kernels need of a CRC-32 polynomial.
type polynomial struct {
	rev    uint32       // the reflected form: bit 31-i holds the coefficient of x^i, x^32 implied
	table  *crc32.Table // hash/crc32's table: short inputs, the bytes after the last 16-byte block
	consts *[14]uint64  // the folding constants (fold_amd64.go; nil without kernels)
	min    int          // the least length the kernels take, where they beat hash/crc32 (BenchmarkShort), beside kernel.min
	// reduce returns the CRC register of 16 bytes (lo, hi little-endian)
	// from a zero start: what a fold's remainder reduces to.
	reduce  func(lo, hi uint64) uint32
	slicing *[8][256]uint32 // reduceTable's tables (nil with another reduce)
}

// The two polynomials. With hash/crc32's Castagnoli table hash/crc32 uses
// its SSE4.2 (amd64) or CRC32-instruction (arm64) code.
var (
	castagnoli = newPolynomial(crc32.Castagnoli, castagnoliReduce, 0)
	ieee       = newPolynomial(crc32.IEEE, nil, 512) // hash/crc32 folds it too, and the reduction is longer
)

// newPolynomial returns the polynomial of reflected form rev; reduce is its
// 16-byte reduction, nil for the tables', and min its least length for
// the kernels.
func newPolynomial(rev uint32, reduce func(lo, hi uint64) uint32, min int) *polynomial {
	p := &polynomial{rev: rev, table: crc32.MakeTable(rev), consts: foldConsts(rev), min: min, reduce: reduce}
	if p.reduce == nil {
		p.slicing = slicingTables(p.table)
		p.reduce = p.reduceTable
	}
	return p
}

// reduceTable is reduce with the polynomial's tables, eight bytes at a
// time (slicing by 8; the register starts at zero, without hash/crc32's
// complements).
func (p *polynomial) reduceTable(lo, hi uint64) uint32 {
	t := p.slicing
	var reg uint32
	for _, q := range [2]uint64{lo, hi} {
		reg ^= uint32(q)
		reg = t[0][q>>56] ^ t[1][q>>48&0xff] ^ t[2][q>>40&0xff] ^ t[3][q>>32&0xff] ^
			t[4][reg>>24] ^ t[5][reg>>16&0xff] ^ t[6][reg>>8&0xff] ^ t[7][reg&0xff]
	}
	return reg
}

// slicingTables returns the tables of slicing by 8 for the table t:
// entry [k][b] is the register after byte b followed by k zero bytes.
func slicingTables(t *crc32.Table) *[8][256]uint32 {
	var s [8][256]uint32
	s[0] = *t
	for k := 1; k < 8; k++ {
		for b := range 256 {
			r := s[k-1][b]
			s[k][b] = r>>8 ^ t[byte(r)]
		}
	}
	return &s
}

// kernel is a folding kernel: fold takes the CRC register (the complement
// of a CRC), a slice whose length is a multiple of 16 and at least 64, and
// a polynomial's constants, and returns a 16-byte remainder whose register
// from a zero start (polynomial.reduce) is the register after those
// bytes. Update uses it from min bytes on, where it beats hash/crc32
// (BenchmarkShort).
type kernel struct {
	name string
	min  int
	fold func(reg uint32, p []byte, k *[14]uint64) (lo, hi uint64)
}

// update is Update with the kernel k (nil: hash/crc32 alone) and the
// polynomial p.
func update(crc uint32, b []byte, k *kernel, p *polynomial) uint32 {
	if k != nil && len(b) >= max(k.min, p.min) {
		n := len(b) &^ 15
		crc = ^p.reduce(k.fold(^crc, b[:n], p.consts))
		b = b[n:]
	}
	return crc32.Update(crc, p.table, b)
}

// Combine returns the CRC-32C of a sequence A followed by B, given
// crcA = Checksum(A), crcB = Checksum(B) and n = len(B): pieces checked
// apart (in parallel, in any order) give the checksum of the whole. B is
// empty when n ≤ 0: the result is crcA. It takes about 2·log2(n)
// multiplications of 32-bit polynomials, about a microsecond.
func Combine(crcA, crcB uint32, n int64) uint32 { return combine(crcA, crcB, n, castagnoli.rev) }

// CombineIEEE is Combine for the CRC-32 of the IEEE polynomial
// (crc32.ChecksumIEEE: the CRC a zip archive records for each record),
// which hash/crc32 cannot combine.
func CombineIEEE(crcA, crcB uint32, n int64) uint32 { return combine(crcA, crcB, n, crc32.IEEE) }

// combine is Combine for the reflected polynomial p.
func combine(crcA, crcB uint32, n int64, p uint32) uint32 {
	if n <= 0 {
		return crcA
	}
	// Appending n zero bytes to A multiplies A's CRC by x^(8n) modulo P
	// (the pre- and post-complements cancel between A and B's own CRC,
	// which already counts B as if after a zero register). x^(8n) is the
	// product of x^(8·2^k) over the bits k of n; each x^(8·2^(k+1)) is the
	// square of the one before.
	op := uint32(1) << (31 - 8) // x^8
	for ; n > 0; n >>= 1 {
		if n&1 != 0 {
			crcA = mulMod(crcA, op, p)
		}
		op = mulMod(op, op, p)
	}
	return crcA ^ crcB
}

// mulMod returns a·b mod P, the operands, the result and P in the
// reflected order (bit 31 is x^0).
func mulMod(a, b, poly uint32) uint32 {
	var p uint32
	// Walk a's coefficients from x^0 (bit 31) up, with b multiplied by x
	// (shifted right, reduced by P when x^31 overflows) at each step.
	for m := uint32(1) << 31; m != 0 && a != 0; m >>= 1 {
		if a&m != 0 {
			p ^= b
			a ^= m
		}
		if b&1 != 0 {
			b = b>>1 ^ poly
		} else {
			b >>= 1
		}
	}
	return p
}
