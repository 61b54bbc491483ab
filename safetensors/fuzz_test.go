package safetensors

import (
	"bytes"
	"errors"
	"testing"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

var fuzzHeaders = []string{
	`{}`,
	`{}      `,
	`{"__metadata__":null}`,
	`{"__metadata__":{"format":"pt","k\n":"\u00e9"}}`,
	`{"a":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]}}`,
	`{"a":{"data_offsets":[0,8],"dtype":"BF16","shape":[4]},"b":{"dtype":"U8","shape":[],"data_offsets":[8,9]}}`,
	` {"z":{"dtype":"F4","shape":[2,3],"data_offsets":[0,3]},"y":{"dtype":"F6_E2M3","shape":[4],"data_offsets":[3,6]}} `,
	`{"e":{"dtype":"F8_E4M3","shape":[0],"data_offsets":[0,0]},"x":{"dtype":"I64","shape":[1],"data_offsets":[0,8],"extra":[1,{"a":null}]}}`,
	`{"a\u0062\ud83d\ude00":{"dtype":"C64","shape":[1],"data_offsets":[0,8]}}`,
	`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`,
	`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`,
	`{"a":{"dtype":"X","shape":[1],"data_offsets":[0,4]}}`,
	`{"a":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}}`,
	`[[[[[[[[[[]]]]]]]]]]`,
	`{"a":1e999}`,
	"{\"\xff\":1}",
}

func FuzzParseHeader(f *testing.F) {
	for _, h := range fuzzHeaders {
		f.Add([]byte(h))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := ParseHeader(data, -1)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Kind <= 0 || e.Kind >= numKinds {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		// Checksum metadata of any shape: a map or ErrChecksum, never a panic.
		if sums, err := h.Checksums(); err != nil && !errors.Is(err, ErrChecksum) {
			t.Fatalf("Checksums: untyped error %v", err)
		} else if err == nil && sums != nil && len(sums) != len(h.Tensors) {
			t.Fatalf("Checksums: %d of %d tensors", len(sums), len(h.Tensors))
		}
		// Without a data section the offsets are unchecked against a file:
		// only re-serialize what is cheap to allocate.
		if n := len(h.Tensors); n > 0 && h.Tensors[n-1].End > 1<<20 {
			return
		}
		checkReserialize(t, h, nil)
	})
}

func FuzzOpenBytes(f *testing.F) {
	for _, h := range fuzzHeaders {
		if hd, err := ParseHeader([]byte(h), -1); err == nil {
			var end int64
			if n := len(hd.Tensors); n > 0 {
				end = hd.Tensors[n-1].End
			}
			f.Add(file(h, bytes.Repeat([]byte{0x3c}, int(end))))
		}
		f.Add(file(h, []byte{1, 2, 3, 4}))
	}
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, '{'})
	f.Add([]byte{3, 0, 0, 0, 0, 0, 0, 0, '{', '}'})
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := OpenBytes(data)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Kind <= 0 || e.Kind >= numKinds {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		defer file.Close()
		h := file.Header()
		if h.DataOffset+h.DataLen != int64(len(data)) {
			t.Fatalf("geometry %d+%d != %d", h.DataOffset, h.DataLen, len(data))
		}
		payload := map[string][]byte{}
		for name, tn := range file.Tensors() {
			b, err := tn.Bytes()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b, data[tn.Offset():tn.Offset()+tn.ByteLen()]) {
				t.Fatal("Bytes differ from the file")
			}
			payload[name] = b
		}
		checkReserialize(t, h, payload)
	})
}

// checkReserialize writes h's tensors (with payload, or zeros) and metadata
// with our writer and checks the result reads back identically.
func checkReserialize(t *testing.T, h *Header, payload map[string][]byte) {
	t.Helper()
	var in []TensorData
	for _, ti := range h.Tensors {
		data := payload[ti.Name]
		if data == nil {
			data = make([]byte, ti.ByteLen())
		}
		in = append(in, TensorData{Name: ti.Name, DType: ti.DType, Shape: ti.Shape, Data: data})
	}
	out, err := Serialize(in, h.Metadata, WithoutChecksums())
	if err != nil {
		if reservedName.Matches(err) || errors.Is(err, ErrHeaderTooLarge) {
			return
		}
		t.Fatalf("re-serialize: %v", err)
	}
	g, err := OpenBytes(out)
	if err != nil {
		t.Fatalf("re-read: %v", err)
	}
	if d := cmp.Diff(h.Metadata, g.Metadata(), cmpopts.EquateEmpty()); d != "" || (h.Metadata == nil) != (g.Metadata() == nil) {
		t.Fatalf("metadata: %s", d)
	}
	if g.Len() != len(h.Tensors) {
		t.Fatalf("%d tensors, want %d", g.Len(), len(h.Tensors))
	}
	for _, want := range in {
		tn, err := g.Tensor(want.Name)
		if err != nil {
			t.Fatal(err)
		}
		b, err := tn.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		got := TensorData{Name: tn.Name(), DType: tn.DType(), Shape: tn.Shape(), Data: b}
		if d := cmp.Diff(want, got, cmpopts.EquateEmpty(), cmp.Comparer(func(a, b dtype.DType) bool { return a == b })); d != "" {
			t.Fatalf("tensor %q: %s", want.Name, d)
		}
	}
	// Our own output re-serializes to the same bytes.
	again, err := Serialize(in, h.Metadata, WithoutChecksums())
	if err != nil || !bytes.Equal(again, out) {
		t.Fatal("writer is not deterministic")
	}
}
