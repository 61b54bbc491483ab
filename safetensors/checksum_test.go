package safetensors

import (
	"bytes"
	"errors"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/dtype"
)

// CombineChecksums agrees with the checksum of the concatenation, for
// every split of random data (lengths 0 to a few KiB, and a large one).
func TestCombineChecksums(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	b := make([]byte, 5000)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	if Checksum(b) != crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)) {
		t.Fatal("Checksum is not CRC-32C")
	}
	for _, n := range []int{0, 1, 7, 64, 4096, 5000} {
		for _, k := range []int{0, min(1, n), n / 3, n / 2, n} {
			a, c := b[:k], b[k:n]
			if got, want := CombineChecksums(Checksum(a), Checksum(c), int64(len(c))), Checksum(b[:n]); got != want {
				t.Fatalf("n=%d k=%d: combined %08x, want %08x", n, k, got, want)
			}
		}
	}
	big := bytes.Repeat(b, 1000) // 5 MB
	if got, want := CombineChecksums(Checksum(big[:12345]), Checksum(big[12345:]), int64(len(big)-12345)), Checksum(big); got != want {
		t.Fatalf("big: %08x, want %08x", got, want)
	}
}

func checksumTensors() []TensorData {
	return []TensorData{
		{Name: "a", DType: dtype.F32, Shape: []int64{4}, Data: []byte("0123456789abcdef")},
		{Name: "b", DType: dtype.U8, Shape: []int64{3}, Data: []byte("xyz")},
		{Name: "e", DType: dtype.U8, Shape: []int64{0}, Data: nil},
	}
}

// Serialize writes a checksum for every tensor; Verify finds a flipped
// bit in a tensor's bytes and names the tensor, its bytes and both sums.
func TestChecksumsWrittenAndVerified(t *testing.T) {
	raw, err := Serialize(checksumTensors(), map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	f, err := OpenBytes(raw)
	if err != nil {
		t.Fatal(err)
	}
	sums, err := f.Header().Checksums()
	if err != nil || len(sums) != 3 || sums["a"] != Checksum([]byte("0123456789abcdef")) || sums["e"] != 0 {
		t.Fatalf("checksums %v, %v", sums, err)
	}
	for _, tn := range f.Tensors() {
		if err := tn.Verify(); err != nil {
			t.Fatal(err)
		}
	}
	tn, _ := f.Tensor("b")
	bad := bytes.Clone(raw)
	bad[tn.Offset()+1] ^= 0x10
	f2, err := OpenBytes(bad)
	if err != nil {
		t.Fatal(err)
	}
	tb, _ := f2.Tensor("b")
	err = tb.Verify()
	var ce *ChecksumError
	if !errors.Is(err, ErrChecksum) || !errors.As(err, &ce) || ce.Tensor != "b" || ce.Begin != tn.Offset() || ce.End != tn.Offset()+3 {
		t.Fatalf("Verify of a flipped bit: %v", err)
	}
	if ta, _ := f2.Tensor("a"); ta.Verify() != nil {
		t.Fatal("an intact tensor fails")
	}
}

// A header whose checksums are damaged (a key naming no tensor, a tensor
// without one, a malformed value) is ErrChecksum naming them.
func TestDamagedChecksums(t *testing.T) {
	raw, err := Serialize(checksumTensors(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ from, to, want string }{
		{`"ckpt.crc32c.b"`, `"ckpt.crc32c.c"`, `names no tensor`},
		{`"ckpt.crc32c.b"`, `"ckpt.crc32c.z"`, `no checksum for "b"`},
		{`"1b`, `"1B`, `not 8 lowercase hex digits`},
	} {
		s := string(raw)
		if c.from == `"1b` {
			i := strings.Index(s, `"ckpt.crc32c.b":"`) + len(`"ckpt.crc32c.b":`)
			s = s[:i] + `"ZZ` + s[i+3:]
		} else {
			s = strings.Replace(s, c.from, c.to, 1)
		}
		f, err := OpenBytes([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		tn, _ := f.Tensor("a")
		if err := tn.Verify(); !errors.Is(err, ErrChecksum) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s -> %s: %v", c.from, c.to, err)
		}
	}
}

// A stream that cannot be patched gets the caller's claims when they name
// every tensor, none otherwise; a claim the data contradict fails Close
// with a *ChecksumError; WithoutChecksums writes the reference bytes.
func TestWriterClaims(t *testing.T) {
	ts := checksumTensors()
	specs, _, _ := specsOf(ts)
	write := func(md map[string]string, opts ...WriteOption) ([]byte, error) {
		var buf bytes.Buffer
		w, err := NewWriter(struct{ io.Writer }{&buf}, specs, md, opts...)
		if err != nil {
			return nil, err
		}
		for _, s := range w.Order() {
			for _, td := range ts {
				if td.Name == s.Name {
					if err := w.WriteTensor(s.Name, td.Data); err != nil {
						return nil, err
					}
				}
			}
		}
		return buf.Bytes(), w.Close()
	}
	claims := map[string]string{}
	for _, td := range ts {
		claims[ChecksumPrefix+td.Name] = FormatChecksum(Checksum(td.Data))
	}
	out, err := write(claims)
	if err != nil {
		t.Fatal(err)
	}
	patched, _ := Serialize(ts, map[string]string{})
	if !bytes.Equal(out, patched) {
		t.Fatal("a stream with every claim differs from a patched file")
	}
	out, err = write(map[string]string{ChecksumPrefix + "a": claims[ChecksumPrefix+"a"]})
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := OpenBytes(out); len(f.Metadata()) != 0 {
		t.Fatalf("a stream with some claims wrote %v", f.Metadata())
	}
	claims[ChecksumPrefix+"b"] = FormatChecksum(Checksum([]byte("xyZ")))
	_, err = write(claims)
	var ce *ChecksumError
	if !errors.As(err, &ce) || ce.Tensor != "b" {
		t.Fatalf("a contradicted claim: %v", err)
	}
	out, err = write(claims, WithoutChecksums())
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := Serialize(ts, map[string]string{}, WithoutChecksums())
	if !bytes.Equal(out, ref) {
		t.Fatal("WithoutChecksums differs from the reference layout")
	}
}

// The header's own checksum finds a changed metadata value, dtype or
// shape, which the tensors' checksums do not cover.
func TestHeaderChecksum(t *testing.T) {
	ts := []TensorData{
		{Name: "w", DType: dtype.I16, Shape: []int64{2, 2}, Data: []byte("abcdefgh")},
		{Name: "v", DType: dtype.U8, Shape: []int64{4}, Data: []byte("ijkl")},
	}
	raw, err := Serialize(ts, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := OpenBytes(raw); f.Metadata()[HeaderChecksumKey] == "" {
		t.Fatalf("no header checksum: %v", f.Metadata())
	}
	for _, c := range []struct{ from, to string }{
		{`"format":"pt"`, `"format":"pu"`},
		{`"dtype":"I16"`, `"dtype":"F16"`},
		{`"shape":[2,2]`, `"shape":[4,1]`},
	} {
		s := strings.Replace(string(raw), c.from, c.to, 1)
		f, err := OpenBytes([]byte(s))
		if err != nil {
			t.Fatalf("%s: %v", c.to, err)
		}
		if _, err := f.Header().Checksums(); !errors.Is(err, ErrChecksum) || !strings.Contains(err.Error(), "the header differs from its checksum") {
			t.Errorf("%s: %v", c.to, err)
		}
	}
}
