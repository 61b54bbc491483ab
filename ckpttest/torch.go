package ckpttest

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"maps"
	"slices"

	"github.com/ckpt-go/ckpt/dtype"
)

// TorchTensor is a tensor of a PyTorch checkpoint as EncodeTorch writes
// it: a view of the storage named Storage, from element Offset, with its
// Shape and Stride in elements. Two tensors of one storage share memory
// in PyTorch; the same view under two names is a tie (tied weights).
type TorchTensor struct {
	Name    string
	Storage string
	Offset  int64
	Shape   []int64
	Stride  []int64
}

// TorchStorage is a storage of a PyTorch checkpoint: its dtype and its
// elements' little-endian bytes.
type TorchStorage struct {
	DType dtype.DType
	Data  []byte
}

// torchTyped are the typed storages torch.save names for dtypes that have
// one; the others are untyped storages of bytes with the dtype given to
// _rebuild_tensor_v3 (torchV3).
var torchTyped = map[dtype.DType]string{
	dtype.F32: "FloatStorage", dtype.F64: "DoubleStorage", dtype.F16: "HalfStorage", dtype.BF16: "BFloat16Storage",
	dtype.I64: "LongStorage", dtype.I32: "IntStorage", dtype.I16: "ShortStorage", dtype.I8: "CharStorage",
	dtype.U8: "ByteStorage", dtype.BOOL: "BoolStorage", dtype.C64: "ComplexFloatStorage",
}

var torchV3 = map[dtype.DType]string{
	dtype.F8_E4M3: "float8_e4m3fn", dtype.F8_E5M2: "float8_e5m2", dtype.F8_E4M3FNUZ: "float8_e4m3fnuz",
	dtype.F8_E5M2FNUZ: "float8_e5m2fnuz", dtype.F8_E8M0: "float8_e8m0fnu",
	dtype.U16: "uint16", dtype.U32: "uint32", dtype.U64: "uint64",
}

// WriteTorch writes EncodeTorch's little-endian archive of tensors to
// path, creating its folder.
func WriteTorch(path string, tensors []TorchTensor, storages map[string]TorchStorage) error {
	b, err := EncodeTorch(tensors, storages, false)
	if err != nil {
		return &Error{Op: "write", Path: path, Err: err}
	}
	return writeBytes(path, b)
}

// EncodeTorch returns a PyTorch checkpoint laid out as torch.save writes
// a state dict: a zip archive of archive/data.pkl (pickle protocol 2: an
// OrderedDict of the tensors, in order, each a _rebuild_tensor_v2 call on
// its typed storage, or _rebuild_tensor_v3 on an untyped one for the
// dtypes without a typed storage, such as FP8), archive/byteorder and the
// stored records archive/data/KEY. With bigEndian the storages' elements
// are written big-endian, as on such a machine. Like Encode, it shares no
// code with the package that reads it (package torch). A dtype PyTorch
// cannot store, a storage that is missing or not whole elements, are
// errors.
func EncodeTorch(tensors []TorchTensor, storages map[string]TorchStorage, bigEndian bool) ([]byte, error) {
	var p []byte
	op := func(b ...byte) { p = append(p, b...) }
	str := func(s string) {
		op('X') // BINUNICODE
		p = binary.LittleEndian.AppendUint32(p, uint32(len(s)))
		p = append(p, s...)
	}
	global := func(mod, name string) { op('c'); p = append(p, mod+"\n"+name+"\n"...) }
	integer := func(v int64) {
		op(0x8a, 8) // LONG1
		p = binary.LittleEndian.AppendUint64(p, uint64(v))
	}
	tuple := func(vs []int64) {
		op('(') // MARK
		for _, v := range vs {
			integer(v)
		}
		op('t') // TUPLE
	}
	op(0x80, 2) // PROTO 2
	global("collections", "OrderedDict")
	op(')', 'R', '(') // EMPTY_TUPLE, REDUCE, MARK
	for _, t := range tensors {
		s, ok := storages[t.Storage]
		if !ok {
			return nil, &Error{Op: "encode", Msg: fmt.Sprintf("tensor %q: no storage %q", t.Name, t.Storage)}
		}
		if len(t.Shape) != len(t.Stride) {
			return nil, &Error{Op: "encode", Msg: fmt.Sprintf("tensor %q: shape %v and stride %v differ in length", t.Name, t.Shape, t.Stride)}
		}
		typed, isTyped := torchTyped[s.DType]
		v3 := torchV3[s.DType]
		if !isTyped && v3 == "" {
			return nil, &Error{Op: "encode", Msg: fmt.Sprintf("tensor %q: PyTorch has no storage for %s", t.Name, s.DType)}
		}
		str(t.Name)
		if isTyped {
			global("torch._utils", "_rebuild_tensor_v2")
		} else {
			global("torch._utils", "_rebuild_tensor_v3")
		}
		op('(', '(')
		str("storage")
		numel := int64(len(s.Data))
		if isTyped {
			global("torch", typed)
			numel /= int64(s.DType.Bits() / 8)
		} else {
			global("torch.storage", "UntypedStorage")
		}
		str(t.Storage)
		str("cpu")
		integer(numel)
		op('t', 'Q') // TUPLE, BINPERSID
		integer(t.Offset)
		tuple(t.Shape)
		tuple(t.Stride)
		op(0x89) // NEWFALSE: requires_grad
		global("collections", "OrderedDict")
		op(')', 'R') // backward hooks
		if !isTyped {
			global("torch", v3)
		}
		op('t', 'R')
	}
	op('u', '.') // SETITEMS, STOP

	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	put := func(name string, b []byte) error {
		w, err := zw.CreateRaw(&zip.FileHeader{Name: name, Method: zip.Store, CRC32: crc32.ChecksumIEEE(b),
			CompressedSize64: uint64(len(b)), UncompressedSize64: uint64(len(b))})
		if err == nil {
			_, err = w.Write(b)
		}
		return err
	}
	order := "little"
	if bigEndian {
		order = "big"
	}
	if err := put("archive/data.pkl", p); err != nil {
		return nil, err
	}
	if err := put("archive/byteorder", []byte(order)); err != nil {
		return nil, err
	}
	for _, k := range slices.Sorted(maps.Keys(storages)) {
		s := storages[k]
		n := s.DType.Bits() / 8
		if n == 0 || len(s.Data)%n != 0 {
			return nil, &Error{Op: "encode", Msg: fmt.Sprintf("storage %q: %d bytes are not whole %s elements", k, len(s.Data), s.DType)}
		}
		b := slices.Clone(s.Data)
		if bigEndian {
			unit := n
			if s.DType == dtype.C64 {
				unit = 4 // the real and imaginary parts
			}
			for i := 0; i < len(b); i += unit {
				slices.Reverse(b[i : i+unit])
			}
		}
		if err := put("archive/data/"+k, b); err != nil {
			return nil, err
		}
	}
	if err := put("archive/version", []byte("3\n")); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, &Error{Op: "encode", Err: err}
	}
	return buf.Bytes(), nil
}

// TorchOf returns tensors as EncodeTorch takes them: each a contiguous
// view of a storage of its own (named by its position), with Fill's
// contents where Data is nil.
func TorchOf(tensors []Tensor) ([]TorchTensor, map[string]TorchStorage, error) {
	var views []TorchTensor
	storages := map[string]TorchStorage{}
	for i, t := range tensors {
		data, err := t.Contents()
		if err != nil {
			return nil, nil, err
		}
		key := fmt.Sprint(i)
		stride := make([]int64, len(t.Shape))
		n := int64(1)
		for d := len(t.Shape) - 1; d >= 0; d-- {
			stride[d] = n
			n *= t.Shape[d]
		}
		views = append(views, TorchTensor{Name: t.Name, Storage: key, Shape: t.Shape, Stride: stride})
		storages[key] = TorchStorage{DType: t.DType, Data: data}
	}
	return views, storages, nil
}
