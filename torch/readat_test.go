package torch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"io/fs"
	"math"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"testing/fstest"
)

// TestReadAt reads every tensor of views of all kinds (contiguous, an
// offset slice, transposed, a permuted 3-d view, a step, a 0-d one, of
// little- and big-endian archives) at every offset and length, whole
// elements or not, and compares with Bytes.
func TestReadAt(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	be := func(n int) []byte {
		var b []byte
		for i := range n {
			b = binary.BigEndian.AppendUint32(b, math.Float32bits(float32(i)))
		}
		return b
	}
	pkl := stateDict(
		ts{name: "flat", storage: "FloatStorage", key: "0", numel: 24, shape: []int64{24}, stride: []int64{1}},
		ts{name: "rows", storage: "FloatStorage", key: "0", numel: 24, offset: 4, shape: []int64{3, 4}, stride: []int64{4, 1}},
		ts{name: "t", storage: "FloatStorage", key: "0", numel: 24, shape: []int64{6, 4}, stride: []int64{1, 6}},
		ts{name: "perm", storage: "FloatStorage", key: "0", numel: 24, shape: []int64{3, 2, 4}, stride: []int64{1, 12, 3}},
		ts{name: "step", storage: "FloatStorage", key: "0", numel: 24, offset: 1, shape: []int64{2, 3}, stride: []int64{12, 3}},
		ts{name: "scalar", storage: "FloatStorage", key: "0", numel: 24, offset: 5, shape: []int64{}, stride: []int64{}},
	)
	for _, order := range []string{"little", "big"} {
		data := seq(24)
		if order == "big" {
			data = be(24)
		}
		c, err := openBytes(t, torchZip("x/", pkl, order, map[string][]byte{"0": data}))
		if err != nil {
			t.Fatal(err)
		}
		for name, tn := range c.Tensors() {
			whole, err := tn.Bytes()
			if err != nil {
				t.Fatal(err)
			}
			size := int64(len(whole))
			for off := int64(0); off <= size; off++ {
				for n := int64(0); off+n <= size+3; n++ {
					b := make([]byte, n)
					got, err := tn.ReadAt(b, off)
					want := min(n, size-off)
					if int64(got) != want || !bytes.Equal(b[:got], whole[off:off+want]) {
						t.Fatalf("%s (%s): ReadAt(%d bytes, %d) = %d %v, %v; want %v", name, order, n, off, got, err, b[:got], whole[off:off+want])
					}
					if (want < n) != (err == io.EOF) || want == n && err != nil {
						t.Fatalf("%s (%s): ReadAt(%d bytes, %d): %v", name, order, n, off, err)
					}
				}
			}
			if _, err := tn.ReadAt(make([]byte, 1), -1); !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("%s: negative offset: %v", name, err)
			}
			g, err := tn.Gather(0, tn.ByteLen())
			if err != nil {
				t.Fatal(err)
			}
			checkGathered(t, name+" ("+order+")", g, whole, tn.GatherBytes(0, tn.ByteLen()))
			if len(whole) > 0 {
				checkRanges(t, name+" ("+order+")", rng, tn, whole)
			}
		}
		c.Close()
		tn, _ := c.Tensor("flat")
		if _, err := tn.ReadAt(make([]byte, 4), 0); !errors.Is(err, ErrClosed) {
			t.Errorf("after Close: %v", err)
		}
	}
}

// TestOpenFS opens a file and an index of an fs.FS as Open opens them
// from the operating system's, and refuses what is not a regular file.
func TestOpenFS(t *testing.T) {
	a := stateDict(ts{name: "a", storage: "FloatStorage", key: "0", numel: 2, shape: []int64{2}, stride: []int64{1}})
	b := stateDict(ts{name: "b", storage: "FloatStorage", key: "0", numel: 2, shape: []int64{2}, stride: []int64{1}})
	fsys := fstest.MapFS{
		"m/one.pt":           {Data: torchZip("one/", a, "little", map[string][]byte{"0": f32(1, 2)})},
		"m/s-1.bin":          {Data: torchZip("s-1/", a, "little", map[string][]byte{"0": f32(1, 2)})},
		"m/s-2.bin":          {Data: torchZip("s-2/", b, "little", map[string][]byte{"0": f32(3, 4)})},
		"m/x.bin.index.json": {Data: []byte(`{"weight_map": {"a": "s-1.bin", "b": "s-2.bin"}}`)},
		"m/bad.index.json":   {Data: []byte(`{"weight_map": {"a": "s-1.bin", "b": "gone.bin"}}`)},
		"m/dir.pt/x":         {},
	}
	c, err := OpenFS(fsys, "m/one.pt")
	if err != nil {
		t.Fatal(err)
	}
	tn, _ := c.Tensor("a")
	if got, _ := tn.Bytes(); !bytes.Equal(got, f32(1, 2)) || tn.File() != "m/one.pt" {
		t.Errorf("one.pt: %v in %s", got, tn.File())
	}
	c.Close()
	c, err = OpenFS(fsys, "m/x.bin.index.json")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Names(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("index: %v", got)
	}
	tn, _ = c.Tensor("b")
	if got, _ := tn.Bytes(); !bytes.Equal(got, f32(3, 4)) || tn.File() != "m/s-2.bin" {
		t.Errorf("b: %v in %s", got, tn.File())
	}
	c.Close()
	if _, err := OpenFS(fsys, "m/bad.index.json"); !errors.Is(err, ErrMissingShard) {
		t.Errorf("missing shard: %v", err)
	}
	if _, err := OpenFS(fsys, "m/dir.pt"); !errors.Is(err, ErrNotRegular) {
		t.Errorf("folder: %v", err)
	}
	if _, err := OpenFS(fsys, "m/none.pt"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing: %v", err)
	}
	if _, err := OpenFS(nil, "x.pt"); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("nil: %v", err)
	}
	if _, err := OpenFS(streamFS{fsys}, "m/one.pt"); !errors.Is(err, ErrUnsupported) {
		t.Errorf("files without ReadAt: %v", err)
	}
}

// streamFS serves the files of an fs.FS without their ReadAt.
type streamFS struct{ fsys fs.FS }

func (s streamFS) Open(name string) (fs.File, error) {
	f, err := s.fsys.Open(name)
	if err != nil {
		return nil, err
	}
	return struct{ fs.File }{f}, nil
}

// TestReadAtLines reads views whose pieces span far more storage than
// they hold (a transposed matrix, a permuted 3-d view, a column slice with
// a step, of either byte order) at random offsets and lengths, line by
// line along their least stride, and compares with Bytes, which gathers
// from the whole span.
func TestReadAtLines(t *testing.T) {
	const r, c = 192, 160 // 120 KiB of F32
	pkl := stateDict(
		ts{name: "t", storage: "FloatStorage", key: "0", numel: r * c, shape: []int64{c, r}, stride: []int64{1, c}},
		ts{name: "perm", storage: "FloatStorage", key: "0", numel: r * c, shape: []int64{8, 20, r}, stride: []int64{20, 1, c}},
		ts{name: "cols", storage: "FloatStorage", key: "0", numel: r * c, offset: 3, shape: []int64{r, 50}, stride: []int64{c, 3}},
		ts{name: "colsT", storage: "FloatStorage", key: "0", numel: r * c, offset: 1, shape: []int64{50, r}, stride: []int64{3, c}},
		ts{name: "col", storage: "FloatStorage", key: "0", numel: r * c, offset: 7, shape: []int64{r}, stride: []int64{c}},
	)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, order := range []string{"little", "big"} {
		data := seq(r * c)
		if order == "big" {
			for i := 0; i < len(data); i += 4 {
				slices.Reverse(data[i : i+4])
			}
		}
		zb := torchZip("x/", pkl, order, map[string][]byte{"0": data})
		// From memory (a read is a request: lines rarely pay) and from a
		// file (a read is a system call).
		inMem, err := openBytes(t, zb)
		if err != nil {
			t.Fatal(err)
		}
		onDisk, err := Open(writeFile(t, t.TempDir(), "x.pt", zb))
		if err != nil {
			t.Fatal(err)
		}
		defer onDisk.Close()
		for _, ck := range []*Checkpoint{inMem, onDisk} {
			// Count the reads: a ReadAt reads the span its elements lie
			// in (one read) or their lines (one read each); from the file,
			// lines pay for some of the reads here, from memory never.
			ar := ck.files[0].ar
			cr := &countingReader{r: ar.r}
			ar.r = cr
			lineReads := 0
			for name, tn := range ck.Tensors() {
				whole, err := tn.Bytes()
				if err != nil {
					t.Fatal(err)
				}
				size := int64(len(whole))
				g, err := tn.Gather(0, tn.ByteLen())
				if err != nil {
					t.Fatal(err)
				}
				checkGathered(t, name+" ("+order+")", g, whole, tn.GatherBytes(0, tn.ByteLen()))
				checkRanges(t, name+" ("+order+")", rng, tn, whole)
				for range 300 {
					off := rng.Int64N(size)
					n := rng.Int64N(min(size-off, 8<<10) + 1)
					if rng.IntN(4) == 0 {
						off = rng.Int64N(size/3) / 4 * 4
						n = min(size-off, size/3)
					}
					b := make([]byte, n)
					cr.calls.Store(0)
					if got, err := tn.ReadAt(b, off); err != nil || int64(got) != n || !bytes.Equal(b, whole[off:off+n]) {
						t.Fatalf("%s (%s): ReadAt(%d bytes, %d): %d, %v; bytes equal %v", name, order, n, off, got, err, bytes.Equal(b, whole[off:off+n]))
					}
					if n == 0 {
						continue
					}
					e0, e1 := off/4, (off+n+3)/4
					lo, hi := tn.spanOf(e0, e1)
					want := int64(1)
					if tn.useLines(e0, e1, (hi-lo+1)*4) {
						want = 0
						tn.lines(e0, e1, func(_, _, _ int64) error { want++; return nil })
						lineReads++
					}
					if got := cr.calls.Load(); got != want {
						t.Fatalf("%s (%s, local %v): ReadAt(%d bytes, %d): %d reads, want %d", name, order, ar.local, n, off, got, want)
					}
				}
			}
			if (lineReads > 0) != ar.local {
				t.Errorf("%s, local %v: %d reads by lines", order, ar.local, lineReads)
			}
		}
	}
}

// checkGathered reads g at every offset with lengths of up to 9 bytes and
// in pieces of 1000 bytes, and compares with whole; it holds memory bytes.
func checkGathered(t *testing.T, name string, g *Gathered, whole []byte, memory int64) {
	t.Helper()
	if int64(len(g.src)) != memory {
		t.Errorf("%s: Gather holds %d bytes, GatherBytes says %d", name, len(g.src), memory)
	}
	size := int64(len(whole))
	for off := int64(0); off <= size; off++ {
		for n := int64(0); n <= 9 && off+n <= size+2; n++ {
			b := make([]byte, n)
			got, err := g.ReadAt(b, off)
			want := min(n, size-off)
			if int64(got) != want || !bytes.Equal(b[:got], whole[off:off+want]) || (want < n) != (err == io.EOF) || want == n && err != nil {
				t.Fatalf("%s: Gathered.ReadAt(%d bytes, %d) = %d, %v", name, n, off, got, err)
			}
		}
	}
	for off := int64(0); off < size; off += 1000 {
		b := make([]byte, min(1000, size-off))
		if _, err := g.ReadAt(b, off); err != nil || !bytes.Equal(b, whole[off:off+int64(len(b))]) {
			t.Fatalf("%s: Gathered.ReadAt(%d bytes, %d): %v", name, len(b), off, err)
		}
	}
	if _, err := g.ReadAt(make([]byte, 1), -1); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("%s: negative offset: %v", name, err)
	}
}

// countingReader counts the reads and the bytes read through it.
type countingReader struct {
	r            io.ReaderAt
	calls, bytes atomic.Int64
}

func (c *countingReader) ReadAt(b []byte, off int64) (int, error) {
	c.calls.Add(1)
	c.bytes.Add(int64(len(b)))
	return c.r.ReadAt(b, off)
}

// TestReadAtTransport reads a transposed matrix in pieces of a few rows
// through a reader that is not a file (each read a request of a remote
// file): each piece is one read of the storage it spans, not a read per
// line; Gather reads the storage once.
func TestReadAtTransport(t *testing.T) {
	const r, c = 512, 384 // 768 KiB of F32
	pkl := stateDict(ts{name: "t", storage: "FloatStorage", key: "0", numel: r * c, shape: []int64{c, r}, stride: []int64{1, c}})
	zb := torchZip("x/", pkl, "little", map[string][]byte{"0": seq(r * c)})
	cr := &countingReader{r: bytes.NewReader(zb)}
	ck, err := NewReader(cr, int64(len(zb)), "x.pt")
	if err != nil {
		t.Fatal(err)
	}
	tn, _ := ck.Tensor("t")
	whole, _ := tn.Bytes()
	const piece = 4 * r * 16 // 16 rows
	cr.calls.Store(0)
	for off := int64(0); off < tn.ByteLen(); off += piece {
		b := make([]byte, piece)
		if _, err := tn.ReadAt(b, off); err != nil || !bytes.Equal(b, whole[off:off+piece]) {
			t.Fatalf("ReadAt(%d): %v", off, err)
		}
	}
	if pieces := tn.ByteLen() / piece; cr.calls.Load() != pieces {
		t.Errorf("%d pieces read with %d reads, want one each", pieces, cr.calls.Load())
	}
	cr.calls.Store(0)
	cr.bytes.Store(0)
	g, err := tn.Gather(0, tn.ByteLen())
	if err != nil {
		t.Fatal(err)
	}
	checkGathered(t, "t", g, whole, tn.ByteLen())
	if cr.calls.Load() != 1 || cr.bytes.Load() != tn.ByteLen() {
		t.Errorf("Gather: %d reads of %d bytes, want one of %d", cr.calls.Load(), cr.bytes.Load(), tn.ByteLen())
	}
}

// TestGatherBytes: Gather holds the storage a view spans, unless the view
// holds far less than it spans and its lines are few (a column of a
// matrix): then only its own bytes.
func TestGatherBytes(t *testing.T) {
	const r, c = 192, 160
	pkl := stateDict(
		ts{name: "t", storage: "FloatStorage", key: "0", numel: r * c, shape: []int64{c, r}, stride: []int64{1, c}},
		ts{name: "col", storage: "FloatStorage", key: "0", numel: r * c, offset: 7, shape: []int64{r}, stride: []int64{c}},
		ts{name: "flat", storage: "FloatStorage", key: "0", numel: r * c, shape: []int64{r * c}, stride: []int64{1}},
	)
	ck, err := Open(writeFile(t, t.TempDir(), "x.pt", torchZip("x/", pkl, "little", map[string][]byte{"0": seq(r * c)})))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	for name, want := range map[string]int64{"t": 4 * r * c, "col": 4 * r, "flat": 4 * r * c} {
		tn, _ := ck.Tensor(name)
		if got := tn.GatherBytes(0, tn.ByteLen()); got != want {
			t.Errorf("%s: GatherBytes %d, want %d", name, got, want)
		}
	}
}

// checkRanges gathers random ranges of tn and reads random pieces inside
// them, which equal whole's; a read outside a range is refused.
func checkRanges(t *testing.T, name string, rng *rand.Rand, tn *Tensor, whole []byte) {
	t.Helper()
	size := int64(len(whole))
	isz := int64(tn.DType().Bits() / 8)
	for range 20 {
		lo := rng.Int64N(size)
		hi := lo + rng.Int64N(size-lo) + 1
		g, err := tn.Gather(lo, hi-lo)
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(g.src)) != tn.GatherBytes(lo, hi-lo) || int64(len(g.src)) > max(tn.extent, hi-lo+2*isz) {
			t.Fatalf("%s: Gather(%d, %d) holds %d bytes, GatherBytes says %d", name, lo, hi-lo, len(g.src), tn.GatherBytes(lo, hi-lo))
		}
		for range 20 {
			a := lo + rng.Int64N(hi-lo)
			b := make([]byte, rng.Int64N(hi-a)+1)
			if n, err := g.ReadAt(b, a); err != nil || n != len(b) || !bytes.Equal(b, whole[a:a+int64(len(b))]) {
				t.Fatalf("%s: Gather(%d, %d).ReadAt(%d bytes, %d): %d, %v", name, lo, hi-lo, len(b), a, n, err)
			}
		}
		if lo >= isz {
			if _, err := g.ReadAt(make([]byte, 1), lo/isz*isz-1); !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("%s: a read before the range [%d, %d): %v", name, lo, hi, err)
			}
		}
		if after := (hi + isz - 1) / isz * isz; after < size {
			if _, err := g.ReadAt(make([]byte, 1), after); !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("%s: a read after the range [%d, %d): %v", name, lo, hi, err)
			}
		}
	}
}

// TestGatherRangeRefused: a range outside the tensor's bytes is refused.
func TestGatherRangeRefused(t *testing.T) {
	pkl := stateDict(ts{name: "t", storage: "FloatStorage", key: "0", numel: 24, shape: []int64{6, 4}, stride: []int64{1, 6}})
	ck, err := openBytes(t, torchZip("x/", pkl, "little", map[string][]byte{"0": seq(24)}))
	if err != nil {
		t.Fatal(err)
	}
	tn, _ := ck.Tensor("t")
	for _, r := range [][2]int64{{-1, 4}, {0, -1}, {0, 97}, {97, 0}, {90, 7}, {math.MaxInt64, 1}, {1, math.MaxInt64}} {
		if _, err := tn.Gather(r[0], r[1]); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("Gather(%d, %d): %v", r[0], r[1], err)
		}
		if b := tn.GatherBytes(r[0], r[1]); b != 0 {
			t.Errorf("GatherBytes(%d, %d) = %d", r[0], r[1], b)
		}
	}
	g, err := tn.Gather(96, 0)
	if err != nil || len(g.src) != 0 {
		t.Fatalf("an empty range at the end: %v", err)
	}
	if n, err := g.ReadAt(make([]byte, 4), 96); n != 0 || err != io.EOF {
		t.Errorf("reading at the end: %d, %v", n, err)
	}
}

// TestRecordCRC: a contiguous view of its whole storage, from its start,
// in a little-endian archive, is its record's bytes (whole), and the
// CRC-32 of what ReadAt gives is the record's; every other view (part of
// the storage, strided, big-endian) is not, and ReadRecordAt gives the
// record's stored bytes, whose CRC-32 is the record's.
func TestRecordCRC(t *testing.T) {
	pkl := stateDict(
		ts{name: "flat", storage: "FloatStorage", key: "0", numel: 24, shape: []int64{24}, stride: []int64{1}},
		ts{name: "rows", storage: "FloatStorage", key: "0", numel: 24, offset: 4, shape: []int64{3, 4}, stride: []int64{4, 1}},
		ts{name: "head", storage: "FloatStorage", key: "0", numel: 24, shape: []int64{5}, stride: []int64{1}},
		ts{name: "t", storage: "FloatStorage", key: "0", numel: 24, shape: []int64{6, 4}, stride: []int64{1, 6}},
	)
	for _, order := range []string{"little", "big"} {
		data := seq(24)
		c, err := openBytes(t, torchZip("x/", pkl, order, map[string][]byte{"0": data}))
		if err != nil {
			t.Fatal(err)
		}
		for name, tn := range c.Tensors() {
			crc, whole := tn.RecordCRC()
			if crc != crc32.ChecksumIEEE(data) {
				t.Errorf("%s (%s): RecordCRC %08x, want %08x", name, order, crc, crc32.ChecksumIEEE(data))
			}
			if want := name == "flat" && order == "little"; whole != want {
				t.Errorf("%s (%s): whole %v, want %v", name, order, whole, want)
			}
			if whole {
				b, _ := tn.Bytes()
				if crc32.ChecksumIEEE(b) != crc {
					t.Errorf("%s: the bytes' CRC differs from the record's", name)
				}
			}
			rec, off, n := tn.Record()
			if rec != "x/data/0" || n != int64(len(data)) || off != recordRanges(t, c)[rec][0] {
				t.Errorf("%s: Record() = %q %d %d", name, rec, off, n)
			}
			b := make([]byte, n+3)
			if k, err := tn.ReadRecordAt(b, 0); k != len(data) || err != io.EOF || !bytes.Equal(b[:k], data) {
				t.Errorf("%s: ReadRecordAt = %d, %v", name, k, err)
			}
			if k, err := tn.ReadRecordAt(b[:4], n-2); k != 2 || err != io.EOF || !bytes.Equal(b[:2], data[n-2:]) {
				t.Errorf("%s: ReadRecordAt at the end = %d, %v", name, k, err)
			}
			if _, err := tn.ReadRecordAt(b[:1], -1); err == nil {
				t.Errorf("%s: a negative offset read", name)
			}
		}
	}
}
