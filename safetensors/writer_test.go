package safetensors

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/shapes"
	"github.com/ckpt-go/ckpt/internal/testutil"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// The byte-exact vectors of the reference implementation's own tests.
func TestSerializeReferenceVectors(t *testing.T) {
	data := []byte{0, 0, 0, 0, 0, 0, 128, 63, 0, 0, 0, 64, 0, 0, 64, 64, 0, 0, 128, 64, 0, 0, 160, 64}
	out, err := Serialize([]TensorData{{Name: "attn.0", DType: dtype.F32, Shape: []int64{1, 2, 3}, Data: data}}, nil, WithoutChecksums())
	if err != nil {
		t.Fatal(err)
	}
	want := append(file(`{"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}}`, nil), data...)
	if !bytes.Equal(out, want) {
		t.Fatalf("got\n%q\nwant\n%q", out, want)
	}
	// Forced alignment: a shorter name needs 7 spaces of padding.
	out, err = Serialize([]TensorData{{Name: "attn0", DType: dtype.F32, Shape: []int64{1, 1, 2, 3}, Data: data}}, nil, WithoutChecksums())
	if err != nil {
		t.Fatal(err)
	}
	want = append(file(`{"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}}       `, nil), data...)
	if !bytes.Equal(out, want) {
		t.Fatalf("got\n%q\nwant\n%q", out, want)
	}
	out, _ = Serialize(nil, nil)
	if want := []byte{8, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' ', ' ', ' ', ' ', ' '}; !bytes.Equal(out, want) {
		t.Fatalf("empty: %q", out)
	}
	out, _ = Serialize(nil, map[string]string{"framework": "pt"})
	if want := file(`{"__metadata__":{"framework":"pt"}}     `, nil); !bytes.Equal(out, want) {
		t.Fatalf("metadata: %q", out)
	}
}

func randomBytes(r *rand.Rand, n int64) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// Every dtype writes and reads back, sub-byte and FP8 included.
func TestRoundTripEveryDType(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var in []TensorData
	for _, d := range dtype.Builtins() {
		for i, shape := range [][]int64{{}, {8}, {2, 4}, {0, 3}, {3, 8, 2}} {
			n, _ := shapes.Elements(shape)
			nb, err := d.ByteLen(n)
			if err != nil {
				continue // a scalar F4 does not fill a byte
			}
			in = append(in, TensorData{Name: d.String() + "/" + string(rune('a'+i)), DType: d, Shape: shape, Data: randomBytes(r, nb)})
		}
	}
	meta := map[string]string{"format": "pt", "note": "every dtype", "ünï\"code\\": "\x01\t\n"}
	raw, err := Serialize(in, meta)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "all.safetensors")
	if err := Save(context.Background(), path, in, meta); err != nil {
		t.Fatal(err)
	}
	disk, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(disk, raw) {
		t.Fatal("Save and Serialize differ")
	}
	for _, open := range []func() (*File, error){
		func() (*File, error) { return OpenBytes(raw) },
		func() (*File, error) { return Open(path) },
		func() (*File, error) { return Open(path, WithReadAt()) },
		func() (*File, error) { return NewReader(bytes.NewReader(raw), int64(len(raw))) },
	} {
		f, err := open()
		if err != nil {
			t.Fatal(err)
		}
		if f.Len() != len(in) {
			t.Fatalf("%d tensors, want %d", f.Len(), len(in))
		}
		if d := cmp.Diff(meta, f.Metadata(), cmpopts.IgnoreMapEntries(func(k, _ string) bool { return IsChecksumKey(k) })); d != "" {
			t.Fatalf("metadata: %s", d)
		}
		if sums, err := f.Header().Checksums(); err != nil || len(sums) != len(in) {
			t.Fatalf("checksums: %d of %d tensors, %v", len(sums), len(in), err)
		}
		for _, want := range in {
			tn, err := f.Tensor(want.Name)
			if err != nil {
				t.Fatal(err)
			}
			got, err := tn.Bytes()
			if err != nil {
				t.Fatal(err)
			}
			gotTD := TensorData{Name: tn.Name(), DType: tn.DType(), Shape: tn.Shape(), Data: got}
			if d := cmp.Diff(want, gotTD, cmpopts.EquateEmpty()); d != "" {
				t.Fatalf("%s (-want +got):\n%s", want.Name, d)
			}
		}
		// Data is aligned to the element size (widest first, 8-byte header).
		for _, tn := range f.Tensors() {
			if w := int64(tn.DType().Bits() / 8); w > 1 && tn.Offset()%w != 0 {
				t.Errorf("%s at offset %d not aligned to %d", tn.Name(), tn.Offset(), w)
			}
		}
		f.Close()
	}
}

func TestLayoutOrder(t *testing.T) {
	specs := []TensorSpec{
		{"b", dtype.BOOL, []int64{1}}, {"f4", dtype.F4, []int64{2}}, {"u8", dtype.U8, []int64{1}},
		{"e4", dtype.F8_E4M3, []int64{1}}, {"e5", dtype.F8_E5M2, []int64{1}}, {"e8", dtype.F8_E8M0, []int64{1}},
		{"h", dtype.F16, []int64{1}}, {"bf", dtype.BF16, []int64{1}}, {"z", dtype.F32, []int64{1}}, {"a", dtype.F32, []int64{1}},
		{"c", dtype.C64, []int64{1}}, {"d", dtype.F64, []int64{1}}, {"l", dtype.I64, []int64{1}}, {"ul", dtype.U64, []int64{1}},
		{"i16", dtype.I16, []int64{1}}, {"u16", dtype.U16, []int64{1}}, {"i32", dtype.I32, []int64{1}}, {"u32", dtype.U32, []int64{1}},
		{"i8", dtype.I8, []int64{1}}, {"fz", dtype.F8_E4M3FNUZ, []int64{1}}, {"f5z", dtype.F8_E5M2FNUZ, []int64{1}},
	}
	w, err := NewWriter(io.Discard, specs, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range w.Order() {
		got = append(got, s.Name)
	}
	// Descending in the reference's Dtype enum (safetensors 0.8), then by name.
	want := []string{"ul", "l", "d", "c", "a", "z", "u32", "i32", "bf", "h", "u16", "i16", "f5z", "fz", "e8", "e4", "e5", "i8", "u8", "f4", "b"}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("order (-want +got):\n%s", d)
	}
}

func TestWithAlignment(t *testing.T) {
	in := []TensorData{{Name: "w", DType: dtype.F32, Shape: []int64{2}, Data: make([]byte, 8)}}
	raw, err := Serialize(in, nil, WithAlignment(4096))
	if err != nil {
		t.Fatal(err)
	}
	f, err := OpenBytes(raw)
	if err != nil {
		t.Fatal(err)
	}
	if f.Header().DataOffset != 4096 || len(raw) != 4096+8 {
		t.Fatalf("data offset %d, size %d", f.Header().DataOffset, len(raw))
	}
	for _, n := range []int{0, -8, 12} {
		_, err := Serialize(in, nil, WithAlignment(n))
		wantKind(t, err, ErrInvalidArgument)
	}
}

func TestDeterministic(t *testing.T) {
	meta := map[string]string{}
	for i := 0; i < 50; i++ {
		meta[strings.Repeat("k", i%7)+string(rune('a'+i%26))+itoa(i)] = itoa(i * i)
	}
	in := []TensorData{{Name: "y", DType: dtype.U8, Shape: []int64{1}, Data: []byte{1}}, {Name: "x", DType: dtype.U8, Shape: []int64{1}, Data: []byte{2}}}
	first, _ := Serialize(in, meta)
	for i := 0; i < 10; i++ {
		again, _ := Serialize([]TensorData{in[1], in[0]}, meta)
		if !bytes.Equal(first, again) {
			t.Fatal("output differs between runs")
		}
	}
	// Header JSON is what encoding/json reads too.
	f, _ := OpenBytes(first)
	var m map[string]json.RawMessage
	if err := json.Unmarshal(first[8:f.Header().DataOffset], &m); err != nil {
		t.Fatal(err)
	}
}

func TestNameEscaping(t *testing.T) {
	names := []string{"", "quote\"", "back\\slash", "tab\tnl\nnul\x00del\x7f", "é😀/<>&", "\u2028"}
	var in []TensorData
	for i, n := range names {
		in = append(in, TensorData{Name: n, DType: dtype.U8, Shape: []int64{1}, Data: []byte{byte(i)}})
	}
	raw, err := Serialize(in, map[string]string{"\x1f": "\u00a0"})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(raw, []byte(`"tab\tnl\nnul\u0000del`+"\x7f"+`"`)) || !bytes.Contains(raw, []byte(`"\u001f":"`+"\u00a0"+`"`)) {
		t.Fatalf("escaping differs from serde_json: %q", raw)
	}
	f, err := OpenBytes(raw)
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range names {
		tn, err := f.Tensor(n)
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := tn.Bytes(); b[0] != byte(i) {
			t.Fatalf("%q: wrong data", n)
		}
	}
}

func TestWriterErrors(t *testing.T) {
	u8 := func(name string, n int64) TensorSpec {
		return TensorSpec{Name: name, DType: dtype.U8, Shape: []int64{n}}
	}
	for _, c := range []struct {
		name  string
		specs []TensorSpec
		meta  map[string]string
		kind  failure
	}{
		{"reserved", []TensorSpec{u8("__metadata__", 1)}, nil, reservedName},
		{"duplicate", []TensorSpec{u8("a", 1), u8("a", 2)}, nil, failure{Kind: ErrDuplicateKey, What: ""}},
		{"invalid dtype", []TensorSpec{{Name: "a", DType: dtype.Invalid, Shape: []int64{1}}}, nil, failure{Kind: ErrUnknownDType, What: ""}},
		{"negative dim", []TensorSpec{u8("a", -1)}, nil, failure{Kind: ErrInvalidArgument, What: ""}},
		{"overflow", []TensorSpec{{Name: "a", DType: dtype.F64, Shape: []int64{1 << 31, 1 << 31, 1 << 31}}}, nil, failure{Kind: ErrOverflow, What: ""}},
		{"odd F4", []TensorSpec{{Name: "a", DType: dtype.F4, Shape: []int64{3}}}, nil, failure{Kind: ErrMisalignedSlice, What: ""}},
		{"invalid utf8 name", []TensorSpec{u8("a\xff", 1)}, nil, failure{Kind: ErrInvalidUTF8, What: ""}},
		{"invalid utf8 metadata", nil, map[string]string{"k": "\xff"}, failure{Kind: ErrInvalidUTF8, What: ""}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewWriter(io.Discard, c.specs, c.meta)
			wantCheck(t, err, c.kind)
		})
	}

	specs := []TensorSpec{u8("a", 4), u8("b", 2), u8("b_empty", 0), u8("c", 1)}
	var buf bytes.Buffer
	w, err := NewWriter(&buf, specs, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantCheck(t, w.WriteTensor("b", []byte{1, 2}), writeOrder)
	wantKind(t, w.WriteTensor("a", []byte{1, 2}), ErrTensorSizeMismatch)
	wantCheck(t, w.Close(), writeOrder)
	spec, tw, err := w.Next()
	if err != nil || spec.Name != "a" {
		t.Fatal(spec, err)
	}
	if _, err := tw.Write([]byte{1, 2}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.Next(); !writeOrder.Matches(err) {
		t.Fatalf("Next with incomplete tensor: %v", err)
	}
	if _, err := tw.Write([]byte{3, 4}); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteTensor("b", []byte{5, 6}); err != nil {
		t.Fatal(err)
	}
	// "b_empty" (zero bytes) is skipped over by name.
	if err := w.WriteTensor("c", []byte{7}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.Next(); err != io.EOF {
		t.Fatalf("Next after last: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := OpenBytes(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := f.Tensor("a"); b.ByteLen() != 4 {
		t.Fatal("bad a")
	}

	// Too many bytes poisons the writer.
	w, _ = NewWriter(io.Discard, specs, nil)
	_, tw, _ = w.Next()
	if _, err := tw.Write(make([]byte, 5)); !writeOrder.Matches(err) {
		t.Fatal(err)
	}
	wantCheck(t, w.Close(), writeOrder)

	// A failing underlying writer.
	_, err = NewWriter(failWriter{}, specs, nil)
	e := wantKind(t, err, ErrIO)
	if !errors.Is(e, errDiskFull) {
		t.Fatal("cause not wrapped")
	}
	// Save checks data lengths.
	err = Save(context.Background(), filepath.Join(t.TempDir(), "x"), []TensorData{{Name: "a", DType: dtype.U8, Shape: []int64{2}, Data: []byte{1}}}, nil)
	wantKind(t, err, ErrTensorSizeMismatch)
}

var errDiskFull = errors.New("no space left on device")

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errDiskFull }

// limitWriter fails with errDiskFull once n bytes were written.
type limitWriter struct {
	w io.Writer
	n int
}

func (l *limitWriter) Write(b []byte) (int, error) {
	if len(b) > l.n {
		k, _ := l.w.Write(b[:l.n])
		l.n -= k
		return k, errDiskFull
	}
	k, err := l.w.Write(b)
	l.n -= k
	return k, err
}

func TestAtomicSave(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "model.safetensors")
	old := []TensorData{{Name: "old", DType: dtype.U8, Shape: []int64{1}, Data: []byte{1}}}
	if err := Save(context.Background(), path, old, nil); err != nil {
		t.Fatal(err)
	}
	oldBytes, _ := os.ReadFile(path)
	big := []TensorData{{Name: "w", DType: dtype.F32, Shape: []int64{1 << 20}, Data: make([]byte, 4<<20)}}
	unchanged := func(t *testing.T) {
		t.Helper()
		now, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(now, oldBytes) {
			t.Fatal("previous file was modified")
		}
		if d := cmp.Diff([]string{"model.safetensors"}, testutil.Entries(t, dir)); d != "" {
			t.Fatalf("stray files: %s", d)
		}
	}

	t.Run("canceled before", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		wantCtxErr(t, Save(ctx, path, big, nil), context.Canceled)
		unchanged(t)
	})
	t.Run("canceled midway", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		fw, err := Create(ctx, path, []TensorSpec{{Name: "w", DType: dtype.F32, Shape: []int64{1 << 20}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, tw, _ := fw.Next()
		if _, err := tw.Write(make([]byte, 2<<20)); err != nil {
			t.Fatal(err)
		}
		cancel()
		_, err = tw.Write(make([]byte, 2<<20))
		wantCtxErr(t, err, context.Canceled)
		wantCtxErr(t, fw.Commit(), context.Canceled)
		unchanged(t)
	})
	t.Run("incomplete", func(t *testing.T) {
		fw, err := Create(context.Background(), path, []TensorSpec{{Name: "w", DType: dtype.U8, Shape: []int64{4}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, tw, _ := fw.Next()
		tw.Write([]byte{1, 2})
		wantCheck(t, fw.Commit(), writeOrder)
		unchanged(t)
	})
	t.Run("abort", func(t *testing.T) {
		fw, err := Create(context.Background(), path, []TensorSpec{{Name: "w", DType: dtype.U8, Shape: []int64{1}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		fw.WriteTensor("w", []byte{9})
		if err := fw.Abort(); err != nil {
			t.Fatal(err)
		}
		if err := fw.Abort(); err != nil {
			t.Fatal(err)
		}
		unchanged(t)
	})
	t.Run("disk full", func(t *testing.T) {
		fw, err := create(context.Background(), path, []TensorSpec{{Name: "w", DType: dtype.F32, Shape: []int64{1 << 20}}}, nil,
			func(w io.Writer) io.Writer { return &limitWriter{w: w, n: 3 << 20} }, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = fw.WriteTensor("w", make([]byte, 4<<20))
		e := wantKind(t, err, ErrIO)
		if !errors.Is(e, errDiskFull) {
			t.Fatal(err)
		}
		wantKind(t, fw.Commit(), ErrIO)
		unchanged(t)
	})
	t.Run("missing dir", func(t *testing.T) {
		wantKind(t, Save(context.Background(), filepath.Join(dir, "no", "x.safetensors"), old, nil), ErrIO)
		unchanged(t)
	})
	t.Run("read-only dir", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("root ignores directory permissions")
		}
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(dir, 0o755)
		wantKind(t, Save(context.Background(), path, big, nil), ErrIO)
		unchanged(t)
	})
	t.Run("success replaces", func(t *testing.T) {
		if err := Save(context.Background(), path, big, map[string]string{"v": "2"}); err != nil {
			t.Fatal(err)
		}
		f := mustOpen(t, path)
		defer f.Close()
		if !f.Has("w") || f.Has("old") || f.Metadata()["v"] != "2" {
			t.Fatal("new file not in place")
		}
		if d := cmp.Diff([]string{"model.safetensors"}, testutil.Entries(t, dir)); d != "" {
			t.Fatalf("stray files: %s", d)
		}
	})
}

// A second save of the same path waits for the first (until its context
// ends), and never removes the first one's temporary file; a save removes
// the temporary files that killed saves of its path left.
func TestSaveWaitsForAnotherSave(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "model.safetensors")
	stale := filepath.Join(dir, ".model.safetensors.tmp-1234")
	os.WriteFile(stale, []byte("killed save"), 0o644)
	one := []TensorData{{Name: "w", DType: dtype.U8, Shape: []int64{1}, Data: []byte{1}}}
	first, err := Create(context.Background(), path, []TensorSpec{{Name: "w", DType: dtype.U8, Shape: []int64{1}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); err == nil {
		t.Error("the killed save's temporary file is still there")
	}
	if entries := testutil.Entries(t, dir); !slices.Contains(entries, ".model.safetensors.lock") {
		t.Skip("no file locks on this platform")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	wantCtxErr(t, Save(ctx, path, one, nil), context.DeadlineExceeded)
	if n := len(testutil.Entries(t, dir)); n != 2 {
		t.Fatalf("the waiting save touched the folder: %v", testutil.Entries(t, dir))
	}
	first.WriteTensor("w", []byte{7})
	if err := first.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := Save(context.Background(), path, one, nil); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"model.safetensors"}, testutil.Entries(t, dir)); d != "" {
		t.Errorf("folder: %s", d)
	}
}
