package dtype

import (
	"encoding/binary"
	"math"
)

// The hot pairs' portable loops, four elements per iteration with one
// bounds check per group and 64-bit loads and stores: on the development VM
// this is about three times the speed of an element-at-a-time loop. The
// remainder (fewer than four elements) goes through the scalar loops.

// dec32 widens src (dtype from, len(dst) elements) exactly to float32 bits.
func dec32(from DType, dst []uint32, src []byte) {
	m := len(dst) &^ 3
	switch from {
	case F32:
		src = src[:4*len(dst)]
		for j := 0; j < m; j += 4 {
			s := (*[16]byte)(src[4*j:])
			d := (*[4]uint32)(dst[j:])
			lo, hi := binary.LittleEndian.Uint64(s[:8]), binary.LittleEndian.Uint64(s[8:])
			d[0], d[1], d[2], d[3] = uint32(lo), uint32(lo>>32), uint32(hi), uint32(hi>>32)
		}
	case BF16:
		src = src[:2*len(dst)]
		for j := 0; j < m; j += 4 {
			w := binary.LittleEndian.Uint64((*[8]byte)(src[2*j:])[:])
			d := (*[4]uint32)(dst[j:])
			d[0], d[1], d[2], d[3] = uint32(w)<<16, uint32(w>>16)<<16, uint32(w>>32)<<16, uint32(w>>48)<<16
		}
	case F16:
		src = src[:2*len(dst)]
		for j := 0; j < m; j += 4 {
			w := binary.LittleEndian.Uint64((*[8]byte)(src[2*j:])[:])
			d := (*[4]uint32)(dst[j:])
			d[0], d[1], d[2], d[3] = f16to32(uint16(w)), f16to32(uint16(w>>16)), f16to32(uint16(w>>32)), f16to32(uint16(w>>48))
		}
	case F8_E4M3, F8_E5M2, F8_E4M3FNUZ, F8_E5M2FNUZ, F8_E8M0:
		t := table8(from)
		src = src[:len(dst)]
		for j := 0; j < m; j += 4 {
			s := (*[4]byte)(src[j:])
			d := (*[4]uint32)(dst[j:])
			d[0], d[1], d[2], d[3] = t[s[0]], t[s[1]], t[s[2]], t[s[3]]
		}
	default:
		dec32Scalar(from, dst, src)
		return
	}
	if m < len(dst) {
		dec32Scalar(from, dst[m:], src[byteOff(from, m):])
	}
}

// fast32 is the common case of floatFormat.enc32, small enough to inline: a
// value that rounds to a normal number of the target. ok is false for
// everything else (zero, subnormal, overflow, Inf, NaN).
func (f *floatFormat) fast32(x uint32) (c uint32, ok bool) {
	a := x & 0x7FFFFFFF
	if a-f.minNorm32 >= f.ovf32-f.minNorm32 {
		return 0, false
	}
	m := a - f.rebias32
	return (x>>31)<<(f.bits-1) | (m+f.half32+(m>>f.shift32)&1)>>f.shift32, true
}

// fast64 is fast32 for a float64 source.
func (f *floatFormat) fast64(x uint64) (c uint32, ok bool) {
	a := x &^ (1 << 63)
	if a-f.minNorm64 >= f.ovf64-f.minNorm64 {
		return 0, false
	}
	m := a - f.rebias64
	return uint32(x>>63)<<(f.bits-1) | uint32((m+f.half64+(m>>f.shift64)&1)>>f.shift64), true
}

// enc4 encodes four float32 values to codes of f: the fast path when all
// four round to normal numbers, enc32 otherwise.
func (f *floatFormat) enc4(s *[4]uint32, sat bool, st *Stats, maxA *uint32) (c0, c1, c2, c3 uint32) {
	var ok0, ok1, ok2, ok3 bool
	c0, ok0 = f.fast32(s[0])
	c1, ok1 = f.fast32(s[1])
	c2, ok2 = f.fast32(s[2])
	c3, ok3 = f.fast32(s[3])
	if ok0 && ok1 && ok2 && ok3 {
		*maxA = max(*maxA, s[0]&0x7FFFFFFF, s[1]&0x7FFFFFFF, s[2]&0x7FFFFFFF, s[3]&0x7FFFFFFF)
		return
	}
	return f.enc32(s[0], sat, st, maxA), f.enc32(s[1], sat, st, maxA), f.enc32(s[2], sat, st, maxA), f.enc32(s[3], sat, st, maxA)
}

// b2i converts a bool to 0 or 1 without a branch.
func b2i(b bool) int64 {
	var i int64
	if b {
		i = 1
	}
	return i
}

// encCodes32 rounds float32 bits to codes of f (len(codes) == len(src)).
// Everything that does not overflow (normal, subnormal, zero) takes the
// same branch-free path, so data straddling the target's subnormal range
// (common for F4, F6 and FP8) does not cost branch mispredictions; only
// overflow, Inf and NaN go to enc32slow.
func (f *floatFormat) encCodes32(codes, src []uint32, sat bool, st *Stats, maxA *uint32) {
	codes = codes[:len(src)]
	ovf, minN, rebias, half, shift := f.ovf32, f.minNorm32, f.rebias32, f.half32, f.shift32
	magic := f.magic32
	magicBits := math.Float32bits(magic)
	sbit := f.bits - 1
	zmask := ^uint32(0)
	if f.fnuz {
		zmask = 0
	}
	var under int64
	mA := *maxA
	for i, x := range src {
		a := x & 0x7FFFFFFF
		if a >= ovf {
			var t uint32
			codes[i] = f.enc32slow(x, sat, st, &t)
			mA = max(mA, t)
			continue
		}
		mA = max(mA, a)
		m := a - rebias
		c := (m + half + (m>>shift)&1) >> shift
		sub := math.Float32bits(float32(math.Float32frombits(a)+magic)) - magicBits
		if a < minN {
			c = sub
		}
		s := (x >> 31) << sbit
		if c == 0 {
			s &= zmask
		}
		under += b2i(c == 0) - b2i(a == 0)
		codes[i] = s | c
	}
	st.Underflow += under
	*maxA = mA
}

// packCodes writes codes of the sub-byte dtype d (4 or 6 bits) to dst.
func packCodes(d DType, dst []byte, c []uint32) {
	switch d.Bits() {
	case 4:
		dst = dst[:len(c)/2]
		c = c[:2*len(dst)]
		for i := range dst {
			dst[i] = byte(c[2*i] | c[2*i+1]<<4)
		}
	case 6:
		dst = dst[:len(c)/4*3]
		for j := 0; j+4 <= len(c); j += 4 {
			s := (*[4]uint32)(c[j:])
			w := s[0] | s[1]<<6 | s[2]<<12 | s[3]<<18
			i := j / 4 * 3
			d := (*[3]byte)(dst[i:])
			d[0], d[1], d[2] = byte(w), byte(w>>8), byte(w>>16)
		}
	}
}

// enc32 rounds float32 bits to the target, len(src) elements.
func enc32(to DType, dst []byte, src []uint32, opts Options, st *Stats) {
	m := len(src) &^ 3
	sat := opts.Saturate
	var maxA uint32
	switch to {
	case F32:
		dst = dst[:4*len(src)]
		for j := 0; j < m; j += 4 {
			s := (*[4]uint32)(src[j:])
			a := max(s[0]&0x7FFFFFFF, s[1]&0x7FFFFFFF, s[2]&0x7FFFFFFF, s[3]&0x7FFFFFFF)
			if a >= 0x7F800000 {
				enc32Scalar(F32, dst[4*j:4*j+16], s[:], opts, st)
				continue
			}
			maxA = max(maxA, a)
			d := (*[16]byte)(dst[4*j:])
			binary.LittleEndian.PutUint64(d[:8], uint64(s[0])|uint64(s[1])<<32)
			binary.LittleEndian.PutUint64(d[8:], uint64(s[2])|uint64(s[3])<<32)
		}
	case BF16, F16:
		// Mostly normal values in practice: the branchy fast path is cheaper.
		f := narrowFormat(to)
		dst = dst[:2*len(src)]
		for j := 0; j < m; j += 4 {
			c0, c1, c2, c3 := f.enc4((*[4]uint32)(src[j:]), sat, st, &maxA)
			binary.LittleEndian.PutUint64((*[8]byte)(dst[2*j:])[:], uint64(c0)|uint64(c1)<<16|uint64(c2)<<32|uint64(c3)<<48)
		}
	case F8_E4M3, F8_E5M2, F8_E4M3FNUZ, F8_E5M2FNUZ:
		f := narrowFormat(to)
		dst = dst[:len(src)]
		for j := 0; j < m; j += 4 {
			c0, c1, c2, c3 := f.enc4((*[4]uint32)(src[j:]), sat, st, &maxA)
			binary.LittleEndian.PutUint32((*[4]byte)(dst[j:])[:], c0|c1<<8|c2<<16|c3<<24)
		}
	case F4, F6_E2M3, F6_E3M2:
		// Scaled MX data sits largely in the subnormal range of these
		// types: the branch-free path avoids mispredictions.
		f := narrowFormat(to)
		var buf [chunk]uint32
		for off := 0; off < len(src); off += chunk {
			k := min(chunk, len(src)-off)
			c := buf[:k]
			f.encCodes32(c, src[off:off+k], sat, st, &maxA)
			packCodes(to, dst[byteOff(to, off):byteOff(to, off+k)], c)
		}
		maxAbs32(st, maxA)
		return
	default:
		enc32Scalar(to, dst, src, opts, st)
		return
	}
	if maxA != 0 {
		maxAbs32(st, maxA)
	}
	if m < len(src) {
		enc32Scalar(to, dst[byteOff(to, m):], src[m:], opts, st)
	}
}

// widenF32 converts BF16, F16 and the 8-bit float types straight to F32
// bytes, without the intermediate buffer. It reports false for other
// sources.
func widenF32(dst, src []byte, from DType, opts Options, st *Stats) bool {
	n := elems(from, len(src))
	m := n &^ 3
	dst = dst[:4*n]
	var maxA uint32
	// special handles a group of four with a NaN or an infinity.
	special := func(j int) {
		var b [4]uint32
		dec32Scalar(from, b[:], src[byteOff(from, j):byteOff(from, j+4)])
		enc32Scalar(F32, dst[4*j:4*j+16], b[:], opts, st)
	}
	switch from {
	case BF16:
		src = src[:2*n]
		for j := 0; j < m; j += 4 {
			w := binary.LittleEndian.Uint64((*[8]byte)(src[2*j:])[:])
			a := max(uint32(w)&0x7FFF, uint32(w>>16)&0x7FFF, uint32(w>>32)&0x7FFF, uint32(w>>48)&0x7FFF)
			if a >= 0x7F80 {
				special(j)
				continue
			}
			maxA = max(maxA, a<<16)
			d := (*[16]byte)(dst[4*j:])
			binary.LittleEndian.PutUint64(d[:8], (w&0xFFFF)<<16|(w&0xFFFF0000)<<32)
			binary.LittleEndian.PutUint64(d[8:], (w>>32&0xFFFF)<<16|(w>>48)<<48)
		}
	case F16:
		src = src[:2*n]
		for j := 0; j < m; j += 4 {
			w := binary.LittleEndian.Uint64((*[8]byte)(src[2*j:])[:])
			a := max(uint32(w)&0x7FFF, uint32(w>>16)&0x7FFF, uint32(w>>32)&0x7FFF, uint32(w>>48)&0x7FFF)
			if a >= 0x7C00 {
				special(j)
				continue
			}
			maxA = max(maxA, f16to32(uint16(a)))
			d := (*[16]byte)(dst[4*j:])
			binary.LittleEndian.PutUint64(d[:8], uint64(f16to32(uint16(w)))|uint64(f16to32(uint16(w>>16)))<<32)
			binary.LittleEndian.PutUint64(d[8:], uint64(f16to32(uint16(w>>32)))|uint64(f16to32(uint16(w>>48)))<<32)
		}
	case F8_E4M3, F8_E5M2, F8_E4M3FNUZ, F8_E5M2FNUZ, F8_E8M0:
		t := table8(from)
		src = src[:n]
		for j := 0; j < m; j += 4 {
			s := (*[4]byte)(src[j:])
			v0, v1, v2, v3 := t[s[0]], t[s[1]], t[s[2]], t[s[3]]
			a := max(v0&0x7FFFFFFF, v1&0x7FFFFFFF, v2&0x7FFFFFFF, v3&0x7FFFFFFF)
			if a >= 0x7F800000 {
				special(j)
				continue
			}
			maxA = max(maxA, a)
			d := (*[16]byte)(dst[4*j:])
			binary.LittleEndian.PutUint64(d[:8], uint64(v0)|uint64(v1)<<32)
			binary.LittleEndian.PutUint64(d[8:], uint64(v2)|uint64(v3)<<32)
		}
	default:
		return false
	}
	maxAbs32(st, maxA)
	if m < n {
		var b [4]uint32
		k := n - m
		dec32Scalar(from, b[:k], src[byteOff(from, m):])
		enc32Scalar(F32, dst[4*m:], b[:k], opts, st)
	}
	st.Elements += int64(n)
	return true
}
