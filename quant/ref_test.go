package quant

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ckpt-go/ckpt/dtype"
)

// Reference decoders, written from the format definitions, independent of
// package dtype's tables.

func refE4M3(c byte) float64 {
	e, m := int(c>>3&15), float64(c&7)
	var v float64
	switch {
	case e == 15 && m == 7:
		return math.NaN()
	case e == 0:
		v = m / 8 * math.Ldexp(1, -6)
	default:
		v = (1 + m/8) * math.Ldexp(1, e-7)
	}
	if c&0x80 != 0 {
		v = -v
	}
	return v
}

func refE5M2(c byte) float64 {
	e, m := int(c>>2&31), float64(c&3)
	var v float64
	switch {
	case e == 31 && m == 0:
		v = math.Inf(1)
	case e == 31:
		return math.NaN()
	case e == 0:
		v = m / 4 * math.Ldexp(1, -14)
	default:
		v = (1 + m/4) * math.Ldexp(1, e-15)
	}
	if c&0x80 != 0 {
		v = -v
	}
	return v
}

// refE2M1 decodes a 4-bit E2M1 code: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their
// negatives (code 8 is -0).
func refE2M1(c byte) float64 {
	v := [8]float64{0, 0.5, 1, 1.5, 2, 3, 4, 6}[c&7]
	if c&8 != 0 {
		v = -v
	}
	return v
}

func refE8M0(c byte) float64 {
	if c == 255 {
		return math.NaN()
	}
	return math.Ldexp(1, int(c)-127)
}

// refRound rounds x once to the target (to nearest, ties to even, overflow
// to ±Inf), by scaling to the target's quantum and rounding there, and
// returns the rounded value as a float64.
func refRound(x float64, to dtype.DType) float64 {
	var mbits, emin int
	var maxv float64
	switch to {
	case dtype.F64:
		return x
	case dtype.F32:
		return float64(float32(x)) // Go's conversion rounds to nearest even
	case dtype.BF16:
		mbits, emin, maxv = 7, -126, 0x1.fep127
	case dtype.F16:
		mbits, emin, maxv = 10, -14, 65504
	default:
		panic("refRound: " + to.String())
	}
	if math.IsNaN(x) || math.IsInf(x, 0) || x == 0 {
		return x
	}
	a := math.Abs(x)
	_, e := math.Frexp(a) // a = f·2^e, f in [0.5, 1)
	q := math.Ldexp(1, max(e-1, emin)-mbits)
	r := math.RoundToEven(a/q) * q
	if r > maxv {
		r = math.Inf(1)
	}
	return math.Copysign(r, x)
}

// sameValue compares two float64 values bit for bit (so -0 != +0), any NaN
// matching any NaN.
func sameValue(a, b float64) bool {
	if math.IsNaN(a) || math.IsNaN(b) {
		return math.IsNaN(a) && math.IsNaN(b)
	}
	return math.Float64bits(a) == math.Float64bits(b)
}

var targets = []dtype.DType{dtype.F32, dtype.BF16, dtype.F16, dtype.F64}

// checkDequant dequantizes w to every target and compares each element with
// refRound(ref(i)).
func checkDequant(t *testing.T, w *Weight, data []byte, scales [][]byte, ref func(i int) float64) {
	t.Helper()
	n := 1
	for _, d := range w.Shape {
		n *= int(d)
	}
	want := make([]float64, n)
	for i := range want {
		want[i] = ref(i)
	}
	for _, to := range targets {
		dst := make([]byte, n*to.Bits()/8)
		st, err := w.Dequantize(dst, to, data, scales, dtype.Options{Workers: 1})
		if err != nil {
			t.Fatalf("%s -> %s: %v", w.Name, to, err)
		}
		if st.Elements != int64(n) {
			t.Errorf("%s -> %s: Stats.Elements %d, want %d", w.Name, to, st.Elements, n)
		}
		got := make([]float64, n)
		if _, err := dtype.DecodeFloat64(got, dst, to); err != nil {
			t.Fatal(err)
		}
		bad := 0
		for i := range got {
			if r := refRound(want[i], to); !sameValue(got[i], r) {
				if bad < 5 {
					t.Errorf("%s -> %s: element %d = %g (%#x), want %g (exact %g)", w.Name, to, i, got[i], math.Float64bits(got[i]), r, want[i])
				}
				bad++
			}
		}
		if bad > 0 {
			t.Errorf("%s -> %s: %d of %d elements differ", w.Name, to, bad, n)
		}
	}
}

// allCodes returns n bytes whose first 256 are every byte value, the rest
// random.
func allCodes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		if i < 256 {
			b[i] = byte(i)
		} else {
			b[i] = byte(rng.UintN(256))
		}
	}
	return b
}

// randScale returns a float32 scale of random magnitude (2^-30 .. 2^30), with
// a random 24-bit significand and, if neg, a random sign.
func randScale(rng *rand.Rand, neg bool) float32 {
	v := float32(math.Ldexp(float64(1<<23|rng.UintN(1<<23)), rng.IntN(61)-30-23))
	if neg && rng.IntN(2) == 0 {
		v = -v
	}
	return v
}

func f32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func TestRefDecodersAgreeWithDType(t *testing.T) {
	// The reference decoders and package dtype's must agree on every code:
	// if they did not, the layout tests would be comparing two definitions.
	for _, c := range []struct {
		d   dtype.DType
		ref func(byte) float64
	}{{dtype.F8_E4M3, refE4M3}, {dtype.F8_E5M2, refE5M2}, {dtype.F8_E8M0, refE8M0}} {
		for code := 0; code < 256; code++ {
			var got [1]float64
			dtype.DecodeFloat64(got[:], []byte{byte(code)}, c.d)
			if !sameValue(got[0], c.ref(byte(code))) {
				t.Errorf("%s code %#x: dtype %g, reference %g", c.d, code, got[0], c.ref(byte(code)))
			}
		}
	}
	for code := 0; code < 16; code++ {
		if !sameValue(tabF4[code], refE2M1(byte(code))) {
			t.Errorf("F4 code %d: %g, want %g", code, tabF4[code], refE2M1(byte(code)))
		}
	}
	for h := 0; h < 1<<16; h++ {
		var got [1]float64
		dtype.DecodeFloat64(got[:], []byte{byte(h), byte(h >> 8)}, dtype.F16)
		if !sameValue(f16(uint16(h)), got[0]) {
			t.Fatalf("f16(%#x) = %g, dtype says %g", h, f16(uint16(h)), got[0])
		}
	}
}

func TestRefRound(t *testing.T) {
	// refRound against known roundings, including the case ml_dtypes'
	// float64 -> bfloat16 cast gets wrong (it rounds through float32).
	for _, c := range []struct {
		x    float64
		to   dtype.DType
		want float64
	}{
		{1 + 0x1p-8 + 0x1p-30, dtype.BF16, 1 + 0x1p-7},
		{1 + 0x1p-8, dtype.BF16, 1}, // tie to even
		{1 + 3*0x1p-8, dtype.BF16, 1 + 0x1p-6},
		{65504 + 16, dtype.F16, math.Inf(1)}, // tie between max and 2^16 rounds to even: overflow
		{65504 + 15.9, dtype.F16, 65504},
		{0x1p-25, dtype.F16, 0}, // half the smallest subnormal, tie to even 0
		{0x1.8p-25, dtype.F16, 0x1p-24},
		{-0x1p-200, dtype.BF16, math.Copysign(0, -1)},
		{0x1.fep127 + 0x1p119, dtype.BF16, math.Inf(1)},
	} {
		if got := refRound(c.x, c.to); !sameValue(got, c.want) {
			t.Errorf("refRound(%g, %s) = %g, want %g", c.x, c.to, got, c.want)
		}
	}
}
