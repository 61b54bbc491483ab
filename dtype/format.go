package dtype

import (
	"math"
)

// nanRule says how a NaN input is written to a narrow float target.
type nanRule uint8

const (
	// nanPayload: sign | all-ones exponent | the top payload bits, forced
	// nonzero (numpy's float16 rule; the quiet bit is not set).
	nanPayload nanRule = iota
	// nanQuiet: sign | quiet NaN | the top payload bits (x86 and ARM
	// hardware float64 -> float32).
	nanQuiet
	// nanCanonical: sign | nanMag (BF16 0x7FC0, F8_E4M3 0x7F, F8_E5M2 0x7E),
	// as ml_dtypes writes them.
	nanCanonical
	// nanUnsigned: the single NaN code nanMag regardless of sign (FNUZ 0x80).
	nanUnsigned
	// nanToZero: the type has no NaN; ml_dtypes writes a zero whose sign bit
	// is the inverse of the NaN's sign bit.
	nanToZero
)

// floatFormat describes a binary float target narrower than its source:
// F16, BF16, the FP8 types (except E8M0), F4, F6 and, from float64, F32.
// Codes are sign | magnitude, the magnitude ordered like the value.
type floatFormat struct {
	dt      DType
	bits    uint   // code width
	mbits   uint   // stored mantissa bits
	bias    int    // exponent bias
	signBit uint32 // sign bit of a code
	maxMag  uint32 // magnitude code of the largest finite value
	infMag  uint32 // magnitude code of infinity, 0 when there is none
	nanMag  uint32 // NaN code (see nanRule)
	nan     nanRule
	fnuz    bool // no negative zero: -0 and negative underflow encode as +0
	maxVal  float64

	// float32 source path
	shift32   uint    // 23 - mbits
	half32    uint32  // 1<<(shift32-1) - 1
	rebias32  uint32  // (127-bias) << 23
	minNorm32 uint32  // bits of the smallest normal value of the target
	ovf32     uint32  // smallest |x| bits that rounds past maxMag
	magic32   float32 // adding it rounds a subnormal to the target's spacing

	// float64 source path
	shift64   uint
	half64    uint64
	rebias64  uint64
	minNorm64 uint64
	ovf64     uint64
	magic64   float64
}

func newFormat(dt DType, bits, mbits uint, bias int, maxMag, infMag, nanMag uint32, nan nanRule, fnuz bool) *floatFormat {
	f := &floatFormat{dt: dt, bits: bits, mbits: mbits, bias: bias,
		signBit: 1 << (bits - 1), maxMag: maxMag, infMag: infMag, nanMag: nanMag, nan: nan, fnuz: fnuz}
	emin := 1 - bias
	emaxField := int(maxMag >> mbits)
	frac := float64(maxMag&(1<<mbits-1)) / float64(uint64(1)<<mbits)
	f.maxVal = math.Ldexp(1+frac, emaxField-bias)
	ulp := math.Ldexp(1, emaxField-bias-int(mbits))
	boundary := f.maxVal + ulp/2 // the first value past max under unbounded-exponent RNE
	tieToMax := maxMag&1 == 0

	if mbits < 23 {
		f.shift32 = 23 - mbits
		f.half32 = 1<<(f.shift32-1) - 1
		f.rebias32 = uint32(127-bias) << 23
		f.minNorm32 = uint32(emin+127) << 23
		f.magic32 = float32(math.Ldexp(1, emin-int(mbits)+23))
		f.ovf32 = math.Float32bits(float32(boundary))
		if tieToMax {
			f.ovf32++
		}
	}
	f.shift64 = 52 - mbits
	f.half64 = 1<<(f.shift64-1) - 1
	f.rebias64 = uint64(1023-bias) << 52
	f.minNorm64 = uint64(emin+1023) << 52
	f.magic64 = math.Ldexp(1, emin-int(mbits)+52)
	f.ovf64 = math.Float64bits(boundary)
	if tieToMax {
		f.ovf64++
	}
	return f
}

var (
	fmtF16      = newFormat(F16, 16, 10, 15, 0x7BFF, 0x7C00, 0, nanPayload, false)
	fmtBF16     = newFormat(BF16, 16, 7, 127, 0x7F7F, 0x7F80, 0x7FC0, nanCanonical, false)
	fmtF32      = newFormat(F32, 32, 23, 127, 0x7F7FFFFF, 0x7F800000, 0, nanQuiet, false)
	fmtE4M3     = newFormat(F8_E4M3, 8, 3, 7, 0x7E, 0, 0x7F, nanCanonical, false)
	fmtE5M2     = newFormat(F8_E5M2, 8, 2, 15, 0x7B, 0x7C, 0x7E, nanCanonical, false)
	fmtE4M3FNUZ = newFormat(F8_E4M3FNUZ, 8, 3, 8, 0x7F, 0, 0x80, nanUnsigned, true)
	fmtE5M2FNUZ = newFormat(F8_E5M2FNUZ, 8, 2, 16, 0x7F, 0, 0x80, nanUnsigned, true)
	fmtF4       = newFormat(F4, 4, 1, 1, 0x7, 0, 0, nanToZero, false)
	fmtF6E2M3   = newFormat(F6_E2M3, 6, 3, 1, 0x1F, 0, 0, nanToZero, false)
	fmtF6E3M2   = newFormat(F6_E3M2, 6, 2, 3, 0x1F, 0, 0, nanToZero, false)
)

// narrowFormat returns the format of a narrow float target, nil for others.
func narrowFormat(d DType) *floatFormat {
	switch d {
	case F16:
		return fmtF16
	case BF16:
		return fmtBF16
	case F8_E4M3:
		return fmtE4M3
	case F8_E5M2:
		return fmtE5M2
	case F8_E4M3FNUZ:
		return fmtE4M3FNUZ
	case F8_E5M2FNUZ:
		return fmtE5M2FNUZ
	case F4:
		return fmtF4
	case F6_E2M3:
		return fmtF6E2M3
	case F6_E3M2:
		return fmtF6E3M2
	}
	return nil
}

// nanCode32 encodes a NaN with float32 bits x.
func (f *floatFormat) nanCode32(x uint32) uint32 {
	return f.nanCode(x>>31 != 0, (x&0x7FFFFF)>>f.shift32)
}

// nanCode64 encodes a NaN with float64 bits x.
func (f *floatFormat) nanCode64(x uint64) uint32 {
	return f.nanCode(x>>63 != 0, uint32((x&(1<<52-1))>>f.shift64))
}

// nanCode encodes a NaN of sign neg whose payload, cut to the format's
// mantissa width, is p.
func (f *floatFormat) nanCode(neg bool, p uint32) uint32 {
	var s uint32
	if neg {
		s = f.signBit
	}
	switch f.nan {
	case nanPayload, nanQuiet:
		if f.nan == nanQuiet {
			p |= 1 << (f.mbits - 1)
		}
		if p == 0 {
			p = 1
		}
		return s | f.infMag | p
	case nanCanonical:
		return s | f.nanMag
	case nanUnsigned:
		return f.nanMag
	}
	return s ^ f.signBit // nanToZero
}

// overflow encodes a finite value (s: sign bit of the code) whose rounded
// magnitude exceeds maxMag.
func (f *floatFormat) overflow(s uint32, sat bool, st *Stats) uint32 {
	st.Overflow++
	return f.clampInf(s, sat, st)
}

// clampInf encodes an out-of-range magnitude (finite overflow or infinity).
func (f *floatFormat) clampInf(s uint32, sat bool, st *Stats) uint32 {
	switch {
	case sat || f.nan == nanToZero:
		st.Saturated++
		return s | f.maxMag
	case f.infMag != 0:
		st.Inf++
		return s | f.infMag
	case f.nan == nanUnsigned:
		st.NaN++
		return f.nanMag
	}
	st.NaN++
	return s | f.nanMag
}

// enc32 rounds the float32 with bits x to the format (round to nearest,
// ties to even, as if the exponent were unbounded; then the overflow rule).
// maxA tracks the largest finite magnitude seen (as float32 bits).
func (f *floatFormat) enc32(x uint32, sat bool, st *Stats, maxA *uint32) uint32 {
	a := x & 0x7FFFFFFF
	var s uint32
	if x>>31 != 0 {
		s = f.signBit
	}
	if a-f.minNorm32 < f.ovf32-f.minNorm32 { // normal, no overflow
		if a > *maxA {
			*maxA = a
		}
		m := a - f.rebias32
		m = (m + f.half32 + (m>>f.shift32)&1) >> f.shift32
		return s | m
	}
	return f.enc32slow(x, sat, st, maxA)
}

func (f *floatFormat) enc32slow(x uint32, sat bool, st *Stats, maxA *uint32) uint32 {
	a := x & 0x7FFFFFFF
	var s uint32
	if x>>31 != 0 {
		s = f.signBit
	}
	switch {
	case a > 0x7F800000:
		st.NaN++
		return f.nanCode32(x)
	case a == 0x7F800000:
		return f.clampInf(s, sat, st)
	}
	if a > *maxA {
		*maxA = a
	}
	if a >= f.ovf32 {
		return f.overflow(s, sat, st)
	}
	if a >= f.minNorm32 { // only reached when called directly
		m := a - f.rebias32
		return s | (m+f.half32+(m>>f.shift32)&1)>>f.shift32
	}
	// Subnormal range of the target (or zero): let the FPU round.
	m := math.Float32bits(float32(math.Float32frombits(a)+f.magic32)) - math.Float32bits(f.magic32)
	return f.subnormal(s, m, a != 0, st)
}

// enc64 is enc32 for a float64 source; maxA tracks float64 bits.
func (f *floatFormat) enc64(x uint64, sat bool, st *Stats, maxA *uint64) uint32 {
	a := x & (1<<63 - 1)
	var s uint32
	if x>>63 != 0 {
		s = f.signBit
	}
	if a-f.minNorm64 < f.ovf64-f.minNorm64 {
		if a > *maxA {
			*maxA = a
		}
		m := a - f.rebias64
		m = (m + f.half64 + (m>>f.shift64)&1) >> f.shift64
		return s | uint32(m)
	}
	switch {
	case a > 0x7FF0000000000000:
		st.NaN++
		return f.nanCode64(x)
	case a == 0x7FF0000000000000:
		return f.clampInf(s, sat, st)
	}
	if a > *maxA {
		*maxA = a
	}
	if a >= f.ovf64 {
		return f.overflow(s, sat, st)
	}
	m := uint32(math.Float64bits(math.Float64frombits(a)+f.magic64) - math.Float64bits(f.magic64))
	return f.subnormal(s, m, a != 0, st)
}

// subnormal finishes the encoding of a value in the target's subnormal
// range (s: sign bit of the code, m: the rounded magnitude code, nonzero:
// the source was not zero): a nonzero value that rounds to zero underflows,
// and FNUZ formats have no negative zero.
func (f *floatFormat) subnormal(s, m uint32, nonzero bool, st *Stats) uint32 {
	if m == 0 {
		if nonzero {
			st.Underflow++
		}
		if f.fnuz {
			return 0
		}
	}
	return s | m
}

// decodeTable returns the float32 bits of every code of an 8-bit or smaller
// format. NaN codes decode to the quiet NaN ml_dtypes produces:
// sign | 0x7FC00000, and 0xFFC00000 for the FNUZ NaN 0x80.
func (f *floatFormat) decodeTable() []uint32 {
	n := 1 << f.bits
	t := make([]uint32, n)
	for c := 0; c < n; c++ {
		code := uint32(c)
		var s uint32
		if code&f.signBit != 0 {
			s = 1 << 31
		}
		mag := code &^ f.signBit
		switch {
		case f.nan == nanUnsigned && code == f.nanMag:
			t[c] = 0xFFC00000
			continue
		case f.infMag != 0 && mag == f.infMag:
			t[c] = s | 0x7F800000
			continue
		case f.nan != nanToZero && f.nan != nanUnsigned && mag > f.maxMag:
			t[c] = s | 0x7FC00000
			continue
		}
		e := int(mag >> f.mbits)
		m := float64(mag & (1<<f.mbits - 1))
		var v float64
		if e == 0 {
			v = math.Ldexp(m, 1-f.bias-int(f.mbits))
		} else {
			v = math.Ldexp(m+float64(uint64(1)<<f.mbits), e-f.bias-int(f.mbits))
		}
		t[c] = s | math.Float32bits(float32(v))
	}
	return t
}

// Decode tables: float32 bits of every code. Built once at start-up and never
// written again.
var (
	tabE4M3     = (*[256]uint32)(fmtE4M3.decodeTable())
	tabE5M2     = (*[256]uint32)(fmtE5M2.decodeTable())
	tabE4M3FNUZ = (*[256]uint32)(fmtE4M3FNUZ.decodeTable())
	tabE5M2FNUZ = (*[256]uint32)(fmtE5M2FNUZ.decodeTable())
	tabE8M0     = func() *[256]uint32 {
		var t [256]uint32
		for c := 0; c < 255; c++ {
			t[c] = math.Float32bits(float32(math.Ldexp(1, c-127)))
		}
		t[255] = 0x7FC00000
		return &t
	}()
	tabF4   = (*[16]uint32)(fmtF4.decodeTable())
	tabF6A  = (*[64]uint32)(fmtF6E2M3.decodeTable())
	tabF6B  = (*[64]uint32)(fmtF6E3M2.decodeTable())
	tabF4x2 = func() *[256][2]uint32 { // both nibbles of a byte
		var t [256][2]uint32
		for b := range t {
			t[b] = [2]uint32{tabF4[b&15], tabF4[b>>4]}
		}
		return &t
	}()
)

// table8 returns the decode table of an 8-bit float type, nil for others.
func table8(d DType) *[256]uint32 {
	switch d {
	case F8_E4M3:
		return tabE4M3
	case F8_E5M2:
		return tabE5M2
	case F8_E4M3FNUZ:
		return tabE4M3FNUZ
	case F8_E5M2FNUZ:
		return tabE5M2FNUZ
	case F8_E8M0:
		return tabE8M0
	}
	return nil
}

// E8M0 encoding, matching ml_dtypes float8_e8m0fnu:
//   - NaN, ±Inf, zero and negative values -> 0xFF (NaN); with Saturate, +Inf
//     and finite overflow -> 0xFE (2^127).
//   - x >= 2^-126: the nearest power of two, a tie (x = 1.5·2^e) going up;
//     2^127·1.5 and above overflow.
//   - 2^-127 < x < 2^-126 -> 0x01 (2^-126); 0 < x <= 2^-127 -> 0x00 (2^-127).
const e8m0NaN = 0xFF

func encE8M0_32(x uint32, sat bool, st *Stats, maxA *uint32) uint32 {
	a := x & 0x7FFFFFFF
	if a >= 0x00800000 && x < 0x7F400000 { // positive normal below 1.5·2^127
		if a > *maxA {
			*maxA = a
		}
		return (x + 0x400000) >> 23
	}
	// Everything else (NaN, infinities, zero, negative, tiny and overflowing
	// values) as for float64, to which float32 widens exactly.
	if a < 0x7F800000 && a > *maxA {
		*maxA = a
	}
	var ignore uint64
	return encE8M0_64(math.Float64bits(float64(math.Float32frombits(x))), sat, st, &ignore)
}

func encE8M0_64(x uint64, sat bool, st *Stats, maxA *uint64) uint32 {
	a := x & (1<<63 - 1)
	const min126 = uint64(1023-126) << 52
	const ovf = uint64(1023+127)<<52 | 1<<51
	if a >= min126 && x < ovf {
		if a > *maxA {
			*maxA = a
		}
		return uint32((x+1<<51)>>52) - (1023 - 127)
	}
	switch {
	case a > 0x7FF0000000000000:
		st.NaN++
		return e8m0NaN
	case a == 0x7FF0000000000000:
		if x == 0x7FF0000000000000 && sat {
			st.Saturated++
			return 0xFE
		}
		st.NaN++
		return e8m0NaN
	}
	if a > *maxA {
		*maxA = a
	}
	switch {
	case x>>63 != 0 || a == 0:
		st.NaN++
		return e8m0NaN
	case a >= ovf:
		st.Overflow++
		if sat {
			st.Saturated++
			return 0xFE
		}
		st.NaN++
		return e8m0NaN
	case a > uint64(1023-127)<<52:
		return 1
	}
	return 0
}
