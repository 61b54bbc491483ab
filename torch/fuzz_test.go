package torch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"hash/crc32"
	"io"
	"maps"
	"os"
	"testing"

	"github.com/ckpt-go/ckpt/safetensors"
)

// fuzzLimits keep each input cheap.
var fuzzLimits = limits{objects: 1 << 14, stack: 1 << 10, memo: 1 << 10, dims: 8, intBytes: 64, line: 256}

func addFixtureSeeds(f *testing.F, pickles bool) {
	f.Add(tinyZip("archive/"))
	for _, p := range []string{"testdata/train_state.pt", "testdata/tied_bf16.pt"} {
		if b, err := os.ReadFile(p); err == nil {
			if pickles {
				c, err := NewReader(bytes.NewReader(b), int64(len(b)), p)
				if err == nil {
					data, _ := c.files[0].ar.pickle()
					f.Add(data)
				}
			} else {
				f.Add(b)
			}
		}
	}
	if pickles {
		f.Add(tinyPickle())
		f.Add(evilPickle("posix", "system"))
		f.Add([]byte("\x80\x04\x95\x05\x00\x00\x00\x00\x00\x00\x00}\x94(K\x01K\x02u."))
	} else {
		f.Add(append(append([]byte{0x80, 0x02}, legacyMagic...), '.'))
	}
}

// FuzzUnpickle: the restricted unpickler never panics, hangs or exceeds
// its limits, whatever the bytes; what it accepts flattens without panic,
// and every error is typed.
func FuzzUnpickle(f *testing.F) {
	addFixtureSeeds(f, true)
	f.Fuzz(func(t *testing.T, data []byte) {
		root, _, err := unpickle(data, fuzzLimits)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Kind.String() == "unknown" {
				t.Fatalf("untyped error %T: %v", err, err)
			}
			return
		}
		if _, err := flatten(root, fuzzLimits.objects); err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("untyped error %T: %v", err, err)
			}
		}
	})
}

// readsInBounds opens the archive data: NewReader either refuses it with a
// typed error, or VerifyRecords runs without panic (each problem typed,
// naming a record within the file) and it reads every tensor, to exactly
// ByteLen bytes (at most the archive's), the same through Bytes, WriteTo,
// ReadAt and Gather.
func readsInBounds(t *testing.T, data []byte) {
	t.Helper()
	c, err := NewReader(bytes.NewReader(data), int64(len(data)), "fuzz.pt")
	if err != nil {
		var e *Error
		if !errors.As(err, &e) || e.Kind.String() == "unknown" {
			t.Fatalf("untyped error %T: %v", err, err)
		}
		return
	}
	_, err = c.VerifyRecords(context.Background(), VerifyOptions{Workers: 2, ReadSize: 7}, func(e *RecordError) {
		if e.Record == "" || e.Begin < 0 || e.Begin > e.End || e.End > int64(len(data)) || !errors.Is(e, safetensors.ErrChecksum) {
			t.Fatalf("record problem out of bounds or untyped: %+v", e)
		}
	})
	if err != nil {
		t.Fatalf("VerifyRecords: %v", err)
	}
	// The stored records lie in the file, in order, and checking them
	// from sums of their bytes finds what reading them finds.
	recs := c.StoredRecords()
	sums := map[string]uint32{}
	for i, r := range recs {
		if r.Begin < 0 || r.Begin > r.End || r.End > int64(len(data)) || i > 0 && r.Begin < recs[i-1].End {
			t.Fatalf("stored record out of bounds or order: %+v", recs)
		}
		sums[r.Name] = crc32.ChecksumIEEE(data[r.Begin:r.End])
	}
	count := func(opts VerifyOptions) (n int) {
		if _, err := c.VerifyRecords(context.Background(), opts, func(*RecordError) { n++ }); err != nil {
			t.Fatalf("VerifyRecords: %v", err)
		}
		return n
	}
	if read, summed := count(VerifyOptions{}), count(VerifyOptions{Summed: func(_, rec string) (uint32, bool) { crc, ok := sums[rec]; return crc, ok }}); read != summed {
		t.Fatalf("%d problems reading the records, %d from their sums", read, summed)
	}
	for name, tn := range c.Tensors() {
		if tn.ByteLen() > int64(len(data)) {
			t.Fatalf("%s: %d bytes from a %d-byte file", name, tn.ByteLen(), len(data))
		}
		b, err := tn.Bytes()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var buf bytes.Buffer
		if n, err := tn.WriteTo(&buf); err != nil || n != tn.ByteLen() || !bytes.Equal(buf.Bytes(), b) {
			t.Fatalf("%s: WriteTo %d %v", name, n, err)
		}
		// ReadAt in pieces of an odd size, not whole elements.
		got := make([]byte, len(b))
		for off := 0; off < len(got); off += 7 {
			if n, err := tn.ReadAt(got[off:min(off+7, len(got))], int64(off)); err != nil && err != io.EOF || n != min(7, len(got)-off) {
				t.Fatalf("%s: ReadAt(%d) = %d, %v", name, off, n, err)
			}
		}
		if !bytes.Equal(got, b) {
			t.Fatalf("%s: ReadAt differs from Bytes", name)
		}
		// Gathered once, read in the same pieces.
		if tn.GatherBytes(0, tn.ByteLen()) > int64(len(data)) {
			t.Fatalf("%s: Gather would hold %d bytes of a %d-byte file", name, tn.GatherBytes(0, tn.ByteLen()), len(data))
		}
		g, err := tn.Gather(0, tn.ByteLen())
		if err != nil {
			t.Fatalf("%s: Gather: %v", name, err)
		}
		clear(got)
		for off := 0; off < len(got); off += 7 {
			if n, err := g.ReadAt(got[off:min(off+7, len(got))], int64(off)); err != nil && err != io.EOF || n != min(7, len(got)-off) {
				t.Fatalf("%s: Gathered.ReadAt(%d) = %d, %v", name, off, n, err)
			}
		}
		if !bytes.Equal(got, b) {
			t.Fatalf("%s: Gathered.ReadAt differs from Bytes", name)
		}
		// The middle third, gathered alone.
		lo, n := int64(len(b)/3), int64(len(b)/3)
		if tn.GatherBytes(lo, n) > int64(len(data)) {
			t.Fatalf("%s: Gather(%d, %d) would hold %d bytes of a %d-byte file", name, lo, n, tn.GatherBytes(lo, n), len(data))
		}
		if g, err = tn.Gather(lo, n); err != nil {
			t.Fatalf("%s: Gather(%d, %d): %v", name, lo, n, err)
		}
		for off := lo; off < lo+n; off += 7 {
			piece := got[off:min(off+7, lo+n)]
			if k, err := g.ReadAt(piece, off); err != nil || k != len(piece) || !bytes.Equal(piece, b[off:off+int64(k)]) {
				t.Fatalf("%s: Gather(%d, %d).ReadAt(%d) = %d, %v", name, lo, n, off, k, err)
			}
		}
	}
}

// FuzzNewReader: a hostile archive never panics; what NewReader accepts
// reads every tensor, to exactly ByteLen bytes, the same through Bytes and
// WriteTo.
func FuzzNewReader(f *testing.F) {
	addFixtureSeeds(f, false)
	f.Fuzz(func(t *testing.T, data []byte) {
		readsInBounds(t, data)
	})
}

// FuzzCheckpoint builds the archive around a fuzzed pickle and storage
// records (so that the zip's checksums hold and the fuzzer reaches the
// tensor checks): whatever NewReader accepts reads back in bounds.
func FuzzCheckpoint(f *testing.F) {
	f.Add(tinyPickle(), seq(6), []byte{0x38, 0x40, 0xb8, 0x00}, "archive/", false)
	f.Add(stateDict(ts{name: "t", storage: "FloatStorage", key: "0", numel: 6, shape: []int64{3, 2}, stride: []int64{1, 3}}),
		seq(6), []byte{}, "m/", true)
	f.Fuzz(func(t *testing.T, pkl, rec0, rec1 []byte, prefix string, big bool) {
		order := "little"
		if big {
			order = "big"
		}
		data := torchZip(prefix, pkl, order, map[string][]byte{"0": rec0, "1": rec1, "2": rec0[:len(rec0)/2]})
		readsInBounds(t, data)
	})
}

// FuzzParseAliases: ParseAliases never panics; what it refuses is a typed
// error, and what it accepts has no chains and reads back the same once
// written as WriteSafetensors writes it.
func FuzzParseAliases(f *testing.F) {
	for _, s := range []string{`{"lm_head.weight":"embed.weight"}`, `{}`, `{"a":"b","c":"b"}`, `{"a":"b","b":"c"}`,
		`{"a":"a"}`, `{"a":"b","a":"c"}`, `{"a":1}`, `[]`, `{"a":"b"} x`, `{"a":"b"`, `"x"`, ``, `{"\u00e9":"b"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseAliases(s)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Kind != ErrInvalidFormat {
				t.Fatalf("untyped error %T: %v", err, err)
			}
			return
		}
		for tied, kept := range got {
			if _, chain := got[kept]; chain || tied == kept {
				t.Fatalf("accepted a chain: %q -> %q", tied, kept)
			}
		}
		b, err := json.Marshal(got)
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseAliases(string(b))
		if err != nil || !maps.Equal(got, again) {
			t.Fatalf("%q: read back as %v, %v", b, again, err)
		}
	})
}
