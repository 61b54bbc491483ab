//go:build amd64 && !purego

package crc32c

import (
	"encoding/binary"
	"hash/crc32"
	"math/bits"
	"math/rand"
	"testing"
)

// xPowMod returns x^n mod P for the polynomial of reflected form rev, in
// the plain (not reflected) order: bit i is the coefficient of x^i.
func xPowMod(n int, rev uint32) uint32 {
	p := bits.Reverse32(rev) // x^32 + p: the low 32 coefficients
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
func foldConst(n int, rev uint32) uint64 { return uint64(bits.Reverse32(xPowMod(n, rev))) << 1 }

// foldDists are the distances, in bits, of foldK's pairs.
var foldDists = map[int]int{k2048: 2048, k1024: 1024, k512: 512, k384: 384, k256: 256, k128: 128}

// TestFoldConstants recomputes every entry of foldK and foldKIEEE from
// their polynomials. On a mismatch it prints the table as it should read.
func TestFoldConstants(t *testing.T) {
	for _, pl := range polys {
		k := pl.p.consts
		for i, d := range foldDists {
			h, l := foldConst(d+32, pl.p.rev), foldConst(d-32, pl.p.rev)
			if k[2*i] != h || k[2*i+1] != l {
				t.Errorf("%s: pair %d (d = %d) = %#011x, %#011x; want x^%d mod P = %#011x and x^%d mod P = %#011x",
					pl.name, i, d, k[2*i], k[2*i+1], d+32, h, d-32, l)
			}
		}
		if k[2*kZero] != 0 || k[2*kZero+1] != 0 || len(k) != 2*(kZero+1) || len(foldDists) != kZero {
			t.Errorf("%s: the constants must end with one zero pair: %#x", pl.name, k)
		}
	}
	if castagnoli.consts != &foldK || ieee.consts != &foldKIEEE {
		t.Errorf("the polynomials' constants are not foldK and foldKIEEE")
	}
}

// TestFoldStep checks what the assembly relies on, in Go: for a 16-byte
// block A and each pair of constants, H·K_H ⊕ L·K_L (PCLMULQDQ $0x00 and
// $0x11) is a 16-byte block with the CRC register of A followed by d/8
// zero bytes, so that xoring it into the block d bits ahead of A is the
// same as having A there.
func TestFoldStep(t *testing.T) {
	r := rand.New(rand.NewSource(5))
	for _, pl := range polys {
		k := pl.p.consts
		tab := crc32.MakeTable(pl.p.rev)
		register := func(b []byte) uint32 { return ^crc32.Update(0xffffffff, tab, b) }
		for i, d := range foldDists {
			for range 100 {
				a := randBytes(r, 16)
				h, l := binary.LittleEndian.Uint64(a), binary.LittleEndian.Uint64(a[8:])
				lo1, hi1 := clmul(h, k[2*i])
				lo2, hi2 := clmul(l, k[2*i+1])
				folded := binary.LittleEndian.AppendUint64(nil, lo1^lo2)
				folded = binary.LittleEndian.AppendUint64(folded, hi1^hi2)
				moved := append(a, make([]byte, d/8)...)
				if got, want := register(folded), register(moved); got != want {
					t.Fatalf("%s, d = %d: folding % x gives register %08x, want %08x", pl.name, d, a, got, want)
				}
				if got, want := pl.p.reduce(binary.LittleEndian.Uint64(a), binary.LittleEndian.Uint64(a[8:])), register(a); got != want {
					t.Fatalf("%s: reduce(% x) = %08x, want %08x", pl.name, a, got, want)
				}
			}
		}
	}
}

// TestBestIEEE: the IEEE polynomial uses the best kernel unless that is
// the PCLMULQDQ one, which is what hash/crc32 runs already.
func TestBestIEEE(t *testing.T) {
	want := best
	if best == sseKernel {
		want = nil
	}
	if bestIEEE != want {
		t.Errorf("bestIEEE = %v, want %v", bestIEEE, want)
	}
}
