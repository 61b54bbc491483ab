package safetensors

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
)

const (
	reuseAB = `{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}}`
	reuseBA = `{"b":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"a":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}}`
)

// WithHeader reuses the parsed header when the file is unchanged: the File
// shares it and reads the same bytes as a fresh Open.
func TestWithHeaderSameFile(t *testing.T) {
	raw := file(reuseAB, []byte{1, 2, 3, 4})
	path := filepath.Join(t.TempDir(), "m.safetensors")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	h, err := ReadHeaderFile(path)
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, f *File, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		defer f.Close()
		if f.Header() != h {
			t.Errorf("%s: header parsed again instead of reused", what)
		}
		tn, err := f.Tensor("b")
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		b, err := tn.Bytes()
		if err != nil || !bytes.Equal(b, []byte{3, 4}) {
			t.Errorf("%s: Bytes = %v, %v; want [3 4]", what, b, err)
		}
	}
	f, err := Open(path, WithHeader(h))
	check("Open", f, err)
	f, err = Open(path, WithHeader(h), WithReadAt())
	check("Open WithReadAt", f, err)
	f, err = OpenBytes(raw, WithHeader(h))
	check("OpenBytes", f, err)
	f, err = NewReader(bytes.NewReader(raw), int64(len(raw)), WithHeader(h))
	check("NewReader", f, err)
	f, err = OpenFS(fstest.MapFS{"m.safetensors": {Data: raw}}, "m.safetensors", WithHeader(h))
	check("OpenFS", f, err)
}

// A file rewritten after its header was parsed is refused with
// ErrFileChanged: other header bytes of the same length, another size, or
// another length field.
func TestWithHeaderChangedFile(t *testing.T) {
	raw := file(reuseAB, []byte{1, 2, 3, 4})
	h, err := ParseHeader(raw[8:8+len(reuseAB)], 4)
	if err != nil {
		t.Fatal(err)
	}
	// A header longer than one comparison chunk, differing only at its end.
	long := `{"__metadata__":{"k":"` + strings.Repeat("x", 3*verifyChunk) + `"},` + reuseAB[1:]
	longRaw := file(long, []byte{1, 2, 3, 4})
	longH, err := ParseHeader(longRaw[8:8+len(long)], 4)
	if err != nil {
		t.Fatal(err)
	}
	longOther := bytes.Clone(longRaw)
	copy(longOther[8+len(long)-len(reuseAB)+1:], reuseBA[1:])

	swappedLen := file(reuseAB+" ", []byte{1, 2, 3})
	cases := []struct {
		name string
		h    *Header
		raw  []byte
	}{
		{"same length, other header", h, file(reuseBA, []byte{1, 2, 3, 4})},
		{"longer data section", h, file(reuseAB, []byte{1, 2, 3, 4, 5})},
		{"same size, other length field", h, swappedLen},
		{"long header differing in its last chunk", longH, longOther},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "m.safetensors")
			if err := os.WriteFile(path, c.raw, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Open(path, WithHeader(c.h))
			if e := wantKind(t, err, ErrFileChanged); e.File != path {
				t.Errorf("error names %q, want %q", e.File, path)
			}
			_, err = OpenBytes(c.raw, WithHeader(c.h))
			wantKind(t, err, ErrFileChanged)
		})
	}
}

// Only headers this package parsed from a whole file can be reused.
func TestWithHeaderForeignHeader(t *testing.T) {
	raw := file(reuseAB, []byte{1, 2, 3, 4})
	_, err := OpenBytes(raw, WithHeader(&Header{HeaderLen: uint64(len(reuseAB)), DataOffset: 8 + int64(len(reuseAB)), DataLen: 4}))
	wantKind(t, err, ErrInvalidArgument)
	h, err := ParseHeader([]byte(reuseAB), -1)
	if err != nil {
		t.Fatal(err)
	}
	_, err = OpenBytes(raw, WithHeader(h))
	wantKind(t, err, ErrInvalidArgument)
}
