package remote

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/safetensors"
)

// pieces cuts [0, n) into random pieces, some overlapping their
// neighbours, in random order; each has bytes no other piece has.
func pieces(r *rand.Rand, n int64) [][2]int64 {
	var out [][2]int64
	var prev int64
	for off := int64(0); off < n; {
		k := min(1+r.Int64N(n/5+1), n-off)
		a := off
		if prev > 1 && r.IntN(4) == 0 {
			a -= 1 + r.Int64N(min(prev-1, 100)) // overlaps the previous piece
		}
		out = append(out, [2]int64{a, off + k})
		off += k
		prev = k
	}
	r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

func fullSum(data []byte) *storeSum {
	c := safetensors.Checksum(data)
	return &storeSum{value: crcBase64(c), typ: "FULL_OBJECT", crc: c}
}

func compositeSum(data []byte, ends []int64, withParts bool) *storeSum {
	var cat []byte
	var parts []uint32
	var off int64
	for _, e := range ends {
		c := safetensors.Checksum(data[off:e])
		cat = binary.BigEndian.AppendUint32(cat, c)
		parts = append(parts, c)
		off = e
	}
	c := safetensors.Checksum(cat)
	s := &storeSum{value: crcBase64(c) + "-" + itoa(int64(len(ends))), typ: "COMPOSITE", crc: c, ends: ends}
	if withParts {
		s.parts = parts
	}
	return s
}

// feed adds data's pieces to t, returning the first error.
func feed(t *tally, data []byte, ps [][2]int64) error {
	for _, p := range ps {
		if err := t.add(p[0], data[p[0]:p[1]]); err != nil {
			return err
		}
	}
	return nil
}

// The pieces of an object read in any order, overlapping or not, verify it
// against a full-object or composite checksum once they cover it (not
// before); one flipped bit anywhere fails the read that completes it, with
// ErrChecksum naming the object; per-part CRCs fail a part read alone.
func TestTallyVerifies(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		n := 1 + r.Int64N(5000)
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		var ends []int64
		for off := int64(0); off < n; {
			off = min(off+1+r.Int64N(n/3+1), n)
			ends = append(ends, off)
		}
		sums := map[string]*storeSum{
			"full":      fullSum(data),
			"composite": compositeSum(data, ends, false),
			"parts":     compositeSum(data, ends, true),
		}
		for kind, sum := range sums {
			ps := pieces(r, n)
			tl := newTally("s3://b/k", `"etag"`, n, sum)
			if err := feed(tl, data, ps[:len(ps)-1]); err != nil {
				t.Fatalf("trial %d %s: %v", trial, kind, err)
			}
			if len(ps) > 1 && tl.verified() && kind != "parts" {
				t.Fatalf("trial %d %s: verified before every byte passed", trial, kind)
			}
			if err := feed(tl, data, ps[len(ps)-1:]); err != nil || !tl.verified() {
				t.Fatalf("trial %d %s: %v, verified %v", trial, kind, err, tl.verified())
			}

			// One bit flipped: the bytes that arrive differ.
			bad := append([]byte(nil), data...)
			at := r.Int64N(n)
			bad[at] ^= 1 << r.IntN(8)
			tl = newTally("s3://b/k", `"etag"`, n, sum)
			err := feed(tl, bad, ps)
			var re *Error
			if !errors.Is(err, ErrChecksum) || !errors.Is(err, safetensors.ErrChecksum) || !errors.As(err, &re) ||
				re.Location != "s3://b/k" || !strings.Contains(err.Error(), `ETag "etag"`) {
				t.Fatalf("trial %d %s: flip at %d: %v", trial, kind, at, err)
			}
			if kind == "parts" && len(ends) > 1 && !strings.Contains(err.Error(), "part ") {
				t.Fatalf("trial %d: per-part mismatch not named: %v", trial, err)
			}
			// Every later read fails too.
			if err2 := tl.add(0, bad[:1]); !errors.Is(err2, ErrChecksum) {
				t.Fatalf("trial %d %s: later read: %v", trial, kind, err2)
			}
		}
	}
}

// A part whose CRC the store listed is verified when read alone; a read of
// a verified object starts a new pass, which catches bytes that differ the
// second time.
func TestTallyPartsAndPasses(t *testing.T) {
	data := []byte(strings.Repeat("0123456789", 100))
	ends := []int64{300, 600, 1000}
	tl := newTally("s3://b/k", `"e"`, 1000, compositeSum(data, ends, true))
	bad := append([]byte(nil), data...)
	bad[400] ^= 0x10
	if err := tl.add(0, data[:300]); err != nil {
		t.Fatal(err)
	}
	if err := tl.add(300, bad[300:600]); !errors.Is(err, ErrChecksum) || !strings.Contains(err.Error(), "part 2 of 3") ||
		!strings.Contains(err.Error(), "bytes=300-599") {
		t.Fatalf("part 2: %v", err)
	}

	tl = newTally("s3://b/k", `"e"`, 1000, fullSum(data))
	if err := tl.add(0, data); err != nil || !tl.verified() {
		t.Fatalf("first pass: %v", err)
	}
	if err := tl.add(0, data[:500]); err != nil || !tl.verified() {
		t.Fatalf("second pass begun: %v %v", err, tl.verified())
	}
	if err := tl.add(500, bad[500:]); err != nil {
		t.Fatal(err) // bad[500:] equals data[500:]
	}
	if err := tl.add(0, bad); !errors.Is(err, ErrChecksum) {
		t.Fatalf("third pass with other bytes: %v", err)
	}

	// The first bytes served from memory count in every pass.
	tl = newTally("s3://b/k", `"e"`, 1000, fullSum(data))
	tl.setSeed(data[:100])
	if err := tl.add(0, data[:100]); err != nil {
		t.Fatal(err)
	}
	for pass := range 3 {
		if err := tl.add(100, data[100:]); err != nil || !tl.verified() {
			t.Fatalf("pass %d: %v", pass, err)
		}
	}
	if err := tl.add(100, bad[100:]); !errors.Is(err, ErrChecksum) {
		t.Fatalf("a pass of the data alone with other bytes: %v", err)
	}
}

// S3's checksum forms parse; anything else is no checksum.
func TestParseStoreSum(t *testing.T) {
	c := crcBase64(0xdeadbeef)
	for _, tc := range []struct {
		value, typ string
		parts      int
		ok         bool
	}{
		{c, "FULL_OBJECT", 0, true},
		{c, "", 0, true},
		{c + "-3", "COMPOSITE", 3, true},
		{c + "-3", "", 3, true},
		{c + "-3", "FULL_OBJECT", 0, false},
		{c, "COMPOSITE", 0, false},
		{c + "-0", "COMPOSITE", 0, false},
		{c + "-03", "COMPOSITE", 0, false},
		{c + "-x", "COMPOSITE", 0, false},
		{"", "", 0, false},
		{"AAAA", "", 0, false},
		{"not base64!", "", 0, false},
	} {
		s, n, ok := parseStoreSum(tc.value, tc.typ)
		if ok != tc.ok || n != tc.parts || (ok && s.crc != 0xdeadbeef) {
			t.Errorf("parseStoreSum(%q, %q) = %+v, %d, %v", tc.value, tc.typ, s, n, ok)
		}
	}
}

// BenchmarkTally accounts 64 MiB in 8 MiB pieces, in an order that merges
// runs, against a copy of the same bytes: the CPU a verified read adds.
func BenchmarkTally(b *testing.B) {
	data := make([]byte, 64<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	dst := make([]byte, len(data))
	sum := fullSum(data)
	b.Run("copy", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for range b.N {
			copy(dst, data)
		}
	})
	b.Run("tally", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for range b.N {
			tl := newTally("s3://b/k", `"e"`, int64(len(data)), sum)
			for _, i := range []int{1, 0, 3, 2, 5, 4, 7, 6} {
				if err := tl.add(int64(i)<<23, data[i<<23:(i+1)<<23]); err != nil {
					b.Fatal(err)
				}
			}
			if !tl.verified() {
				b.Fatal("not verified")
			}
		}
	})
}
