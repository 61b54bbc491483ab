//go:build (amd64 || arm64) && !purego

package dtype

import (
	"encoding/binary"
	"math"
	"sync"
	"unsafe"

	"github.com/ckpt-go/ckpt/internal/crc32c"
)

// vecRun is the signature of a vector fast path. It converts whole blocks of
// elements from the start of src into dst and stops before the first block
// that holds a value it does not handle itself (NaN, Inf, overflow, or a
// code without a plain decode); it returns the number of elements it
// converted and how many of them were nonzero and rounded to zero. It folds
// the magnitudes it saw into acc (a vector register image whose lane layout
// the kernel's accMax function knows). With nt set (only when the kernel's
// ntAlign is nonzero and dst is aligned to it: Options.Streaming, or an
// output of ntMin bytes or more) it writes dst with non-temporal stores,
// which keep a large output from evicting everything else from the caches
// and save the read-for-ownership of dst.
type vecRun func(dst, src []byte, acc *[32]byte, nt bool) (n, underflow int)

// sumRun is a widening vecRun (no underflow) that also folds the CRC-32C
// of the source blocks it converts into state, with the folding pair k
// (crc32c.Fold64Pair): state, zero before the call, then holds the folded
// remainder of exactly the source bytes of the elements it returns
// (crc32c.Folded). Its blocks must be 64 source bytes.
type sumRun func(dst, src []byte, acc *[32]byte, nt bool, k *[2]uint64, state *[64]byte) int

// vecKernel combines a vector fast path with the portable kernel: the fast
// path converts the ordinary blocks, the portable kernel the blocks that hold
// special values and the tail, so that dst and Stats are exactly what the
// portable kernel alone would give.
type vecKernel struct {
	run      vecRun
	sum      sumRun // run that also folds the CRC of the source (nil: none)
	inSize   int    // bytes per source element
	outSize  int    // bytes per target element
	block    int    // elements per vector block
	fallback kernel
	// ntAlign is the dst alignment the non-temporal stores need (0: the
	// kernel has none).
	ntAlign uintptr
	// accMax returns the largest finite input magnitude recorded in acc.
	accMax func(acc *[32]byte) float64
}

// maxFallbackRun bounds how many elements the portable kernel converts in one
// go after the fast path gave up, when special values come in runs.
const maxFallbackRun = 4096

func (v *vecKernel) convert(dst, src []byte, opts Options, st *Stats) {
	v.convertCRC(dst, src, opts, st, nil)
}

// convertSum is convert that also adds the CRC-32C of src to *crc (as
// crc32c.Update): the vector blocks fold it as they load them (v.sum),
// the portable kernel's runs are summed right after it converts them.
func (v *vecKernel) convertSum(dst, src []byte, opts Options, st *Stats, crc *uint32) {
	v.convertCRC(dst, src, opts, st, crc)
}

// foldPair is crc32c's 64-byte folding pair, as the summing kernels read
// it (read-only).
var foldPair = crc32c.Fold64Pair()

// convertCRC is convert, summing src into *crc unless crc is nil.
func (v *vecKernel) convertCRC(dst, src []byte, opts Options, st *Stats, crc *uint32) {
	n := len(src) / v.inSize
	if n < v.block {
		// Shorter than a vector block: the portable kernel converts it
		// all, as the loop below would, without the accumulator (which
		// escapes to the heap through v.run).
		v.fallback(dst, src, opts, st)
		if crc != nil {
			*crc = crc32c.Update(*crc, src)
		}
		return
	}
	var acc [32]byte
	fast, under := 0, 0
	run := v.block // elements the portable kernel takes after a stop
	// Non-temporal stores for a streaming output: the portable kernel
	// first converts the elements before the first aligned dst address
	// (when the misalignment is whole elements), then blocks and fallback
	// runs are whole blocks, so the alignment of dst holds at every entry
	// to the fast path.
	nt, i := false, 0
	if v.ntAlign != 0 && (opts.Streaming || len(dst) >= ntMin) {
		mis := -uintptr(unsafe.Pointer(unsafe.SliceData(dst))) % v.ntAlign
		if head := int(mis) / v.outSize; mis%uintptr(v.outSize) == 0 && n-head >= v.block {
			nt, i = true, head
			if head > 0 {
				v.fallback(dst[:head*v.outSize], src[:head*v.inSize], opts, st)
				if crc != nil {
					*crc = crc32c.Update(*crc, src[:head*v.inSize])
				}
			}
		}
	}
	for i < n {
		if n-i >= v.block {
			var d, u int
			if crc != nil {
				var state [64]byte
				d = v.sum(dst[i*v.outSize:n*v.outSize], src[i*v.inSize:n*v.inSize], &acc, nt, &foldPair, &state)
				seg := int64(d * v.inSize)
				*crc = crc32c.Combine(*crc, crc32c.Folded(&state, seg), seg)
			} else {
				d, u = v.run(dst[i*v.outSize:n*v.outSize], src[i*v.inSize:n*v.inSize], &acc, nt)
			}
			under += u
			i += d
			fast += d
			if d > 0 {
				run = v.block
			} else if run < maxFallbackRun {
				run *= 2
			}
			if i >= n {
				break
			}
		}
		j := min(i+run, n)
		v.fallback(dst[i*v.outSize:j*v.outSize], src[i*v.inSize:j*v.inSize], opts, st)
		if crc != nil {
			*crc = crc32c.Update(*crc, src[i*v.inSize:j*v.inSize])
		}
		i = j
	}
	if fast > 0 {
		st.Elements += int64(fast)
		st.Underflow += int64(under)
		if m := v.accMax(&acc); m > st.MaxAbs {
			st.MaxAbs = m
		}
	}
}

// vecTable caches the vector kernels of the built-in pairs: built once, on
// first use, and read-only afterwards.
var vecTable struct {
	once sync.Once
	k    [numBuiltin][numBuiltin]kernel
	s    [numBuiltin][numBuiltin]sumKernel
}

// archKernel returns the vectorized kernel for the pair, or nil when there
// is none and the portable kernel must be used.
func archKernel(from, to DType) kernel {
	if from >= numBuiltin || to >= numBuiltin {
		return nil
	}
	vecTable.once.Do(func() {
		for f := DType(1); f < numBuiltin; f++ {
			for t := DType(1); t < numBuiltin; t++ {
				if f != t {
					vecTable.k[f][t] = vecKernelFor(f, t, genericKernel(f, t))
					vecTable.s[f][t] = sumKernelFor(f, t, genericKernel(f, t))
				}
			}
		}
	})
	return vecTable.k[from][to]
}

// archSumKernel returns the vector kernel for the pair that sums the
// source as it converts it (sumKernel), or nil when there is none.
func archSumKernel(from, to DType) sumKernel {
	if from >= numBuiltin || to >= numBuiltin {
		return nil
	}
	archKernel(from, to) // builds the table
	return vecTable.s[from][to]
}

// accMaxU16 returns the largest 16-bit lane of acc.
func accMaxU16(acc *[32]byte) uint16 {
	var m uint16
	for i := 0; i < 32; i += 2 {
		m = max(m, binary.LittleEndian.Uint16(acc[i:]))
	}
	return m
}

// accMaxU32 returns the largest 32-bit lane of acc.
func accMaxU32(acc *[32]byte) uint32 {
	var m uint32
	for i := 0; i < 32; i += 4 {
		m = max(m, binary.LittleEndian.Uint32(acc[i:]))
	}
	return m
}

// accMaxU8 returns the largest byte of acc.
func accMaxU8(acc *[32]byte) uint8 {
	var m uint8
	for _, b := range acc {
		m = max(m, b)
	}
	return m
}

// maxAbsBF16 reads acc as the magnitudes of BF16 values.
func maxAbsBF16(acc *[32]byte) float64 {
	return float64(math.Float32frombits(uint32(accMaxU16(acc)) << 16))
}

// maxAbsF16 reads acc as the magnitudes of F16 values (all finite).
func maxAbsF16(acc *[32]byte) float64 {
	h := accMaxU16(acc)
	e, m := int(h>>10), float64(h&0x3ff)
	if e == 0 {
		return math.Ldexp(m, -24)
	}
	return math.Ldexp(1024+m, e-25)
}

// maxAbsF32 reads acc as the magnitudes of F32 values.
func maxAbsF32(acc *[32]byte) float64 {
	return float64(math.Float32frombits(accMaxU32(acc)))
}

// f8Layout describes a sign-magnitude 8-bit float (or E8M0) for the vector
// decoder: code magnitude m decodes as float32 bits m<<shift times 2^scaleExp,
// which is exact for subnormals too.
type f8Layout struct {
	magMask     uint8 // bits of the code that hold the magnitude
	signed      bool  // the top bit is a sign
	shift       uint  // 23 - mantissa bits
	scaleExp    int   // 127 - bias
	magSpecial  uint8 // magnitudes >= this are NaN/Inf: left to the portable kernel (0xFF: none below 0xFF)
	codeSpecial uint8 // one more code left to the portable kernel
}

// f8Layouts lists the 8-bit float types with a vector decoder.
var f8Layouts = map[DType]f8Layout{
	F8_E4M3:     {magMask: 0x7f, signed: true, shift: 20, scaleExp: 120, magSpecial: 0x7f, codeSpecial: 0xff},
	F8_E5M2:     {magMask: 0x7f, signed: true, shift: 21, scaleExp: 112, magSpecial: 0x7c, codeSpecial: 0xff},
	F8_E4M3FNUZ: {magMask: 0x7f, signed: true, shift: 20, scaleExp: 119, magSpecial: 0xff, codeSpecial: 0x80},
	F8_E5M2FNUZ: {magMask: 0x7f, signed: true, shift: 21, scaleExp: 111, magSpecial: 0xff, codeSpecial: 0x80},
	F8_E8M0:     {magMask: 0xff, signed: false, shift: 23, scaleExp: 0, magSpecial: 0xff, codeSpecial: 0x00},
}

// f8DecodeTable holds the decoder parameters of each layout, computed once
// (read-only afterwards).
var f8DecodeTable = map[DType]*f8DecodeParams{}

func init() {
	for d, l := range f8Layouts {
		f8DecodeTable[d] = l.decodeParams()
	}
}

// value returns the magnitude code m as a float64.
func (l f8Layout) value(m uint8) float64 {
	return float64(math.Float32frombits(uint32(m)<<l.shift)) * math.Ldexp(1, l.scaleExp)
}

// maxAbs reads acc as the magnitude codes of l (a vecKernel's accMax).
func (l f8Layout) maxAbs(acc *[32]byte) float64 { return l.value(accMaxU8(acc)) }

// f8DecodeParams is the constant block the vector FP8 decoders read: each
// row is one 32-byte vector. The amd64 decoders through binary16 (E4M3,
// E4M3FNUZ, E5M2) read only the first three rows.
type f8DecodeParams struct {
	magMask8     [32]uint8
	magSpecial8  [32]uint8
	codeSpecial8 [32]uint8
	signMask32   [8]uint32
	magMask32    [8]uint32
	scale        [8]float32
	shift        [8]uint64 // count for the vector shift: [0] is used
}

func (l f8Layout) decodeParams() *f8DecodeParams {
	p := new(f8DecodeParams)
	for i := range 32 {
		p.magMask8[i] = l.magMask
		p.magSpecial8[i] = l.magSpecial
		p.codeSpecial8[i] = l.codeSpecial
	}
	for i := range 8 {
		if l.signed {
			p.signMask32[i] = 0x80000000
		}
		p.magMask32[i] = uint32(l.magMask)
		p.scale[i] = float32(math.Ldexp(1, l.scaleExp))
	}
	p.shift[0] = uint64(l.shift)
	return p
}

// f8EncodeParams is the constant block the vector F32→FP8 encoder reads.
// The fast path handles inputs that do not overflow (|x| <= omax), where the
// rounding is the same in both Saturate modes; it counts the nonzero inputs
// with |x| <= under, which round to zero.
type f8EncodeParams struct {
	omax  [8]uint32 // largest |x| bits that do not overflow
	under [8]uint32 // nonzero |x| bits <= under round to zero
	// Rows of the arm64 encoder: integer round to nearest even for normal
	// results, a float addition of magic for subnormal ones.
	sublim [8]uint32 // |x| at or below this encodes as a subnormal (or the smallest normal)
	magic  [8]uint32 // float adding the subnormal quantum at the last mantissa bit
	rebias [8]uint32 // exponent rebias in code units
	half   [8]uint32 // 2^(shift-1) - 1, for round to nearest even
	shift  [4]uint64 // 23 - mantissa bits ([0] is used; both encoders)

	// Rows of the AVX2 encoder, which rounds with one float addition: C is
	// 2^(shift + max(e, emin)) for |x| in binade e, the sum |x| + C rounds
	// |x| to the target's quantum in that binade (subnormal ones included),
	// and code = (sum - C) + (C >> shift) - codeBias, all in integer bits.
	expMask  [8]uint32 // 0x7f800000
	minExp   [8]uint32 // exponent bits of the smallest normal
	shiftExp [8]uint32 // shift << 23
	codeBias [8]uint32 // (127 + emin + shift) << mantissa bits
}

// f8Encoders lists the FP8 targets with a vector encoder.
var f8Encoders = map[DType]*f8EncodeParams{
	F8_E4M3: newF8EncodeParams(0x43e80000, 0x3a800000, 0x3c800000, 0x46800000, 120<<3, 20, -6),
	F8_E5M2: newF8EncodeParams(0x476fffff, 0x37000000, 0x38800000, 0x43000000, 112<<2, 21, -14),
}

func newF8EncodeParams(omax, under, sublim, magic, rebias uint32, shift uint, emin int) *f8EncodeParams {
	p := new(f8EncodeParams)
	for i := range 8 {
		p.omax[i] = omax
		p.under[i] = under
		p.sublim[i] = sublim - 1
		p.magic[i] = magic
		p.rebias[i] = rebias
		p.half[i] = 1<<(shift-1) - 1
		p.expMask[i] = 0x7f800000
		p.minExp[i] = sublim
		p.shiftExp[i] = uint32(shift) << 23
		p.codeBias[i] = uint32(127+emin+int(shift)) << (23 - shift)
	}
	p.shift[0] = uint64(shift)
	return p
}
