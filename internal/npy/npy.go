// Package npy writes tensors as NumPy .npy files (numpy.lib.format), for
// `ckpt get --format npy`.
//
// A .npy file is the magic "\x93NUMPY", a version, the header's length,
// then a Python dict literal giving the dtype ("descr"), the memory order
// and the shape, padded with spaces and a final newline so that the data
// starts on a multiple of 64 bytes. Header writes it byte for byte as
// np.save does in numpy 2.x, including the spare spaces numpy leaves for
// the first axis to grow, so an integer, bool, F16, F32, F64 or C64
// tensor's file is identical to np.save's (interop/ checks it).
//
// The narrow floats numpy lacks are written under the names ml_dtypes
// registers with numpy ("bfloat16", "float8_e4m3fn", ...): np.load maps
// such a descr back to the ml_dtypes type once ml_dtypes is imported
// (directly, or by jax), and without it fails with "descr is not a valid
// dtype descriptor". np.save itself writes these arrays as anonymous void
// data ('<V2', '<V1', which load as void and need .view(ml_dtypes.bfloat16))
// and float8_e5m2 as '<f1', which np.load refuses: the ml_dtypes name keeps
// the type. Sub-byte F4 and F6 elements are unpacked to one a byte, the
// code in the low bits, which is how ml_dtypes holds them.
package npy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/ckpt-go/ckpt/dtype"
)

// ErrNoType is returned (wrapped) for a dtype that has no .npy descr:
// a dtype added with dtype.Register.
var ErrNoType = errors.New("npy: no .npy dtype")

const (
	align       = 64
	growthSpace = 21 // numpy's GROWTH_AXIS_MAX_DIGITS
)

// descrs are the .npy dtype strings of the safetensors dtypes.
var descrs = map[dtype.DType]string{
	dtype.BOOL:        "|b1",
	dtype.U8:          "|u1",
	dtype.I8:          "|i1",
	dtype.I16:         "<i2",
	dtype.U16:         "<u2",
	dtype.I32:         "<i4",
	dtype.U32:         "<u4",
	dtype.I64:         "<i8",
	dtype.U64:         "<u8",
	dtype.F16:         "<f2",
	dtype.F32:         "<f4",
	dtype.F64:         "<f8",
	dtype.C64:         "<c8",
	dtype.BF16:        "bfloat16",
	dtype.F8_E4M3:     "float8_e4m3fn",
	dtype.F8_E5M2:     "float8_e5m2",
	dtype.F8_E4M3FNUZ: "float8_e4m3fnuz",
	dtype.F8_E5M2FNUZ: "float8_e5m2fnuz",
	dtype.F8_E8M0:     "float8_e8m0fnu",
	dtype.F4:          "float4_e2m1fn",
	dtype.F6_E2M3:     "float6_e2m3fn",
	dtype.F6_E3M2:     "float6_e3m2fn",
}

// Descr returns the .npy descr of d: numpy's type string ("<f4", "|b1")
// or the ml_dtypes name ("bfloat16"). A dtype neither numpy nor ml_dtypes
// defines is an error wrapping ErrNoType.
func Descr(d dtype.DType) (string, error) {
	if s, ok := descrs[d]; ok {
		return s, nil
	}
	return "", fmt.Errorf("%w for %s: neither numpy nor ml_dtypes defines it", ErrNoType, d)
}

// NeedsMLDtypes reports whether np.load needs ml_dtypes imported to read
// a file of d (its descr is an ml_dtypes name).
func NeedsMLDtypes(d dtype.DType) bool {
	s, ok := descrs[d]
	return ok && !strings.ContainsAny(s[:1], "<|>")
}

// Header returns the .npy header, magic to final newline, for a C-order
// array of the descr and shape: version 1.0, or 2.0 when the header is too
// long for 1.0's 16-bit length (as np.save chooses).
func Header(descr string, shape []int64) []byte {
	var h strings.Builder
	h.WriteString("{'descr': '")
	h.WriteString(descr)
	h.WriteString("', 'fortran_order': False, 'shape': (")
	for i, d := range shape {
		if i > 0 {
			h.WriteString(", ")
		}
		h.WriteString(strconv.FormatInt(d, 10))
	}
	if len(shape) == 1 {
		h.WriteString(",")
	}
	h.WriteString("), }")
	if len(shape) > 0 {
		h.WriteString(strings.Repeat(" ", max(growthSpace-len(strconv.FormatInt(shape[0], 10)), 0)))
	}
	text := h.String()
	version, lenBytes := byte(1), 2
	hlen := len(text) + 1 // the final newline
	pad := align - (8+lenBytes+hlen)%align
	if hlen+pad > 0xFFFF {
		version, lenBytes = 2, 4
		pad = align - (8+lenBytes+hlen)%align
	}
	out := make([]byte, 0, 8+lenBytes+hlen+pad)
	out = append(out, "\x93NUMPY"...)
	out = append(out, version, 0)
	if lenBytes == 2 {
		out = binary.LittleEndian.AppendUint16(out, uint16(hlen+pad))
	} else {
		out = binary.LittleEndian.AppendUint32(out, uint32(hlen+pad))
	}
	out = append(out, text...)
	for range pad {
		out = append(out, ' ')
	}
	return append(out, '\n')
}

// Write writes a tensor of dtype d and shape, given as its little-endian
// safetensors bytes, as a .npy file. data must hold exactly the tensor.
func Write(w io.Writer, d dtype.DType, shape []int64, data []byte) error {
	descr, err := Descr(d)
	if err != nil {
		return err
	}
	n := int64(1)
	for _, s := range shape {
		if s < 0 {
			return fmt.Errorf("npy: negative dimension in shape %v", shape)
		}
		n *= s
	}
	if size, err := d.ByteLen(n); err != nil || size != int64(len(data)) {
		return fmt.Errorf("npy: %d bytes do not hold a %s tensor of shape %v", len(data), d, shape)
	}
	if _, err := w.Write(Header(descr, shape)); err != nil {
		return err
	}
	switch d {
	case dtype.F4:
		return writeUnpacked(w, data, 1, 2, func(dst, src []byte) {
			dst[0], dst[1] = src[0]&0x0F, src[0]>>4
		})
	case dtype.F6_E2M3, dtype.F6_E3M2:
		return writeUnpacked(w, data, 3, 4, func(dst, src []byte) {
			g := uint32(src[0]) | uint32(src[1])<<8 | uint32(src[2])<<16
			for j := range 4 {
				dst[j] = byte(g>>(6*j)) & 0x3F
			}
		})
	}
	_, err = w.Write(data)
	return err
}

// writeUnpacked writes packed sub-byte elements one a byte, through a
// bounded buffer: each group of in bytes becomes out bytes.
func writeUnpacked(w io.Writer, data []byte, in, out int, unpack func(dst, src []byte)) error {
	const groups = 16 << 10
	buf := make([]byte, groups*out)
	for len(data) > 0 {
		n := min(len(data)/in, groups)
		for g := range n {
			unpack(buf[g*out:g*out+out], data[g*in:g*in+in])
		}
		if _, err := w.Write(buf[:n*out]); err != nil {
			return err
		}
		data = data[n*in:]
	}
	return nil
}
