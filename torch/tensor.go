package torch

import (
	"encoding/binary"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/ckpt-go/ckpt/dtype"
)

// copyChunk is the size of the buffer WriteTo copies through.
const copyChunk = 1 << 20

// copyBufs holds WriteTo's buffers, so that writing a checkpoint of many
// tensors does not allocate one per tensor.
var copyBufs = sync.Pool{New: func() any { return new([copyChunk]byte) }}

// Tensor is one tensor of a Checkpoint: a view (offset, shape, strides) of
// a storage record of the archive. It is cheap: nothing is read until
// ReadTo, Bytes or WriteTo, which give the elements in row-major order as
// contiguous little-endian bytes, the layout of safetensors. A Tensor is
// safe for concurrent use.
type Tensor struct {
	c       *Checkpoint
	sf      *shardFile
	name    string
	dt      dtype.DType
	shape   []int64
	stride  []int64 // in elements
	offset  int64   // storage offset, in elements
	size    int64   // bytes of the contiguous copy
	contig  bool
	base    int64 // archive offset of the view's first element
	extent  int64 // bytes from base that hold every element of the view
	storage string
	record  string
}

// Name returns the tensor's name: its dotted path in the checkpoint
// ("model.enc.weight").
func (t *Tensor) Name() string { return t.name }

// File returns the path of the archive that holds the tensor's storage:
// the checkpoint's file, or for a sharded checkpoint the shard's path (the
// index's folder joined with the name the index gives it).
func (t *Tensor) File() string { return t.sf.path }

// DType returns the element type.
func (t *Tensor) DType() dtype.DType { return t.dt }

// Shape returns the dimensions (a copy; empty for a 0-d tensor).
func (t *Tensor) Shape() []int64 { return slices.Clone(t.shape) }

// Strides returns the strides of the view in the storage, in elements (a
// copy).
func (t *Tensor) Strides() []int64 { return slices.Clone(t.stride) }

// StorageOffset returns the offset of the view's first element in its
// storage, in elements.
func (t *Tensor) StorageOffset() int64 { return t.offset }

// Storage returns the key of the storage record the tensor views (its
// record is data/KEY in the archive). Tensors of one file with the same key
// share memory in PyTorch.
func (t *Tensor) Storage() string { return t.storage }

// Contiguous reports whether the view's elements lie in row-major order
// without gaps, so that reading it is one copy. Other views (transposed,
// strided, expanded) are gathered element by element.
func (t *Tensor) Contiguous() bool { return t.contig }

// ByteLen returns the size of the tensor's contiguous bytes: the number of
// elements times the element size. It never exceeds the size of the
// tensor's storage record.
func (t *Tensor) ByteLen() int64 { return t.size }

// Bytes returns the tensor's contiguous little-endian bytes in a new slice.
func (t *Tensor) Bytes() ([]byte, error) {
	b := make([]byte, t.size) // <= the record's size, which is within the file
	if err := t.ReadTo(b); err != nil {
		return nil, err
	}
	return b, nil
}

// ReadTo fills dst, which must be ByteLen bytes long, with the tensor's
// contiguous little-endian bytes. A non-contiguous view reads the part of
// its storage it spans (at most the record's size) and gathers from it.
func (t *Tensor) ReadTo(dst []byte) error {
	if int64(len(dst)) != t.size {
		return t.err(ErrInvalidArgument, fmt.Sprintf("destination of %d bytes, the tensor has %d", len(dst), t.size), nil)
	}
	if err := t.checkOpen(); err != nil {
		return err
	}
	if t.size == 0 {
		return nil
	}
	if t.contig {
		if err := t.readAt(dst, t.base); err != nil {
			return err
		}
		t.toLittle(dst)
		return nil
	}
	src, err := t.span()
	if err != nil {
		return err
	}
	t.gather(dst, src, 0)
	t.toLittle(dst)
	return nil
}

// WriteTo writes the tensor's contiguous little-endian bytes to w, through
// a buffer of at most 1 MiB (plus, for a non-contiguous view, the part of
// the storage it spans). It implements io.WriterTo.
func (t *Tensor) WriteTo(w io.Writer) (int64, error) {
	if err := t.checkOpen(); err != nil {
		return 0, err
	}
	var src []byte
	if !t.contig && t.size > 0 {
		var err error
		if src, err = t.span(); err != nil {
			return 0, err
		}
	}
	bp := copyBufs.Get().(*[copyChunk]byte)
	defer copyBufs.Put(bp)
	buf := bp[:min(t.size, copyChunk)]
	isz := int64(t.dt.Bits() / 8)
	chunk := int64(len(buf)) / isz * isz // whole elements, for the gather and the byte swap
	var done int64
	for done < t.size {
		n := min(chunk, t.size-done)
		b := buf[:n]
		if t.contig {
			if err := t.readAt(b, t.base+done); err != nil {
				return done, err
			}
		} else {
			t.gather(b, src, done/isz)
		}
		t.toLittle(b)
		m, err := w.Write(b)
		done += int64(m)
		if err != nil {
			return done, err
		}
		if m != len(b) {
			return done, io.ErrShortWrite
		}
	}
	return done, nil
}

func (t *Tensor) checkOpen() error {
	if t.c.closed.Load() {
		return t.err(ErrClosed, "the checkpoint is closed", nil)
	}
	return nil
}

func (t *Tensor) err(kind ErrorKind, msg string, err error) error {
	return &Error{Kind: kind, File: t.sf.path, Record: t.record, Tensor: t.name, Msg: msg, Err: err}
}

func (t *Tensor) readAt(b []byte, off int64) error {
	n, err := t.sf.ar.r.ReadAt(b, off)
	if n == len(b) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return t.err(ErrIO, "read", err)
}

// span reads the bytes of the storage that the view spans.
func (t *Tensor) span() ([]byte, error) {
	src := make([]byte, t.extent) // <= the record's size, checked at Open
	if err := t.readAt(src, t.base); err != nil {
		return nil, err
	}
	return src, nil
}

// gather copies len(dst) bytes of the view, starting at element first in
// row-major order, from src (the span from the view's first element).
func (t *Tensor) gather(dst, src []byte, first int64) {
	isz := int64(t.dt.Bits() / 8)
	nd := len(t.shape)
	idx := make([]int64, nd)
	rem := first
	var off int64 // element offset in src
	for i := nd - 1; i >= 0; i-- {
		idx[i] = rem % t.shape[i]
		rem /= t.shape[i]
		off += idx[i] * t.stride[i]
	}
	// The innermost dimension is copied a run at a time: one copy when its
	// stride is 1, a strided loop otherwise.
	last := nd - 1
	for p := int64(0); p < int64(len(dst)); {
		if last < 0 { // a 0-d tensor: one element
			copy(dst, src[:isz])
			return
		}
		run := min(t.shape[last]-idx[last], (int64(len(dst))-p)/isz)
		if t.stride[last] == 1 {
			copy(dst[p:p+run*isz], src[off*isz:(off+run)*isz])
		} else {
			gatherRun(dst[p:p+run*isz], src[off*isz:], t.stride[last]*isz, isz)
		}
		p += run * isz
		idx[last] += run - 1
		off += (run - 1) * t.stride[last]
		// Step to the next element.
		for i := last; i >= 0; i-- {
			idx[i]++
			off += t.stride[i]
			if idx[i] < t.shape[i] {
				break
			}
			off -= idx[i] * t.stride[i]
			idx[i] = 0
		}
	}
}

// gatherRun fills dst with elements of isz bytes taken every step bytes
// from src.
func gatherRun(dst, src []byte, step, isz int64) {
	n := int64(len(dst)) / isz
	switch isz {
	case 1:
		for k := range n {
			dst[k] = src[k*step]
		}
	case 2:
		for k := range n {
			binary.LittleEndian.PutUint16(dst[2*k:], binary.LittleEndian.Uint16(src[k*step:]))
		}
	case 4:
		for k := range n {
			binary.LittleEndian.PutUint32(dst[4*k:], binary.LittleEndian.Uint32(src[k*step:]))
		}
	case 8:
		for k := range n {
			binary.LittleEndian.PutUint64(dst[8*k:], binary.LittleEndian.Uint64(src[k*step:]))
		}
	default:
		for k := range n {
			copy(dst[k*isz:(k+1)*isz], src[k*step:k*step+isz])
		}
	}
}

// toLittle byte-swaps b in place when the archive is big-endian.
func (t *Tensor) toLittle(b []byte) {
	if !t.sf.ar.big {
		return
	}
	unit := t.dt.Bits() / 8
	if t.dt.Info().Kind == dtype.KindComplex {
		unit /= 2 // each of the real and imaginary parts
	}
	swapBytes(b, unit)
}

// swapBytes reverses the byte order of each unit-byte element of b.
func swapBytes(b []byte, unit int) {
	if unit < 2 {
		return
	}
	for i := 0; i+unit <= len(b); i += unit {
		e := b[i : i+unit]
		for j, k := 0, unit-1; j < k; j, k = j+1, k-1 {
			e[j], e[k] = e[k], e[j]
		}
	}
}
