package npy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/dtype"
)

func TestHeaderAsNumpy(t *testing.T) {
	// What np.save (numpy 2.3) writes for np.zeros(3, np.float32).
	want := "\x93NUMPY\x01\x00v\x00{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }" +
		strings.Repeat(" ", 60) + "\n"
	if got := string(Header("<f4", []int64{3})); got != want {
		t.Errorf("Header = %q\nwant     %q", got, want)
	}
	for _, shape := range [][]int64{nil, {0}, {7}, {2, 3}, {1, 2, 3, 4, 5, 6, 7, 8}, {123456789012, 2}} {
		h := Header("bfloat16", shape)
		if len(h)%64 != 0 || h[len(h)-1] != '\n' || h[6] != 1 {
			t.Errorf("shape %v: header of %d bytes, version %d, last %q", shape, len(h), h[6], h[len(h)-1])
		}
		if int(binary.LittleEndian.Uint16(h[8:])) != len(h)-10 {
			t.Errorf("shape %v: header length field %d, want %d", shape, binary.LittleEndian.Uint16(h[8:]), len(h)-10)
		}
	}
	// A scalar: no spare spaces for growth, only the alignment padding.
	if got, want := string(Header("<i8", nil)), "\x93NUMPY\x01\x00v\x00{'descr': '<i8', 'fortran_order': False, 'shape': (), }"+strings.Repeat(" ", 62)+"\n"; got != want {
		t.Errorf("scalar header %q\nwant            %q", got, want)
	}
	// A header longer than 64 KiB needs version 2.0 and its 32-bit length.
	long := make([]int64, 30000)
	for i := range long {
		long[i] = 1
	}
	h := Header("<f4", long)
	if h[6] != 2 || int(binary.LittleEndian.Uint32(h[8:])) != len(h)-12 || len(h)%64 != 0 {
		t.Errorf("long header: version %d, length field %d, size %d", h[6], binary.LittleEndian.Uint32(h[8:]), len(h))
	}
}

func TestWriteUnpacksSubByte(t *testing.T) {
	var b bytes.Buffer
	// F4: element 0 in the low nibble.
	if err := Write(&b, dtype.F4, []int64{4}, []byte{0x21, 0xF3}); err != nil {
		t.Fatal(err)
	}
	if got := b.Bytes()[len(Header("float4_e2m1fn", []int64{4})):]; !bytes.Equal(got, []byte{1, 2, 3, 0xF}) {
		t.Errorf("F4 data %x", got)
	}
	// F6: four 6-bit codes in a little-endian 24-bit group.
	codes := []uint32{0x01, 0x3F, 0x15, 0x2A}
	g := codes[0] | codes[1]<<6 | codes[2]<<12 | codes[3]<<18
	b.Reset()
	if err := Write(&b, dtype.F6_E3M2, []int64{2, 2}, []byte{byte(g), byte(g >> 8), byte(g >> 16)}); err != nil {
		t.Fatal(err)
	}
	if got := b.Bytes()[len(Header("float6_e3m2fn", []int64{2, 2})):]; !bytes.Equal(got, []byte{0x01, 0x3F, 0x15, 0x2A}) {
		t.Errorf("F6 data %x", got)
	}
	// A large F4 tensor goes through the bounded buffer in several writes.
	data := make([]byte, 40000)
	for i := range data {
		data[i] = byte(i)
	}
	b.Reset()
	if err := Write(&b, dtype.F4, []int64{80000}, data); err != nil {
		t.Fatal(err)
	}
	out := b.Bytes()[len(Header("float4_e2m1fn", []int64{80000})):]
	for i := range data {
		if out[2*i] != data[i]&0xF || out[2*i+1] != data[i]>>4 {
			t.Fatalf("element %d: %x %x from %x", 2*i, out[2*i], out[2*i+1], data[i])
		}
	}
}

func TestWriteErrors(t *testing.T) {
	var b bytes.Buffer
	if err := Write(&b, dtype.F32, []int64{3}, make([]byte, 8)); err == nil {
		t.Error("8 bytes for 3 F32 accepted")
	}
	if err := Write(&b, dtype.F4, []int64{3}, make([]byte, 2)); err == nil {
		t.Error("odd F4 count accepted")
	}
	if err := Write(&b, dtype.F32, []int64{-1}, nil); err == nil {
		t.Error("negative dimension accepted")
	}
	if b.Len() != 0 {
		t.Errorf("%d bytes written before refusing", b.Len())
	}
	reg, err := dtype.Register(dtype.Spec{Name: "NPY_TEST_U8F", Bits: 8, Max: 255,
		Decode: func(dst []float32, src []byte) {
			for i, c := range src {
				dst[i] = float32(c)
			}
		},
		Encode: func(dst []byte, src []float32, _ dtype.Options) dtype.Stats {
			for i, f := range src {
				dst[i] = byte(f)
			}
			return dtype.Stats{}
		}})
	if err != nil { // registered by an earlier run in this process (-count > 1)
		if reg, err = dtype.Parse("NPY_TEST_U8F"); err != nil {
			t.Fatalf("registering a dtype: %v", err)
		}
	}
	if _, err := Descr(reg); !errors.Is(err, ErrNoType) {
		t.Errorf("registered dtype: %v, want ErrNoType", err)
	}
	if NeedsMLDtypes(dtype.F32) || !NeedsMLDtypes(dtype.BF16) || NeedsMLDtypes(reg) {
		t.Error("NeedsMLDtypes")
	}
}
