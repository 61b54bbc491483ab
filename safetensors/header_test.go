package safetensors

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/testutil"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestMalformed(t *testing.T) {
	f32 := func(name string, begin, end int) string {
		return `"` + name + `":{"dtype":"F32","shape":[` + itoa((end-begin)/4) + `],"data_offsets":[` + itoa(begin) + `,` + itoa(end) + `]}`
	}
	deep := strings.Repeat("[", 200) + strings.Repeat("]", 200)
	cases := []struct {
		name   string
		raw    []byte
		kind   ErrorKind
		tensor string // expected Error.Tensor, if set
	}{
		{"empty file", nil, ErrHeaderTooSmall, ""},
		{"7 bytes", []byte{1, 2, 3, 4, 5, 6, 7}, ErrHeaderTooSmall, ""},
		{"too large before file length", func() []byte {
			b := make([]byte, 16)
			binary.LittleEndian.PutUint64(b, MaxHeaderSize+1)
			return b
		}(), ErrHeaderTooLarge, ""},
		{"huge length field", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, '{', '}'}, ErrHeaderTooLarge, ""},
		{"length past end", func() []byte {
			b := make([]byte, 88)
			binary.LittleEndian.PutUint64(b, 1000)
			return b
		}(), ErrInvalidHeaderLength, ""},
		{"invalid utf8", file("{\"a\xff\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,1]}}", []byte{0}), ErrInvalidUTF8, ""},
		{"empty header", file("", nil), ErrInvalidJSON, ""},
		{"spaces only", file("        ", nil), ErrInvalidJSON, ""},
		{"unterminated object", file("{", nil), ErrInvalidJSON, ""},
		{"missing value", file(`{"a":}`, nil), ErrInvalidJSON, ""},
		{"trailing garbage", file(`{} x`, nil), ErrInvalidJSON, ""},
		{"trailing NUL padding", file("{}\x00\x00", nil), ErrInvalidJSON, ""},
		{"vertical tab whitespace", file("\v{}", nil), ErrInvalidJSON, ""},
		{"form feed whitespace", file("{}\f", nil), ErrInvalidJSON, ""},
		{"nbsp whitespace", file("\u00a0{}", nil), ErrInvalidJSON, ""},
		{"trailing comma", file(`{"__metadata__":{"a":"b"},}`, nil), ErrInvalidJSON, ""},
		{"single quotes", file(`{'a':1}`, nil), ErrInvalidJSON, ""},
		{"leading zero", file(`{"a":{"dtype":"U8","shape":[01],"data_offsets":[0,1]}}`, []byte{0}), ErrInvalidJSON, ""},
		{"control char in name", file("{\"a\tb\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,1]}}", []byte{0}), ErrInvalidJSON, ""},
		{"bad escape", file(`{"a\x":{"dtype":"U8","shape":[],"data_offsets":[0,1]}}`, []byte{0}), ErrInvalidJSON, ""},
		{"lone surrogate", file(`{"\ud800":{"dtype":"U8","shape":[],"data_offsets":[0,1]}}`, []byte{0}), ErrInvalidJSON, ""},
		{"lone low surrogate", file(`{"\udc00":{"dtype":"U8","shape":[],"data_offsets":[0,1]}}`, []byte{0}), ErrInvalidJSON, ""},
		{"too deep", file(`{"a":{"dtype":"U8","shape":[],"data_offsets":[0,1],"x":`+deep+`}}`, []byte{0}), ErrInvalidJSON, ""},
		{"number out of range", file(`{"a":{"dtype":"U8","shape":[],"data_offsets":[0,1],"x":1e999}}`, []byte{0}), ErrInvalidJSON, ""},
		{"syntax error wins over earlier shape error", file(`{"a":{"dtype":"X","shape":[],"data_offsets":[0,1]},}`, []byte{0}), ErrInvalidJSON, ""},
		{"not an object", file(`[]`, nil), ErrInvalidHeader, ""},
		{"string header", file(`"x"`, nil), ErrInvalidHeader, ""},
		{"metadata number value", file(`{"__metadata__":{"a":1}}`, nil), ErrInvalidHeader, "__metadata__"},
		{"metadata array", file(`{"__metadata__":[]}`, nil), ErrInvalidHeader, "__metadata__"},
		{"tensor not object", file(`{"a":[1]}`, nil), ErrInvalidHeader, "a"},
		{"dtype not string", file(`{"a":{"dtype":1,"shape":[],"data_offsets":[0,1]}}`, []byte{0}), ErrInvalidHeader, "a"},
		{"negative dim", file(`{"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}}`, []byte{0}), ErrInvalidHeader, "a"},
		{"negative zero dim", file(`{"a":{"dtype":"U8","shape":[-0],"data_offsets":[0,0]}}`, nil), ErrInvalidHeader, "a"},
		{"float dim", file(`{"a":{"dtype":"U8","shape":[1.0],"data_offsets":[0,1]}}`, []byte{0}), ErrInvalidHeader, "a"},
		{"exponent dim", file(`{"a":{"dtype":"U8","shape":[1e0],"data_offsets":[0,1]}}`, []byte{0}), ErrInvalidHeader, "a"},
		{"string dim", file(`{"a":{"dtype":"U8","shape":["1"],"data_offsets":[0,1]}}`, []byte{0}), ErrInvalidHeader, "a"},
		{"three offsets", file(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1,1]}}`, []byte{0}), ErrInvalidHeader, "a"},
		{"one offset", file(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0]}}`, []byte{0}), ErrInvalidHeader, "a"},
		{"missing dtype", file(`{"a":{"shape":[1],"data_offsets":[0,1]}}`, []byte{0}), ErrInvalidHeader, "a"},
		{"missing shape", file(`{"a":{"dtype":"U8","data_offsets":[0,1]}}`, []byte{0}), ErrInvalidHeader, "a"},
		{"missing offsets", file(`{"a":{"dtype":"U8","shape":[1]}}`, []byte{0}), ErrInvalidHeader, "a"},
		{"empty entry", file(`{"a":{}}`, nil), ErrInvalidHeader, "a"},
		{"unknown dtype", file(`{"a":{"dtype":"F31","shape":[1],"data_offsets":[0,4]}}`, make([]byte, 4)), ErrUnknownDType, "a"},
		{"lower-case dtype", file(`{"a":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}}`, make([]byte, 4)), ErrUnknownDType, "a"},
		{"alias dtype", file(`{"a":{"dtype":"float32","shape":[1],"data_offsets":[0,4]}}`, make([]byte, 4)), ErrUnknownDType, "a"},
		{"duplicate tensor", file(`{`+f32("a", 0, 4)+`,`+f32("a", 4, 8)+`}`, make([]byte, 8)), ErrDuplicateKey, "a"},
		{"duplicate escaped tensor", file(`{`+f32("ab", 0, 4)+`,`+f32(`a\u0062`, 4, 8)+`}`, make([]byte, 8)), ErrDuplicateKey, "ab"},
		{"duplicate metadata", file(`{"__metadata__":{},"__metadata__":null}`, nil), ErrDuplicateKey, "__metadata__"},
		{"duplicate metadata key", file(`{"__metadata__":{"k":"a","k":"b"}}`, nil), ErrDuplicateKey, "__metadata__"},
		{"duplicate field", file(`{"a":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, []byte{0}), ErrDuplicateKey, "a"},
		{"hole", file(`{`+f32("a", 0, 4)+`,`+f32("b", 8, 12)+`}`, make([]byte, 12)), ErrInvalidOffset, "b"},
		{"overlap", file(`{`+f32("a", 0, 8)+`,`+f32("b", 4, 8)+`}`, make([]byte, 8)), ErrInvalidOffset, "b"},
		{"not from zero", file(`{`+f32("a", 4, 8)+`}`, make([]byte, 8)), ErrInvalidOffset, "a"},
		{"end before begin", file(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},"b":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}}`, nil), ErrInvalidOffset, "b"},
		{"offset beyond int64", file(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,18446744073709551615]}}`, nil), ErrInvalidOffset, "a"},
		{"trailing bytes", file(`{`+f32("a", 0, 4)+`}`, make([]byte, 5)), ErrIncompleteBuffer, ""},
		{"truncated data", file(`{`+f32("a", 0, 8)+`}`, make([]byte, 4)), ErrIncompleteBuffer, ""},
		{"no tensors but data", file(`{}`, []byte{1}), ErrIncompleteBuffer, ""},
		{"element overflow", file(`{"a":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}}`, nil), ErrOverflow, "a"},
		{"byte overflow", file(`{"a":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,0]}}`, nil), ErrOverflow, "a"},
		{"dim beyond int64", file(`{"a":{"dtype":"U8","shape":[99999999999999999999],"data_offsets":[0,0]}}`, nil), ErrOverflow, "a"},
		{"misaligned F4", file(`{"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}}`, make([]byte, 2)), ErrMisalignedSlice, "a"},
		{"misaligned F6", file(`{"a":{"dtype":"F6_E2M3","shape":[2],"data_offsets":[0,2]}}`, make([]byte, 2)), ErrMisalignedSlice, "a"},
		{"size mismatch", file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, make([]byte, 4)), ErrTensorSizeMismatch, "a"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := OpenBytes(c.raw)
			e := wantKind(t, err, c.kind)
			if c.tensor != "" && e.Tensor != c.tensor {
				t.Errorf("error names tensor %q, want %q (%v)", e.Tensor, c.tensor, err)
			}
			// The same verdict through the ReadAt path.
			_, err2 := NewReader(strings.NewReader(string(c.raw)), int64(len(c.raw)))
			wantKind(t, err2, c.kind)
			if e.Error() == "" || !strings.HasPrefix(e.Error(), "safetensors: ") {
				t.Errorf("bad message %q", e.Error())
			}
		})
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestAccepted(t *testing.T) {
	cases := []struct {
		name   string
		raw    []byte
		want   []TensorInfo
		meta   map[string]string
		noMeta bool
	}{
		{"empty", file(`{}`, nil), []TensorInfo{}, nil, true},
		{"padded", file("{}      ", nil), []TensorInfo{}, nil, true},
		{"whitespace everywhere", file(" \t\r\n{ \"a\" : { \"dtype\" : \"U8\" , \"shape\" : [ 1 , 2 ] , \"data_offsets\" : [ 0 , 2 ] } }\n\r\t ", []byte{1, 2}),
			[]TensorInfo{{Name: "a", DType: dtype.U8, Shape: []int64{1, 2}, Begin: 0, End: 2}}, nil, true},
		{"metadata null", file(`{"__metadata__":null,"a":{"dtype":"U8","shape":[],"data_offsets":[0,1]}}`, []byte{7}),
			[]TensorInfo{{Name: "a", DType: dtype.U8, Shape: []int64{}, Begin: 0, End: 1}}, nil, true},
		{"metadata empty", file(`{"__metadata__":{}}`, nil), []TensorInfo{}, map[string]string{}, false},
		{"metadata escapes", file(`{"__metadata__":{"k\n":"v\u00e9\ud83d\ude00\/"}}`, nil), []TensorInfo{}, map[string]string{"k\n": "vé😀/"}, false},
		{"mlx key order", file(`{"__metadata__":null,"b":{"data_offsets":[0,4],"dtype":"F32","shape":[1]},"a":{"data_offsets":[4,8],"dtype":"F32","shape":[1]}}`, make([]byte, 8)),
			[]TensorInfo{{Name: "b", DType: dtype.F32, Shape: []int64{1}, Begin: 0, End: 4}, {Name: "a", DType: dtype.F32, Shape: []int64{1}, Begin: 4, End: 8}}, nil, true},
		{"escaped name", file(`{"a\u0062\"\\":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, []byte{1}),
			[]TensorInfo{{Name: "ab\"\\", DType: dtype.U8, Shape: []int64{1}, Begin: 0, End: 1}}, nil, true},
		{"escaped dtype", file(`{"a":{"dtype":"\u00550\u0038"}}`[:0]+`{"a":{"dtype":"U\u0038","shape":[1],"data_offsets":[0,1]}}`, []byte{1}),
			[]TensorInfo{{Name: "a", DType: dtype.U8, Shape: []int64{1}, Begin: 0, End: 1}}, nil, true},
		{"unknown field ignored", file(`{"a":{"dtype":"U8","x":{"y":[1,-2.5e3,true,false,null,"z"]},"shape":[1],"data_offsets":[0,1]}}`, []byte{1}),
			[]TensorInfo{{Name: "a", DType: dtype.U8, Shape: []int64{1}, Begin: 0, End: 1}}, nil, true},
		{"nesting within limit", file(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":`+strings.Repeat("[", 100)+strings.Repeat("]", 100)+`}}`, []byte{1}),
			[]TensorInfo{{Name: "a", DType: dtype.U8, Shape: []int64{1}, Begin: 0, End: 1}}, nil, true},
		{"zero-size tensors share offsets", file(`{"z2":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"z1":{"dtype":"F32","shape":[2,0],"data_offsets":[0,0]},"b":{"dtype":"U8","shape":[1],"data_offsets":[4,5]}}`, make([]byte, 5)),
			[]TensorInfo{
				{Name: "z1", DType: dtype.F32, Shape: []int64{2, 0}, Begin: 0, End: 0},
				{Name: "a", DType: dtype.F32, Shape: []int64{1}, Begin: 0, End: 4},
				{Name: "z2", DType: dtype.F32, Shape: []int64{0}, Begin: 4, End: 4},
				{Name: "b", DType: dtype.U8, Shape: []int64{1}, Begin: 4, End: 5},
			}, nil, true},
		{"huge dim times zero", file(`{"a":{"dtype":"U8","shape":[0,9223372036854775807],"data_offsets":[0,0]}}`, nil),
			[]TensorInfo{{Name: "a", DType: dtype.U8, Shape: []int64{0, 9223372036854775807}}}, nil, true},
		{"F4 pair", file(`{"a":{"dtype":"F4","shape":[2,3],"data_offsets":[0,3]}}`, make([]byte, 3)),
			[]TensorInfo{{Name: "a", DType: dtype.F4, Shape: []int64{2, 3}, Begin: 0, End: 3}}, nil, true},
		{"F6 four", file(`{"a":{"dtype":"F6_E3M2","shape":[4],"data_offsets":[0,3]}}`, make([]byte, 3)),
			[]TensorInfo{{Name: "a", DType: dtype.F6_E3M2, Shape: []int64{4}, Begin: 0, End: 3}}, nil, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := OpenBytes(c.raw)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(c.want, f.Header().Tensors, cmpopts.IgnoreUnexported(TensorInfo{}), cmpopts.EquateEmpty()); d != "" {
				t.Errorf("tensors (-want +got):\n%s", d)
			}
			if c.noMeta {
				if f.Metadata() != nil {
					t.Errorf("metadata %v, want nil", f.Metadata())
				}
			} else if d := cmp.Diff(c.meta, f.Metadata()); d != "" || f.Metadata() == nil {
				t.Errorf("metadata (-want +got):\n%s", d)
			}
			for _, ti := range c.want {
				if !f.Has(ti.Name) {
					t.Errorf("Has(%q) = false", ti.Name)
				}
				got, ok := f.Header().Lookup(ti.Name)
				if !ok || got.Name != ti.Name {
					t.Errorf("Lookup(%q) = %v, %v", ti.Name, got, ok)
				}
			}
			h := f.Header()
			if h.DataOffset != 8+int64(h.HeaderLen) || h.DataOffset+h.DataLen != int64(len(c.raw)) {
				t.Errorf("header geometry %+v for %d-byte file", h, len(c.raw))
			}
		})
	}
}

func TestParseHeaderDirect(t *testing.T) {
	hdr := []byte(`{"a":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}}`)
	h, err := ParseHeader(hdr, 8)
	if err != nil {
		t.Fatal(err)
	}
	if h.DataOffset != int64(8+len(hdr)) || h.DataLen != 8 || len(h.Tensors) != 1 {
		t.Fatalf("%+v", h)
	}
	if ti := h.Tensors[0]; ti.NumElements() != 4 || ti.ByteLen() != 8 {
		t.Fatalf("%+v", ti)
	}
	// Negative dataLen skips the coverage check.
	if _, err := ParseHeader(hdr, -1); err != nil {
		t.Fatal(err)
	}
	_, err = ParseHeader(hdr, 9)
	wantKind(t, err, ErrIncompleteBuffer)
	// The parsed header does not alias the input.
	hdr[7] = 'X'
	if h.Tensors[0].Name != "a" {
		t.Fatal("header aliases input")
	}
}

func TestErrorFormatting(t *testing.T) {
	e := &Error{Kind: ErrTensorNotFound, File: "m.safetensors", Tensor: "w", Msg: "no such tensor"}
	if got, want := e.Error(), `safetensors: m.safetensors: tensor "w": no such tensor`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if !errors.Is(e, ErrTensorNotFound) || errors.Is(e, ErrClosed) {
		t.Error("Is mismatch")
	}
	if ks := testutil.Kinds[ErrorKind](kindNames[:]); len(ks) != int(numKinds)-1 || ks[0] != ErrHeaderTooSmall || ks[len(ks)-1] != ErrChecksum {
		t.Fatalf("kinds %v, want every kind from header_too_small to checksum", ks)
	}
	seen := map[string]bool{}
	for _, k := range testutil.Kinds[ErrorKind](kindNames[:]) {
		s := k.String()
		if s == "" || strings.ContainsAny(s, " -") || seen[s] {
			t.Errorf("bad kind name %q", s)
		}
		seen[s] = true
	}
	if ErrHeaderTooLarge.String() != "header_too_large" {
		t.Error(ErrHeaderTooLarge.String())
	}
}

func TestReadHeaderFile(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/x.safetensors"
	if err := Save(context.Background(), path, []TensorData{{Name: "a", DType: dtype.U8, Shape: []int64{3}, Data: []byte{1, 2, 3}}}, map[string]string{"k": "v"}); err != nil {
		t.Fatal(err)
	}
	h, err := ReadHeaderFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if h.Metadata["k"] != "v" || len(h.Tensors) != 1 || h.DataLen != 3 {
		t.Fatalf("%+v", h)
	}
	_, err = ReadHeaderFile(dir + "/missing.safetensors")
	e := wantKind(t, err, ErrIO)
	if e.File == "" {
		t.Error("error does not name the file")
	}
}

// Shapes of more dimensions than the parser reserves (3 per tensor) move
// the shape arena while parsing: every shape must still read back whole,
// capped, and the header's name index must find every tensor.
func TestParseHeaderHighRankShapes(t *testing.T) {
	var b strings.Builder
	b.WriteString("{")
	var off int64
	want := map[string][]int64{}
	for i := range 40 {
		shape := make([]int64, 1+i%9)
		for j := range shape {
			shape[j] = 1
		}
		shape[0] = int64(i + 1)
		name := "t" + itoa(i)
		want[name] = shape
		if i > 0 {
			b.WriteString(",")
		}
		dims := make([]string, len(shape))
		for j, d := range shape {
			dims[j] = strconv.FormatInt(d, 10)
		}
		fmt.Fprintf(&b, `%q:{"shape":[%s],"dtype":"U8","data_offsets":[%d,%d]}`, name, strings.Join(dims, ","), off, off+int64(i+1))
		off += int64(i + 1)
	}
	b.WriteString("}")
	h, err := ParseHeader([]byte(b.String()), off)
	if err != nil {
		t.Fatal(err)
	}
	for name, shape := range want {
		i, ok := h.Index(name)
		if !ok {
			t.Fatalf("Index(%q) not found", name)
		}
		ti := h.Tensors[i]
		if ti.Name != name || !slices.Equal(ti.Shape, shape) || cap(ti.Shape) != len(ti.Shape) {
			t.Errorf("%s: shape %v (cap %d), want %v", name, ti.Shape, cap(ti.Shape), shape)
		}
	}
	if _, ok := h.Index("t40"); ok {
		t.Error("Index found a tensor the header does not have")
	}
}
