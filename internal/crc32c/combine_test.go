package crc32c

import (
	"hash/crc32"
	"math/rand"
	"testing"
)

// TestCombine checks Combine against the CRC of the concatenation, for
// every split of short inputs and random splits of long ones, and against
// the zero-byte operator computed another way (appending n zero bytes is
// what Combine multiplies by) for lengths too long to hash.
func TestCombine(t *testing.T) {
	testCombine(t, "CRC-32C", Checksum, Combine, crc32.Castagnoli)
}

// TestCombineIEEE is TestCombine for the IEEE polynomial (zip's CRC-32).
func TestCombineIEEE(t *testing.T) {
	testCombine(t, "CRC-32", crc32.ChecksumIEEE, CombineIEEE, crc32.IEEE)
}

func testCombine(t *testing.T, name string, Checksum func([]byte) uint32, Combine func(a, b uint32, n int64) uint32, poly uint32) {
	t.Helper()
	r := rand.New(rand.NewSource(7))
	b := randBytes(r, 300)
	for n := range len(b) + 1 {
		for k := 0; k <= n; k++ {
			if got, want := Combine(Checksum(b[:k]), Checksum(b[k:n]), int64(n-k)), Checksum(b[:n]); got != want {
				t.Fatalf("%s: Combine at %d of %d bytes = %08x, want %08x", name, k, n, got, want)
			}
		}
	}
	big := randBytes(r, 3<<20)
	for range 20 {
		k := r.Intn(len(big))
		if got, want := Combine(Checksum(big[:k]), Checksum(big[k:]), int64(len(big)-k)), Checksum(big); got != want {
			t.Fatalf("%s: Combine at %d of %d bytes = %08x, want %08x", name, k, len(big), got, want)
		}
	}
	// Long runs of zeros: Combine(a, crc(zeros), n) is the CRC of A
	// followed by n zeros; zerosOp applies the same operator by doubling
	// a run of zeros, independent of Combine's square-and-multiply order.
	for _, n := range []int64{1 << 20, 1<<32 + 12345, 1<<40 - 1, 1<<62 + 3} {
		a := r.Uint32()
		if got, want := Combine(a, 0, n), zerosOp(a, n, poly); got != want {
			t.Fatalf("%s: Combine(%08x, 0, %d) = %08x, want %08x", name, a, n, got, want)
		}
	}
}

// zerosOp returns the register a multiplied by x^(8n) mod P, from the
// bit-serial definition (one zero bit: shift, reduce) raised by repeated
// squaring of the 32×32 matrix of that linear map.
func zerosOp(a uint32, n int64, poly uint32) uint32 {
	var m [32]uint32 // m[i]: the image of bit i
	for i := range 32 {
		v := uint32(1) << i
		for range 8 { // one zero byte, bit by bit
			if v&1 != 0 {
				v = v>>1 ^ poly
			} else {
				v >>= 1
			}
		}
		m[i] = v
	}
	apply := func(m *[32]uint32, v uint32) uint32 {
		var s uint32
		for i := range 32 {
			if v>>i&1 != 0 {
				s ^= m[i]
			}
		}
		return s
	}
	for ; n > 0; n >>= 1 {
		if n&1 != 0 {
			a = apply(&m, a)
		}
		var sq [32]uint32
		for i := range 32 {
			sq[i] = apply(&m, m[i])
		}
		m = sq
	}
	return a
}

func BenchmarkCombine(b *testing.B) {
	for b.Loop() {
		Combine(0x12345678, 0x9abcdef0, 2<<20)
	}
}

func BenchmarkCombineIEEE(b *testing.B) {
	for b.Loop() {
		CombineIEEE(0x12345678, 0x9abcdef0, 2<<20)
	}
}
