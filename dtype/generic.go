package dtype

import (
	"encoding/binary"
	"math"
	"math/bits"
	"unsafe"
)

// chunk is the number of elements the portable kernels convert at a time
// through a buffer on the stack. A multiple of 8, so that sub-byte types stay
// byte-aligned.
const chunk = 512

// isInt reports whether d is BOOL or an integer type.
func isInt(d DType) bool {
	switch d {
	case BOOL, U8, I8, I16, U16, I32, U32, I64, U64:
		return true
	}
	return false
}

// exact32 reports whether every value of d is a float32, so that float32 can
// be the intermediate type.
func exact32(d DType) bool {
	switch d {
	case F64, I32, U32, I64, U64, C64:
		return false
	}
	return d.Valid()
}

// byteOff returns the byte offset of element i (a multiple of 8 for sub-byte
// types).
func byteOff(d DType, i int) int { return int(int64(i) * int64(d.Bits()) / 8) }

// genericKernel returns the portable kernel for the pair, nil when the
// conversion is not defined (complex to real) or a dtype is unknown.
func genericKernel(from, to DType) kernel {
	fi, ti := from.info(), to.info()
	if fi == nil || ti == nil {
		return nil
	}
	if from == to {
		return func(dst, src []byte, opts Options, st *Stats) { copyConvert(dst, src, from, opts, st) }
	}
	if from == C64 {
		return nil
	}
	if fi.codec != nil || ti.codec != nil {
		return func(dst, src []byte, opts Options, st *Stats) { convertRegistered(dst, to, src, from, opts, st) }
	}
	if isInt(from) && isInt(to) {
		return func(dst, src []byte, opts Options, st *Stats) { convertInts(dst, to, src, from, st) }
	}
	if exact32(from) {
		return func(dst, src []byte, opts Options, st *Stats) { convert32(dst, to, src, from, opts, st) }
	}
	return func(dst, src []byte, opts Options, st *Stats) { convert64(dst, to, src, from, opts, st) }
}

// elems returns the number of elements a slice of n bytes of d holds.
func elems(d DType, n int) int { return int(int64(n) * 8 / int64(d.Bits())) }

// counted returns the number of scalar values n elements of d stand for.
func counted(d DType, n int) int64 {
	if d == C64 {
		return 2 * int64(n)
	}
	return int64(n)
}

func convert32(dst []byte, to DType, src []byte, from DType, opts Options, st *Stats) {
	if to == F32 && widenF32(dst, src, from, opts, st) {
		return
	}
	var buf [chunk]uint32
	n := elems(from, len(src))
	for off := 0; off < n; off += chunk {
		k := min(chunk, n-off)
		s := src[byteOff(from, off):byteOff(from, off+k)]
		d := dst[byteOff(to, off):byteOff(to, off+k)]
		dec32(from, buf[:k], s)
		if from == BF16 && to == F16 {
			// ml_dtypes writes BF16 NaNs as the canonical F16 NaN.
			for i, x := range buf[:k] {
				if x&0x7FFFFFFF > 0x7F800000 {
					buf[i] = x&0x80000000 | 0x7FC00000
				}
			}
		}
		enc32(to, d, buf[:k], opts, st)
		if from == F16 && to == F64 {
			// numpy widens F16 NaNs to F64 with the payload and without
			// setting the quiet bit.
			for i := range k {
				h := binary.LittleEndian.Uint16(s[2*i:])
				if h&0x7C00 == 0x7C00 && h&0x3FF != 0 {
					binary.LittleEndian.PutUint64(d[8*i:], uint64(h&0x8000)<<48|0x7FF0000000000000|uint64(h&0x3FF)<<42)
				}
			}
		}
	}
	st.Elements += int64(n)
}

func convert64(dst []byte, to DType, src []byte, from DType, opts Options, st *Stats) {
	var buf [chunk]float64
	n := elems(from, len(src))
	// Integers wider than 53 bits are rounded to odd on the way to float64,
	// so that the second rounding to a narrower target is exact RNE.
	odd := to != F64
	for off := 0; off < n; off += chunk {
		k := min(chunk, n-off)
		dec64(from, buf[:k], src[byteOff(from, off):byteOff(from, off+k)], odd)
		enc64(to, dst[byteOff(to, off):byteOff(to, off+k)], buf[:k], opts, st)
	}
	st.Elements += int64(n)
}

// dec32Scalar widens src (dtype from, len(dst) elements) exactly to float32
// bits, one element at a time.
func dec32Scalar(from DType, dst []uint32, src []byte) {
	switch from {
	case F32:
		src = src[:4*len(dst)]
		for i := range dst {
			dst[i] = binary.LittleEndian.Uint32(src[4*i:])
		}
	case BF16:
		src = src[:2*len(dst)]
		for i := range dst {
			dst[i] = uint32(binary.LittleEndian.Uint16(src[2*i:])) << 16
		}
	case F16:
		src = src[:2*len(dst)]
		for i := range dst {
			dst[i] = f16to32(binary.LittleEndian.Uint16(src[2*i:]))
		}
	case F8_E4M3, F8_E5M2, F8_E4M3FNUZ, F8_E5M2FNUZ, F8_E8M0:
		t := table8(from)
		src = src[:len(dst)]
		for i, b := range src {
			dst[i] = t[b]
		}
	case F4:
		src = src[:len(dst)/2]
		for i, b := range src {
			p := &tabF4x2[b]
			dst[2*i] = p[0]
			dst[2*i+1] = p[1]
		}
	case F6_E2M3, F6_E3M2:
		t := tabF6A
		if from == F6_E3M2 {
			t = tabF6B
		}
		src = src[:len(dst)/4*3]
		for i := 0; i+3 <= len(src); i += 3 {
			w := uint32(src[i]) | uint32(src[i+1])<<8 | uint32(src[i+2])<<16
			j := i / 3 * 4
			d := dst[j : j+4 : j+4]
			d[0] = t[w&63]
			d[1] = t[w>>6&63]
			d[2] = t[w>>12&63]
			d[3] = t[w>>18&63]
		}
	case BOOL:
		for i, b := range src[:len(dst)] {
			if b != 0 {
				dst[i] = 0x3F800000
			} else {
				dst[i] = 0
			}
		}
	case U8:
		for i, b := range src[:len(dst)] {
			dst[i] = math.Float32bits(float32(b))
		}
	case I8:
		for i, b := range src[:len(dst)] {
			dst[i] = math.Float32bits(float32(int8(b)))
		}
	case U16:
		src = src[:2*len(dst)]
		for i := range dst {
			dst[i] = math.Float32bits(float32(binary.LittleEndian.Uint16(src[2*i:])))
		}
	case I16:
		src = src[:2*len(dst)]
		for i := range dst {
			dst[i] = math.Float32bits(float32(int16(binary.LittleEndian.Uint16(src[2*i:]))))
		}
	}
}

// f16to32 widens IEEE binary16 bits exactly; NaN payloads are kept as they
// are (numpy), not quieted.
func f16to32(h uint16) uint32 {
	s := uint32(h&0x8000) << 16
	a := uint32(h & 0x7FFF)
	switch {
	case a >= 0x7C00:
		return s | 0x7F800000 | (a&0x3FF)<<13
	case a >= 0x0400:
		return s | (a<<13 + 112<<23)
	}
	return s | math.Float32bits(float32(a)*0x1p-24)
}

// dec64 widens src to float64: exactly for F64, I32 and U32; I64 and U64
// beyond 2^53 round to odd when odd is set, to nearest even otherwise.
func dec64(from DType, dst []float64, src []byte, odd bool) {
	switch from {
	case F64:
		src = src[:8*len(dst)]
		for i := range dst {
			dst[i] = math.Float64frombits(binary.LittleEndian.Uint64(src[8*i:]))
		}
	case I32:
		src = src[:4*len(dst)]
		for i := range dst {
			dst[i] = float64(int32(binary.LittleEndian.Uint32(src[4*i:])))
		}
	case U32:
		src = src[:4*len(dst)]
		for i := range dst {
			dst[i] = float64(binary.LittleEndian.Uint32(src[4*i:]))
		}
	case I64:
		src = src[:8*len(dst)]
		for i := range dst {
			v := int64(binary.LittleEndian.Uint64(src[8*i:]))
			if odd {
				if v < 0 {
					dst[i] = -roundOdd(uint64(-v)) // -MinInt64 wraps to 2^63 as uint64: fine
				} else {
					dst[i] = roundOdd(uint64(v))
				}
			} else {
				dst[i] = float64(v)
			}
		}
	case U64:
		src = src[:8*len(dst)]
		for i := range dst {
			v := binary.LittleEndian.Uint64(src[8*i:])
			if odd {
				dst[i] = roundOdd(v)
			} else {
				dst[i] = float64(v)
			}
		}
	}
}

// roundOdd converts u to float64 rounding to odd: truncate, and set the last
// mantissa bit if anything nonzero was dropped. A later round-to-nearest-even
// to a format of at most 51 mantissa bits then equals a single rounding.
func roundOdd(u uint64) float64 {
	n := bits.Len64(u)
	if n <= 53 {
		return float64(u)
	}
	sh := uint(n - 53)
	hi := u >> sh
	if u&(1<<sh-1) != 0 {
		hi |= 1
	}
	return math.Ldexp(float64(hi), int(sh))
}

// maxAbs32 folds float32 magnitude bits into st.MaxAbs.
func maxAbs32(st *Stats, a uint32) {
	if v := float64(math.Float32frombits(a)); v > st.MaxAbs {
		st.MaxAbs = v
	}
}

func maxAbs64(st *Stats, a uint64) {
	if v := math.Float64frombits(a); v > st.MaxAbs {
		st.MaxAbs = v
	}
}

// enc32Scalar rounds float32 bits to the target, len(src) elements, one at a
// time.
func enc32Scalar(to DType, dst []byte, src []uint32, opts Options, st *Stats) {
	sat := opts.Saturate
	var maxA uint32
	switch to {
	case F32:
		dst = dst[:4*len(src)]
		for i, x := range src {
			if a := x & 0x7FFFFFFF; a >= 0x7F800000 {
				x = special32(x, sat, st)
			} else if a > maxA {
				maxA = a
			}
			binary.LittleEndian.PutUint32(dst[4*i:], x)
		}
	case C64: // the real part, with a zero imaginary part
		dst = dst[:8*len(src)]
		for i, x := range src {
			if a := x & 0x7FFFFFFF; a >= 0x7F800000 {
				x = special32(x, sat, st)
			} else if a > maxA {
				maxA = a
			}
			binary.LittleEndian.PutUint64(dst[8*i:], uint64(x))
		}
	case F64:
		dst = dst[:8*len(src)]
		for i, x := range src {
			a := x & 0x7FFFFFFF
			var y uint64
			if a >= 0x7F800000 {
				y = widenSpecial32(x, sat, st)
			} else {
				if a > maxA {
					maxA = a
				}
				y = math.Float64bits(float64(math.Float32frombits(x)))
			}
			binary.LittleEndian.PutUint64(dst[8*i:], y)
		}
	case BF16, F16:
		f := narrowFormat(to)
		dst = dst[:2*len(src)]
		for i, x := range src {
			binary.LittleEndian.PutUint16(dst[2*i:], uint16(f.enc32(x, sat, st, &maxA)))
		}
	case F8_E4M3, F8_E5M2, F8_E4M3FNUZ, F8_E5M2FNUZ:
		f := narrowFormat(to)
		dst = dst[:len(src)]
		for i, x := range src {
			dst[i] = byte(f.enc32(x, sat, st, &maxA))
		}
	case F8_E8M0:
		dst = dst[:len(src)]
		for i, x := range src {
			dst[i] = byte(encE8M0_32(x, sat, st, &maxA))
		}
	case F4, F6_E2M3, F6_E3M2:
		enc32(to, dst, src, opts, st)
		return
	default: // BOOL and integers
		var buf [chunk]float64
		f := buf[:len(src)]
		for i, x := range src {
			f[i] = float64(math.Float32frombits(x))
		}
		enc64(to, dst, f, opts, st)
		return
	}
	maxAbs32(st, maxA)
}

// special32 handles NaN and ±Inf for a float32-or-wider target.
func special32(x uint32, sat bool, st *Stats) uint32 {
	if x&0x7FFFFFFF > 0x7F800000 {
		st.NaN++
		return x
	}
	if sat {
		st.Saturated++
		return x&0x80000000 | 0x7F7FFFFF
	}
	st.Inf++
	return x
}

// widenSpecial32 widens a float32 NaN or ±Inf to float64 bits. NaNs are
// quieted with their payload kept, as x86 and ARM hardware do.
func widenSpecial32(x uint32, sat bool, st *Stats) uint64 {
	s := uint64(x>>31) << 63
	if x&0x7FFFFFFF > 0x7F800000 {
		st.NaN++
		return s | 0x7FF8000000000000 | uint64(x&0x7FFFFF)<<29
	}
	if sat {
		st.Saturated++
		return s | 0x7FEFFFFFFFFFFFFF
	}
	st.Inf++
	return s | 0x7FF0000000000000
}

// Integer ranges of the integer targets.
func intRange(d DType) (lo, hi float64) {
	switch d {
	case U8:
		return 0, math.MaxUint8
	case I8:
		return math.MinInt8, math.MaxInt8
	case U16:
		return 0, math.MaxUint16
	case I16:
		return math.MinInt16, math.MaxInt16
	case U32:
		return 0, math.MaxUint32
	case I32:
		return math.MinInt32, math.MaxInt32
	case I64:
		return math.MinInt64, math.MaxInt64
	case U64:
		return 0, math.MaxUint64
	}
	return 0, 1
}

// enc64 rounds float64 values to the target.
func enc64(to DType, dst []byte, src []float64, opts Options, st *Stats) {
	sat := opts.Saturate
	var maxA uint64
	switch to {
	case F64:
		dst = dst[:8*len(src)]
		for i, v := range src {
			x := math.Float64bits(v)
			a := x &^ (1 << 63)
			if a >= 0x7FF0000000000000 {
				if a > 0x7FF0000000000000 {
					st.NaN++
				} else if sat {
					st.Saturated++
					x = x&(1<<63) | 0x7FEFFFFFFFFFFFFF
				} else {
					st.Inf++
				}
			} else if a > maxA {
				maxA = a
			}
			binary.LittleEndian.PutUint64(dst[8*i:], x)
		}
	case F32:
		dst = dst[:4*len(src)]
		minN, span := fmtF32.minNorm64, fmtF32.ovf64-fmtF32.minNorm64
		for i, v := range src {
			// A normal float32 result: the hardware conversion rounds to
			// nearest even.
			y := math.Float32bits(float32(v))
			if a := math.Float64bits(v) &^ (1 << 63); a-minN < span {
				maxA = max(maxA, a)
			} else {
				y = fmtF32.enc64(math.Float64bits(v), sat, st, &maxA)
			}
			binary.LittleEndian.PutUint32(dst[4*i:], y)
		}
	case C64: // as F32, into the real part, with a zero imaginary part
		dst = dst[:8*len(src)]
		minN, span := fmtF32.minNorm64, fmtF32.ovf64-fmtF32.minNorm64
		for i, v := range src {
			y := math.Float32bits(float32(v))
			if a := math.Float64bits(v) &^ (1 << 63); a-minN < span {
				maxA = max(maxA, a)
			} else {
				y = fmtF32.enc64(math.Float64bits(v), sat, st, &maxA)
			}
			binary.LittleEndian.PutUint64(dst[8*i:], uint64(y))
		}
	case BF16, F16:
		f := narrowFormat(to)
		dst = dst[:2*len(src)]
		for i, v := range src {
			x := math.Float64bits(v)
			c, ok := f.fast64(x)
			if ok {
				maxA = max(maxA, x&^(1<<63))
			} else {
				c = f.enc64(x, sat, st, &maxA)
			}
			binary.LittleEndian.PutUint16(dst[2*i:], uint16(c))
		}
	case F8_E4M3, F8_E5M2, F8_E4M3FNUZ, F8_E5M2FNUZ:
		f := narrowFormat(to)
		dst = dst[:len(src)]
		for i, v := range src {
			x := math.Float64bits(v)
			c, ok := f.fast64(x)
			if ok {
				maxA = max(maxA, x&^(1<<63))
			} else {
				c = f.enc64(x, sat, st, &maxA)
			}
			dst[i] = byte(c)
		}
	case F8_E8M0:
		dst = dst[:len(src)]
		for i, v := range src {
			dst[i] = byte(encE8M0_64(math.Float64bits(v), sat, st, &maxA))
		}
	case F4:
		f := fmtF4
		dst = dst[:len(src)/2]
		src = src[:2*len(dst)]
		for i := range dst {
			lo := f.enc64(math.Float64bits(src[2*i]), sat, st, &maxA)
			hi := f.enc64(math.Float64bits(src[2*i+1]), sat, st, &maxA)
			dst[i] = byte(lo | hi<<4)
		}
	case F6_E2M3, F6_E3M2:
		f := narrowFormat(to)
		dst = dst[:len(src)/4*3]
		src = src[:len(dst)/3*4]
		for j := 0; j+4 <= len(src); j += 4 {
			s := src[j : j+4 : j+4]
			w := f.enc64(math.Float64bits(s[0]), sat, st, &maxA) | f.enc64(math.Float64bits(s[1]), sat, st, &maxA)<<6 |
				f.enc64(math.Float64bits(s[2]), sat, st, &maxA)<<12 | f.enc64(math.Float64bits(s[3]), sat, st, &maxA)<<18
			i := j / 4 * 3
			d := dst[i : i+3 : i+3]
			d[0], d[1], d[2] = byte(w), byte(w>>8), byte(w>>16)
		}
	case BOOL:
		dst = dst[:len(src)]
		for i, v := range src {
			a := math.Float64bits(v) &^ (1 << 63)
			switch {
			case a > 0x7FF0000000000000:
				st.NaN++
			case a < 0x7FF0000000000000 && a > maxA:
				maxA = a
			}
			if v != 0 || v != v {
				dst[i] = 1
			} else {
				dst[i] = 0
			}
		}
	default:
		encInts(to, dst, src, st, &maxA)
	}
	maxAbs64(st, maxA)
}

// encInts truncates float64 values toward zero and clamps them to the
// integer target's range; NaN becomes 0.
func encInts(to DType, dst []byte, src []float64, st *Stats, maxA *uint64) {
	lo, hi := intRange(to)
	size := to.Bits() / 8
	dst = dst[:size*len(src)]
	for i, v := range src {
		if size <= 4 && v > lo-1 && v < hi+1 {
			// In range after truncation (NaN fails the test): the
			// hardware conversion truncates toward zero.
			n := int64(v)
			*maxA = max(*maxA, math.Float64bits(v)&^(1<<63))
			st.Underflow += b2i(n == 0 && v != 0)
			putInt(dst, i, size, uint64(n))
			continue
		}
		a := math.Float64bits(v) &^ (1 << 63)
		var t float64
		switch {
		case a > 0x7FF0000000000000:
			st.NaN++
			t = 0
		case a == 0x7FF0000000000000:
			st.Saturated++
			t = hi
			if v < 0 {
				t = lo
			}
		default:
			if a > *maxA {
				*maxA = a
			}
			t = math.Trunc(v)
			switch {
			case t < lo:
				st.Overflow++
				st.Saturated++
				t = lo
			case t > hi || (hi >= 0x1p63 && t >= hi): // 2^63 and 2^64 are not in range
				st.Overflow++
				st.Saturated++
				t = hi
			case t == 0 && v != 0:
				st.Underflow++
			}
		}
		var u uint64
		switch {
		case to == U64:
			if t >= 0x1p64 {
				u = math.MaxUint64
			} else {
				u = uint64(t)
			}
		case to == I64 && t >= 0x1p63:
			u = math.MaxInt64
		default:
			u = uint64(int64(t))
		}
		putInt(dst, i, size, u)
	}
}

func putInt(dst []byte, i, size int, u uint64) {
	switch size {
	case 1:
		dst[i] = byte(u)
	case 2:
		binary.LittleEndian.PutUint16(dst[2*i:], uint16(u))
	case 4:
		binary.LittleEndian.PutUint32(dst[4*i:], uint32(u))
	case 8:
		binary.LittleEndian.PutUint64(dst[8*i:], u)
	}
}

// convertInts converts between BOOL and integer types: exact when the value
// fits, clamped to the target range otherwise (Overflow and Saturated).
func convertInts(dst []byte, to DType, src []byte, from DType, st *Stats) {
	if from == U64 {
		convertIntsScalar(dst, to, src, from, st)
		return
	}
	n := elems(from, len(src))
	var lo, hi int64
	switch to {
	case BOOL:
	case I64, U64: // sources other than U64 are at most MaxInt64
		lo, hi = math.MinInt64, math.MaxInt64
		if to == U64 {
			lo = 0
		}
	default:
		l, h := intRange(to)
		lo, hi = int64(l), int64(h)
	}
	var buf [chunk]int64
	var maxAbs uint64
	for off := 0; off < n; off += chunk {
		k := min(chunk, n-off)
		b := buf[:k]
		decInts(from, b, src[byteOff(from, off):byteOff(from, off+k)])
		var clamped int64
		for i, v := range b {
			u := uint64(v)
			if v < 0 {
				u = -u
			}
			maxAbs = max(maxAbs, u)
			if to == BOOL {
				b[i] = b2i(v != 0)
				continue
			}
			c := min(max(v, lo), hi)
			clamped += b2i(c != v)
			b[i] = c
		}
		st.Overflow += clamped
		st.Saturated += clamped
		putInts(to, dst[byteOff(to, off):byteOff(to, off+k)], b)
	}
	if m := float64(maxAbs); m > st.MaxAbs {
		st.MaxAbs = m
	}
	st.Elements += int64(n)
}

// decInts reads BOOL or integer elements (not U64) as int64.
func decInts(from DType, dst []int64, src []byte) {
	switch from {
	case BOOL:
		for i, b := range src[:len(dst)] {
			dst[i] = b2i(b != 0)
		}
	case U8:
		for i, b := range src[:len(dst)] {
			dst[i] = int64(b)
		}
	case I8:
		for i, b := range src[:len(dst)] {
			dst[i] = int64(int8(b))
		}
	case U16:
		src = src[:2*len(dst)]
		for i := range dst {
			dst[i] = int64(binary.LittleEndian.Uint16(src[2*i:]))
		}
	case I16:
		src = src[:2*len(dst)]
		for i := range dst {
			dst[i] = int64(int16(binary.LittleEndian.Uint16(src[2*i:])))
		}
	case U32:
		src = src[:4*len(dst)]
		for i := range dst {
			dst[i] = int64(binary.LittleEndian.Uint32(src[4*i:]))
		}
	case I32:
		src = src[:4*len(dst)]
		for i := range dst {
			dst[i] = int64(int32(binary.LittleEndian.Uint32(src[4*i:])))
		}
	case I64:
		src = src[:8*len(dst)]
		for i := range dst {
			dst[i] = int64(binary.LittleEndian.Uint64(src[8*i:]))
		}
	}
}

// putInts writes int64 values (already in range) as elements of to.
func putInts(to DType, dst []byte, src []int64) {
	switch to.Bits() {
	case 8:
		for i, v := range src[:len(dst)] {
			dst[i] = byte(v)
		}
	case 16:
		dst = dst[:2*len(src)]
		for i, v := range src {
			binary.LittleEndian.PutUint16(dst[2*i:], uint16(v))
		}
	case 32:
		dst = dst[:4*len(src)]
		for i, v := range src {
			binary.LittleEndian.PutUint32(dst[4*i:], uint32(v))
		}
	case 64:
		dst = dst[:8*len(src)]
		for i, v := range src {
			binary.LittleEndian.PutUint64(dst[8*i:], uint64(v))
		}
	}
}

// convertIntsScalar is convertInts one element at a time; it handles U64
// sources, whose values may exceed MaxInt64.
func convertIntsScalar(dst []byte, to DType, src []byte, from DType, st *Stats) {
	n := elems(from, len(src))
	fs, ts := from.Bits()/8, to.Bits()/8
	var lo, hi int64
	var hiU uint64
	switch to {
	case BOOL:
	case U64:
		hiU = math.MaxUint64
	default:
		l, h := intRange(to)
		lo, hi = int64(l), int64(h)
		if to == I64 {
			lo, hi = math.MinInt64, math.MaxInt64
		}
		hiU = uint64(hi)
	}
	var maxAbs uint64
	for i := 0; i < n; i++ {
		var neg bool
		var mag uint64 // |v|
		var raw uint64
		switch fs {
		case 1:
			raw = uint64(src[i])
		case 2:
			raw = uint64(binary.LittleEndian.Uint16(src[2*i:]))
		case 4:
			raw = uint64(binary.LittleEndian.Uint32(src[4*i:]))
		case 8:
			raw = binary.LittleEndian.Uint64(src[8*i:])
		}
		switch from {
		case BOOL:
			if raw != 0 {
				raw = 1
			}
			mag = raw
		case I8:
			v := int64(int8(raw))
			neg, mag = v < 0, uint64(absInt(v))
		case I16:
			v := int64(int16(raw))
			neg, mag = v < 0, uint64(absInt(v))
		case I32:
			v := int64(int32(raw))
			neg, mag = v < 0, uint64(absInt(v))
		case I64:
			v := int64(raw)
			neg, mag = v < 0, uint64(absInt(v))
		default:
			mag = raw
		}
		if mag > maxAbs {
			maxAbs = mag
		}
		var out uint64
		switch {
		case to == BOOL:
			if mag != 0 {
				out = 1
			}
		case neg:
			if mag > uint64(-lo) || (lo == 0) {
				st.Overflow++
				st.Saturated++
				out = uint64(lo)
			} else {
				out = -mag
			}
		default:
			if mag > hiU {
				st.Overflow++
				st.Saturated++
				out = hiU
			} else {
				out = mag
			}
		}
		putInt(dst, i, ts, out)
	}
	if m := float64(maxAbs); m > st.MaxAbs {
		st.MaxAbs = m
	}
	st.Elements += int64(n)
}

// absInt returns |v| as a uint64-compatible int64 bit pattern (MinInt64 stays
// 2^63 once converted to uint64).
func absInt(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

// copyConvert handles from == to: the bytes are copied unchanged (NaN
// payloads included) and the values are scanned for the statistics. With
// Saturate, infinities become ±max like in every other conversion.
func copyConvert(dst, src []byte, d DType, opts Options, st *Stats) {
	copy(dst, src)
	n := elems(d, len(src))
	switch {
	case d == C64 || d == F32:
		scanF32(dst, opts, st)
	case d == F64:
		for i := 0; i+8 <= len(dst); i += 8 {
			x := binary.LittleEndian.Uint64(dst[i:])
			a := x &^ (1 << 63)
			switch {
			case a > 0x7FF0000000000000:
				st.NaN++
			case a == 0x7FF0000000000000:
				if opts.Saturate {
					st.Saturated++
					binary.LittleEndian.PutUint64(dst[i:], x&(1<<63)|0x7FEFFFFFFFFFFFFF)
				} else {
					st.Inf++
				}
			default:
				maxAbs64(st, a)
			}
		}
	case isInt(d):
		var tmp [chunk]byte
		var s Stats
		for off := 0; off < n; off += chunk {
			k := min(chunk, n-off)
			// Integers: only MaxAbs matters; reuse the int path into BOOL.
			convertInts(tmp[:k], BOOL, src[byteOff(d, off):byteOff(d, off+k)], d, &s)
		}
		if s.MaxAbs > st.MaxAbs {
			st.MaxAbs = s.MaxAbs
		}
	default:
		var buf [chunk]uint32
		info := d.info()
		for off := 0; off < n; off += chunk {
			k := min(chunk, n-off)
			b := buf[:k]
			if info.codec != nil {
				decodeRegistered(info.codec, b, src[byteOff(d, off):byteOff(d, off+k)])
			} else {
				dec32(d, b, src[byteOff(d, off):byteOff(d, off+k)])
			}
			var maxA uint32
			for j, x := range b {
				a := x & 0x7FFFFFFF
				switch {
				case a > 0x7F800000:
					st.NaN++
				case a == 0x7F800000:
					if opts.Saturate && (d == F16 || d == BF16 || d == F8_E5M2) {
						// Re-encode the clamped value: ±max of the type.
						st.Saturated++
						saturateCopy(d, dst, off+j, x)
					} else {
						st.Inf++
					}
				case a > maxA:
					maxA = a
				}
			}
			maxAbs32(st, maxA)
		}
	}
	st.Elements += counted(d, n)
}

// saturateCopy replaces the infinite element i of dst (dtype d) with ±max.
func saturateCopy(d DType, dst []byte, i int, x uint32) {
	var s Stats
	var m uint32
	switch d {
	case F16, BF16:
		f := narrowFormat(d)
		binary.LittleEndian.PutUint16(dst[2*i:], uint16(f.enc32(x, true, &s, &m)))
	case F8_E5M2:
		dst[i] = byte(fmtE5M2.enc32(x, true, &s, &m))
	}
}

func scanF32(b []byte, opts Options, st *Stats) {
	var maxA uint32
	for i := 0; i+4 <= len(b); i += 4 {
		x := binary.LittleEndian.Uint32(b[i:])
		a := x & 0x7FFFFFFF
		switch {
		case a > 0x7F800000:
			st.NaN++
		case a == 0x7F800000:
			if opts.Saturate {
				st.Saturated++
				binary.LittleEndian.PutUint32(b[i:], x&0x80000000|0x7F7FFFFF)
			} else {
				st.Inf++
			}
		case a > maxA:
			maxA = a
		}
	}
	maxAbs32(st, maxA)
}

// convertRegistered converts to or from a registered dtype through float32:
// the source is decoded to float32 (exactly for built-in types up to 32
// bits; F64 and 64-bit integers round once to float32 first) and the target
// is encoded from float32 by its Spec.
func convertRegistered(dst []byte, to DType, src []byte, from DType, opts Options, st *Stats) {
	n := elems(from, len(src))
	fi, ti := from.info(), to.info()
	buf := make([]uint32, min(n, chunk))
	f32 := unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(buf))), len(buf))
	var tmp []byte
	if fi.codec == nil && !exact32(from) {
		tmp = make([]byte, 4*len(buf))
	}
	for off := 0; off < n; off += chunk {
		k := min(chunk, n-off)
		s := src[byteOff(from, off):byteOff(from, off+k)]
		d := dst[byteOff(to, off):byteOff(to, off+k)]
		switch {
		case fi.codec != nil:
			fi.codec.Decode(f32[:k], s)
		case exact32(from):
			dec32(from, buf[:k], s)
		default: // F64, I32, U32, I64, U64, C64 (C64 -> registered is refused earlier)
			var ignore Stats
			convert64(tmp[:4*k], F32, s, from, Options{}, &ignore)
			for j := range k {
				buf[j] = binary.LittleEndian.Uint32(tmp[4*j:])
			}
		}
		if ti.codec != nil {
			es := ti.codec.Encode(d, f32[:k], opts)
			es.Elements = 0
			st.Add(es)
			if es.MaxAbs == 0 {
				var m uint32
				for _, x := range buf[:k] {
					if a := x & 0x7FFFFFFF; a < 0x7F800000 && a > m {
						m = a
					}
				}
				maxAbs32(st, m)
			}
		} else {
			enc32(to, d, buf[:k], opts, st)
		}
	}
	st.Elements += int64(n)
}

// decodeRegistered runs a registered Decode into a float32 view of dst. It
// copies through a heap buffer so that callers' stack buffers do not escape.
func decodeRegistered(c *Spec, dst []uint32, src []byte) {
	tmp := make([]float32, len(dst))
	c.Decode(tmp, src)
	for i, v := range tmp {
		dst[i] = math.Float32bits(v)
	}
}
