package interop_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ckpt-go/ckpt/dtype"
)

// oracleType describes one narrow float type as both ckpt and ml_dtypes
// know it.
type oracleType struct {
	dt   dtype.DType
	bits int // 4, 6, 8 or 16
	// nanAny: any NaN code of the right sign is as good as the reference's
	// (the formats' semantics fix NaN-ness and sign, not the payload).
	nanAny bool
	// hasInf tells whether the type has infinities (then the reference for
	// the saturating mode keeps them, see satReference).
	hasInf bool
	// noNaN: the type has no NaN encoding (FP4/FP6). ml_dtypes turns a NaN
	// into a zero with the opposite sign bit (+NaN → -0, -NaN → +0), and so
	// does ckpt; it is compared like any other value.
	noNaN bool
}

var oracleTypes = []oracleType{
	{dt: dtype.F8_E4M3, bits: 8},
	{dt: dtype.F8_E5M2, bits: 8, nanAny: true, hasInf: true},
	{dt: dtype.F8_E4M3FNUZ, bits: 8},
	{dt: dtype.F8_E5M2FNUZ, bits: 8},
	{dt: dtype.F8_E8M0, bits: 8},
	{dt: dtype.F4, bits: 4, noNaN: true},
	{dt: dtype.F6_E2M3, bits: 6, noNaN: true},
	{dt: dtype.F6_E3M2, bits: 6, noNaN: true},
	{dt: dtype.BF16, bits: 16, nanAny: true, hasInf: true},
	{dt: dtype.F16, bits: 16, nanAny: true, hasInf: true},
}

// satReference names the Python output the saturating mode is compared
// with: "sat" is clip(x, -max, max) then the cast, so finite overflow and
// ±Inf become ±max and NaN stays NaN (OCP SAT, NVIDIA SATFINITE), which is
// what dtype.Options.Saturate does for every target, BF16 and F16 included.
// ("satfin", which keeps ±Inf where the target has it, is the other common
// reading of "saturate"; the Python script writes it for reference.)
func satReference(oracleType) string { return "sat" }

func (ot oracleType) mask() uint16 { return uint16(1)<<ot.bits - 1 }

// isNaN and sign interpret a code of the type.
func (ot oracleType) isNaN(c uint16) bool {
	switch ot.dt {
	case dtype.F8_E4M3:
		return c&0x7f == 0x7f
	case dtype.F8_E5M2:
		return c&0x7f > 0x7c
	case dtype.F8_E4M3FNUZ, dtype.F8_E5M2FNUZ:
		return c == 0x80
	case dtype.F8_E8M0:
		return c == 0xff
	case dtype.BF16:
		return c&0x7fff > 0x7f80
	case dtype.F16:
		return c&0x7fff > 0x7c00
	}
	return false
}

func (ot oracleType) isInf(c uint16) bool {
	switch ot.dt {
	case dtype.F8_E5M2:
		return c&0x7f == 0x7c
	case dtype.BF16:
		return c&0x7fff == 0x7f80
	case dtype.F16:
		return c&0x7fff == 0x7c00
	}
	return false
}

// isZero reports whether c is ±0 (E8M0 has no zero).
func (ot oracleType) isZero(c uint16) bool {
	switch ot.dt {
	case dtype.F8_E8M0:
		return false
	case dtype.F8_E4M3FNUZ, dtype.F8_E5M2FNUZ:
		return c == 0
	}
	return c&^(1<<(ot.bits-1)) == 0
}

func (ot oracleType) sign(c uint16) uint16 { return c >> (ot.bits - 1) & 1 }

// same reports whether got is an acceptable result where the reference gave
// want.
func (ot oracleType) same(got, want uint16) bool {
	if got == want {
		return true
	}
	return ot.nanAny && ot.isNaN(got) && ot.isNaN(want) && ot.sign(got) == ot.sign(want)
}

// packCodes packs codes (one per element, in the low bits) into ckpt's
// layout: 8-bit codes as bytes, 16-bit codes little-endian, and 4- and 6-bit
// codes as a little-endian bit stream, element 0 in the lowest bits of byte
// 0 (for F4: element 0 in the low nibble).
func (ot oracleType) packCodes(codes []uint16) []byte {
	switch ot.bits {
	case 8:
		out := make([]byte, len(codes))
		for i, c := range codes {
			out[i] = byte(c)
		}
		return out
	case 16:
		out := make([]byte, 2*len(codes))
		for i, c := range codes {
			binary.LittleEndian.PutUint16(out[2*i:], c)
		}
		return out
	}
	out := make([]byte, 0, len(codes)*ot.bits/8)
	var acc uint32
	n := 0
	for _, c := range codes {
		acc |= uint32(c&ot.mask()) << n
		n += ot.bits
		for n >= 8 {
			out = append(out, byte(acc))
			acc >>= 8
			n -= 8
		}
	}
	return out
}

// unpackCodes is the inverse of packCodes for n elements.
func (ot oracleType) unpackCodes(b []byte, n int) []uint16 {
	out := make([]uint16, n)
	switch ot.bits {
	case 8:
		for i := range out {
			out[i] = uint16(b[i])
		}
		return out
	case 16:
		for i := range out {
			out[i] = binary.LittleEndian.Uint16(b[2*i:])
		}
		return out
	}
	var acc uint32
	have, j := 0, 0
	for i := range out {
		for have < ot.bits {
			acc |= uint32(b[j]) << have
			j++
			have += 8
		}
		out[i] = uint16(acc) & ot.mask()
		acc >>= ot.bits
		have -= ot.bits
	}
	return out
}

// readRef reads a Python output: one element per byte (code in the low
// bits) for narrow types, little-endian uint16 for 16-bit types.
func (ot oracleType) readRef(t testing.TB, path string, n int) []uint16 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	w := 1
	if ot.bits == 16 {
		w = 2
	}
	if len(b) != n*w {
		t.Fatalf("%s: %d bytes, want %d", path, len(b), n*w)
	}
	out := make([]uint16, n)
	for i := range out {
		if w == 2 {
			out[i] = binary.LittleEndian.Uint16(b[2*i:])
		} else {
			out[i] = uint16(b[i])
		}
	}
	return out
}

func readF32(t testing.TB, path string) []uint32 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]uint32, len(b)/4)
	for i := range out {
		out[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return out
}

func f32Bytes(v []uint32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], x)
	}
	return b
}

// oracleCodes runs the reference's decode of every code and returns, per
// type, the float32 bits of each code, and the reference's info.
func oracleCodes(t testing.TB, dir string) (map[dtype.DType][]uint32, map[string]any) {
	t.Helper()
	runPy(t, "dtype_oracle.py", "codes", dir)
	tables := make(map[dtype.DType][]uint32)
	for _, ot := range oracleTypes {
		tables[ot.dt] = readF32(t, filepath.Join(dir, "codes_"+ot.dt.String()+".f32"))
		if len(tables[ot.dt]) != 1<<ot.bits {
			t.Fatalf("codes_%s: %d codes", ot.dt, len(tables[ot.dt]))
		}
	}
	var info map[string]any
	readJSON(t, filepath.Join(dir, "info.json"), &info)
	return tables, info
}

// TestDecodeEveryCode: every code of every narrow float type widens to the
// same float32 as in ml_dtypes (NaN codes to a NaN), BF16 and F16
// exhaustively too.
func TestDecodeEveryCode(t *testing.T) {
	python(t)
	dir := t.TempDir()
	tables, info := oracleCodes(t, dir)
	t.Logf("reference: ml_dtypes %v, numpy %v", info["ml_dtypes"], info["numpy"])
	for _, ot := range oracleTypes {
		t.Run(ot.dt.String(), func(t *testing.T) {
			want := tables[ot.dt]
			codes := make([]uint16, len(want))
			for i := range codes {
				codes[i] = uint16(i)
			}
			src := ot.packCodes(codes)
			dst := make([]byte, 4*len(codes))
			if _, err := dtype.Convert(dst, dtype.F32, src, ot.dt, dtype.Options{}); err != nil {
				t.Fatalf("Convert %s→F32: %v", ot.dt, err)
			}
			var mm mismatches
			for i, w := range want {
				g := binary.LittleEndian.Uint32(dst[4*i:])
				if g == w || (isNaN32(g) && isNaN32(w)) {
					continue
				}
				mm.add("code %#x: ckpt %#08x (%g), ml_dtypes %#08x (%g)", i, g, math.Float32frombits(g), w, math.Float32frombits(w))
			}
			mm.report(t, ot.dt.String()+"→F32", len(want))
		})
	}
}

func isNaN32(b uint32) bool { return b&0x7fffffff > 0x7f800000 }

// f32Specials are the float32 values every conversion must get right.
func f32Specials() []uint32 {
	v := []uint32{
		0x00000000, 0x80000000, // ±0
		0x7f800000, 0xff800000, // ±Inf
		0x7fc00000, 0xffc00000, 0x7fffffff, 0xffffffff, // quiet NaN, payloads
		0x7f800001, 0xff800001, 0x7fa00000, 0x7f800100, 0x7f802000, 0x7fbfffff, // signalling NaN
		0x7fc00001, 0x7fe00000, 0x7f810000,
		0x00000001, 0x80000001, 0x007fffff, 0x807fffff, // F32 subnormals
		0x00800000, 0x80800000, 0x7f7fffff, 0xff7fffff, // min normal, max
		0x3f800000, 0xbf800000, 0x3f800001, 0x3f7fffff,
	}
	return v
}

// edgeValues derives, from the reference's table of a type's values, the
// float32 inputs where a conversion to that type is most likely to go wrong:
// every value, the midpoints between neighbours (ties), the float32 values
// next to both, max and just past it (including the overflow tie), and
// values around half the smallest positive value. Both signs.
func edgeValues(table []uint32) []uint32 {
	var pos []float64
	for _, b := range table {
		f := math.Float32frombits(b)
		if f >= 0 && !math.IsInf(float64(f), 0) && !math.IsNaN(float64(f)) {
			pos = append(pos, float64(f))
		}
	}
	slices.Sort(pos)
	pos = slices.Compact(pos)
	var out []float32
	add := func(xs ...float64) {
		for _, x := range xs {
			f := float32(x)
			if math.IsInf(float64(f), 0) {
				continue
			}
			out = append(out, f, math.Nextafter32(f, float32(math.Inf(1))), math.Nextafter32(f, 0))
		}
	}
	for i, a := range pos {
		add(a)
		if i+1 < len(pos) {
			add((a + pos[i+1]) / 2)
		}
	}
	if n := len(pos); n >= 2 {
		mx, prev := pos[n-1], pos[n-2]
		next := mx + (mx - prev)
		add(next, (mx+next)/2, 2*mx, 4*mx, 1e30, math.MaxFloat32)
		if pos[0] == 0 {
			m := pos[1]
			add(m/2, m/4, 0.75*m, 1.5*m/2)
		} else {
			m := pos[0]
			add(m/2, m/4, 0.75*m, 1e-30, 1e-40)
		}
	}
	res := make([]uint32, 0, 2*len(out))
	for _, f := range out {
		b := math.Float32bits(f)
		res = append(res, b, b^0x80000000)
	}
	return res
}

// nearRange draws n random float32 values spread over a type's range:
// mostly uniform between two neighbouring values, some log-uniform from a
// quarter of the smallest to four times the largest.
func nearRange(r *rand.Rand, table []uint32, n int) []uint32 {
	var pos []float64
	for _, b := range table {
		f := float64(math.Float32frombits(b))
		if f > 0 && !math.IsInf(f, 0) && !math.IsNaN(f) {
			pos = append(pos, f)
		}
	}
	slices.Sort(pos)
	pos = slices.Compact(pos)
	lo, hi := math.Log2(pos[0]/4), math.Log2(min(pos[len(pos)-1]*4, math.MaxFloat32))
	out := make([]uint32, n)
	for i := range out {
		var x float64
		if r.IntN(10) == 0 {
			x = math.Exp2(lo + r.Float64()*(hi-lo))
		} else {
			j := r.IntN(len(pos) - 1)
			x = pos[j] + r.Float64()*(pos[j+1]-pos[j])
		}
		b := math.Float32bits(float32(x))
		if r.IntN(2) == 0 {
			b ^= 0x80000000
		}
		out[i] = b
	}
	return out
}

// TestConvertF32 sends millions of float32 values — every special value,
// random bit patterns, the edges of each type's range and random values
// inside it — through dtype.Convert and through ml_dtypes, in both modes, and
// requires the same bytes.
func TestConvertF32(t *testing.T) {
	python(t)
	dir := t.TempDir()
	tables, _ := oracleCodes(t, dir)

	r := rand.New(rand.NewPCG(2, 0xc4c4))
	in := f32Specials()
	for range 1 << 21 {
		in = append(in, r.Uint32())
	}
	for _, ot := range oracleTypes {
		in = append(in, edgeValues(tables[ot.dt])...)
		in = append(in, nearRange(r, tables[ot.dt], 100_000)...)
	}
	// An odd count (1 mod 16) for the 8- and 16-bit targets, so that a
	// conversion split across goroutines must handle a tail; F4 and F6 get
	// the first len(in)-1 values (whole bytes).
	for len(in)%16 != 1 {
		in = append(in, 0x3f800000) // 1.0: a dropped tail element shows
	}
	src := f32Bytes(in)
	inPath := filepath.Join(dir, "in.f32")
	if err := os.WriteFile(inPath, src, 0o644); err != nil {
		t.Fatal(err)
	}
	runPy(t, "dtype_oracle.py", "convert", inPath, dir)
	t.Logf("%d float32 inputs", len(in))

	for _, ot := range oracleTypes {
		for _, sat := range []bool{false, true} {
			ref := "nonsat"
			if sat {
				ref = satReference(ot)
			}
			t.Run(fmt.Sprintf("%s/saturate=%v", ot.dt, sat), func(t *testing.T) {
				n := len(in)
				if ot.bits < 8 {
					n--
				}
				want := ot.readRef(t, filepath.Join(dir, ref+"_"+ot.dt.String()+".bin"), len(in))[:n]
				dst := make([]byte, n*ot.bits/8)
				st, err := dtype.Convert(dst, ot.dt, src[:4*n], dtype.F32, dtype.Options{Saturate: sat})
				if err != nil {
					t.Fatalf("Convert F32→%s: %v", ot.dt, err)
				}
				got := ot.unpackCodes(dst, n)
				var mm mismatches
				var nan, inf, under int64
				for i, w := range want {
					if x := in[i] & 0x7fffffff; x != 0 && x < 0x7f800000 && ot.isZero(w) {
						under++
					}
					if ot.isNaN(w) {
						nan++
					}
					if ot.isInf(w) {
						inf++
					}
					if !ot.same(got[i], w) {
						mm.add("%#08x (%g): ckpt %#x, ml_dtypes %#x", in[i], math.Float32frombits(in[i]), got[i], w)
					}
				}
				mm.report(t, fmt.Sprintf("F32→%s (%s)", ot.dt, ref), n)
				if st.Elements != int64(n) {
					t.Errorf("Stats.Elements = %d, want %d", st.Elements, n)
				}
				if ot.noNaN {
					// Documented: NaN inputs of a target without NaN count.
					nan = 0
					for _, x := range in[:n] {
						if isNaN32(x) {
							nan++
						}
					}
				}
				if st.NaN != nan {
					t.Errorf("Stats.NaN = %d, want %d (NaN outputs of the reference, or NaN inputs for a type without NaN)", st.NaN, nan)
				}
				if st.Underflow != under {
					t.Errorf("Stats.Underflow = %d, the reference turned %d nonzero values into zeros", st.Underflow, under)
				}
				if st.Inf != inf {
					t.Errorf("Stats.Inf = %d, the reference produced %d infinities", st.Inf, inf)
				}
			})
		}
	}

	// BF16 and F16 to every type, every code: one rounding from the exact
	// value (ml_dtypes converts through float32, which is exact here).
	for _, from := range oracleTypes {
		if from.bits != 16 {
			continue
		}
		codes := make([]uint16, 1<<16)
		for i := range codes {
			codes[i] = uint16(i)
		}
		src := from.packCodes(codes)
		for _, ot := range oracleTypes {
			t.Run(fmt.Sprintf("%s→%s", from.dt, ot.dt), func(t *testing.T) {
				want := ot.readRef(t, filepath.Join(dir, "from_"+from.dt.String()+"_"+ot.dt.String()+".bin"), len(codes))
				dst := make([]byte, len(codes)*ot.bits/8)
				if _, err := dtype.Convert(dst, ot.dt, src, from.dt, dtype.Options{}); err != nil {
					t.Fatalf("Convert %s→%s: %v", from.dt, ot.dt, err)
				}
				got := ot.unpackCodes(dst, len(codes))
				var mm mismatches
				for i, w := range want {
					if !ot.same(got[i], w) {
						mm.add("%s %#04x: ckpt %#x, ml_dtypes %#x", from.dt, i, got[i], w)
					}
				}
				mm.report(t, fmt.Sprintf("%s→%s", from.dt, ot.dt), len(codes))
			})
		}
	}
}

// TestPackRoundTrip checks the test's own packing helpers.
func TestPackRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, ot := range oracleTypes {
		codes := make([]uint16, 64)
		for i := range codes {
			codes[i] = uint16(r.Uint32()) & ot.mask()
		}
		if got := ot.unpackCodes(ot.packCodes(codes), len(codes)); !slices.Equal(got, codes) {
			t.Errorf("%s: pack/unpack round trip lost codes", ot.dt)
		}
	}
	f4 := oracleType{dt: dtype.F4, bits: 4}
	if got := f4.packCodes([]uint16{0x1, 0xf}); got[0] != 0xf1 {
		t.Errorf("F4 packing: %#x, want 0xf1 (element 0 in the low nibble)", got[0])
	}
}
