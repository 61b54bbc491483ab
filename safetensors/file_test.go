package safetensors

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/google/go-cmp/cmp"
)

func i32Data(n int) []byte {
	b := make([]byte, 4*n)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(i))
	}
	return b
}

// mustOpen opens the file at path, failing the test if it cannot.
func mustOpen(t *testing.T, path string, opts ...OpenOption) *File {
	t.Helper()
	f, err := Open(path, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func saveTemp(t *testing.T, tensors []TensorData, meta map[string]string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "t.safetensors")
	if err := Save(context.Background(), path, tensors, meta); err != nil {
		t.Fatal(err)
	}
	return path
}

// backends opens the same file every way the package can.
func backends(t *testing.T, path string) map[string]*File {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*File{}
	add := func(name string, f *File, err error) {
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out[name] = f
		t.Cleanup(func() { f.Close() })
	}
	f, err := Open(path)
	add("mmap", f, err)
	f, err = Open(path, WithReadMode(ReadPread))
	add("mmap-pread", f, err)
	f, err = Open(path, WithReadMode(ReadMapped))
	add("mmap-mapped", f, err)
	f, err = Open(path, WithReadAt())
	add("readat", f, err)
	f, err = OpenBytes(raw)
	add("bytes", f, err)
	f, err = NewReader(bytes.NewReader(raw), int64(len(raw)))
	add("reader", f, err)
	return out
}

func TestFileAccessors(t *testing.T) {
	path := saveTemp(t, []TensorData{
		{Name: "b", DType: dtype.I32, Shape: []int64{2, 3}, Data: i32Data(6)},
		{Name: "a", DType: dtype.U8, Shape: []int64{2}, Data: []byte{7, 8}},
	}, map[string]string{"k": "v"})
	for name, f := range backends(t, path) {
		t.Run(name, func(t *testing.T) {
			if d := cmp.Diff([]string{"b", "a"}, f.Names()); d != "" {
				t.Fatalf("names: %s", d)
			}
			if f.Len() != 2 || !f.Has("a") || f.Has("c") {
				t.Fatal("Len/Has")
			}
			m := f.Metadata()
			m["k"] = "changed"
			if f.Metadata()["k"] != "v" {
				t.Fatal("Metadata is not a copy")
			}
			_, err := f.Tensor("c")
			wantKind(t, err, ErrTensorNotFound)
			var seen []string
			for n, tn := range f.Tensors() {
				seen = append(seen, n)
				if tn.Name() != n {
					t.Fatal("name mismatch")
				}
				break
			}
			if len(seen) != 1 {
				t.Fatal("early break ignored")
			}
			tn, _ := f.Tensor("b")
			if tn.NumElements() != 6 || tn.ByteLen() != 24 || tn.DType() != dtype.I32 {
				t.Fatal("tensor info")
			}
			sh := tn.Shape()
			sh[0] = 99
			if tn.Shape()[0] != 2 || tn.Info().Shape[0] != 2 {
				t.Fatal("Shape is not a copy")
			}
			dst := make([]byte, 24)
			if err := tn.ReadTo(dst); err != nil || !bytes.Equal(dst, i32Data(6)) {
				t.Fatal(err)
			}
			wantKind(t, tn.ReadTo(make([]byte, 3)), ErrInvalidArgument)
		})
	}
}

func TestUseAfterClose(t *testing.T) {
	path := saveTemp(t, []TensorData{{Name: "w", DType: dtype.F32, Shape: []int64{4}, Data: make([]byte, 16)}}, nil)
	for name, f := range backends(t, path) {
		t.Run(name, func(t *testing.T) {
			tn, err := f.Tensor("w")
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal("second Close:", err)
			}
			_, err = f.Tensor("w")
			wantKind(t, err, ErrClosed)
			_, err = tn.Bytes()
			wantKind(t, err, ErrClosed)
			wantKind(t, tn.ReadTo(make([]byte, 16)), ErrClosed)
			_, err = tn.Float32s()
			wantKind(t, err, ErrClosed)
			s, err := tn.Slice(Span(0, 2))
			if err != nil {
				t.Fatal(err)
			}
			_, err = s.Bytes()
			wantKind(t, err, ErrClosed)
		})
	}
}

// A file truncated by someone else while mapped gives an error, not a
// SIGBUS crash.
func TestTruncatedWhileMapped(t *testing.T) {
	if !mmapSupported {
		t.Skip("no mmap")
	}
	const n = 1 << 18 // 1 MiB of F32: well past the first page
	path := saveTemp(t, []TensorData{{Name: "w", DType: dtype.F32, Shape: []int64{n}, Data: make([]byte, 4*n)}}, nil)
	direct := mustOpen(t, path, WithReadMode(ReadMapped))
	defer direct.Close()
	pread := mustOpen(t, path, WithReadMode(ReadPread))
	defer pread.Close()
	auto := mustOpen(t, path)
	defer auto.Close()
	if err := os.Truncate(path, direct.Header().DataOffset); err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, 4*n)
	tn, _ := direct.Tensor("w")
	e := wantCheck(t, tn.ReadTo(dst), fault)
	if e.File != path || e.Tensor != "w" {
		t.Fatalf("error does not name file and tensor: %v", e)
	}
	_, err := tn.Float32s()
	wantCheck(t, err, fault)
	s, _ := tn.Slice(Span(n/2, n))
	wantCheck(t, s.ReadTo(make([]byte, 2*n)), fault)
	tp, _ := pread.Tensor("w")
	wantKind(t, tp.ReadTo(dst), ErrIO)
	_, err = tp.Float32s()
	wantKind(t, err, ErrIO)
	ta, _ := auto.Tensor("w")
	wantCheck(t, ta.ReadTo(dst), fault)
	_, err = ta.Float32s() // F32 to F32: a raw copy, from the mapping
	wantCheck(t, err, fault)
	_, err = ta.Float64s() // a conversion, in place from the mapping
	wantCheck(t, err, fault)
	_, err = tn.Float64s()
	wantCheck(t, err, fault)
}

func TestSlice(t *testing.T) {
	shape := []int64{4, 5, 6}
	path := saveTemp(t, []TensorData{{Name: "x", DType: dtype.I32, Shape: shape, Data: i32Data(120)}}, nil)
	// naive gathers the expected values.
	naive := func(r [3][2]int64) []byte {
		var out []byte
		for i := r[0][0]; i < r[0][1]; i++ {
			for j := r[1][0]; j < r[1][1]; j++ {
				for k := r[2][0]; k < r[2][1]; k++ {
					out = binary.LittleEndian.AppendUint32(out, uint32(i*30+j*6+k))
				}
			}
		}
		return out
	}
	cases := []struct {
		name       string
		ranges     []Range
		bounds     [3][2]int64
		shape      []int64
		contiguous bool
	}{
		{"all", nil, [3][2]int64{{0, 4}, {0, 5}, {0, 6}}, []int64{4, 5, 6}, true},
		{"rows", []Range{Span(1, 3)}, [3][2]int64{{1, 3}, {0, 5}, {0, 6}}, []int64{2, 5, 6}, true},
		{"at", []Range{At(2)}, [3][2]int64{{2, 3}, {0, 5}, {0, 6}}, []int64{5, 6}, true},
		{"at at span", []Range{At(1), At(2), Span(1, 4)}, [3][2]int64{{1, 2}, {2, 3}, {1, 4}}, []int64{3}, true},
		{"middle", []Range{Full(), Span(1, 3)}, [3][2]int64{{0, 4}, {1, 3}, {0, 6}}, []int64{4, 2, 6}, false},
		{"last dim (tensor parallel)", []Range{Full(), Full(), Span(3, 6)}, [3][2]int64{{0, 4}, {0, 5}, {3, 6}}, []int64{4, 5, 3}, false},
		{"mixed", []Range{Span(1, 4), At(4), Span(0, 2)}, [3][2]int64{{1, 4}, {4, 5}, {0, 2}}, []int64{3, 2}, false},
		{"empty", []Range{Span(2, 2)}, [3][2]int64{{2, 2}, {0, 5}, {0, 6}}, []int64{0, 5, 6}, true},
	}
	for bname, f := range backends(t, path) {
		tn, _ := f.Tensor("x")
		for _, c := range cases {
			t.Run(bname+"/"+c.name, func(t *testing.T) {
				s, err := tn.Slice(c.ranges...)
				if err != nil {
					t.Fatal(err)
				}
				if d := cmp.Diff(c.shape, s.Shape()); d != "" {
					t.Fatalf("shape: %s", d)
				}
				if s.Contiguous() != c.contiguous {
					t.Errorf("Contiguous = %v", s.Contiguous())
				}
				want := naive(c.bounds)
				got, err := s.Bytes()
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) || s.ByteLen() != int64(len(want)) {
					t.Fatalf("got %v, want %v", got, want)
				}
				// Converting slice read: I32 -> F64 holds the same values.
				out := make([]byte, s.NumElements()*8)
				if _, err := s.ConvertTo(dtype.F64, out, dtype.Options{}); err != nil {
					t.Fatal(err)
				}
				for i := 0; i < len(want)/4; i++ {
					if math.Float64frombits(binary.LittleEndian.Uint64(out[8*i:])) != float64(binary.LittleEndian.Uint32(want[4*i:])) {
						t.Fatalf("converted element %d wrong", i)
					}
				}
			})
		}
		if bname == "mmap" || bname == "bytes" {
			s, _ := tn.Slice(Span(1, 3))
			b, _ := s.Bytes()
			all, _ := tn.Bytes()
			if &b[0] != &all[30*4] {
				t.Errorf("%s: contiguous slice is not zero-copy", bname)
			}
		}
	}
	f := backends(t, path)["bytes"]
	tn, _ := f.Tensor("x")
	for _, bad := range [][]Range{
		{Span(0, 5)}, {Span(3, 2)}, {Span(-1, 2)}, {At(4)}, {At(-1)}, {Full(), Full(), Full(), Full()},
	} {
		_, err := tn.Slice(bad...)
		wantCheck(t, err, invalidSlice)
	}
	if s := Span(1, 3).String() + " " + At(2).String() + " " + Full().String(); s != "1:3 2 :" {
		t.Error(s)
	}
}

func TestSliceSubByte(t *testing.T) {
	path := saveTemp(t, []TensorData{{Name: "q", DType: dtype.F4, Shape: []int64{4, 6}, Data: []byte{
		0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe, 0x10, 0x32, 0x54, 0x76}}}, nil)
	f := mustOpen(t, path)
	defer f.Close()
	tn, _ := f.Tensor("q")
	s, err := tn.Slice(Span(1, 3))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := s.Bytes()
	if !bytes.Equal(b, []byte{0x76, 0x98, 0xba, 0xdc, 0xfe, 0x10}) {
		t.Fatalf("%x", b)
	}
	if s, err := tn.Slice(Full(), Span(2, 6)); err != nil || s.ByteLen() != 8 {
		t.Fatal(err)
	}
	_, err = tn.Slice(Full(), Span(1, 3))
	wantKind(t, err, ErrMisalignedSlice)
	_, err = tn.Slice(Full(), Span(0, 3))
	wantKind(t, err, ErrMisalignedSlice)
}

func bf16(f float32) uint16 { return uint16(math.Float32bits(f) >> 16) }

func TestConvertTo(t *testing.T) {
	vals := []float32{1, -2, 0.5, 3.140625, 0, float32(math.Inf(1)), -65536, 1e-3}
	n := 5000 // spans several chunks only with a tiny chunk; values repeat
	raw := make([]byte, 2*n)
	want := make([]float32, n)
	for i := 0; i < n; i++ {
		v := vals[i%len(vals)]
		h := bf16(v)
		binary.LittleEndian.PutUint16(raw[2*i:], h)
		want[i] = math.Float32frombits(uint32(h) << 16)
	}
	path := saveTemp(t, []TensorData{{Name: "w", DType: dtype.BF16, Shape: []int64{int64(n)}, Data: raw}}, nil)
	for name, f := range backends(t, path) {
		t.Run(name, func(t *testing.T) {
			f.chunk = 1000 // several chunks, the last one partial
			tn, _ := f.Tensor("w")
			got, err := tn.Float32s()
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Fatalf("Float32s: %s", d)
			}
			f64, err := tn.Float64s()
			if err != nil || f64[1] != -2 {
				t.Fatal(err)
			}
			dst := make([]byte, 4*n)
			st, err := tn.ConvertTo(dtype.F32, dst, dtype.Options{})
			if err != nil || st.Elements != int64(n) {
				t.Fatal(err, st)
			}
			_, err = tn.ConvertTo(dtype.F32, dst[:8], dtype.Options{})
			wantKind(t, err, ErrInvalidArgument)
			_, err = tn.ConvertTo(dtype.Invalid, dst, dtype.Options{})
			wantKind(t, err, ErrUnknownDType)
			// BF16 -> F8_E4M3 is lossy (Inf, -65536 overflow): stats say so.
			f8 := make([]byte, n)
			st, err = tn.ConvertTo(dtype.F8_E4M3, f8, dtype.Options{Saturate: true})
			if err != nil {
				t.Fatal(err)
			}
			if !st.Lossy() {
				t.Errorf("stats %v: want lossy", st)
			}
			// Same dtype: a copy.
			same := make([]byte, 2*n)
			if _, err := tn.ConvertTo(dtype.BF16, same, dtype.Options{}); err != nil || !bytes.Equal(same, raw) {
				t.Fatal(err)
			}
		})
	}
}

// Open does not read tensor data: a sparse multi-GiB file opens instantly
// and its header is all that is read.
func TestOpenSparse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.safetensors")
	fw, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWriter(fw, []TensorSpec{{Name: "w", DType: dtype.BF16, Shape: []int64{1 << 31}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := fw.Truncate(w.Size()); err != nil {
		t.Fatal(err)
	}
	fw.Close()
	f := mustOpen(t, path)
	defer f.Close()
	tn, _ := f.Tensor("w")
	if tn.ByteLen() != 4<<30 {
		t.Fatal(tn.ByteLen())
	}
	s, err := tn.Slice(Span(1<<30, 1<<30+4))
	if err != nil {
		t.Fatal(err)
	}
	if b, err := s.Bytes(); err != nil || !bytes.Equal(b, make([]byte, 8)) {
		t.Fatal(err)
	}
}

// Chunked converting reads give the same result as one conversion, for
// sub-byte dtypes too (chunks hold whole bytes of both dtypes).
func TestConvertChunkedSubByte(t *testing.T) {
	for _, d := range []dtype.DType{dtype.F4, dtype.F6_E2M3, dtype.F8_E4M3, dtype.F16} {
		n := int64(8*1001 + 8)
		nb, _ := d.ByteLen(n)
		raw := make([]byte, nb)
		for i := range raw {
			raw[i] = byte(i*7 + i>>3)
		}
		if d == dtype.F8_E4M3 {
			for i := range raw {
				raw[i] &= 0x7e // avoid NaN patterns
			}
		}
		path := saveTemp(t, []TensorData{{Name: "q", DType: d, Shape: []int64{n}, Data: raw}}, nil)
		f := mustOpen(t, path)
		tn, _ := f.Tensor("q")
		whole, err := tn.Float32s()
		if err != nil {
			t.Fatalf("%v: %v", d, err)
		}
		for _, chunk := range []int64{1, 3, 100, 777} {
			f.chunk = chunk
			got, err := tn.Float32s()
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(whole, got, cmp.Comparer(func(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) })); d != "" {
				t.Fatalf("chunk %d: %s", chunk, d)
			}
		}
		f.Close()
	}
}

// plainFS hides ReadAt, leaving only fs.File's Read.
type plainFS struct{ fs.FS }

type plainFile struct{ fs.File }

func (p plainFS) Open(name string) (fs.File, error) {
	f, err := p.FS.Open(name)
	if err != nil {
		return nil, err
	}
	return plainFile{f}, nil
}

func TestOpenFS(t *testing.T) {
	path := saveTemp(t, []TensorData{{Name: "w", DType: dtype.I32, Shape: []int64{3}, Data: i32Data(3)}}, map[string]string{"k": "v"})
	raw, _ := os.ReadFile(path)
	dirFS := os.DirFS(filepath.Dir(path))
	mapFS := fstest.MapFS{"m.safetensors": &fstest.MapFile{Data: raw}, "bad": &fstest.MapFile{Data: raw[:20]}}
	for name, open := range map[string]func() (*File, error){
		"dirfs":  func() (*File, error) { return OpenFS(dirFS, filepath.Base(path)) },
		"mapfs":  func() (*File, error) { return OpenFS(mapFS, "m.safetensors") },
		"plain":  func() (*File, error) { return OpenFS(plainFS{mapFS}, "m.safetensors") },
		"readat": func() (*File, error) { return OpenFS(dirFS, filepath.Base(path), WithReadAt()) },
	} {
		t.Run(name, func(t *testing.T) {
			f, err := open()
			if err != nil {
				t.Fatal(err)
			}
			if name == "dirfs" && mmapSupported && !f.Mapped() {
				t.Error("os.DirFS file not mapped")
			}
			tn, err := f.Tensor("w")
			if err != nil {
				t.Fatal(err)
			}
			b, err := tn.Bytes()
			if err != nil || !bytes.Equal(b, i32Data(3)) || f.Metadata()["k"] != "v" {
				t.Fatal(err)
			}
			if f.Path() == "" {
				t.Error("no path")
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
	_, err := OpenFS(mapFS, "bad")
	e := wantKind(t, err, ErrInvalidHeaderLength)
	if e.File != "bad" {
		t.Errorf("error names %q", e.File)
	}
	_, err = OpenFS(mapFS, "missing")
	wantKind(t, err, ErrIO)
}

func TestConcurrentReads(t *testing.T) {
	const n = 1 << 16
	raw := make([]byte, 2*n)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint16(raw[2*i:], bf16(float32(i%128)))
	}
	path := saveTemp(t, []TensorData{{Name: "w", DType: dtype.BF16, Shape: []int64{n}, Data: raw}}, nil)
	for name, f := range backends(t, path) {
		t.Run(name, func(t *testing.T) {
			f.chunk = 4096
			done := make(chan error, 8)
			for g := 0; g < 8; g++ {
				go func() {
					tn, err := f.Tensor("w")
					if err != nil {
						done <- err
						return
					}
					v, err := tn.Float32s()
					if err == nil {
						for i := range v {
							if v[i] != float32(i%128) {
								err = errors.New("wrong value")
								break
							}
						}
					}
					done <- err
				}()
			}
			for g := 0; g < 8; g++ {
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// ReadHeaderFS reads the header through ReadAt, or in order from a plain
// fs.File, refusing folders and broken files like ReadHeaderFile.
func TestReadHeaderFS(t *testing.T) {
	path := saveTemp(t, []TensorData{{Name: "w", DType: dtype.I32, Shape: []int64{3}, Data: i32Data(3)}}, map[string]string{"k": "v"})
	raw, _ := os.ReadFile(path)
	want, err := ReadHeaderFile(path)
	if err != nil {
		t.Fatal(err)
	}
	mapFS := fstest.MapFS{"m.safetensors": &fstest.MapFile{Data: raw}, "bad": &fstest.MapFile{Data: raw[:20]},
		"d/x": &fstest.MapFile{Data: raw}}
	for name, fsys := range map[string]fs.FS{"dirfs": os.DirFS(filepath.Dir(path)), "mapfs": mapFS, "plain": plainFS{mapFS}} {
		file := "m.safetensors"
		if name == "dirfs" {
			file = filepath.Base(path)
		}
		h, err := ReadHeaderFS(fsys, file)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if h.HeaderLen != want.HeaderLen || h.DataLen != want.DataLen || h.Metadata["k"] != "v" || len(h.Tensors) != 1 {
			t.Errorf("%s: header %+v", name, h)
		}
	}
	_, err = ReadHeaderFS(mapFS, "bad")
	if e := wantKind(t, err, ErrInvalidHeaderLength); e.File != "bad" {
		t.Errorf("error names %q", e.File)
	}
	_, err = ReadHeaderFS(plainFS{mapFS}, "bad")
	wantKind(t, err, ErrInvalidHeaderLength)
	_, err = ReadHeaderFS(mapFS, "d")
	wantKind(t, err, ErrNotRegular)
	_, err = ReadHeaderFS(mapFS, "missing")
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing: %v", err)
	}
}
