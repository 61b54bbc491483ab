package torch

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/safetensors"
)

// verifyAll runs VerifyRecords and returns its problems, sorted by record.
func verifyAll(t testing.TB, c *Checkpoint, opts VerifyOptions) ([]*RecordError, VerifyStats) {
	t.Helper()
	var got []*RecordError
	st, err := c.VerifyRecords(context.Background(), opts, func(e *RecordError) { got = append(got, e) })
	if err != nil {
		t.Fatalf("VerifyRecords: %v", err)
	}
	slices.SortFunc(got, func(a, b *RecordError) int { return strings.Compare(a.File+a.Record, b.File+b.Record) })
	return got, st
}

// viewsFixture is a checkpoint of three storages: "a" alone in storage 0,
// "b" and its transpose "bt" in storage 1, and "tied", a tie of "a".
func viewsFixture() []byte {
	pkl := stateDict(
		ts{name: "a", storage: "FloatStorage", key: "0", numel: 4, shape: []int64{4}, stride: []int64{1}},
		ts{name: "b", storage: "FloatStorage", key: "1", numel: 6, shape: []int64{2, 3}, stride: []int64{3, 1}},
		ts{name: "bt", storage: "FloatStorage", key: "1", numel: 6, shape: []int64{3, 2}, stride: []int64{1, 3}},
		ts{name: "tied", storage: "FloatStorage", key: "0", numel: 4, shape: []int64{4}, stride: []int64{1}},
		ts{name: "c", storage: "FloatStorage", key: "2", numel: 2, shape: []int64{2}, stride: []int64{1}})
	return torchZip("archive/", pkl, "little", map[string][]byte{"0": seq(4), "1": f32(9, 8, 7, 6, 5, 4), "2": f32(1, 2)})
}

// recordRanges returns each record's data range in the archive.
func recordRanges(t testing.TB, c *Checkpoint) map[string][2]int64 {
	t.Helper()
	out := map[string][2]int64{}
	for name, f := range c.files[0].ar.records {
		off, err := f.DataOffset()
		if err != nil {
			t.Fatal(err)
		}
		out[name] = [2]int64{off, off + int64(f.CompressedSize64)}
	}
	return out
}

func allBytes(t testing.TB, c *Checkpoint) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for name, tn := range c.Tensors() {
		b, err := tn.Bytes()
		if err != nil {
			return nil
		}
		out[name] = b
	}
	return out
}

func TestVerifyRecordsClean(t *testing.T) {
	files := map[string][]byte{"views": viewsFixture()}
	for _, p := range []string{"testdata/tied_bf16.pt", "testdata/train_state.pt", "../../shared/fixtures/torch/dtypes.pt", "../../shared/fixtures/torch/mlp_f32.bin"} {
		if b, err := os.ReadFile(p); err == nil {
			files[p] = b
		}
	}
	for name, data := range files {
		c, err := NewReader(bytes.NewReader(data), int64(len(data)), name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, w := range []int{1, 3} {
			probs, st := verifyAll(t, c, VerifyOptions{Workers: w, ReadSize: 5})
			if len(probs) != 0 {
				t.Errorf("%s: problems in a sound file: %v", name, probs[0])
			}
			if st.Records != len(c.files[0].ar.records) || st.Tensors != c.Len() || st.Bytes <= 0 {
				t.Errorf("%s: stats %+v, want %d records, %d tensors", name, st, len(c.files[0].ar.records), c.Len())
			}
		}
	}
}

// TestVerifyRecordsCorruption flips one bit at every byte of the file and
// truncates it at every length: Open refuses it with a typed error, or
// VerifyRecords reports it, or every tensor reads back as it was written
// (a flip in a field no reader uses, such as a time stamp). A flip inside
// a storage record is always reported, naming the record and every tensor
// that views it.
func TestVerifyRecordsCorruption(t *testing.T) {
	orig := viewsFixture()
	c0, err := openBytes(t, orig)
	if err != nil {
		t.Fatal(err)
	}
	want := allBytes(t, c0)
	ranges := recordRanges(t, c0)
	viewers := map[string][]string{"archive/data/0": {"a", "tied"}, "archive/data/1": {"b", "bt"}, "archive/data/2": {"c"}}
	rng := rand.New(rand.NewPCG(1, 2))
	silent := 0
	for pos := range orig {
		data := slices.Clone(orig)
		data[pos] ^= 1 << rng.IntN(8)
		c, err := openBytes(t, data)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("byte %d: untyped error %T: %v", pos, err, err)
			}
			continue
		}
		probs, _ := verifyAll(t, c, VerifyOptions{Workers: 2, ReadSize: 3})
		for rec, r := range ranges {
			if int64(pos) < r[0] || int64(pos) >= r[1] {
				continue
			}
			found := false
			for _, p := range probs {
				if p.Record == rec && p.Begin == r[0] && p.End == r[1] && slices.Equal(p.Tensors, viewers[rec]) &&
					errors.Is(p, safetensors.ErrChecksum) && strings.Contains(p.Msg, "CRC-32 mismatch") {
					found = true
				}
			}
			if !found {
				t.Errorf("byte %d of record %s flipped: problems %v", pos, rec, probs)
			}
		}
		if len(probs) == 0 {
			silent++
			if got := allBytes(t, c); !equalBytes(got, want) {
				t.Errorf("byte %d flipped: no problem, but the tensors read differently", pos)
			}
		}
	}
	t.Logf("%d of %d flips change nothing a reader uses", silent, len(orig))
	for n := range len(orig) {
		c, err := openBytes(t, orig[:n])
		if err == nil {
			if probs, _ := verifyAll(t, c, VerifyOptions{}); len(probs) == 0 && !equalBytes(allBytes(t, c), want) {
				t.Errorf("cut at %d: no problem, but the tensors read differently", n)
			}
			continue
		}
		var e *Error
		if !errors.As(err, &e) {
			t.Fatalf("cut at %d: untyped error %T: %v", n, err, err)
		}
	}
}

func equalBytes(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !bytes.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// TestVerifyRecordsLocalHeader: a local header whose CRC-32 or size
// disagrees with the directory is a problem, though the bytes match the
// directory.
func TestVerifyRecordsLocalHeader(t *testing.T) {
	orig := viewsFixture()
	c0, _ := openBytes(t, orig)
	r := recordRanges(t, c0)["archive/data/1"]
	hdr := r[0] - int64(len("archive/data/1")) - localHeaderLen
	for field, msg := range map[int64]string{14: "local header says", 18: "size mismatch", 22: "size mismatch"} {
		data := slices.Clone(orig)
		data[hdr+field] ^= 0x10
		c, err := openBytes(t, data)
		if err != nil {
			t.Fatalf("field %d: %v", field, err)
		}
		probs, _ := verifyAll(t, c, VerifyOptions{})
		if len(probs) != 1 || probs[0].Record != "archive/data/1" || !strings.Contains(probs[0].Msg, msg) {
			t.Errorf("field %d: %v", field, probs)
		} else {
			t.Log(probs[0])
		}
	}
}

// TestVerifyRecordsShards: the problem of a shard names the shard's file.
func TestVerifyRecordsShards(t *testing.T) {
	idx := shardSet(t, goodIndex)
	dir := filepath.Dir(idx)
	p := filepath.Join(dir, "pytorch_model-00002-of-00002.bin")
	c0, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	r := recordRanges(t, c0)["archive/data/0"]
	c0.Close()
	data, _ := os.ReadFile(p)
	data[r[0]+1] ^= 4
	writeFile(t, dir, filepath.Base(p), data)
	c, err := Open(idx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	probs, st := verifyAll(t, c, VerifyOptions{Workers: 4})
	if len(probs) != 1 || probs[0].File != p || !slices.Equal(probs[0].Tensors, []string{"l1.tied", "l1.w"}) {
		t.Fatalf("problems %v", probs)
	}
	want := `torch: ` + p + `: archive/data/0: bytes `
	if got := probs[0].Error(); !strings.HasPrefix(got, want) || !strings.Contains(got, `(tensors "l1.tied", "l1.w"): CRC-32 mismatch`) {
		t.Errorf("message %q", got)
	}
	if st.Tensors != 2 { // l0.w and l0.b; l1.w's storage is damaged
		t.Errorf("stats %+v", st)
	}
}

func TestVerifyRecordsRefusals(t *testing.T) {
	c, err := openBytes(t, viewsFixture())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.VerifyRecords(ctx, VerifyOptions{}, func(*RecordError) { t.Error("a problem after cancel") }); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled: %v", err)
	}
	c.Close()
	if _, err := c.VerifyRecords(context.Background(), VerifyOptions{}, func(*RecordError) {}); !errors.Is(err, ErrClosed) {
		t.Errorf("closed: %v", err)
	}
	var nilc *Checkpoint
	if _, err := nilc.VerifyRecords(context.Background(), VerifyOptions{}, func(*RecordError) {}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("nil: %v", err)
	}
}

// TestParseIndex: ParseIndex applies Open's rules to an index's bytes.
func TestParseIndex(t *testing.T) {
	ix, err := ParseIndex([]byte(goodIndex))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ix.Names, []string{"l1.w", "l1.tied", "l0.w", "l0.b"}) || ix.WeightMap["l0.b"] != "pytorch_model-00001-of-00002.bin" ||
		!slices.Equal(ix.Shards, []string{"pytorch_model-00002-of-00002.bin", "pytorch_model-00001-of-00002.bin"}) {
		t.Errorf("index %+v", ix)
	}
	for in, kind := range map[string]ErrorKind{
		`{"weight_map": {"a": "../x.bin"}}`:  ErrInsecurePath,
		`{"weight_map": {}}`:                 ErrInvalidFormat,
		`[]`:                                 ErrInvalidFormat,
		string(make([]byte, MaxIndexSize+1)): ErrInvalidFormat,
	} {
		if _, err := ParseIndex([]byte(in)); !errors.Is(err, kind) {
			t.Errorf("%.40q: %v, want %v", in, err, kind)
		}
	}
}

// countedViews opens viewsFixture's bytes ("views.pt") through a
// countingReader.
func countedViews(t *testing.T) ([]byte, *Checkpoint, *countingReader) {
	t.Helper()
	data := viewsFixture()
	cr := &countingReader{r: bytes.NewReader(data)}
	c, err := NewReader(cr, int64(len(data)), "views.pt")
	if err != nil {
		t.Fatal(err)
	}
	return data, c, cr
}

// TestVerifyRecordsReads counts VerifyRecords' reads (each a ranged
// request on a remote file): a storage record, whose data offset Open
// found, costs its local header's window and its bytes (smaller than the
// buffer here), one read each; any other record one read more, for its
// local header's fixed part.
func TestVerifyRecordsReads(t *testing.T) {
	_, c, cr := countedViews(t)
	ar := c.files[0].ar
	storages := len(ar.dataOff)
	others := len(ar.records) - storages
	if storages != 3 {
		t.Fatalf("Open located %d storage records, want 3", storages)
	}
	cr.calls.Store(0)
	if probs, _ := verifyAll(t, c, VerifyOptions{}); len(probs) != 0 {
		t.Fatalf("problems in a sound file: %v", probs[0])
	}
	if got, want := cr.calls.Load(), int64(2*storages+3*others); got != want {
		t.Errorf("%d reads for %d storage records and %d others, want %d", got, storages, others, want)
	}
}

// TestVerifyRecordsSummed: StoredRecords lists every stored record with
// its bytes, in file order; VerifyRecords checks the records a pass
// summed (VerifyOptions.Summed) from those sums, reading only their local
// headers, and reports a sum that disagrees with the directory; records
// the pass did not sum are read as before.
func TestVerifyRecordsSummed(t *testing.T) {
	data, c, cr := countedViews(t)
	recs := c.StoredRecords()
	ranges := recordRanges(t, c)
	if len(recs) != len(ranges) || !slices.IsSortedFunc(recs, func(a, b StoredRecord) int { return cmp.Compare(a.Begin, b.Begin) }) {
		t.Fatalf("StoredRecords %+v, want the %d records in file order", recs, len(ranges))
	}
	for _, r := range recs {
		if r.File != "views.pt" || ranges[r.Name] != [2]int64{r.Begin, r.End} {
			t.Errorf("StoredRecords: %+v, want bytes %v", r, ranges[r.Name])
		}
	}
	sums := func(b []byte) func(file, record string) (uint32, bool) {
		m := map[string]uint32{}
		for _, r := range recs {
			m[r.File+"\x00"+r.Name] = crc32.ChecksumIEEE(b[r.Begin:r.End])
		}
		return func(file, record string) (uint32, bool) {
			crc, ok := m[file+"\x00"+record]
			return crc, ok
		}
	}
	cr.bytes.Store(0)
	base, stBase := verifyAll(t, c, VerifyOptions{})
	read := cr.bytes.Swap(0)
	probs, st := verifyAll(t, c, VerifyOptions{Summed: sums(data)})
	if len(base) != 0 || len(probs) != 0 || st != stBase {
		t.Fatalf("summed: %v %+v, read: %v %+v", probs, st, base, stBase)
	}
	var recBytes int64
	for _, r := range recs {
		recBytes += r.End - r.Begin
	}
	if got := cr.bytes.Load(); got > read-recBytes {
		t.Errorf("summed: read %d bytes, want at most %d (the %d bytes of records not read again)", got, read-recBytes, recBytes)
	}

	// A pass that saw other bytes: the sums, not the reader's sound
	// bytes, decide.
	bad := slices.Clone(data)
	r1 := ranges["archive/data/1"]
	bad[r1[0]+2] ^= 4
	probs, _ = verifyAll(t, c, VerifyOptions{Summed: sums(bad)})
	if len(probs) != 1 || probs[0].Record != "archive/data/1" || !slices.Equal(probs[0].Tensors, []string{"b", "bt"}) || !strings.Contains(probs[0].Msg, "CRC-32 mismatch") {
		t.Errorf("a damaged sum: %v", probs)
	}
	// A pass that summed nothing: every record read.
	cr.bytes.Store(0)
	if probs, _ = verifyAll(t, c, VerifyOptions{Summed: func(string, string) (uint32, bool) { return 0, false }}); len(probs) != 0 || cr.bytes.Load() != read {
		t.Errorf("nothing summed: %v, read %d bytes, want %d", probs, cr.bytes.Load(), read)
	}
}
