package dtype

import (
	"encoding/binary"
	"math"
	"testing"
)

var fuzzSources = []DType{F32, F64, BF16, F16, F8_E4M3, F8_E5M2, F8_E4M3FNUZ, F8_E5M2FNUZ, F8_E8M0, F4, F6_E2M3, F6_E3M2}
var fuzzTargets = append([]DType{F32}, narrowTargets...)

// widenRef returns the float32 bits element i of src (dtype d, not F64)
// widens to, computed from the reference definitions.
func widenRef(d DType, c uint32) uint32 {
	switch d {
	case F32:
		return c
	case BF16:
		return c << 16
	case F16:
		if c&0x7C00 == 0x7C00 && c&0x3FF != 0 {
			return (c&0x8000)<<16 | 0x7F800000 | (c&0x3FF)<<13
		}
	case F8_E8M0:
		if c == 0xFF {
			return 0x7FC00000
		}
		return math.Float32bits(float32(math.Ldexp(1, int(c)-127)))
	}
	v := refFor(d).value(c)
	if math.IsNaN(v) {
		if c&refFor(d).signBit() != 0 {
			return 0xFFC00000
		}
		return 0x7FC00000
	}
	return math.Float32bits(float32(v))
}

// FuzzConvert converts random bytes between the float types and compares
// every element and the statistics with the reference.
func FuzzConvert(f *testing.F) {
	f.Add([]byte{0, 0, 0x80, 0x7F, 0, 0, 0xE8, 0x43, 1, 0, 0xC0, 0xFF, 0, 0, 0, 0x80}, uint8(0), uint8(3), false)
	f.Add([]byte{0x7E, 0x7F, 0xFF, 0x80, 0x01, 0x00, 0x3C, 0x7B}, uint8(4), uint8(1), true)
	f.Add([]byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xEF, 0x7F, 0, 0, 0, 0, 0, 0, 0xF0, 0x7F}, uint8(1), uint8(0), false)
	f.Add([]byte{0x12, 0x34, 0x56, 0x78, 0x9A, 0xBC}, uint8(11), uint8(8), true)
	f.Fuzz(func(t *testing.T, data []byte, fs, ts uint8, sat bool) {
		from := fuzzSources[int(fs)%len(fuzzSources)]
		to := fuzzTargets[int(ts)%len(fuzzTargets)]
		// Whole groups of 8 elements so that every dtype fills whole bytes.
		group := from.Bits() // bytes per 8 elements
		n := len(data) / group * 8
		src := data[:n/8*group]
		nb, _ := to.ByteLen(int64(n))
		dst := make([]byte, nb)
		st, err := Convert(dst, to, src, from, Options{Saturate: sat, Workers: 1})
		if err != nil {
			t.Fatal(err)
		}
		var want Stats
		got := codes(to, dst)
		var in []uint32
		if from != F64 {
			in = codes(from, src)
		}
		for i := 0; i < n; i++ {
			var w uint32
			switch {
			case from == F64:
				x := math.Float64frombits(binary.LittleEndian.Uint64(src[8*i:]))
				if to == F32 {
					w = refF64toF32(x, sat, &want)
				} else {
					w = refEncodeF64(to, x, sat, &want)
				}
			case to == F32:
				w = widenRef(from, in[i])
				want.Elements++
				a := w & 0x7FFFFFFF
				switch {
				case a > 0x7F800000:
					want.NaN++
				case a == 0x7F800000 && sat:
					want.Saturated++
					w = w&0x80000000 | 0x7F7FFFFF
				case a == 0x7F800000:
					want.Inf++
				default:
					want.MaxAbs = max(want.MaxAbs, float64(math.Float32frombits(a)))
				}
			default:
				x := widenRef(from, in[i])
				if from == BF16 && to == F16 && x&0x7FFFFFFF > 0x7F800000 {
					x = x&0x80000000 | 0x7FC00000 // canonical NaN (ml_dtypes)
				}
				w = refEncodeF32(to, x, sat, &want)
			}
			if from == to && to != F32 {
				// Same dtype: a copy, except that Saturate clamps infinities.
				if x := widenRef(from, in[i]); !(sat && x&0x7FFFFFFF == 0x7F800000) {
					w = in[i]
				}
			}
			if got[i] != w {
				t.Fatalf("%v -> %v sat=%v element %d: got %#x, want %#x", from, to, sat, i, got[i], w)
			}
		}
		if from != to && st != want {
			t.Fatalf("%v -> %v sat=%v: stats %v, want %v", from, to, sat, st, want)
		}
	})
}
