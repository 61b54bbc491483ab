package dtype

// An independent reference for rounding to the narrow float formats, written
// with math/big arithmetic and the formats' textbook definitions rather than
// the bit tricks of the kernels.

import (
	"math"
	"math/big"
)

// refFmt is the textbook description of a narrow float format.
type refFmt struct {
	dt       DType
	bits     int // code width
	ebits    int
	mbits    int
	bias     int
	hasInf   bool // IEEE-style: all-ones exponent is Inf/NaN
	fn       bool // E4M3: only all-ones magnitude is NaN, no Inf
	fnuz     bool // NaN is 0x80, no -0
	noNaN    bool // F4, F6: no Inf, no NaN
	canonNaN uint32
}

var refFmts = []refFmt{
	{dt: F16, bits: 16, ebits: 5, mbits: 10, bias: 15, hasInf: true},
	{dt: BF16, bits: 16, ebits: 8, mbits: 7, bias: 127, hasInf: true, canonNaN: 0x7FC0},
	{dt: F8_E4M3, bits: 8, ebits: 4, mbits: 3, bias: 7, fn: true, canonNaN: 0x7F},
	{dt: F8_E5M2, bits: 8, ebits: 5, mbits: 2, bias: 15, hasInf: true, canonNaN: 0x7E},
	{dt: F8_E4M3FNUZ, bits: 8, ebits: 4, mbits: 3, bias: 8, fnuz: true},
	{dt: F8_E5M2FNUZ, bits: 8, ebits: 5, mbits: 2, bias: 16, fnuz: true},
	{dt: F4, bits: 4, ebits: 2, mbits: 1, bias: 1, noNaN: true},
	{dt: F6_E2M3, bits: 6, ebits: 2, mbits: 3, bias: 1, noNaN: true},
	{dt: F6_E3M2, bits: 6, ebits: 3, mbits: 2, bias: 3, noNaN: true},
}

func refFor(d DType) refFmt {
	for _, f := range refFmts {
		if f.dt == d {
			return f
		}
	}
	if d == F32 {
		return refFmt{dt: F32, bits: 32, ebits: 8, mbits: 23, bias: 127, hasInf: true}
	}
	panic("no reference for " + d.String())
}

func (f refFmt) signBit() uint32 { return 1 << (f.bits - 1) }

// maxCode is the magnitude code of the largest finite value.
func (f refFmt) maxCode() uint32 {
	all := uint32(1)<<(f.bits-1) - 1
	switch {
	case f.hasInf:
		return all - (1<<f.mbits - 1) - 1 // exponent all ones minus one, mantissa all ones
	case f.fn:
		return all - 1
	}
	return all
}

// value returns the exact value of a code (NaN for NaN codes, ±Inf).
func (f refFmt) value(code uint32) float64 {
	sign := 1.0
	if code&f.signBit() != 0 {
		sign = -1
	}
	mag := code &^ f.signBit()
	e := int(mag >> f.mbits)
	m := int(mag & (1<<f.mbits - 1))
	emax := 1<<f.ebits - 1
	switch {
	case f.fnuz && code == f.signBit():
		return math.NaN()
	case f.hasInf && e == emax && m == 0:
		return math.Inf(int(sign))
	case f.hasInf && e == emax:
		return math.NaN()
	case f.fn && mag == uint32(1)<<(f.bits-1)-1:
		return math.NaN()
	}
	if e == 0 {
		return sign * float64(m) * math.Pow(2, float64(1-f.bias-f.mbits))
	}
	return sign * (1 + float64(m)/math.Pow(2, float64(f.mbits))) * math.Pow(2, float64(e-f.bias))
}

func (f refFmt) maxVal() float64 { return f.value(f.maxCode()) }

// nanCode is the code a NaN input with the given sign and float32 payload
// becomes (the rules of the package documentation).
func (f refFmt) nanCode(neg bool, payload32 uint32) uint32 {
	var s uint32
	if neg {
		s = f.signBit()
	}
	switch {
	case f.noNaN:
		return s ^ f.signBit()
	case f.fnuz:
		return 0x80
	case f.dt == F16:
		p := payload32 >> 13
		if p == 0 {
			p = 1
		}
		return s | 0x7C00 | p
	}
	return s | f.canonNaN
}

// refStats collects the expected statistics.
type refStats = Stats

// encode rounds the exact value x (nil for NaN; inf ±1 for infinities) to
// the format, returning the code. payload32 is the NaN payload (float32
// mantissa bits).
func (f refFmt) encode(x *big.Float, neg bool, inf bool, nan bool, payload32 uint32, sat bool, st *refStats) uint32 {
	st.Elements++
	var s uint32
	if neg {
		s = f.signBit()
	}
	clamp := func() uint32 {
		switch {
		case sat || f.noNaN:
			st.Saturated++
			return s | f.maxCode()
		case f.hasInf:
			st.Inf++
			return s | (f.maxCode() + 1)
		}
		st.NaN++
		return f.nanCode(neg, 0)
	}
	if nan {
		st.NaN++
		return f.nanCode(neg, payload32)
	}
	if inf {
		return clamp()
	}
	ax := new(big.Float).SetPrec(0).Abs(x)
	if av, _ := ax.Float64(); av > st.MaxAbs {
		st.MaxAbs = av
	}
	if ax.Sign() == 0 {
		if f.fnuz {
			return 0
		}
		return s
	}
	// ax = mant * 2^exp with mant in [0.5, 1): the leading bit is 2^(exp-1).
	e := ax.MantExp(nil) - 1
	emin := 1 - f.bias
	if e < emin {
		e = emin
	}
	// q = ax / 2^(e-mbits), rounded to an integer, ties to even.
	q := new(big.Float).SetPrec(0).SetMantExp(ax, f.mbits-e)
	qi, _ := q.Int(nil) // truncated
	frac := new(big.Float).SetPrec(0).Sub(q, new(big.Float).SetPrec(0).SetInt(qi))
	switch frac.Cmp(big.NewFloat(0.5)) {
	case 1:
		qi.Add(qi, big.NewInt(1))
	case 0:
		if qi.Bit(0) == 1 {
			qi.Add(qi, big.NewInt(1))
		}
	}
	val, _ := new(big.Float).SetMantExp(new(big.Float).SetInt(qi), e-f.mbits).Float64()
	if val > f.maxVal() {
		st.Overflow++
		return clamp()
	}
	if val == 0 {
		st.Underflow++
		if f.fnuz {
			return 0
		}
		return s
	}
	Q := qi.Uint64()
	for Q >= 1<<(f.mbits+1) {
		Q >>= 1
		e++
	}
	if Q >= 1<<f.mbits {
		return s | uint32(e+f.bias)<<f.mbits | uint32(Q-1<<f.mbits)
	}
	return s | uint32(Q)
}

// refE8M0 encodes to F8_E8M0 by the rules of the package documentation.
func refE8M0(x float64, sat bool, st *refStats) uint32 {
	st.Elements++
	switch {
	case math.IsNaN(x):
		st.NaN++
		return 0xFF
	case math.IsInf(x, 1) && sat:
		st.Saturated++
		return 0xFE
	case math.IsInf(x, 0):
		st.NaN++
		return 0xFF
	}
	if math.Abs(x) > st.MaxAbs {
		st.MaxAbs = math.Abs(x)
	}
	if x <= 0 {
		st.NaN++
		return 0xFF
	}
	if x < math.Ldexp(1, -126) {
		if x > math.Ldexp(1, -127) {
			return 1
		}
		return 0
	}
	fr, e := math.Frexp(x) // x = fr * 2^e, fr in [0.5, 1)
	p := e - 1
	if fr >= 0.75 {
		p++
	}
	if p > 127 {
		st.Overflow++
		if sat {
			st.Saturated++
			return 0xFE
		}
		st.NaN++
		return 0xFF
	}
	return uint32(p + 127)
}

// refEncodeF64 encodes a float64 input to d with the reference.
func refEncodeF64(d DType, x float64, sat bool, st *refStats) uint32 {
	if d == F8_E8M0 {
		return refE8M0(x, sat, st)
	}
	f := refFor(d)
	neg := math.Signbit(x)
	var payload uint32
	if math.IsNaN(x) {
		payload = uint32((math.Float64bits(x) & (1<<52 - 1)) >> 29)
	}
	var bx *big.Float
	if !math.IsNaN(x) && !math.IsInf(x, 0) {
		bx = new(big.Float).SetPrec(0).SetFloat64(x)
	}
	return f.encode(bx, neg, math.IsInf(x, 0), math.IsNaN(x), payload, sat, st)
}

// refEncodeF32 encodes a float32 input (by its bits) to d.
func refEncodeF32(d DType, bits uint32, sat bool, st *refStats) uint32 {
	x := math.Float32frombits(bits)
	if d == F8_E8M0 {
		return refE8M0(float64(x), sat, st)
	}
	f := refFor(d)
	nan := x != x
	var bx *big.Float
	if !nan && !math.IsInf(float64(x), 0) {
		bx = new(big.Float).SetPrec(0).SetFloat64(float64(x))
	}
	return f.encode(bx, bits>>31 != 0, math.IsInf(float64(x), 0), nan, bits&0x7FFFFF, sat, st)
}
