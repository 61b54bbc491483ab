package dtype

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
)

// The vector kernels (arch_*.s) must give the same bytes and the same Stats
// as the portable kernels for every input. These tests run both on the same
// inputs: exhaustively for 8- and 16-bit sources, on edge values and
// millions of random bit patterns and realistic values for F32 sources, at
// many lengths and alignments so that every tail and fallback path runs.

// vecPairs lists the conversions that may have a vector kernel.
var vecPairs = []struct{ from, to DType }{
	{BF16, F32}, {F16, F32},
	{F8_E4M3, F32}, {F8_E5M2, F32}, {F8_E4M3FNUZ, F32}, {F8_E5M2FNUZ, F32}, {F8_E8M0, F32},
	{F32, BF16}, {F32, F16}, {F32, F8_E4M3}, {F32, F8_E5M2},
}

// vecUnderTest returns the vector kernel for the pair (falling back to the
// portable one) and the portable kernel, or skips when this build has no
// vector kernel for it.
func vecUnderTest(t testing.TB, from, to DType) (vec, ref kernel) {
	t.Helper()
	ref = referenceKernel(from, to)
	if ref == nil {
		t.Fatalf("no portable kernel for %v→%v", from, to)
	}
	vec = vecKernelFor(from, to, ref)
	if vec == nil {
		t.Skipf("no vector kernel for %v→%v in this build", from, to)
	}
	return vec, ref
}

// compareKernels runs both kernels on src and fails on any difference in the
// output bytes or the Stats.
func compareKernels(t *testing.T, name string, vec, ref kernel, from, to DType, src []byte, opts Options) {
	t.Helper()
	n := len(src) * 8 / from.Bits()
	outLen := n * to.Bits() / 8
	got := make([]byte, outLen)
	want := make([]byte, outLen)
	for i := range got { // make stale bytes visible
		got[i], want[i] = 0xa5, 0x5a
	}
	var gs, ws Stats
	vec(got, src, opts, &gs)
	ref(want, src, opts, &ws)
	if gs != ws {
		t.Errorf("%s %v→%v %+v: stats differ:\nvector   %+v\nportable %+v", name, from, to, opts, gs, ws)
	}
	for i := range got {
		if got[i] != want[i] {
			e := i / (to.Bits() / 8)
			in := src[e*from.Bits()/8 : (e+1)*from.Bits()/8]
			out := to.Bits() / 8
			t.Errorf("%s %v→%v %+v: element %d (input % x): vector % x, portable % x", name, from, to, opts, e, in,
				got[e*out:(e+1)*out], want[e*out:(e+1)*out])
			return
		}
	}
}

var bothModes = []Options{{}, {Saturate: true}}

func TestVecWiden16Exhaustive(t *testing.T) {
	for _, from := range []DType{BF16, F16} {
		t.Run(from.String(), func(t *testing.T) { testWiden16(t, from) })
	}
}

func testWiden16(t *testing.T, from DType) {
	vec, ref := vecUnderTest(t, from, F32)
	all := make([]byte, 2*65536)
	for i := range 65536 {
		binary.LittleEndian.PutUint16(all[2*i:], uint16(i))
	}
	// Shuffled, so that special values are spread over many blocks.
	shuf := append([]byte(nil), all...)
	r := rand.New(rand.NewSource(1))
	r.Shuffle(65536, func(i, j int) {
		shuf[2*i], shuf[2*i+1], shuf[2*j], shuf[2*j+1] = shuf[2*j], shuf[2*j+1], shuf[2*i], shuf[2*i+1]
	})
	for _, opts := range bothModes {
		compareKernels(t, "ordered", vec, ref, from, F32, all, opts)
		compareKernels(t, "shuffled", vec, ref, from, F32, shuf, opts)
		// Every length and alignment near the block size.
		for off := 0; off < 4; off++ {
			for n := 0; n <= 130; n++ {
				compareKernels(t, fmt.Sprintf("off %d len %d", off, n), vec, ref, from, F32,
					shuf[2*(off*997):2*(off*997+n)], opts)
			}
		}
	}
}

func TestVecWiden8Exhaustive(t *testing.T) {
	for _, from := range []DType{F8_E4M3, F8_E5M2, F8_E4M3FNUZ, F8_E5M2FNUZ, F8_E8M0} {
		t.Run(from.String(), func(t *testing.T) { testWiden8(t, from) })
	}
}

func testWiden8(t *testing.T, from DType) {
	vec, ref := vecUnderTest(t, from, F32)
	codes := make([]byte, 256+8)
	for i := range codes {
		codes[i] = byte(i)
	}
	r := rand.New(rand.NewSource(2))
	shuf := make([]byte, 4096)
	for i := range shuf {
		shuf[i] = byte(r.Intn(256))
	}
	// Codes without NaN/Inf, so that whole runs take the fast path.
	finite := make([]byte, 0, 4096)
	for _, c := range shuf {
		if isFiniteCode(from, c) {
			finite = append(finite, c)
		}
	}
	for _, opts := range bothModes {
		for off := 0; off < 8; off++ {
			for n := 0; off+n <= len(codes) && n <= 257; n++ {
				compareKernels(t, fmt.Sprintf("codes off %d len %d", off, n), vec, ref, from, F32, codes[off:off+n], opts)
			}
		}
		compareKernels(t, "random", vec, ref, from, F32, shuf, opts)
		for n := 0; n <= 257; n++ {
			compareKernels(t, fmt.Sprintf("finite len %d", n), vec, ref, from, F32, finite[3:3+n], opts)
		}
		compareKernels(t, "finite", vec, ref, from, F32, finite, opts)
	}
}

// isFiniteCode reports whether an 8-bit code of d is a finite number the
// vector decoder handles without the portable kernel.
func isFiniteCode(d DType, c byte) bool {
	switch d {
	case F8_E4M3:
		return c&0x7f != 0x7f
	case F8_E5M2:
		return c&0x7f < 0x7c
	case F8_E4M3FNUZ, F8_E5M2FNUZ:
		return c != 0x80
	case F8_E8M0:
		return c != 0xff && c != 0
	}
	return false
}

// f32Edges returns float32 bit patterns at the edges of every narrow target:
// zeros, subnormals, ties and their neighbours, the largest finite values and
// just past them, infinities and NaN payloads, with both signs.
func f32Edges() []uint32 {
	var out []uint32
	add := func(b uint32) {
		for _, d := range []uint32{0, 1, 2, 0xffffffff, 0xfffffffe} {
			out = append(out, b+d, (b+d)^0x80000000)
		}
	}
	vals := []float64{0, 1, 0.5, 1.5, 2, 3, 448, 464, 465, 480, 57344, 61440, 61439, 65504, 65520, 65536,
		0x1p-6, 0x1p-7, 0x1p-9, 0x1p-10, 0x1.8p-10, 0x1p-11, 0x1p-14, 0x1p-15, 0x1p-16, 0x1p-17, 0x1.8p-17, 0x1p-18,
		0x1p-24, 0x1p-25, 0x1.8p-25, 0x1p-26, 0x1.fep127, 0x1.ffp127, 0x1p-126, 0x1p-133, 0x1p-134, 0x1p-149,
		math.MaxFloat32, 240, 248, 256, 1e-3, 1e-8, 1e-30, 1e30}
	for _, v := range vals {
		add(math.Float32bits(float32(v)))
	}
	// Every exponent with mantissas around the rounding points of each
	// target (shifts 13, 16, 20, 21).
	for e := uint32(0); e < 256; e++ {
		for _, m := range []uint32{0, 1, 0x7fffff, 0x400000, 0x1000, 0x2000, 0x3000, 0x8000, 0x10000, 0x18000,
			0x80000, 0x100000, 0x180000, 0x100000 | 0x80000, 0x200000, 0x300000, 0x600000, 0x700000} {
			add(e<<23 | m&0x7fffff)
		}
	}
	// NaN payloads.
	for _, p := range []uint32{1, 0x2000, 0x400000, 0x400001, 0x7fffff, 0x1fff, 0x3fffff} {
		add(0x7f800000 | p)
	}
	return out
}

func u32Bytes(v []uint32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], x)
	}
	return b
}

// realisticF32 returns n float32 values like tensor contents: normally
// distributed with a spread of scales, some exact zeros.
func realisticF32(r *rand.Rand, n int, scale float64) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		v := r.NormFloat64() * scale
		if r.Intn(16) == 0 {
			v = 0
		}
		out[i] = math.Float32bits(float32(v))
	}
	return out
}

func TestVecNarrowF32(t *testing.T) {
	for _, to := range []DType{BF16, F16, F8_E4M3, F8_E5M2} {
		t.Run(to.String(), func(t *testing.T) { testNarrowF32(t, to) })
	}
}

func testNarrowF32(t *testing.T, to DType) {
	nRandom := 1 << 21
	if testing.Short() {
		nRandom = 1 << 16
	}
	vec, ref := vecUnderTest(t, F32, to)
	r := rand.New(rand.NewSource(3))
	edges := f32Edges()
	r.Shuffle(len(edges), func(i, j int) { edges[i], edges[j] = edges[j], edges[i] })
	rnd := make([]uint32, nRandom)
	for i := range rnd {
		rnd[i] = r.Uint32()
	}
	// Random bit patterns with the exponent drawn near the target's range,
	// so that most blocks stay on the fast path while hitting every
	// mantissa.
	near := make([]uint32, nRandom)
	for i := range near {
		e := uint32(127 - 20 + r.Intn(40))
		near[i] = r.Uint32()&0x807fffff | e<<23
	}
	// Each edge value alone in an otherwise ordinary block, at every lane.
	var lone []uint32
	for i, e := range edges {
		blk := realisticF32(r, 32, 1)
		blk[i%32] = e
		lone = append(lone, blk...)
	}
	// Random bit patterns near the range that neither overflow nor
	// underflow on their own: whole runs for the fast path.
	var inRange []uint32
	var one [4]byte
	for _, u := range near {
		var st Stats
		ref(one[:], u32Bytes([]uint32{u}), Options{}, &st)
		if !st.Lossy() {
			inRange = append(inRange, u)
		}
	}
	for _, opts := range bothModes {
		compareKernels(t, "edges", vec, ref, F32, to, u32Bytes(edges), opts)
		compareKernels(t, "lone edges", vec, ref, F32, to, u32Bytes(lone), opts)
		compareKernels(t, "in range", vec, ref, F32, to, u32Bytes(inRange), opts)
		compareKernels(t, "random bits", vec, ref, F32, to, u32Bytes(rnd), opts)
		compareKernels(t, "near range", vec, ref, F32, to, u32Bytes(near), opts)
		for _, scale := range []float64{1e-4, 1, 100, 1e4} {
			compareKernels(t, fmt.Sprintf("realistic ×%g", scale), vec, ref, F32, to,
				u32Bytes(realisticF32(r, 1<<14, scale)), opts)
		}
		// Edge values dropped one at a time into ordinary blocks, at
		// every position and tail length.
		base := realisticF32(r, 300, 1)
		for n := 0; n <= 257; n++ {
			v := append([]uint32(nil), base[:n]...)
			if n > 0 {
				v[r.Intn(n)] = edges[r.Intn(len(edges))]
			}
			compareKernels(t, fmt.Sprintf("len %d", n), vec, ref, F32, to, u32Bytes(v), opts)
		}
	}
}

// TestVecFastPathTaken makes sure the vector kernels handle ordinary data
// themselves rather than silently leaving everything to the portable kernel.
func TestVecFastPathTaken(t *testing.T) {
	r := rand.New(rand.NewSource(4))
	for _, p := range vecPairs {
		var calls int
		ref := referenceKernel(p.from, p.to)
		counting := func(dst, src []byte, opts Options, st *Stats) {
			calls += len(src)
			ref(dst, src, opts, st)
		}
		vec := vecKernelFor(p.from, p.to, counting)
		if vec == nil {
			continue
		}
		// Ordinary values of the source type, from realistic F32 values
		// converted by the portable kernel.
		vals := u32Bytes(realisticF32(r, 4096, 1))
		src := vals
		if p.from != F32 {
			src = make([]byte, 4096*p.from.Bits()/8)
			if enc := referenceKernel(F32, p.from); enc != nil {
				var st Stats
				enc(src, vals, Options{Saturate: true}, &st)
			} else {
				for i := range src {
					src[i] = byte(r.Intn(256))
				}
			}
			for i := range src { // keep only finite, plainly decodable codes
				if p.from.Bits() == 8 && !isFiniteCode(p.from, src[i]) {
					src[i] = 0x38
				}
			}
		}
		dst := make([]byte, 4096*p.to.Bits()/8)
		var st Stats
		vec(dst, src, Options{}, &st)
		// No value overflows, and underflow is counted by the vector code:
		// the portable kernel only gets the tail (4096 is a whole number of
		// blocks).
		if calls != 0 {
			t.Errorf("%v→%v: portable kernel converted %d of %d bytes", p.from, p.to, calls, len(src))
		}
	}
}

// TestVecSpecialRuns checks the back-off when special values come in long
// runs: the result must not change.
func TestVecSpecialRuns(t *testing.T) {
	for _, p := range vecPairs {
		if p.from != F32 {
			continue
		}
		t.Run(p.to.String(), func(t *testing.T) { testSpecialRuns(t, p.from, p.to) })
	}
}

func testSpecialRuns(t *testing.T, from, to DType) {
	vec, ref := vecUnderTest(t, from, to)
	r := rand.New(rand.NewSource(5))
	v := realisticF32(r, 50000, 1)
	for i := 1000; i < 20000; i++ {
		v[i] = 0x7fc00000 // a run of NaN
	}
	for i := 30000; i < 50000; i += 97 {
		v[i] = 0x7f800000 // scattered Inf
	}
	for _, opts := range bothModes {
		compareKernels(t, "runs", vec, ref, from, to, u32Bytes(v), opts)
	}
}

// TestVecMaxAbs checks that the largest magnitude is found in any lane.
func TestVecMaxAbs(t *testing.T) {
	for _, p := range vecPairs {
		if p.from != F32 {
			continue
		}
		t.Run(p.to.String(), func(t *testing.T) { testMaxAbs(t, p.from, p.to) })
	}
}

func testMaxAbs(t *testing.T, from, to DType) {
	vec, ref := vecUnderTest(t, from, to)
	for pos := 0; pos < 96; pos++ {
		v := make([]uint32, 96)
		for i := range v {
			v[i] = math.Float32bits(0.25)
		}
		v[pos] = math.Float32bits(-3.5)
		compareKernels(t, fmt.Sprintf("max at %d", pos), vec, ref, from, to, u32Bytes(v), Options{})
		var st Stats
		vec(make([]byte, 96*to.Bits()/8), u32Bytes(v), Options{}, &st)
		if diff := cmp.Diff(3.5, st.MaxAbs); diff != "" {
			t.Errorf("%v→%v max at %d: %s", from, to, pos, diff)
		}
	}
}

// referenceKernel is the kernel the vector kernels are compared with.
func referenceKernel(from, to DType) kernel { return genericKernel(from, to) }

// TestVecNonTemporal runs conversions whose output is large enough for the
// non-temporal stores, into an aligned and a misaligned dst, with special
// values sprinkled in so that the fallback runs between vector stretches.
func TestVecNonTemporal(t *testing.T) {
	if testing.Short() {
		t.Skip("large buffers")
	}
	for _, p := range vecPairs {
		t.Run(p.from.String()+"to"+p.to.String(), func(t *testing.T) {
			vec, ref := vecUnderTest(t, p.from, p.to)
			n := ((4<<20)/(p.to.Bits()/8) + 12345) &^ 1 // output past ntMin
			r := rand.New(rand.NewSource(6))
			f := realisticF32(r, n, 1)
			for i := 0; i < n; i += 1 + r.Intn(5000) {
				f[i] = math.Float32bits(float32(math.Inf(1)))
			}
			src := u32Bytes(f)
			if p.from != F32 {
				src = make([]byte, n*p.from.Bits()/8)
				var st Stats
				genericKernel(F32, p.from)(src, u32Bytes(f), Options{}, &st)
			}
			outLen := n * p.to.Bits() / 8
			buf := make([]byte, outLen+64)
			base := int(-uintptr(unsafe.Pointer(&buf[0])) & 31) // 32-byte aligned
			want := make([]byte, outLen)
			var ws Stats
			ref(want, src, Options{}, &ws)
			for _, off := range []int{base, base + 4} {
				dst := buf[off : off+outLen]
				var gs Stats
				vec(dst, src, Options{}, &gs)
				if gs != ws {
					t.Errorf("dst offset %d: stats differ:\nvector   %v\nportable %v", off-base, gs, ws)
				}
				if !bytes.Equal(dst, want) {
					t.Errorf("dst offset %d: output differs", off-base)
				}
			}
		})
	}
}

// FuzzVecKernels compares the vector and portable kernels on arbitrary
// bytes, for every pair with a vector kernel and both Saturate modes.
func FuzzVecKernels(f *testing.F) {
	f.Add(uint8(0), false, []byte{0x80, 0x7f, 0xff, 0x7f, 0x01, 0x00, 0x00, 0x00})
	f.Add(uint8(7), true, u32Bytes(f32Edges()[:200]))
	f.Add(uint8(9), false, u32Bytes(realisticF32(rand.New(rand.NewSource(7)), 100, 300)))
	codes := make([]byte, 300)
	for i := range codes {
		codes[i] = byte(i * 37)
	}
	f.Add(uint8(2), false, codes)
	f.Add(uint8(3), true, codes)
	f.Fuzz(func(t *testing.T, pair uint8, sat bool, data []byte) {
		p := vecPairs[int(pair)%len(vecPairs)]
		ref := referenceKernel(p.from, p.to)
		vec := vecKernelFor(p.from, p.to, ref)
		if vec == nil {
			return
		}
		size := p.from.Bits() / 8
		src := data[:len(data)/size*size]
		compareKernels(t, "fuzz", vec, ref, p.from, p.to, src, Options{Saturate: sat})
	})
}

// TestArchKernelWired checks that Convert uses the vector kernels where this
// build has them, and that its results (one goroutine or several) match the
// portable kernel.
func TestArchKernelWired(t *testing.T) {
	r := rand.New(rand.NewSource(8))
	for _, p := range vecPairs {
		has := vecKernelFor(p.from, p.to, genericKernel(p.from, p.to)) != nil
		if got := archKernel(p.from, p.to) != nil; got != has {
			t.Errorf("%v→%v: archKernel present %v, vector kernel present %v", p.from, p.to, got, has)
		}
		n := 1<<19 + 77
		f := u32Bytes(realisticF32(r, n, 10))
		src := f
		if p.from != F32 {
			src = make([]byte, n*p.from.Bits()/8)
			var st Stats
			genericKernel(F32, p.from)(src, f, Options{}, &st)
		}
		want := make([]byte, n*p.to.Bits()/8)
		var ws Stats
		genericKernel(p.from, p.to)(want, src, Options{}, &ws)
		for _, workers := range []int{1, 3} {
			got := make([]byte, len(want))
			gs, err := Convert(got, p.to, src, p.from, Options{Workers: workers})
			if err != nil {
				t.Fatal(err)
			}
			if gs != ws || !bytes.Equal(got, want) {
				t.Errorf("%v→%v workers %d: Convert differs from the portable kernel: %v vs %v", p.from, p.to, workers, gs, ws)
			}
		}
	}
}

// TestVecStreaming runs conversions with Options.Streaming (non-temporal
// stores below ntMin) at every dst offset within the kernels' alignment,
// so that the aligning head converted by the portable kernel takes every
// length, with special values that send blocks to the fallback, and short
// lengths where no aligned block fits. It also runs Convert with
// Streaming, one goroutine and several.
func TestVecStreaming(t *testing.T) {
	for _, p := range vecPairs {
		t.Run(p.from.String()+"to"+p.to.String(), func(t *testing.T) {
			vec, ref := vecUnderTest(t, p.from, p.to)
			r := rand.New(rand.NewSource(9))
			for _, n := range []int{0, 1, 31, 40, 63, 64, 100, 1000, 20011} {
				f := realisticF32(r, n, 1)
				for i := 0; i < n; i += 1 + r.Intn(700) {
					f[i] = math.Float32bits(float32(math.NaN()))
				}
				src := u32Bytes(f)
				if p.from != F32 {
					src = make([]byte, n*p.from.Bits()/8)
					var st Stats
					genericKernel(F32, p.from)(src, u32Bytes(f), Options{}, &st)
				}
				outLen := n * p.to.Bits() / 8
				want := make([]byte, outLen)
				var ws Stats
				ref(want, src, Options{}, &ws)
				buf := make([]byte, outLen+64)
				base := int(-uintptr(unsafe.Pointer(&buf[0])) & 31)
				for off := base; off < base+32; off++ {
					dst := buf[off : off+outLen]
					for i := range dst {
						dst[i] = 0xa5
					}
					var gs Stats
					vec(dst, src, Options{Streaming: true}, &gs)
					if gs != ws || !bytes.Equal(dst, want) {
						t.Fatalf("n %d, dst offset %d: differs from the portable kernel: stats %v vs %v", n, off-base, gs, ws)
					}
				}
			}
			n := 1<<19 + 77 // split across goroutines by Convert
			f := u32Bytes(realisticF32(r, n, 10))
			src := f
			if p.from != F32 {
				src = make([]byte, n*p.from.Bits()/8)
				var st Stats
				genericKernel(F32, p.from)(src, f, Options{}, &st)
			}
			want := make([]byte, n*p.to.Bits()/8)
			var ws Stats
			ref(want, src, Options{}, &ws)
			for _, workers := range []int{1, 3} {
				got := make([]byte, len(want))
				gs, err := Convert(got, p.to, src, p.from, Options{Workers: workers, Streaming: true})
				if err != nil {
					t.Fatal(err)
				}
				if gs != ws || !bytes.Equal(got, want) {
					t.Errorf("Convert workers %d: differs from the portable kernel: %v vs %v", workers, gs, ws)
				}
			}
		})
	}
}
