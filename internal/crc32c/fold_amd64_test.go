//go:build amd64 && !purego

package crc32c

import (
	"encoding/binary"
	"math/bits"
	"math/rand"
	"testing"
)

// xPowMod returns x^n mod P for the Castagnoli polynomial, in the plain
// (not reflected) order: bit i is the coefficient of x^i. P is derived
// from the reflected form hash/crc32 names (crc32.Castagnoli).
func xPowMod(n int) uint32 {
	p := bits.Reverse32(0x82F63B78) // x^32 + 0x1EDC6F41: the low 32 coefficients
	v := uint32(1)
	for range n {
		carry := v>>31 != 0
		v <<= 1
		if carry {
			v ^= p
		}
	}
	return v
}

// foldConst is a constant as foldK stores it: 33-bit reflected.
func foldConst(n int) uint64 { return uint64(bits.Reverse32(xPowMod(n))) << 1 }

// foldDists are the distances, in bits, of foldK's pairs.
var foldDists = map[int]int{k2048: 2048, k1024: 1024, k512: 512, k384: 384, k256: 256, k128: 128}

// TestFoldConstants recomputes every entry of foldK from the polynomial.
// On a mismatch it prints the table as it should read.
func TestFoldConstants(t *testing.T) {
	for i, d := range foldDists {
		h, l := foldConst(d+32), foldConst(d-32)
		if foldK[2*i] != h || foldK[2*i+1] != l {
			t.Errorf("foldK pair %d (d = %d) = %#011x, %#011x; want x^%d mod P = %#011x and x^%d mod P = %#011x",
				i, d, foldK[2*i], foldK[2*i+1], d+32, h, d-32, l)
		}
	}
	if foldK[2*kZero] != 0 || foldK[2*kZero+1] != 0 || len(foldK) != 2*(kZero+1) || len(foldDists) != kZero {
		t.Errorf("foldK must end with one zero pair: %#x", foldK)
	}
}

// register returns the CRC register after b from a zero register.
func register(b []byte) uint32 { return ^ref(0xffffffff, b) }

// TestFoldStep checks what the assembly relies on, in Go: for a 16-byte
// block A and each pair of foldK, H·K_H ⊕ L·K_L (PCLMULQDQ $0x00 and
// $0x11) is a 16-byte block with the CRC register of A followed by d/8
// zero bytes, so that xoring it into the block d bits ahead of A is the
// same as having A there.
func TestFoldStep(t *testing.T) {
	r := rand.New(rand.NewSource(5))
	for i, d := range foldDists {
		for range 100 {
			a := randBytes(r, 16)
			h, l := binary.LittleEndian.Uint64(a), binary.LittleEndian.Uint64(a[8:])
			lo1, hi1 := clmul(h, foldK[2*i])
			lo2, hi2 := clmul(l, foldK[2*i+1])
			folded := binary.LittleEndian.AppendUint64(nil, lo1^lo2)
			folded = binary.LittleEndian.AppendUint64(folded, hi1^hi2)
			moved := append(a, make([]byte, d/8)...)
			if got, want := register(folded), register(moved); got != want {
				t.Fatalf("d = %d: folding % x gives register %08x, want %08x", d, a, got, want)
			}
		}
	}
}
