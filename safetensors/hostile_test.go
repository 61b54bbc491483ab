package safetensors

import (
	"bytes"
	"encoding/binary"
	"runtime"
	"strings"
	"testing"
)

// A hostile header of nothing but '{' (or of many tiny objects) must not
// reserve tables far larger than the header itself.
func TestHostileHeaderAllocation(t *testing.T) {
	const n = 10_000_000
	for _, hdr := range []string{
		strings.Repeat("{", n),
		`{"a":{"dtype":"U8","shape":[],"data_offsets":[0,1],"x":[` + strings.Repeat("{},", n/3) + `{}]}}`,
	} {
		raw := make([]byte, 8+len(hdr))
		binary.LittleEndian.PutUint64(raw, uint64(len(hdr)))
		copy(raw[8:], hdr)
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		_, err := OpenBytes(raw)
		runtime.ReadMemStats(&m1)
		if err == nil {
			t.Fatal("hostile header accepted")
		}
		if got := m1.TotalAlloc - m0.TotalAlloc; got > 4*uint64(len(hdr)) {
			t.Errorf("parsing a %d-byte hostile header allocated %d bytes (%v)", len(hdr), got, err)
		}
	}
}

// TestCombinedFaults pins which kind a user sees when a file has several
// faults: the first failing step in the reference's order (length field,
// UTF-8, JSON syntax, header shape, then per tensor in offset order: offsets,
// overflow, sub-byte alignment, size; then coverage of the data section).
// Among header-shape faults the first in document order is reported, and
// ckpt's stricter duplicate-key check runs before the offset checks.
func TestCombinedFaults(t *testing.T) {
	u8 := func(name string, begin, end int) string {
		return `"` + name + `":{"dtype":"U8","shape":[` + itoa(end-begin) + `],"data_offsets":[` + itoa(begin) + `,` + itoa(end) + `]}`
	}
	cases := []struct {
		name   string
		raw    []byte
		kind   ErrorKind
		tensor string
	}{
		{"too small beats a huge length", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, ErrHeaderTooSmall, ""},
		{"past the end beats bad UTF-8", func() []byte { b := file("{\xff", nil); b[0] = 10; return b }(), ErrInvalidHeaderLength, ""},
		{"bad UTF-8 beats bad JSON", file("{\xff", nil), ErrInvalidUTF8, ""},
		{"bad JSON beats bad offsets", file(`{`+u8("a", 4, 8)+`,}`, make([]byte, 9)), ErrInvalidJSON, ""},
		{"unknown dtype beats hole and trailing bytes", file(`{"a":{"dtype":"X8","shape":[1],"data_offsets":[0,1]},`+u8("b", 2, 3)+`}`, make([]byte, 9)), ErrUnknownDType, "a"},
		{"bad shape beats truncation", file(`{"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,8]}}`, nil), ErrInvalidHeader, "a"},
		{"first header-shape fault in document order (dtype)", file(`{"a":{"dtype":"X8","shape":[1],"data_offsets":[0,1]},"__metadata__":{"k":1}}`, []byte{0}), ErrUnknownDType, "a"},
		{"first header-shape fault in document order (metadata)", file(`{"__metadata__":{"k":1},"a":{"dtype":"X8","shape":[1],"data_offsets":[0,1]}}`, []byte{0}), ErrInvalidHeader, "__metadata__"},
		{"duplicate beats bad offsets", file(`{`+u8("a", 0, 1)+`,`+u8("a", 5, 6)+`}`, make([]byte, 6)), ErrDuplicateKey, "a"},
		{"hole in 2nd tensor beats overflow in 3rd", file(`{`+u8("a", 0, 1)+`,`+u8("b", 2, 3)+`,"c":{"dtype":"F64","shape":[4611686018427387904,4],"data_offsets":[3,3]}}`, make([]byte, 3)), ErrInvalidOffset, "b"},
		{"overflow in 1st tensor beats hole in 2nd", file(`{"c":{"dtype":"F64","shape":[4611686018427387904,4],"data_offsets":[0,0]},`+u8("b", 2, 3)+`}`, make([]byte, 3)), ErrOverflow, "c"},
		{"misaligned beats size mismatch", file(`{"a":{"dtype":"F4","shape":[3],"data_offsets":[0,7]}}`, make([]byte, 7)), ErrMisalignedSlice, "a"},
		{"size mismatch beats trailing bytes", file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, make([]byte, 9)), ErrTensorSizeMismatch, "a"},
		{"offsets checked in offset order, not document order", file(`{`+u8("late", 1, 2)+`,"early":{"dtype":"F32","shape":[1],"data_offsets":[0,1]}}`, make([]byte, 2)), ErrTensorSizeMismatch, "early"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := OpenBytes(c.raw)
			e := wantKind(t, err, c.kind)
			if e.Tensor != c.tensor {
				t.Errorf("error names tensor %q, want %q (%v)", e.Tensor, c.tensor, err)
			}
			_, err = NewReader(bytes.NewReader(c.raw), int64(len(c.raw)))
			wantKind(t, err, c.kind)
		})
	}
}
