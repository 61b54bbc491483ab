package safetensors

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"unsafe"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/pagecache"
)

// Tensor is a cheap view of one tensor of an open File. It holds no data;
// its methods read from the File and fail with ErrClosed after Close.
type Tensor struct {
	f    *File
	info *TensorInfo
}

// Name returns the tensor's name.
func (t *Tensor) Name() string { return t.info.Name }

// DType returns the tensor's element type.
func (t *Tensor) DType() dtype.DType { return t.info.DType }

// Shape returns a copy of the tensor's shape (empty for a scalar).
func (t *Tensor) Shape() []int64 { return slices.Clone(t.info.Shape) }

// NumElements returns the number of elements (1 for a scalar).
func (t *Tensor) NumElements() int64 { return t.info.NumElements() }

// ByteLen returns the size of the tensor's data in bytes.
func (t *Tensor) ByteLen() int64 { return t.info.ByteLen() }

// Info returns the tensor's header entry (with a copy of the shape).
func (t *Tensor) Info() TensorInfo {
	i := *t.info
	i.Shape = slices.Clone(i.Shape)
	return i
}

// File returns the file the tensor belongs to.
func (t *Tensor) File() *File { return t.f }

// Offset returns the absolute file offset of the tensor's first byte.
func (t *Tensor) Offset() int64 { return t.f.hdr.DataOffset + t.info.Begin }

func (t *Tensor) err(kind ErrorKind, msg string) *Error {
	return t.f.err(kind, t.info.Name, msg)
}

// Bytes returns the tensor's raw little-endian bytes. For mapped files and
// OpenBytes it is a zero-copy view of the file (capacity limited to the
// tensor): do not modify it, and do not use it after File.Close. Reading the
// view of a mapped file that another process truncated raises SIGBUS in the
// reading code, which this package cannot intercept for the caller; use
// ReadTo or ConvertTo for a checked copy. With the ReadAt backend, Bytes
// returns a fresh copy.
func (t *Tensor) Bytes() ([]byte, error) {
	f := t.f
	off := f.hdr.DataOffset + t.info.Begin
	end := f.hdr.DataOffset + t.info.End
	if f.data != nil {
		// No lock: a view is only a slice header, and using it after Close
		// is documented as invalid anyway.
		if f.closed.Load() {
			return nil, t.err(ErrClosed, "file is closed")
		}
		if end > int64(len(f.data)) {
			return nil, t.err(ErrIO, "tensor extends past the mapped file")
		}
		return f.data[off:end:end], nil
	}
	if err := f.rlock(t.info.Name); err != nil {
		return nil, err
	}
	defer f.mu.RUnlock()
	buf := make([]byte, end-off)
	if err := f.readAt(t.info.Name, buf, off); err != nil {
		return nil, err
	}
	return buf, nil
}

// ReadTo copies the tensor's raw bytes into dst, which must be exactly ByteLen
// bytes long. Files opened from a path are read with pread (see ReadMode); a
// file truncated while open yields ErrIO (a memory fault included), never a
// crash.
func (t *Tensor) ReadTo(dst []byte) error {
	if int64(len(dst)) != t.info.ByteLen() {
		return t.err(ErrInvalidArgument, fmt.Sprintf("destination is %d bytes, tensor has %d", len(dst), t.info.ByteLen()))
	}
	return t.f.readRange(t.info.Name, dst, t.f.hdr.DataOffset+t.info.Begin)
}

// readRange copies len(dst) bytes at absolute offset off.
func (f *File) readRange(tensor string, dst []byte, off int64) error {
	if err := f.rlock(tensor); err != nil {
		return err
	}
	defer f.mu.RUnlock()
	if f.usePread() {
		return f.readAt(tensor, dst, off)
	}
	end := off + int64(len(dst))
	if end > int64(len(f.data)) {
		return f.err(ErrIO, tensor, "range extends past the mapped file")
	}
	return f.protect(tensor, func() { copy(dst, f.data[off:end]) })
}

// convertChunk is the source chunk size of converting reads: large enough to
// amortise pread and goroutine start-up, small enough to stay in cache.
const convertChunk = 4 << 20

// ConvertTo reads the tensor converted to dtype to into dst, which must hold
// exactly NumElements elements of to. The conversion is dtype.Convert
// (exact widening, a single rounding; see its options). When to equals the
// tensor's dtype it is a plain copy. Data is fetched in large pread chunks
// into a reused buffer, or straight from memory (see ReadMode).
func (t *Tensor) ConvertTo(to dtype.DType, dst []byte, opts dtype.Options) (dtype.Stats, error) {
	from := t.info.DType
	n := t.info.NumElements()
	if !validDType(to) {
		return dtype.Stats{}, t.err(ErrUnknownDType, fmt.Sprintf("unknown target dtype %v", to))
	}
	want, err := to.ByteLen(n)
	if err != nil {
		return dtype.Stats{}, &Error{Kind: ErrMisalignedSlice, File: t.f.path, Tensor: t.info.Name,
			Msg: fmt.Sprintf("%d elements do not fill whole bytes of %s", n, to), Err: err}
	}
	if int64(len(dst)) != want {
		return dtype.Stats{}, t.err(ErrInvalidArgument, fmt.Sprintf("destination is %d bytes, %d elements of %s need %d", len(dst), n, to, want))
	}
	if to == from {
		if err := t.ReadTo(dst); err != nil {
			return dtype.Stats{}, err
		}
		return dtype.Stats{Elements: n}, nil
	}
	return t.f.convertRange(t.info.Name, dst, to, t.f.hdr.DataOffset+t.info.Begin, t.info.ByteLen(), from, opts)
}

// convertRange converts srcLen bytes of dtype from at absolute offset off
// into dst.
func (f *File) convertRange(tensor string, dst []byte, to dtype.DType, off, srcLen int64, from dtype.DType, opts dtype.Options) (dtype.Stats, error) {
	if err := f.rlock(tensor); err != nil {
		return dtype.Stats{}, err
	}
	defer f.mu.RUnlock()
	var total dtype.Stats
	if f.data != nil && !f.mapped {
		// Plain memory (OpenBytes): convert in one call, all workers.
		st, err := dtype.Convert(dst, to, f.data[off:off+srcLen], from, opts)
		if err != nil {
			return st, f.convErr(tensor, from, to, err)
		}
		return st, nil
	}
	// Chunks hold a whole number of bytes of both dtypes: a multiple of 8
	// elements. With pread each chunk is read into a reused, cache-sized
	// buffer and converted from there; from a mapping each chunk is converted
	// in place under fault protection, on the goroutine that protects it.
	// Workers take chunks in turn.
	fb, tb := int64(from.Bits()), int64(to.Bits())
	chunk := int64(convertChunk)
	if f.chunk > 0 {
		chunk = f.chunk
	}
	elems := chunk * 8 / fb / 8 * 8
	if elems < 8 {
		elems = 8
	}
	srcChunk := elems * fb / 8
	nChunks := (srcLen + srcChunk - 1) / srcChunk
	// Chunks are fetched with pread only where raw copies are (see usePread):
	// converting in place from the mapping measured faster (~6.9 vs ~4.4 GB/s
	// BF16->F32 on a fresh mapping, BENCHMARKS.md).
	pread := f.usePread()
	if !pread && srcLen <= srcChunk {
		// One chunk from the mapping (every small tensor): converted here,
		// without the closures and workers of the general case below.
		if off+srcLen > int64(len(f.data)) {
			return dtype.Stats{}, f.err(ErrIO, tensor, "range extends past the mapped file")
		}
		o := opts
		o.Workers = 1
		src := f.data[off : off+srcLen]
		var st dtype.Stats
		var err error
		if ferr := f.protect(tensor, func() { st, err = dtype.Convert(dst, to, src, from, o) }); ferr != nil {
			return st, ferr
		}
		if err != nil {
			return st, f.convErr(tensor, from, to, err)
		}
		return st, nil
	}
	convErr := func(err error) error { return f.convErr(tensor, from, to, err) }
	// scratch returns a chunk buffer from the pool; only pread needs one.
	scratch := func(n int64) *[]byte {
		if !pread {
			return nil
		}
		return f.getScratch(int(n))
	}
	doChunk := func(ci int64, buf *[]byte, o dtype.Options) (dtype.Stats, error) {
		done := ci * srcChunk
		m := min(srcChunk, srcLen-done)
		first := done * 8 / fb // elements before this chunk: a multiple of 8
		dStart := first * tb / 8
		dEnd := int64(len(dst))
		if done+m < srcLen {
			dEnd = (first + m*8/fb) * tb / 8
		}
		var st dtype.Stats
		var err error
		if pread {
			src := (*buf)[:m]
			if err := f.readAt(tensor, src, off+done); err != nil {
				return dtype.Stats{}, err
			}
			st, err = dtype.Convert(dst[dStart:dEnd], to, src, from, o)
		} else {
			// Straight from the mapping, on this goroutine only, so that a
			// fault is caught by protect.
			if off+done+m > int64(len(f.data)) {
				return dtype.Stats{}, f.err(ErrIO, tensor, "range extends past the mapped file")
			}
			o.Workers = 1
			src := f.data[off+done : off+done+m]
			if ferr := f.protect(tensor, func() { st, err = dtype.Convert(dst[dStart:dEnd], to, src, from, o) }); ferr != nil {
				return st, ferr
			}
		}
		if err != nil {
			return st, convErr(err)
		}
		return st, nil
	}
	workers := int64(opts.Workers)
	if workers <= 0 {
		workers = int64(runtime.GOMAXPROCS(0))
	}
	workers = min(workers, nChunks)
	if workers <= 1 {
		buf := scratch(min(srcChunk, srcLen))
		defer f.putScratch(buf)
		for ci := int64(0); ci < nChunks; ci++ {
			st, err := doChunk(ci, buf, opts)
			total.Add(st)
			if err != nil {
				return total, err
			}
		}
		return total, nil
	}
	one := opts
	one.Workers = 1
	stats := make([]dtype.Stats, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := int64(0); w < workers; w++ {
		wg.Add(1)
		go func(w int64) {
			defer wg.Done()
			buf := scratch(srcChunk)
			defer f.putScratch(buf)
			for ci := w; ci < nChunks; ci += workers {
				st, err := doChunk(ci, buf, one)
				stats[w].Add(st)
				if err != nil {
					errs[w] = err
					return
				}
			}
		}(w)
	}
	wg.Wait()
	for w := range stats {
		total.Add(stats[w])
	}
	for _, err := range errs {
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// convErr is the error of a failed conversion of tensor.
func (f *File) convErr(tensor string, from, to dtype.DType, err error) error {
	return &Error{Kind: ErrInvalidArgument, File: f.path, Tensor: tensor, Msg: fmt.Sprintf("convert %s to %s", from, to), Err: err}
}

// ConvertElementsTo converts the elements [first, first+n) of the tensor,
// in row-major order, to dtype to into dst, where n is the number of
// elements dst holds. It is ConvertTo for a part of a tensor, so that a
// caller can spread one large tensor over several goroutines (each with
// opts.Workers 1) or convert it in bounded pieces: first and n must be
// multiples of 8 unless the range ends at the tensor's end, so that both
// dtypes' sub-byte packing (F4, F6) starts on a byte boundary. When to
// equals the tensor's dtype it is a plain copy.
func (t *Tensor) ConvertElementsTo(to dtype.DType, dst []byte, first int64, opts dtype.Options) (dtype.Stats, error) {
	from := t.info.DType
	total := t.info.NumElements()
	if !validDType(to) {
		return dtype.Stats{}, t.err(ErrUnknownDType, fmt.Sprintf("unknown target dtype %v", to))
	}
	tb, fb := int64(to.Bits()), int64(from.Bits())
	if tb <= 0 || fb <= 0 || int64(len(dst))*8%tb != 0 {
		return dtype.Stats{}, t.err(ErrInvalidArgument, fmt.Sprintf("destination of %d bytes is not a whole number of %s elements", len(dst), to))
	}
	n := int64(len(dst)) * 8 / tb
	if first < 0 || first > total || n > total-first {
		return dtype.Stats{}, t.err(ErrInvalidArgument, fmt.Sprintf("elements [%d, %d+%d) outside the tensor's %d", first, first, n, total))
	}
	if first%8 != 0 || (n%8 != 0 && first+n != total) {
		return dtype.Stats{}, t.err(ErrInvalidArgument, fmt.Sprintf("elements [%d, %d+%d): a part must start and end on multiples of 8 elements", first, first, n))
	}
	if n == 0 {
		return dtype.Stats{}, nil
	}
	off := t.f.hdr.DataOffset + t.info.Begin + first*fb/8
	srcLen := (n*fb + 7) / 8
	if to == from {
		if err := t.f.readRange(t.info.Name, dst, off); err != nil {
			return dtype.Stats{}, err
		}
		return dtype.Stats{Elements: n}, nil
	}
	return t.f.convertRange(t.info.Name, dst, to, off, srcLen, from, opts)
}

// Evict tells the kernel that this process no longer needs the mapped
// pages holding the elements [first, first+n): the whole pages inside that
// range leave the process's resident set (the page cache keeps them, and a
// later read faults them back in). A loader that has converted those
// elements calls it so that its resident memory is the converted output,
// not output plus source. It does nothing for files that are not mapped
// and on systems without madvise; it never fails.
func (t *Tensor) Evict(first, n int64) {
	f := t.f
	if !f.mapped || first < 0 || n <= 0 {
		return
	}
	total := t.info.NumElements()
	if first >= total {
		return
	}
	n = min(n, total-first)
	fb := int64(t.info.DType.Bits())
	off := f.hdr.DataOffset + t.info.Begin + first*fb/8
	end := f.hdr.DataOffset + t.info.Begin + (first+n)*fb/8
	f.Evict(off, end-off)
}

// Evict is Tensor.Evict for the bytes [off, off+n) of the file, which may
// span several tensors: a reader that has finished with a run of them drops
// their pages with one call (each call interrupts the process's other
// threads to flush their address translations). The whole pages inside the
// range leave the resident set; it does nothing for files that are not
// mapped and never fails.
func (f *File) Evict(off, n int64) {
	if !f.mapped || off < 0 || n <= 0 {
		return
	}
	if f.rlock("") != nil {
		return
	}
	defer f.mu.RUnlock()
	end := off + n
	if end > int64(len(f.data)) || end < off {
		return
	}
	pagecache.Drop(f.data[off:end])
}

// Float32s returns the tensor's elements converted to float32 (exactly for
// every dtype of 24 significant bits or fewer; rounded once otherwise).
func (t *Tensor) Float32s() ([]float32, error) {
	n := t.info.NumElements()
	out := make([]float32, n)
	prefault(f32Bytes(out))
	_, err := t.ConvertTo(dtype.F32, f32Bytes(out), dtype.Options{})
	if err != nil {
		return nil, err
	}
	fixEndian32(out)
	return out, nil
}

// Float64s returns the tensor's elements converted to float64.
func (t *Tensor) Float64s() ([]float64, error) {
	n := t.info.NumElements()
	out := make([]float64, n)
	prefault(f64Bytes(out))
	_, err := t.ConvertTo(dtype.F64, f64Bytes(out), dtype.Options{})
	if err != nil {
		return nil, err
	}
	fixEndian64(out)
	return out, nil
}

func f32Bytes(s []float32) []byte {
	if len(s) == 0 {
		return []byte{}
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*4)
}

func f64Bytes(s []float64) []byte {
	if len(s) == 0 {
		return []byte{}
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*8)
}
