package crc32c

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/rand"
	"testing"
)

// Every kernel must give hash/crc32's CRC for every input, for both
// polynomials: the tests run each kernel this CPU has (kernels) and the
// plain Update and UpdateIEEE on the same inputs, at every length up to
// 4 KiB, every start alignment within a cache line, random initial CRCs
// and random splits into pieces.

// polys are the polynomials under test: each one's Update.
var polys = []struct {
	name   string
	p      *polynomial
	update func(uint32, []byte) uint32
}{
	{"castagnoli", castagnoli, Update},
	{"ieee", ieee, UpdateIEEE},
}

// variant is a way to compute a CRC under test, with the reference it
// must equal.
type variant struct {
	name string
	fn   func(uint32, []byte) uint32
	ref  func(uint32, []byte) uint32
}

// variants are the ways to compute the CRCs under test: Update and
// UpdateIEEE as they select, and each kernel forced, for each polynomial.
func variants() []variant {
	var vs []variant
	for _, pl := range polys {
		tab := crc32.MakeTable(pl.p.rev)
		want := func(crc uint32, b []byte) uint32 { return crc32.Update(crc, tab, b) }
		vs = append(vs, variant{pl.name + "/Update", pl.update, want})
		for _, k := range kernels() {
			vs = append(vs, variant{pl.name + "/" + k.name, func(crc uint32, b []byte) uint32 { return update(crc, b, k, pl.p) }, want})
		}
	}
	return vs
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	r.Read(b)
	return b
}

func TestKernelsAvailable(t *testing.T) {
	names := []string{}
	for _, k := range kernels() {
		names = append(names, k.name)
		if k.min < 64 {
			t.Errorf("kernel %s: min %d is under the 64 bytes fold takes", k.name, k.min)
		}
	}
	t.Logf("kernels on this CPU: %v (Update uses %v, UpdateIEEE %v)", names, best, bestIEEE)

	if len(names) == 0 && best != nil || len(names) > 0 && best != kernels()[0] {
		t.Errorf("best = %v, want the first of %v", best, names)
	}
}

func TestKnownValues(t *testing.T) {
	// The check value of CRC-32C ("123456789") and RFC 3720's iSCSI
	// examples (B.4): 32 bytes of zeros, of 0xff, ascending, descending.
	asc, desc, ff := make([]byte, 32), make([]byte, 32), make([]byte, 32)
	for i := range 32 {
		asc[i], desc[i], ff[i] = byte(i), byte(31-i), 0xff
	}
	cases := []struct {
		in   []byte
		want uint32
	}{
		{[]byte("123456789"), 0xe3069283},
		{make([]byte, 32), 0x8a9136aa},
		{ff, 0x62a8ab43},
		{asc, 0x46dd794e},
		{desc, 0x113fdb5c},
		{nil, 0},
	}
	for _, c := range cases {
		if got := Checksum(c.in); got != c.want {
			t.Errorf("Checksum(% x) = %08x, want %08x", c.in, got, c.want)
		}
	}
	// The check value of the IEEE CRC-32, and a length the kernels take.
	long := make([]byte, 4096)
	for i := range long {
		long[i] = byte(i * 7)
	}
	for _, in := range [][]byte{[]byte("123456789"), long} {
		if got, want := UpdateIEEE(0, in), crc32.ChecksumIEEE(in); got != want {
			t.Errorf("UpdateIEEE(0, %d bytes) = %08x, want %08x", len(in), got, want)
		}
	}
	if got := UpdateIEEE(0, []byte("123456789")); got != 0xcbf43926 {
		t.Errorf("UpdateIEEE(0, \"123456789\") = %08x, want cbf43926", got)
	}
}

func TestEveryLength(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	buf := randBytes(r, 4096+64)
	for _, v := range variants() {
		for n := 0; n <= 4096; n++ {
			off := n % 64
			b := buf[off : off+n]
			crc := r.Uint32()
			if got, want := v.fn(crc, b), v.ref(crc, b); got != want {
				t.Fatalf("%s: length %d at offset %d, crc %08x: got %08x, want %08x", v.name, n, off, crc, got, want)
			}
		}
	}
}

// TestFold calls each kernel's fold directly at every length it takes up
// to 4 KiB, below the min from which Update uses it too.
func TestFold(t *testing.T) {
	r := rand.New(rand.NewSource(6))
	buf := randBytes(r, 4096+64)
	for _, pl := range polys {
		tab := crc32.MakeTable(pl.p.rev)
		for _, k := range kernels() {
			for n := 64; n <= 4096; n += 16 {
				off := r.Intn(64)
				b := buf[off : off+n]
				reg := r.Uint32()
				if got, want := pl.p.reduce(k.fold(reg, b, pl.p.consts)), ^crc32.Update(^reg, tab, b); got != want {
					t.Fatalf("%s/%s: fold(%08x, %d bytes at offset %d) reduces to %08x, want %08x", pl.name, k.name, reg, n, off, got, want)
				}
			}
		}
	}
}

func TestEveryAlignment(t *testing.T) {
	r := rand.New(rand.NewSource(2))
	buf := randBytes(r, 70000)
	for _, v := range variants() {
		for _, n := range []int{16, 64, 255, 256, 257, 1000, 4096, 65536 + 17} {
			for off := range 64 {
				b := buf[off : off+n]
				crc := r.Uint32()
				if got, want := v.fn(crc, b), v.ref(crc, b); got != want {
					t.Fatalf("%s: length %d at offset %d, crc %08x: got %08x, want %08x", v.name, n, off, crc, got, want)
				}
			}
		}
	}
}

func TestLongInputs(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	buf := randBytes(r, 5<<20)
	lengths := []int{1 << 20, 4<<20 + 1, 5<<20 - 64}
	for range 6 {
		lengths = append(lengths, r.Intn(5<<20-64))
	}
	for _, v := range variants() {
		for _, n := range lengths {
			off := r.Intn(64)
			b := buf[off : off+n]
			crc := r.Uint32()
			if got, want := v.fn(crc, b), v.ref(crc, b); got != want {
				t.Fatalf("%s: length %d at offset %d: got %08x, want %08x", v.name, n, off, got, want)
			}
		}
	}
}

// TestSpecialInputs runs inputs whose folds carry many or few bits: all
// zeros, all ones, one bit set at each of many positions.
func TestSpecialInputs(t *testing.T) {
	for _, v := range variants() {
		for _, n := range []int{64, 256, 4096, 1 << 16} {
			for _, fill := range []byte{0, 0xff} {
				b := make([]byte, n)
				for i := range b {
					b[i] = fill
				}
				for _, crc := range []uint32{0, 0xffffffff} {
					if got, want := v.fn(crc, b), v.ref(crc, b); got != want {
						t.Fatalf("%s: %d bytes of %#x, crc %08x: got %08x, want %08x", v.name, n, fill, crc, got, want)
					}
				}
			}
			b := make([]byte, n)
			for bit := 0; bit < 8*n; bit += 1 + bit/7 {
				b[bit/8] = 1 << (bit % 8)
				if got, want := v.fn(0, b), v.ref(0, b); got != want {
					t.Fatalf("%s: %d bytes with bit %d set: got %08x, want %08x", v.name, n, bit, got, want)
				}
				b[bit/8] = 0
			}
		}
	}
}

func TestIncremental(t *testing.T) {
	r := rand.New(rand.NewSource(4))
	buf := randBytes(r, 1<<20)
	for _, v := range variants() {
		for trial := range 200 {
			n := r.Intn(len(buf))
			if trial%2 == 0 {
				n = r.Intn(8192)
			}
			b := buf[:n]
			crc := r.Uint32()
			want := v.ref(crc, b)
			got := crc
			for rest := b; len(rest) > 0; {
				k := r.Intn(len(rest)) + 1
				if r.Intn(2) == 0 {
					k = min(k, r.Intn(600)+1) // many short pieces, across the kernels' minimum
				}
				got = v.fn(got, rest[:k])
				rest = rest[k:]
			}
			if got != want {
				t.Fatalf("%s: %d bytes in random pieces, crc %08x: got %08x, want %08x", v.name, n, crc, got, want)
			}
		}
	}
}

func FuzzUpdate(f *testing.F) {
	f.Add(uint32(0), []byte("123456789"), 0)
	f.Add(uint32(0xffffffff), make([]byte, 300), 17)
	f.Add(uint32(0x12345678), make([]byte, 4096), 1000)
	f.Fuzz(func(t *testing.T, crc uint32, b []byte, split int) {
		if split < 0 {
			split = -split
		}
		if len(b) > 0 {
			split %= len(b) + 1
		} else {
			split = 0
		}
		for _, v := range variants() {
			want := v.ref(crc, b)
			if got := v.fn(crc, b); got != want {
				t.Fatalf("%s(%08x, %d bytes) = %08x, want %08x", v.name, crc, len(b), got, want)
			}
			if got := v.fn(v.fn(crc, b[:split]), b[split:]); got != want {
				t.Fatalf("%s(%08x, %d bytes split at %d) = %08x, want %08x", v.name, crc, len(b), split, got, want)
			}
		}
	})
}

func (k *kernel) String() string { return fmt.Sprintf("kernel %s (from %d bytes)", k.name, k.min) }

// A state that is the 64 bytes themselves (one block folded into a zero
// state) gives their checksum; so does every state congruent to the
// bytes, which Folded's other callers check (package dtype).
func TestFolded(t *testing.T) {
	var st [64]byte
	if got := Folded(&st, 0); got != 0 {
		t.Errorf("Folded(zero, 0) = %08x", got)
	}
	for i := range st {
		st[i] = byte(i*37 + 5)
	}
	if got, want := Folded(&st, 64), Checksum(st[:]); got != want {
		t.Errorf("Folded(block, 64) = %08x, want %08x", got, want)
	}
	// Longer inputs, folded here as the kernels of other packages do it,
	// with a carry-less multiplication in Go.
	rng := rand.New(rand.NewSource(78))
	for _, blocks := range []int{1, 2, 3, 17} {
		b := make([]byte, 64*blocks)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		var st [64]byte
		k := Fold64Pair()
		for off := 0; off < len(b); off += 64 {
			for lane := 0; lane < 64; lane += 16 {
				h := binary.LittleEndian.Uint64(st[lane:])
				l := binary.LittleEndian.Uint64(st[lane+8:])
				a0, a1 := clmul(h, k[0])
				b0, b1 := clmul(l, k[1])
				binary.LittleEndian.PutUint64(st[lane:], a0^b0^binary.LittleEndian.Uint64(b[off+lane:]))
				binary.LittleEndian.PutUint64(st[lane+8:], a1^b1^binary.LittleEndian.Uint64(b[off+lane+8:]))
			}
		}
		if got, want := Folded(&st, int64(len(b))), Checksum(b); got != want {
			t.Errorf("%d blocks: Folded = %08x, want %08x", blocks, got, want)
		}
	}
}

// clmul returns the carry-less product of a and b as (low, high) 64-bit
// halves, as PCLMULQDQ gives it.
func clmul(a, b uint64) (lo, hi uint64) {
	for i := range 64 {
		if b>>i&1 != 0 {
			lo ^= a << i
			if i > 0 {
				hi ^= a >> (64 - i)
			}
		}
	}
	return lo, hi
}
