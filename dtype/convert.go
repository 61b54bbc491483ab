package dtype

import (
	"context"
	"runtime"
	"sync"
	"unsafe"

	"github.com/ckpt-go/ckpt/internal/crc32c"
)

// parallelMin is the size (in bytes of the larger side) from which Convert
// splits the work across goroutines.
const parallelMin = 1 << 20

// Convert converts the elements of src (dtype from) into dst (dtype to), both
// in little-endian safetensors layout, and reports what happened to the
// values. dst and src must hold the same whole number of elements; otherwise
// Convert returns a *ConvertError matching ErrLength. Unknown dtypes give a
// *ConvertError matching ErrUnknown, and C64 to a real type one matching
// ErrUnsupported. dst and src must not overlap unless they are the same slice
// of the same dtype.
//
// Every value is widened exactly and rounded once to the target, to nearest
// with ties to even (except F8_E8M0, see below). The rules for values out of
// the target's range, NaN and the special encodings are given in the package
// documentation; Stats counts each event.
//
// Conversions of at least 1 MiB are split across opts.Workers goroutines
// (GOMAXPROCS when 0); the result and the Stats are the same as serially.
func Convert(dst []byte, to DType, src []byte, from DType, opts Options) (Stats, error) {
	var st Stats
	k, n, err := plan(dst, to, src, from)
	if err != nil {
		return st, err
	}
	run(k, dst, to, src, from, n, opts, &st)
	return st, nil
}

// ConvertSum is Convert that also returns the CRC-32C of the bytes of src
// following those whose CRC-32C is crc (as crc32c / hash/crc32's Update:
// ConvertSum(..., 0) gives the checksum of src): a reader that must both
// convert and verify bytes reads them once. Where the pair has a vector
// kernel that folds the CRC from the registers it loads (BF16 and F16 to
// F32, on amd64 CPUs with VPCLMULQDQ), the CRC costs no read of its own;
// otherwise src is converted in steps of about 192 KiB, each summed right
// after it is converted, while it is in the cache. dst, Stats and errors
// are Convert's; on an error the CRC returned is crc.
func ConvertSum(dst []byte, to DType, src []byte, from DType, opts Options, crc uint32) (Stats, uint32, error) {
	var st Stats
	k, n, err := plan(dst, to, src, from)
	if err != nil || n == 0 {
		return st, crc, err
	}
	sk := archSumKernel(from, to)
	if sk == nil {
		sk = stepSum(k, to, from)
	}
	opts, workers := callPlan(dst, src, opts)
	if workers == 1 {
		sk(dst, src, opts, &st, &crc)
		return st, crc, nil
	}
	// In parts on several goroutines, as Convert splits them, each part's
	// CRC combined in order.
	stats, crcs, lens := make([]Stats, workers), make([]uint32, workers), make([]int64, workers)
	inParts(n, from, to, workers, func(p, lo, hi int) {
		s := src[byteOff(from, lo):byteOff(from, hi)]
		lens[p] = int64(len(s))
		sk(dst[byteOff(to, lo):byteOff(to, hi)], s, opts, &stats[p], &crcs[p])
	})
	for p := range stats {
		st.Add(stats[p])
		crc = crc32c.Combine(crc, crcs[p], lens[p])
	}
	return st, crc, nil
}

// stepSum makes a sumKernel of k: it converts crc32c.Step source bytes (whole
// multiples of 8 elements) at a time and sums each step after it.
func stepSum(k kernel, to, from DType) sumKernel {
	return func(dst, src []byte, opts Options, st *Stats, crc *uint32) {
		per := max(crc32c.Step*8/from.Bits()&^7, 8) // elements per step
		n, _ := from.Elements(len(src))
		for lo := 0; lo < n; lo += per {
			hi := min(n, lo+per)
			s := src[byteOff(from, lo):byteOff(from, hi)]
			k(dst[byteOff(to, lo):byteOff(to, hi)], s, opts, st)
			*crc = crc32c.Update(*crc, s)
		}
	}
}

// plan checks the arguments of Convert and returns the kernel for the pair
// and the number of elements.
func plan(dst []byte, to DType, src []byte, from DType) (kernel, int, error) {
	fail := func(err error, reason string) (kernel, int, error) {
		ns, nd := -1, -1
		if from.Valid() {
			if n, e := from.Elements(len(src)); e == nil {
				ns = n
			}
		}
		if to.Valid() {
			if n, e := to.Elements(len(dst)); e == nil {
				nd = n
			}
		}
		return nil, 0, &ConvertError{From: from, To: to, SrcBytes: len(src), DstBytes: len(dst),
			SrcElements: ns, DstElements: nd, Err: err, Reason: reason}
	}
	if !from.Valid() {
		return fail(ErrUnknown, "unknown source dtype")
	}
	if !to.Valid() {
		return fail(ErrUnknown, "unknown target dtype")
	}
	ns, errS := from.Elements(len(src))
	nd, errD := to.Elements(len(dst))
	switch {
	case errS != nil:
		return fail(ErrLength, "source is not a whole number of elements")
	case errD != nil:
		return fail(ErrLength, "destination is not a whole number of elements")
	case ns != nd:
		return fail(ErrLength, "element counts differ")
	}
	k := archKernel(from, to)
	if k == nil {
		k = genericKernel(from, to)
	}
	if k == nil {
		return fail(ErrUnsupported, "no conversion from complex to real values")
	}
	return k, ns, nil
}

// run converts the n elements of src into dst with k, split across
// goroutines from parallelMin bytes on.
func run(k kernel, dst []byte, to DType, src []byte, from DType, n int, opts Options, st *Stats) {
	if n == 0 {
		return
	}
	opts, workers := callPlan(dst, src, opts)
	if workers == 1 {
		k(dst, src, opts, st)
		return
	}
	convertParallel(k, dst, to, src, from, n, workers, opts, st)
}

// callPlan says how a conversion runs: a large output streams (whether it
// is converted in one call or split across goroutines into parts below
// ntMin), and a call of parallelMin bytes or more is split across
// opts.Workers goroutines (GOMAXPROCS when 0); workers is 1 for a call
// converted on the caller's goroutine.
func callPlan(dst, src []byte, opts Options) (_ Options, workers int) {
	if len(dst) >= ntMin {
		opts.Streaming = true
	}
	workers = opts.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	if max(len(src), len(dst)) < parallelMin {
		workers = 1
	}
	return opts, workers
}

// ntMin is the output size from which the vector kernels write with
// non-temporal stores (Options.Streaming) without being asked: well beyond
// the per-core caches, where the output would only evict the input on its
// way to memory. Convert applies it to the whole call, before any split
// across goroutines.
const ntMin = 4 << 20

// segmentBytes is how much ConvertContext converts between checks of its
// context (of the larger side).
const segmentBytes = 32 << 20

// ConvertContext is Convert for long conversions: it works through the
// slices in segments of about 32 MiB and stops at the first segment boundary
// after ctx is done, returning the Stats so far and ctx.Err(). dst is then
// only partly written.
func ConvertContext(ctx context.Context, dst []byte, to DType, src []byte, from DType, opts Options) (Stats, error) {
	var total Stats
	if err := ctx.Err(); err != nil {
		return total, err
	}
	k, n, err := plan(dst, to, src, from)
	if err != nil {
		return total, err
	}
	width := max(from.Bits(), to.Bits())
	per := segmentBytes * 8 / width &^ 7 // elements per segment, a multiple of 8
	for lo := 0; lo < n; lo += per {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		hi := min(n, lo+per)
		var st Stats
		run(k, dst[byteOff(to, lo):byteOff(to, hi)], to, src[byteOff(from, lo):byteOff(from, hi)], from, hi-lo, opts, &st)
		total.Add(st)
	}
	return total, nil
}

// convertParallel splits n elements into parts of a multiple of 8 elements
// (whole bytes for every dtype) of at least parallelMin/2 bytes each.
func convertParallel(k kernel, dst []byte, to DType, src []byte, from DType, n, workers int, opts Options, st *Stats) {
	stats := make([]Stats, workers)
	inParts(n, from, to, workers, func(p, lo, hi int) {
		k(dst[byteOff(to, lo):byteOff(to, hi)], src[byteOff(from, lo):byteOff(from, hi)], opts, &stats[p])
	})
	for _, s := range stats {
		st.Add(s)
	}
}

// inParts runs part(p, lo, hi) on its own goroutine for each part p of
// the n elements: at most workers parts of a multiple of 8 elements (whole
// bytes for every dtype) and at least parallelMin/2 bytes each, in order,
// [lo, hi) their elements. It returns when every part is done.
func inParts(n int, from, to DType, workers int, part func(p, lo, hi int)) {
	width := max(from.Bits(), to.Bits()) // bits per element of the larger side
	minElems := parallelMin / 2 * 8 / width
	parts := min(workers, max(1, n/minElems))
	per := ((n+parts-1)/parts + 7) &^ 7 // parts*per >= n
	var wg sync.WaitGroup
	for p := 0; p*per < n; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			part(p, p*per, min(n, (p+1)*per))
		}(p)
	}
	wg.Wait()
}

// DecodeFloat32 widens the elements of src (dtype from) into dst, which must
// have one float32 per element. It is Convert with F32 as the target, without
// reinterpreting dst as bytes at the call site.
func DecodeFloat32(dst []float32, src []byte, from DType) (Stats, error) {
	return Convert(Float32Bytes(dst), F32, src, from, Options{})
}

// EncodeFloat32 rounds src into dst (dtype to), which must hold len(src)
// elements. It is Convert with F32 as the source.
func EncodeFloat32(dst []byte, to DType, src []float32, opts Options) (Stats, error) {
	return Convert(dst, to, Float32Bytes(src), F32, opts)
}

// DecodeFloat64 widens src into dst like DecodeFloat32, for float64.
func DecodeFloat64(dst []float64, src []byte, from DType) (Stats, error) {
	return Convert(Float64Bytes(dst), F64, src, from, Options{})
}

// EncodeFloat64 rounds src into dst (dtype to), like EncodeFloat32.
func EncodeFloat64(dst []byte, to DType, src []float64, opts Options) (Stats, error) {
	return Convert(dst, to, Float64Bytes(src), F64, opts)
}

// Float32Bytes returns the memory of f as bytes, without copying: the bytes
// are the F32 safetensors layout on little-endian hosts (amd64, arm64 and
// every other platform Go supports except big-endian ones such as s390x and
// ppc64, where the byte order is reversed). Writes through either slice are
// visible in the other.
func Float32Bytes(f []float32) []byte {
	if len(f) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(f))), 4*len(f))
}

// Float64Bytes is Float32Bytes for float64.
func Float64Bytes(f []float64) []byte {
	if len(f) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(f))), 8*len(f))
}
