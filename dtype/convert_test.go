package dtype

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/x448/float16"
)

// narrowTargets are the float dtypes narrower than float32.
var narrowTargets = []DType{F16, BF16, F8_E4M3, F8_E5M2, F8_E4M3FNUZ, F8_E5M2FNUZ, F8_E8M0, F4, F6_E2M3, F6_E3M2}

// codes unpacks the element codes of b (dtype d).
func codes(d DType, b []byte) []uint32 {
	switch d.Bits() {
	case 4:
		out := make([]uint32, 0, 2*len(b))
		for _, x := range b {
			out = append(out, uint32(x&15), uint32(x>>4))
		}
		return out
	case 6:
		out := make([]uint32, 0, len(b)/3*4)
		for i := 0; i+3 <= len(b); i += 3 {
			w := uint32(b[i]) | uint32(b[i+1])<<8 | uint32(b[i+2])<<16
			for j := 0; j < 4; j++ {
				out = append(out, w>>(6*j)&63)
			}
		}
		return out
	case 8:
		out := make([]uint32, len(b))
		for i, x := range b {
			out[i] = uint32(x)
		}
		return out
	case 16:
		out := make([]uint32, len(b)/2)
		for i := range out {
			out[i] = uint32(binary.LittleEndian.Uint16(b[2*i:]))
		}
		return out
	case 32:
		out := make([]uint32, len(b)/4)
		for i := range out {
			out[i] = binary.LittleEndian.Uint32(b[4*i:])
		}
		return out
	}
	panic("codes: bits")
}

// pack is the inverse of codes.
func pack(d DType, c []uint32) []byte {
	switch d.Bits() {
	case 4:
		b := make([]byte, len(c)/2)
		for i := range b {
			b[i] = byte(c[2*i] | c[2*i+1]<<4)
		}
		return b
	case 6:
		b := make([]byte, 0, len(c)/4*3)
		for i := 0; i+4 <= len(c); i += 4 {
			w := c[i] | c[i+1]<<6 | c[i+2]<<12 | c[i+3]<<18
			b = append(b, byte(w), byte(w>>8), byte(w>>16))
		}
		return b
	case 8:
		b := make([]byte, len(c))
		for i, x := range c {
			b[i] = byte(x)
		}
		return b
	case 16:
		b := make([]byte, 2*len(c))
		for i, x := range c {
			binary.LittleEndian.PutUint16(b[2*i:], uint16(x))
		}
		return b
	}
	panic("pack: bits")
}

func mustConvert(t testing.TB, to DType, src []byte, from DType, opts Options) ([]byte, Stats) {
	t.Helper()
	n, err := from.Elements(len(src))
	if err != nil {
		t.Fatal(err)
	}
	nb, err := to.ByteLen(int64(n))
	if err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, nb)
	st, err := Convert(dst, to, src, from, opts)
	if err != nil {
		t.Fatalf("Convert %v->%v: %v", from, to, err)
	}
	return dst, st
}

func f32bytes(v []uint32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], x)
	}
	return b
}

func f64bytes(v []float64) []byte {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(x))
	}
	return b
}

// finiteValues returns the positive finite values of a format, ascending.
func finiteValues(d DType) []float64 {
	if d == F8_E8M0 {
		var v []float64
		for e := -127; e <= 127; e++ {
			v = append(v, math.Ldexp(1, e))
		}
		return v
	}
	f := refFor(d)
	var v []float64
	for c := uint32(0); c <= f.maxCode(); c++ {
		if x := f.value(c); x > 0 {
			v = append(v, x)
		}
	}
	return v
}

// edgeInputs returns float64 inputs around every interesting point of d:
// each value, each midpoint (a tie), values just off the midpoints, past
// max, tiny values, zeros, infinities and NaNs with payloads.
func edgeInputs(d DType, rng *rand.Rand, f64 bool) []float64 {
	vals := finiteValues(d)
	if len(vals) > 600 { // F16, BF16: a sample
		s := make([]float64, 0, 600)
		for i := 0; i < 300; i++ {
			j := rng.IntN(len(vals) - 1)
			s = append(s, vals[j], vals[j+1])
		}
		s = append(s, vals[:8]...)
		s = append(s, vals[len(vals)-8:]...)
		vals = s
	}
	near := func(x float64, dir int) float64 {
		if f64 {
			return math.Nextafter(x, float64(dir)*math.Inf(1))
		}
		return float64(math.Nextafter32(float32(x), float32(dir)*float32(math.Inf(1))))
	}
	var in []float64
	add := func(x float64) { in = append(in, x, -x) }
	maxV := vals[len(vals)-1]
	for i, x := range vals {
		add(x)
		add(near(x, 1))
		add(near(x, -1))
		next := 2 * maxV // past max: the "next" value with unbounded exponent
		if i+1 < len(vals) {
			next = vals[i+1]
		} else {
			next = maxV + (maxV - vals[i-1])
		}
		mid := (x + next) / 2
		if d == F8_E8M0 {
			mid = 1.5 * x
		}
		add(mid)
		add(near(mid, 1))
		add(near(mid, -1))
		if f64 {
			add(mid * (1 + 0x1p-40))
			add(mid * (1 - 0x1p-40))
		}
	}
	small := vals[0]
	for _, x := range []float64{0, small / 2, small / 4, small * 0.75, small * 1.25, 1e-40, 0x1p-149, 0x1p-127, 0x1p-126, 3 * 0x1p-128,
		maxV * 1.5, maxV * 4, 1e30, math.MaxFloat32, math.Inf(1)} {
		add(x)
	}
	if f64 {
		add(1e300)
		add(0x1p-1074)
	}
	return in
}

// nanBits32 are float32 NaNs with various signs and payloads.
var nanBits32 = []uint32{0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FFFFFFF, 0x7FA00000, 0x7F802000, 0x7F804000, 0x7FC02000}

func TestNarrowFromF32MatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, to := range narrowTargets {
		var in []uint32
		for _, x := range edgeInputs(to, rng, false) {
			in = append(in, math.Float32bits(float32(x)))
		}
		in = append(in, nanBits32...)
		for i := 0; i < 20000; i++ {
			in = append(in, rng.Uint32())
		}
		for len(in)%8 != 0 {
			in = append(in, 0)
		}
		matchesReference(t, to, F32, in, f32bytes(in),
			func(x uint32, sat bool, st *Stats) uint32 { return refEncodeF32(to, x, sat, st) },
			func(x uint32) string { return fmt.Sprintf("%#08x (%g)", x, math.Float32frombits(x)) })
	}
}

// matchesReference converts src, the values in of dtype from, to dtype to
// with and without Saturate, and checks every code and the statistics
// against ref's; show formats an input for the failure messages.
func matchesReference[T any](t *testing.T, to, from DType, in []T, src []byte, ref func(x T, sat bool, st *Stats) uint32, show func(T) string) {
	t.Helper()
	for _, sat := range []bool{false, true} {
		got, st := mustConvert(t, to, src, from, Options{Saturate: sat, Workers: 1})
		var want Stats
		gc := codes(to, got)
		bad := 0
		for i, x := range in {
			w := ref(x, sat, &want)
			if gc[i] != w && bad < 10 {
				bad++
				t.Errorf("%v %s -> %v sat=%v: got %#x, want %#x", from, show(x), to, sat, gc[i], w)
			}
		}
		if st != want {
			t.Errorf("%v -> %v sat=%v: stats\n got %v\nwant %v", from, to, sat, st, want)
		}
	}
}

func TestNarrowFromF64MatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	targets := append([]DType{F32}, narrowTargets...)
	for _, to := range targets {
		var in []float64
		if to == F32 {
			for i := 0; i < 2000; i++ {
				x := math.Float32frombits(rng.Uint32())
				m := float64(x) * (1 + (rng.Float64()-0.5)*0x1p-22)
				in = append(in, float64(x), m)
			}
			in = append(in, math.MaxFloat32, math.MaxFloat32*(1+0x1p-24), math.MaxFloat32*(1+0x1p-25), 0x1p-150, 0x1p-151, 0x1.8p-150, 0x1p-149*2.5, 1e-50, math.Inf(-1))
		} else {
			in = edgeInputs(to, rng, true)
		}
		for _, b := range []uint64{0x7FF8000000000000, 0xFFF8000000000000, 0x7FF0000000000001, 0x7FF4000000000000, 0x7FFFFFFFFFFFFFFF} {
			in = append(in, math.Float64frombits(b))
		}
		for i := 0; i < 20000; i++ {
			in = append(in, math.Float64frombits(rng.Uint64()))
		}
		for len(in)%8 != 0 {
			in = append(in, 0)
		}
		ref := func(x float64, sat bool, st *Stats) uint32 { return refEncodeF64(to, x, sat, st) }
		if to == F32 {
			ref = refF64toF32
		}
		matchesReference(t, to, F64, in, f64bytes(in), ref,
			func(x float64) string { return fmt.Sprintf("%#016x (%g)", math.Float64bits(x), x) })
	}
}

// refF64toF32 is the reference for F64 -> F32: Go's conversion (IEEE round
// to nearest even), NaNs quieted with their top payload bits.
func refF64toF32(x float64, sat bool, st *Stats) uint32 {
	st.Elements++
	b := math.Float64bits(x)
	s := uint32(b>>63) << 31
	switch {
	case math.IsNaN(x):
		st.NaN++
		return s | 0x7FC00000 | uint32(b&(1<<52-1)>>29)
	case math.IsInf(x, 0):
		if sat {
			st.Saturated++
			return s | 0x7F7FFFFF
		}
		st.Inf++
		return s | 0x7F800000
	}
	if math.Abs(x) > st.MaxAbs {
		st.MaxAbs = math.Abs(x)
	}
	y := float32(x)
	if math.IsInf(float64(y), 0) {
		st.Overflow++
		if sat {
			st.Saturated++
			return s | 0x7F7FFFFF
		}
		st.Inf++
	}
	if y == 0 && x != 0 {
		st.Underflow++
	}
	return math.Float32bits(y)
}

// TestEveryCodeDecodesExactly decodes every code of each type of 8 bits or
// less, compares it with the textbook value, and encodes it back.
func TestEveryCodeDecodesExactly(t *testing.T) {
	for _, d := range []DType{F8_E4M3, F8_E5M2, F8_E4M3FNUZ, F8_E5M2FNUZ, F8_E8M0, F4, F6_E2M3, F6_E3M2} {
		n := 1 << d.Bits()
		all := make([]uint32, n)
		for i := range all {
			all[i] = uint32(i)
		}
		src := pack(d, all)
		got32, _ := mustConvert(t, F32, src, d, Options{})
		got64, _ := mustConvert(t, F64, src, d, Options{})
		v32 := codes(F32, got32)
		for c := 0; c < n; c++ {
			var want float64
			if d == F8_E8M0 {
				want = math.Ldexp(1, c-127)
				if c == 255 {
					want = math.NaN()
				}
			} else {
				want = refFor(d).value(uint32(c))
			}
			g := math.Float32frombits(v32[c])
			g64 := math.Float64frombits(binary.LittleEndian.Uint64(got64[8*c:]))
			if math.IsNaN(want) {
				wantBits := uint32(0x7FC00000)
				if c >= 128 && d != F8_E8M0 {
					wantBits = 0xFFC00000 // sign kept; FNUZ's 0x80 decodes negative like ml_dtypes
				}
				if v32[c] != wantBits || !math.IsNaN(g64) {
					t.Errorf("%v code %#x: got %#x / %v, want NaN %#x", d, c, v32[c], g64, wantBits)
				}
				continue
			}
			if float64(g) != want || g64 != want || math.Signbit(float64(g)) != math.Signbit(want) {
				t.Errorf("%v code %#x: got %v / %v, want %v", d, c, g, g64, want)
			}
		}
		// Encode back: every non-NaN code is a fixed point.
		back, st := mustConvert(t, d, got32, F32, Options{})
		bc := codes(d, back)
		for c := 0; c < n; c++ {
			if bc[c] != uint32(c) && !math.IsNaN(float64(math.Float32frombits(v32[c]))) {
				t.Errorf("%v: code %#x -> %v -> %#x", d, c, math.Float32frombits(v32[c]), bc[c])
			}
		}
		if st.Overflow != 0 || st.Underflow != 0 || st.Saturated != 0 {
			t.Errorf("%v: round trip stats %v", d, st)
		}
	}
}

func TestWiden16Exhaustive(t *testing.T) {
	all := make([]uint32, 65536)
	for i := range all {
		all[i] = uint32(i)
	}
	for _, d := range []DType{BF16, F16} {
		src := pack(d, all)
		out, st := mustConvert(t, F32, src, d, Options{})
		out64, _ := mustConvert(t, F64, src, d, Options{})
		got := codes(F32, out)
		for i, g := range got {
			var want uint32
			if d == BF16 {
				want = uint32(i) << 16
			} else {
				want = math.Float32bits(float16.Frombits(uint16(i)).Float32())
				if i&0x7C00 == 0x7C00 && i&0x3FF != 0 {
					// x448 quiets NaNs; numpy (and ckpt) keep the payload.
					want = uint32(i&0x8000)<<16 | 0x7F800000 | uint32(i&0x3FF)<<13
				}
			}
			if g != want {
				t.Fatalf("%v %#04x: got %#08x, want %#08x", d, i, g, want)
			}
			g64 := math.Float64frombits(binary.LittleEndian.Uint64(out64[8*i:]))
			if f := math.Float32frombits(g); !(float64(f) == g64 || (f != f && g64 != g64)) {
				t.Fatalf("%v %#04x: F64 %v, F32 %v", d, i, g64, f)
			}
		}
		// 2 NaN patterns families per sign: 2*(2^m - 1) NaNs, 2 Infs.
		mb := 7
		if d == F16 {
			mb = 10
		}
		if st.NaN != 2*(1<<mb-1) || st.Inf != 2 || st.Elements != 65536 || st.Lossy() && (st.Overflow+st.Underflow+st.Saturated) != 0 {
			t.Errorf("%v widening stats %v", d, st)
		}
		// And back: every non-NaN pattern is a fixed point; F16 NaNs too
		// (numpy keeps the payload), BF16 NaNs become the canonical NaN.
		back, _ := mustConvert(t, d, out, F32, Options{})
		for i, c := range codes(d, back) {
			want := uint32(i)
			isNaN := (d == F16 && i&0x7C00 == 0x7C00 && i&0x3FF != 0) || (d == BF16 && i&0x7F80 == 0x7F80 && i&0x7F != 0)
			if isNaN && d == BF16 {
				want = uint32(i&0x8000) | 0x7FC0
			}
			if c != want {
				t.Fatalf("%v %#04x round trip: %#04x", d, i, c)
			}
		}
	}
}

func TestF16MatchesX448(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	in := make([]uint32, 1<<16)
	for i := range in {
		in[i] = rng.Uint32()
	}
	got, _ := mustConvert(t, F16, f32bytes(in), F32, Options{})
	for i, c := range codes(F16, got) {
		x := math.Float32frombits(in[i])
		if x != x {
			continue // NaN payloads: x448 quiets, numpy (ckpt) does not
		}
		if w := float16.Fromfloat32(x).Bits(); uint16(c) != w {
			t.Fatalf("%#08x: got %#04x, x448 %#04x", in[i], c, w)
		}
	}
}

// TestNarrowToNarrow checks that BF16/F16/FP8 sources go to FP8/F4/F6
// through their exact float32 value (one rounding).
func TestNarrowToNarrow(t *testing.T) {
	all := make([]uint32, 65536)
	for i := range all {
		all[i] = uint32(i)
	}
	for _, from := range []DType{BF16, F16} {
		src := pack(from, all)
		wide, _ := mustConvert(t, F32, src, from, Options{})
		for _, to := range []DType{F8_E4M3, F8_E5M2, F8_E4M3FNUZ, F8_E8M0, F4, F6_E3M2} {
			for _, sat := range []bool{false, true} {
				direct, st1 := mustConvert(t, to, src, from, Options{Saturate: sat})
				via, st2 := mustConvert(t, to, wide, F32, Options{Saturate: sat})
				if string(direct) != string(via) || st1 != st2 {
					t.Errorf("%v -> %v sat=%v differs from via F32 (%v vs %v)", from, to, sat, st1, st2)
				}
			}
		}
	}
	// FP8 -> FP8 through float32 as well.
	codes8 := make([]byte, 256)
	for i := range codes8 {
		codes8[i] = byte(i)
	}
	for _, from := range []DType{F8_E4M3, F8_E5M2, F8_E4M3FNUZ, F8_E5M2FNUZ, F8_E8M0} {
		wide, _ := mustConvert(t, F32, codes8, from, Options{})
		for _, to := range narrowTargets {
			if to == from {
				continue
			}
			direct, _ := mustConvert(t, to, codes8, from, Options{})
			via, _ := mustConvert(t, to, wide, F32, Options{})
			if string(direct) != string(via) {
				t.Errorf("%v -> %v differs from via F32", from, to)
			}
		}
	}
}

func TestSpecialValues(t *testing.T) {
	f := func(v ...float32) []byte { return Float32Bytes(v) }
	inf := float32(math.Inf(1))
	nan := float32(math.NaN())
	negZero := float32(math.Copysign(0, -1))
	cases := []struct {
		to   DType
		in   []byte
		sat  bool
		want []byte
	}{
		{F8_E4M3, f(448, 464, 465, 480, -1e9, inf, -inf, nan), false, []byte{0x7E, 0x7E, 0x7F, 0x7F, 0xFF, 0x7F, 0xFF, 0x7F}},
		{F8_E4M3, f(448, 464, 465, 480, -1e9, inf, -inf, nan), true, []byte{0x7E, 0x7E, 0x7E, 0x7E, 0xFE, 0x7E, 0xFE, 0x7F}},
		{F8_E5M2, f(57344, 61439, 61440, -1e9, inf, -inf, nan, negZero), false, []byte{0x7B, 0x7B, 0x7C, 0xFC, 0x7C, 0xFC, 0x7E, 0x80}},
		{F8_E5M2, f(57344, 61439, 61440, -1e9, inf, -inf, nan, negZero), true, []byte{0x7B, 0x7B, 0x7B, 0xFB, 0x7B, 0xFB, 0x7E, 0x80}},
		{F8_E4M3FNUZ, f(240, 247.9, 248, -1e-30, float32(math.Copysign(0, -1)), inf, nan, -240), false, []byte{0x7F, 0x7F, 0x80, 0x00, 0x00, 0x80, 0x80, 0xFF}},
		{F8_E4M3FNUZ, f(240, 247.9, 248, -1e-30, float32(math.Copysign(0, -1)), inf, nan, -240), true, []byte{0x7F, 0x7F, 0x7F, 0x00, 0x00, 0x7F, 0x80, 0xFF}},
		{F8_E8M0, f(0, -1, 1, 1.5, 3, 0x1p-127, 0x1.2p-127, inf), false, []byte{0xFF, 0xFF, 0x7F, 0x80, 0x81, 0x00, 0x01, 0xFF}},
		{F8_E8M0, f(0x1.7fp127, 0x1.8p127, inf, -inf, nan, 1e-45, 0x1.8p-126, 0.75), true, []byte{0xFE, 0xFE, 0xFE, 0xFF, 0xFF, 0x00, 0x02, 0x7F}},
		{F4, f(7, -100, inf, -inf, nan, -nan, 0.25, 0.26), false, pack(F4, []uint32{7, 15, 7, 15, 8, 0, 0, 1})},
		{F6_E3M2, f(30, -28, inf, nan, 0.03125, 0.046875, -1e-30, 7.5), false, pack(F6_E3M2, []uint32{0x1F, 0x3F, 0x1F, 0x20, 0, 1, 0x20, 0x18})},
		{F16, f(65504, 65519.99, 65520, nan, -nan, math.Float32frombits(0x7F800001), 0x1p-25, 0x1.000002p-25), false, pack(F16, []uint32{0x7BFF, 0x7BFF, 0x7C00, 0x7E00, 0xFE00, 0x7C01, 0, 1})},
		{BF16, f(math.Float32frombits(0x7F800001), -nan, 0x1p-133, 0x1p-134, math.MaxFloat32, 1.00390625, 1.01171875, negZero), false, pack(BF16, []uint32{0x7FC0, 0xFFC0, 1, 0, 0x7F80, 0x3F80, 0x3F82, 0x8000})},
	}
	for _, c := range cases {
		got, _ := mustConvert(t, c.to, c.in, F32, Options{Saturate: c.sat})
		if string(got) != string(c.want) {
			t.Errorf("%v sat=%v: got % x, want % x", c.to, c.sat, got, c.want)
		}
	}
}

// TestStatsCounters checks each counter on a hand-made input.
func TestStatsCounters(t *testing.T) {
	in := Float32Bytes([]float32{1, -2, 500, -1e-9, float32(math.Inf(1)), float32(math.NaN()), 0, 3})
	_, st := mustConvert(t, F8_E4M3, in, F32, Options{})
	want := Stats{Elements: 8, NaN: 3, Overflow: 1, Underflow: 1, MaxAbs: 500}
	if st != want {
		t.Errorf("E4M3: got %v, want %v", st, want)
	}
	_, st = mustConvert(t, F8_E4M3, in, F32, Options{Saturate: true})
	want = Stats{Elements: 8, NaN: 1, Overflow: 1, Saturated: 2, Underflow: 1, MaxAbs: 500}
	if st != want {
		t.Errorf("E4M3 sat: got %v, want %v", st, want)
	}
	_, st = mustConvert(t, F8_E5M2, in, F32, Options{})
	want = Stats{Elements: 8, NaN: 1, Inf: 1, Underflow: 1, MaxAbs: 500}
	if st != want {
		t.Errorf("E5M2: got %v, want %v", st, want)
	}
	if !st.Lossy() {
		t.Error("Lossy false")
	}
	// Widening: exact, counts only NaN/Inf and MaxAbs.
	_, st = mustConvert(t, F64, in, F32, Options{})
	want = Stats{Elements: 8, NaN: 1, Inf: 1, MaxAbs: 500}
	if st != want {
		t.Errorf("F64: got %v, want %v", st, want)
	}
}

func TestFloatToInt(t *testing.T) {
	in := f64bytes([]float64{1.9, -1.9, 0.5, -0.5, 300, -300, math.NaN(), math.Inf(1), math.Inf(-1), 127.99, -128.5, 0})
	got, st := mustConvert(t, I8, in, F64, Options{})
	want := []byte{1, 0xFF, 0, 0, 127, 0x80, 0, 127, 0x80, 127, 0x80, 0}
	if string(got) != string(want) {
		t.Errorf("I8: got % x, want % x", got, want)
	}
	if st.NaN != 1 || st.Overflow != 2 || st.Saturated != 4 || st.Underflow != 2 || st.MaxAbs != 300 {
		t.Errorf("I8 stats %v", st)
	}
	got, _ = mustConvert(t, U8, in, F64, Options{})
	want = []byte{1, 0, 0, 0, 255, 0, 0, 255, 0, 127, 0, 0}
	if string(got) != string(want) {
		t.Errorf("U8: got % x, want % x", got, want)
	}
	big64 := f64bytes([]float64{0x1p63, -0x1p63, 0x1p64, 1e30, -1, 0x1p62})
	got, _ = mustConvert(t, I64, big64, F64, Options{})
	wantI := []int64{math.MaxInt64, math.MinInt64, math.MaxInt64, math.MaxInt64, -1, 1 << 62}
	for i, w := range wantI {
		if g := int64(binary.LittleEndian.Uint64(got[8*i:])); g != w {
			t.Errorf("I64[%d] = %d, want %d", i, g, w)
		}
	}
	got, _ = mustConvert(t, U64, big64, F64, Options{})
	wantU := []uint64{1 << 63, 0, math.MaxUint64, math.MaxUint64, 0, 1 << 62}
	for i, w := range wantU {
		if g := binary.LittleEndian.Uint64(got[8*i:]); g != w {
			t.Errorf("U64[%d] = %d, want %d", i, g, w)
		}
	}
	// BOOL: nonzero or NaN -> 1.
	got, _ = mustConvert(t, BOOL, Float32Bytes([]float32{0, float32(math.Copysign(0, -1)), 1e-40, float32(math.NaN()), -3, float32(math.Inf(-1)), 0, 2}), F32, Options{})
	if string(got) != string([]byte{0, 0, 1, 1, 1, 1, 0, 1}) {
		t.Errorf("BOOL: % x", got)
	}
}

func TestIntConversions(t *testing.T) {
	in := make([]byte, 8*6)
	for i, v := range []int64{-1, 300, math.MinInt64, math.MaxInt64, 65535, 0} {
		binary.LittleEndian.PutUint64(in[8*i:], uint64(v))
	}
	got, st := mustConvert(t, U16, in, I64, Options{})
	want := []uint16{0, 300, 0, 65535, 65535, 0}
	for i, w := range want {
		if g := binary.LittleEndian.Uint16(got[2*i:]); g != w {
			t.Errorf("U16[%d] = %d, want %d", i, g, w)
		}
	}
	if st.Overflow != 3 || st.Saturated != 3 || st.Elements != 6 || st.MaxAbs != 0x1p63 {
		t.Errorf("stats %v", st)
	}
	u := make([]byte, 16)
	binary.LittleEndian.PutUint64(u, math.MaxUint64)
	binary.LittleEndian.PutUint64(u[8:], 5)
	got, st = mustConvert(t, I64, u, U64, Options{})
	if int64(binary.LittleEndian.Uint64(got)) != math.MaxInt64 || binary.LittleEndian.Uint64(got[8:]) != 5 || st.Saturated != 1 {
		t.Errorf("U64->I64: % x %v", got, st)
	}
	got, _ = mustConvert(t, BOOL, []byte{0, 1, 0xFF, 0x80}, I8, Options{})
	if string(got) != string([]byte{0, 1, 1, 1}) {
		t.Errorf("I8->BOOL % x", got)
	}
	got, _ = mustConvert(t, I16, []byte{0, 2, 0, 1}, BOOL, Options{})
	if string(got) != string([]byte{0, 0, 1, 0, 0, 0, 1, 0}) {
		t.Errorf("BOOL->I16 % x", got)
	}
	// Ints to floats are exact, then rounded once.
	got, _ = mustConvert(t, F32, []byte{0xFF, 0x7F, 0x80, 0x00}, I8, Options{})
	if g := codes(F32, got); math.Float32frombits(g[0]) != -1 || math.Float32frombits(g[1]) != 127 || math.Float32frombits(g[2]) != -128 {
		t.Errorf("I8->F32 %v", got)
	}
}

// TestWideIntsRoundOnce converts 64-bit and 32-bit integers to every narrow
// float target and compares with rounding the exact integer once.
func TestWideIntsRoundOnce(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	var vals []int64
	for i := 0; i < 4000; i++ {
		sh := rng.IntN(64)
		v := int64(rng.Uint64() >> sh)
		if rng.IntN(2) == 0 {
			v = -v
		}
		vals = append(vals, v)
	}
	// Integers just off a float32 tie: 2^40 + 2^16 (a tie for F32) + 1.
	vals = append(vals, 1<<40+1<<16+1, 1<<40+1<<16, 1<<40+3<<16, math.MinInt64, math.MaxInt64, 0, 1, -1)
	for len(vals)%8 != 0 {
		vals = append(vals, 0)
	}
	src := make([]byte, 8*len(vals))
	srcU := make([]byte, 8*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint64(src[8*i:], uint64(v))
		binary.LittleEndian.PutUint64(srcU[8*i:], uint64(v))
	}
	for _, to := range append([]DType{F32}, narrowTargets...) {
		if to == F8_E8M0 {
			continue // covered by the float tests; negative integers are NaN
		}
		for _, from := range []DType{I64, U64} {
			s := src
			if from == U64 {
				s = srcU
			}
			got, _ := mustConvert(t, to, s, from, Options{})
			gc := codes(to, got)
			for i, v := range vals {
				bx := new(big.Float).SetInt64(v)
				if from == U64 {
					bx = new(big.Float).SetUint64(uint64(v))
				}
				var ign Stats
				w := refFor(to).encode(bx, bx.Sign() < 0, false, false, 0, false, &ign)
				if gc[i] != w {
					t.Fatalf("%v %d -> %v: got %#x, want %#x", from, v, to, gc[i], w)
				}
			}
		}
	}
}

func TestC64(t *testing.T) {
	src := Float32Bytes([]float32{1.5, -2})
	got, st := mustConvert(t, C64, src[:8], F32, Options{})
	if string(got) != string(Float32Bytes([]float32{1.5, 0, -2, 0})) || st.Elements != 2 {
		t.Errorf("F32->C64 % x %v", got, st)
	}
	// F64 rounds to the F32 real part.
	got, _ = mustConvert(t, C64, f64bytes([]float64{1 + 0x1p-30}), F64, Options{})
	if string(got) != string(Float32Bytes([]float32{1, 0})) {
		t.Errorf("F64->C64 % x", got)
	}
	c := Float32Bytes([]float32{1, 2, float32(math.NaN()), 4})
	got, st = mustConvert(t, C64, c, C64, Options{})
	if string(got) != string(c) || st.Elements != 4 || st.NaN != 1 || st.MaxAbs != 4 {
		t.Errorf("C64 copy %v", st)
	}
	_, err := Convert(make([]byte, 8), F32, c, C64, Options{})
	var ce *ConvertError
	if !errors.Is(err, ErrUnsupported) || !errors.As(err, &ce) || ce.From != C64 || ce.To != F32 {
		t.Errorf("C64->F32: %v", err)
	}
}

func TestSameDTypeCopies(t *testing.T) {
	src := pack(BF16, []uint32{0x7F81, 0x3F80, 0xFF80, 0x0001})
	got, st := mustConvert(t, BF16, src, BF16, Options{})
	if string(got) != string(src) || st.NaN != 1 || st.Inf != 1 || st.Elements != 4 {
		t.Errorf("BF16 copy: % x %v", got, st)
	}
	got, st = mustConvert(t, BF16, src, BF16, Options{Saturate: true})
	if c := codes(BF16, got); c[2] != 0xFF7F || st.Saturated != 1 || c[0] != 0x7F81 {
		t.Errorf("BF16 copy saturating: % x %v", got, st)
	}
}

func TestF4F6Packing(t *testing.T) {
	// F4: element 0 in the low nibble.
	got, _ := mustConvert(t, F4, Float32Bytes([]float32{0.5, -6}), F32, Options{})
	if string(got) != "\xf1" {
		t.Errorf("F4 packing: % x", got)
	}
	// F6: element i in bits [6i, 6i+6) of the little-endian bit stream.
	// E2M3 codes 1 (0.125), 0x3F (-7.5), 0x08 (1), 0x20 (-0).
	got, _ = mustConvert(t, F6_E2M3, Float32Bytes([]float32{0.125, -7.5, 1, float32(math.Copysign(0, -1))}), F32, Options{})
	w := uint32(1) | 0x3F<<6 | 0x08<<12 | 0x20<<18
	if string(got) != string([]byte{byte(w), byte(w >> 8), byte(w >> 16)}) {
		t.Errorf("F6 packing: % x", got)
	}
	// Random round trips through F32 of every sub-byte type.
	rng := rand.New(rand.NewPCG(9, 10))
	for _, d := range []DType{F4, F6_E2M3, F6_E3M2} {
		b := make([]byte, 3*4*100)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		wide, _ := mustConvert(t, F32, b, d, Options{})
		back, _ := mustConvert(t, d, wide, F32, Options{})
		if string(back) != string(b) {
			t.Errorf("%v round trip differs", d)
		}
	}
}

func TestParallelMatchesSerial(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, n := range []int{3<<20/4 + 24, 1<<20 + 1, 3880321} {
		testParallel(t, rng, n)
	}
}

func testParallel(t *testing.T, rng *rand.Rand, n int) {
	in := make([]uint32, n)
	for i := range in {
		in[i] = rng.Uint32()
	}
	src := f32bytes(in)
	for _, to := range []DType{BF16, F8_E4M3, F4, F6_E2M3, F64} {
		for _, w := range []int{2, 3, 8} {
			nb, err := to.ByteLen(int64(n))
			if err != nil {
				continue // odd counts of sub-byte types
			}
			serial := make([]byte, nb)
			par := make([]byte, nb)
			s1, err1 := Convert(serial, to, src, F32, Options{Workers: 1})
			s2, err2 := Convert(par, to, src, F32, Options{Workers: w})
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			if string(serial) != string(par) || s1 != s2 || s2.Elements != int64(n) {
				t.Errorf("%v n=%d workers=%d: parallel differs (%v vs %v)", to, n, w, s1, s2)
			}
		}
	}
}

func TestConvertErrors(t *testing.T) {
	_, err := Convert(make([]byte, 3), BF16, make([]byte, 4), F32, Options{})
	var ce *ConvertError
	if !errors.Is(err, ErrLength) || !errors.As(err, &ce) || ce.SrcElements != 1 || ce.DstElements != -1 {
		t.Errorf("odd dst: %v", err)
	}
	_, err = Convert(make([]byte, 4), BF16, make([]byte, 4), F32, Options{})
	if !errors.Is(err, ErrLength) || !errors.As(err, &ce) || ce.SrcElements != 1 || ce.DstElements != 2 {
		t.Errorf("count mismatch: %v", err)
	}
	// 3 F4 elements do not fill whole bytes; 1 byte of F6 is not an element.
	_, err = Convert(make([]byte, 1), F6_E2M3, make([]byte, 4), F32, Options{})
	if !errors.Is(err, ErrLength) {
		t.Errorf("F6: %v", err)
	}
	_, err = Convert(nil, DType(999), nil, F32, Options{})
	if !errors.Is(err, ErrUnknown) {
		t.Errorf("unknown: %v", err)
	}
	if _, err := Convert(nil, F16, nil, F32, Options{}); err != nil {
		t.Errorf("empty: %v", err)
	}
}

func TestDecodeEncodeFloat32(t *testing.T) {
	f := []float32{1, 2.5, -448, 1e9}
	b := make([]byte, 4)
	st, err := EncodeFloat32(b, F8_E4M3, f, Options{Saturate: true})
	if err != nil || string(b) != "\x38\x42\xfe\x7e" || st.Saturated != 1 {
		t.Fatalf("EncodeFloat32: % x %v %v", b, st, err)
	}
	back := make([]float32, 4)
	if _, err := DecodeFloat32(back, b, F8_E4M3); err != nil || back[3] != 448 || back[1] != 2.5 {
		t.Fatalf("DecodeFloat32: %v %v", back, err)
	}
	d := make([]float64, 4)
	if _, err := DecodeFloat64(d, b, F8_E4M3); err != nil || d[2] != -448 {
		t.Fatalf("DecodeFloat64: %v %v", d, err)
	}
	if _, err := EncodeFloat64(b[:2], BF16, []float64{1}, Options{}); err != nil || b[1] != 0x3F {
		t.Fatalf("EncodeFloat64: % x %v", b, err)
	}
	if Float32Bytes(nil) != nil || len(Float32Bytes(f)) != 16 {
		t.Error("Float32Bytes")
	}
}

func TestConvertContext(t *testing.T) {
	n := 80 << 20 / 4 // 80 MiB of F32: three segments
	src := make([]byte, 4*n)
	for i := 0; i < n; i += 1000 {
		binary.LittleEndian.PutUint32(src[4*i:], math.Float32bits(float32(i)))
	}
	want := make([]byte, 2*n)
	ws, err := Convert(want, BF16, src, F32, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 2*n)
	gs, err := ConvertContext(context.Background(), got, BF16, src, F32, Options{})
	if err != nil || gs != ws || string(got) != string(want) {
		t.Fatalf("ConvertContext differs from Convert: %v %v %v", gs, ws, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := ConvertContext(ctx, got, BF16, src, F32, Options{}); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled: %v", err)
	}
	if _, err := ConvertContext(context.Background(), got[:2*n-2], BF16, src, F32, Options{}); !errors.Is(err, ErrLength) {
		t.Errorf("length: %v", err)
	}
}

// elemAt returns the raw bits of element i of b (dtype d).
func elemAt(d DType, b []byte, i int) uint64 {
	switch d.Bits() {
	case 4, 6:
		return uint64(codes(d, b)[i])
	case 8:
		return uint64(b[i])
	case 16:
		return uint64(binary.LittleEndian.Uint16(b[2*i:]))
	case 32:
		return uint64(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return binary.LittleEndian.Uint64(b[8*i:])
}

// TestAllPairs converts random bytes between every pair of built-in dtypes:
// only complex to real is refused, and going through F64 (exact for every
// source but I64 and U64) gives the same result as the direct conversion,
// which exercises the float32 and float64 paths against each other.
func TestAllPairs(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	const n = 64
	for _, from := range Builtins() {
		nb, _ := from.ByteLen(n)
		src := make([]byte, nb)
		for i := range src {
			src[i] = byte(rng.Uint32())
		}
		if from == BOOL {
			for i := range src {
				src[i] &= 1
			}
		}
		wide := make([]byte, 8*n)
		_, wideErr := Convert(wide, F64, src, from, Options{})
		for _, to := range Builtins() {
			for _, sat := range []bool{false, true} {
				tb, _ := to.ByteLen(n)
				dst := make([]byte, tb)
				st, err := Convert(dst, to, src, from, Options{Saturate: sat})
				if from == C64 && to != C64 {
					if !errors.Is(err, ErrUnsupported) {
						t.Errorf("%v -> %v: %v, want ErrUnsupported", from, to, err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("%v -> %v: %v", from, to, err)
				}
				wantElems := int64(n)
				if from == C64 {
					wantElems = 2 * n
				}
				if st.Elements != wantElems {
					t.Errorf("%v -> %v: Elements %d", from, to, st.Elements)
				}
				if wideErr != nil || from == I64 || from == U64 || from == F64 || to == C64 || to == F64 || from == to {
					continue
				}
				via := make([]byte, tb)
				if _, err := Convert(via, to, wide, F64, Options{Saturate: sat}); err != nil {
					t.Fatal(err)
				}
				for i := 0; i < n; i++ {
					x := math.Float64frombits(binary.LittleEndian.Uint64(wide[8*i:]))
					if x != x && to.IsFloat() {
						continue // NaN payloads differ through F64's quieting
					}
					if g, w := elemAt(to, dst, i), elemAt(to, via, i); g != w {
						t.Errorf("%v -> %v sat=%v element %d (%v): direct %#x, via F64 %#x", from, to, sat, i, x, g, w)
						break
					}
				}
			}
		}
	}
}

// TestIntPairsMatchScalar compares the chunked integer path with the
// element-at-a-time one for every pair of BOOL and integer types.
func TestIntPairsMatchScalar(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	ints := []DType{BOOL, U8, I8, I16, U16, I32, U32, I64, U64}
	const n = 1000
	for _, from := range ints {
		src := make([]byte, n*from.Bits()/8)
		for i := range src {
			src[i] = byte(rng.Uint32())
			if rng.IntN(4) == 0 {
				src[i] = 0
			}
		}
		if from == BOOL {
			for i := range src {
				src[i] &= 1
			}
		}
		for _, to := range ints {
			a := make([]byte, n*to.Bits()/8)
			b := make([]byte, len(a))
			var sa, sb Stats
			convertInts(a, to, src, from, &sa)
			convertIntsScalar(b, to, src, from, &sb)
			if string(a) != string(b) || sa != sb {
				t.Errorf("%v -> %v: chunked and scalar differ (%v vs %v)", from, to, sa, sb)
			}
		}
	}
}

func TestSameDTypeF32Saturate(t *testing.T) {
	src := Float32Bytes([]float32{float32(math.Inf(-1)), 2, float32(math.NaN()), float32(math.Inf(1))})
	got, st := mustConvert(t, F32, src, F32, Options{Saturate: true})
	g := codes(F32, got)
	if g[0] != 0xFF7FFFFF || g[3] != 0x7F7FFFFF || g[1] != 0x40000000 || st.Saturated != 2 || st.NaN != 1 || st.MaxAbs != 2 {
		t.Errorf("F32 saturating copy: %x %v", g, st)
	}
	got, st = mustConvert(t, F32, src, F32, Options{})
	if string(got) != string(src) || st.Inf != 2 {
		t.Errorf("F32 copy: %v", st)
	}
	f64 := f64bytes([]float64{math.Inf(1), -3})
	got, st = mustConvert(t, F64, f64, F64, Options{Saturate: true})
	if math.Float64frombits(binary.LittleEndian.Uint64(got)) != math.MaxFloat64 || st.Saturated != 1 || st.MaxAbs != 3 {
		t.Errorf("F64 saturating copy: %v", st)
	}
}

// TestNaNPayloadRules pins the NaN bits numpy and ml_dtypes write for the
// pairs whose rule is not the composition through F32.
func TestNaNPayloadRules(t *testing.T) {
	got, _ := mustConvert(t, F64, pack(F16, []uint32{0x7C01, 0xFD55, 0x7E00, 0x3C00}), F16, Options{})
	want := []uint64{0x7FF0040000000000, 0xFFF5540000000000, 0x7FF8000000000000, 0x3FF0000000000000}
	for i, w := range want {
		if g := binary.LittleEndian.Uint64(got[8*i:]); g != w {
			t.Errorf("F16->F64 [%d] = %#x, want %#x", i, g, w)
		}
	}
	got, _ = mustConvert(t, F16, pack(BF16, []uint32{0x7F81, 0xFF81, 0x7FC0, 0x3F80}), BF16, Options{})
	if c := codes(F16, got); c[0] != 0x7E00 || c[1] != 0xFE00 || c[2] != 0x7E00 || c[3] != 0x3C00 {
		t.Errorf("BF16->F16 NaNs: %x", c)
	}
	got, _ = mustConvert(t, F64, pack(BF16, []uint32{0x7F81, 0xFF81, 0, 0}), BF16, Options{})
	if g := binary.LittleEndian.Uint64(got); g != 0x7FF8200000000000 {
		t.Errorf("BF16->F64 NaN = %#x", g)
	}
	got, _ = mustConvert(t, F32, f64bytes([]float64{math.Float64frombits(0x7FF0000000000001), math.Float64frombits(0x7FF4000000000000)}), F64, Options{})
	if c := codes(F32, got); c[0] != 0x7FC00000 || c[1] != 0x7FE00000 {
		t.Errorf("F64->F32 NaNs: %x", c)
	}
}
