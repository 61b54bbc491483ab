package ckpt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/torch"
)

// Verifying PyTorch tensors against their storage records' CRC-32 (the
// CRC the archive's zip directory records), as the loader reads them.

// ptVerifyFixture is ptFixture and "w", a [1536, 1024] F32 weight alone in
// its storage (6 MiB: two pieces of a load, read by several workers).
func ptVerifyFixture(t testing.TB) ([]ptView, map[string]ptStorage) {
	views, storages := ptFixture(t)
	views = append(views, ptView{Name: "w", Storage: "9", Shape: []int64{1536, 1024}, Stride: []int64{1024, 1}})
	storages["9"] = ptStorage{DType: dtype.F32, Data: f32s(ramp(1536 * 1024)...)}
	return views, storages
}

// flipRecord flips one bit of the byte at of the storage record that
// tensor views in the PyTorch file path (the record's data, not the zip
// directory), and returns the record's name and its bytes in the file.
func flipRecord(t testing.TB, path, tensor string, at int64) (rec string, begin, end int64) {
	t.Helper()
	c, err := torch.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	tn, err := c.Tensor(tensor)
	if err != nil {
		t.Fatal(err)
	}
	rec, off, n := tn.Record()
	c.Close()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[off+at] ^= 0x10
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return rec, off, off + n
}

// wantRecordErr checks that err is the checksum error of the tensor name
// and its storage record rec, bytes [begin, end) of a file named file.
func wantRecordErr(t testing.TB, what string, err error, file, name, rec string, begin, end int64) {
	t.Helper()
	var ce *safetensors.ChecksumError
	switch {
	case !errors.Is(err, ErrChecksum) || !errors.As(err, &ce):
		t.Errorf("%s: %v, want a checksum error", what, err)
	case ce.Tensor != name || ce.Record != rec || filepath.Base(ce.File) != file || ce.Begin != begin || ce.End != end || ce.Want == ce.Got:
		t.Errorf("%s: %+v, want tensor %q, record %q of %s, bytes %d to %d", what, ce, name, rec, file, begin, end)
	case !strings.Contains(err.Error(), fmt.Sprintf("%q", name)) || !strings.Contains(err.Error(), rec):
		t.Errorf("%s: the message does not name the tensor and record: %v", what, err)
	}
}

// readPartShuffled reads all of a Part in pieces of odd sizes, in a random order,
// from several goroutines, and returns the bytes and the first error.
func readPartShuffled(p *Part, seed uint64) ([]byte, error) {
	b := make([]byte, p.Size())
	type piece struct{ lo, hi int64 }
	var ps []piece
	rng := rand.New(rand.NewPCG(seed, 1))
	for lo := int64(0); lo < int64(len(b)); {
		hi := min(int64(len(b)), lo+1+rng.Int64N(max(int64(len(b))/5, 7)))
		ps = append(ps, piece{lo, hi})
		lo = hi
	}
	rng.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	ch := make(chan piece)
	for range 4 {
		wg.Go(func() {
			for pc := range ch {
				if _, err := p.ReadAt(b[pc.lo:pc.hi], pc.lo); err != nil {
					mu.Lock()
					first = cmpErr(first, err)
					mu.Unlock()
				}
			}
		})
	}
	for _, pc := range ps {
		ch <- pc
	}
	close(ch)
	wg.Wait()
	return b, first
}

// cmpErr keeps a checksum error over any other.
func cmpErr(a, b error) error {
	if a == nil || !errors.Is(a, ErrChecksum) && errors.Is(b, ErrChecksum) {
		return b
	}
	return a
}

// itemOf returns the Item of name.
func itemOf(t testing.TB, m *Model, name string) *Item {
	t.Helper()
	items, err := m.Items()
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		if it.Name == name {
			return it
		}
	}
	t.Fatalf("no item %s", name)
	return nil
}

// contentsPart returns the Part of Contents that holds the stored tensor
// name.
func contentsPart(t testing.TB, m *Model, name string) *Part {
	t.Helper()
	c, err := m.Contents(m.Components()[0])
	if err != nil {
		t.Fatal(err)
	}
	for i := range c.Tensors {
		if c.Tensors[i].Tensor == name {
			return &c.Tensors[i]
		}
	}
	t.Fatalf("no part %s", name)
	return nil
}

// TestTorchVerifyDamaged flips one bit in the data of a storage record (a
// small BF16 weight, a 6 MiB F32 one read in pieces by several workers)
// of a single file and of a shard of an index: Load (as stored and
// converted), LoadTensor, an Item's Data and a Contents Part read in odd
// pieces in any order fail with ErrChecksum naming the file, the tensor,
// its record and the record's bytes, and nothing is handed out; the other
// tensors load; VerifyNever loads the flipped value.
func TestTorchVerifyDamaged(t *testing.T) {
	views, storages := ptVerifyFixture(t)
	want := ptWant(views, storages)
	for _, layout := range []string{"file", "index"} {
		for _, name := range []string{"h.weight", "w"} {
			what := layout + "/" + name
			dir := t.TempDir()
			var path, file string
			if layout == "file" {
				file = "model.pt"
				path = writePT(t, dir, file, torchArchive(t, views, storages, false))
			} else {
				// Shard 1: storage 0's views; shard 2: the others.
				var a, b []ptView
				var wm []string
				for _, v := range views {
					shard := "pytorch_model-00001-of-00002.bin"
					if v.Storage == "0" {
						a = append(a, v)
					} else {
						b = append(b, v)
						shard = "pytorch_model-00002-of-00002.bin"
					}
					wm = append(wm, fmt.Sprintf("%q: %q", v.Name, shard))
				}
				sb := map[string]ptStorage{}
				for k, s := range storages {
					if k != "0" {
						sb[k] = s
					}
				}
				writePT(t, dir, "pytorch_model-00001-of-00002.bin", torchArchive(t, a, map[string]ptStorage{"0": storages["0"]}, false))
				file = "pytorch_model-00002-of-00002.bin"
				writePT(t, dir, file, torchArchive(t, b, sb, false))
				path = writePT(t, dir, "pytorch_model.bin.index.json", []byte(`{"weight_map": {`+strings.Join(wm, ", ")+`}}`))
			}
			at := int64(3)
			if name == "w" {
				at = 5<<20 + 3 // in the second piece of a load
			}
			rec, begin, end := flipRecord(t, filepath.Join(dir, file), name, at)
			ctx := context.Background()
			for _, opts := range [][]Option{nil, {WithDType(To(dtype.F32))}, {WithDType(To(dtype.BF16)), WithWorkers(4)}} {
				m := mustOpen(t, path, opts...)
				w, err := m.Load(ctx)
				if w != nil {
					t.Errorf("%s: Load handed out weights with its error", what)
				}
				wantRecordErr(t, what+": Load", err, file, name, rec, begin, end)
				_, err = m.LoadTensor(ctx, name)
				wantRecordErr(t, what+": LoadTensor", err, file, name, rec, begin, end)
				if _, err := m.LoadTensor(ctx, "steps"); err != nil {
					t.Errorf("%s: an undamaged tensor: %v", what, err)
				}
				_, err = itemOf(t, m, name).Produce(ctx, nil)
				wantRecordErr(t, what+": Produce", err, file, name, rec, begin, end)
			}
			m := mustOpen(t, path)
			for seed := range uint64(3) {
				_, err := readPartShuffled(&itemOf(t, m, name).Data, seed)
				wantRecordErr(t, what+": Item's Data", err, file, name, rec, begin, end)
				_, err = readPartShuffled(contentsPart(t, m, name), seed)
				wantRecordErr(t, what+": Contents' Part", err, file, name, rec, begin, end)
			}
			if b, err := readPartShuffled(contentsPart(t, m, "steps"), 0); err != nil || !bytes.Equal(b, want["steps"]) {
				t.Errorf("%s: an undamaged Part: %v", what, err)
			}
			// VerifyNever: the flipped value, unnoticed.
			nw := mustLoad(t, mustOpen(t, path, WithVerify(VerifyNever)))
			tt, _ := nw.Tensor(name)
			flipped := bytes.Clone(want[name])
			flipped[at] ^= 0x10
			if !bytes.Equal(tt.Bytes(), flipped) {
				t.Errorf("%s: VerifyNever did not load the flipped bit", what)
			}
		}
	}
}

// TestTorchVerifyViews: a view of part of a storage (an offset slice), a
// transposed view gathered from it and a tied name, with a bit flipped in
// their storage record. With VerifyPresent the whole view (enc.weight)
// and its tie fail, while the views load unverified (their bytes are not
// the record's); with VerifyAlways they fail too, by reading the record,
// in a load, alone and as a Part, whether the flip is in the view's own
// elements or not; VerifyNever loads everything.
func TestTorchVerifyViews(t *testing.T) {
	views, storages := ptFixture(t)
	want := ptWant(views, storages)
	ctx := context.Background()
	for _, at := range []int64{1, 12*4 + 1} { // an element enc.rows lacks, one it has
		dir := t.TempDir()
		path := writePT(t, dir, "model.pt", torchArchive(t, views, storages, false))
		rec, begin, end := flipRecord(t, path, "enc.weight", at)
		m := mustOpen(t, path)
		_, err := m.Load(ctx)
		wantRecordErr(t, "present: Load", err, "model.pt", "enc.weight", rec, begin, end)
		_, err = m.LoadTensor(ctx, "dec.weight") // the tie reads its kept tensor
		wantRecordErr(t, "present: the tie", err, "model.pt", "enc.weight", rec, begin, end)
		for _, name := range []string{"enc.rows", "enc.weight_t"} {
			tt, err := m.LoadTensor(ctx, name)
			if err != nil {
				t.Fatalf("present: %s: %v", name, err)
			}
			if damaged := !bytes.Equal(tt.Bytes(), want[name]); damaged != (at > 12*4 || name == "enc.weight_t") {
				t.Errorf("present: %s: damaged %v", name, damaged)
			}
			if _, err := readPartShuffled(&itemOf(t, m, name).Data, 1); err != nil {
				t.Errorf("present: %s: Part: %v", name, err)
			}
		}
		ma := mustOpen(t, path, WithVerify(VerifyAlways))
		for _, name := range []string{"enc.rows", "enc.weight_t"} {
			_, err := ma.LoadTensor(ctx, name)
			wantRecordErr(t, "always: "+name, err, "model.pt", name, rec, begin, end)
			_, err = ma.LoadTensor(ctx, name)
			wantRecordErr(t, "always: "+name+" again", err, "model.pt", name, rec, begin, end)
			for seed := range uint64(3) {
				_, err = readPartShuffled(&itemOf(t, ma, name).Data, seed)
				wantRecordErr(t, "always: "+name+": Part", err, "model.pt", name, rec, begin, end)
			}
			_, err = readPartShuffled(contentsPart(t, ma, name), 0)
			wantRecordErr(t, "always: "+name+": Contents' Part", err, "model.pt", name, rec, begin, end)
		}
		if _, err := ma.LoadTensor(ctx, "h.weight"); err != nil {
			t.Errorf("always: an undamaged tensor: %v", err)
		}
		mustLoad(t, mustOpen(t, path, WithVerify(VerifyNever)))
	}
	// Undamaged, VerifyAlways loads every view and Part, reading each
	// view's record once per load or Part.
	path := writePT(t, t.TempDir(), "model.pt", torchArchive(t, views, storages, false))
	ma := mustOpen(t, path, WithVerify(VerifyAlways), WithDType(To(dtype.F32)))
	w := mustLoad(t, ma)
	for _, v := range views {
		tt, _ := w.Tensor(v.Name)
		wb, _ := convertTo(t, want[v.Name], storages[v.Storage].DType, tt.DType)
		if !bytes.Equal(tt.Bytes(), wb) {
			t.Errorf("always: %s differs", v.Name)
		}
		it := itemOf(t, ma, v.Name)
		if b, err := readPartShuffled(&it.Data, 7); err != nil || !bytes.Equal(b, want[v.Name]) {
			t.Errorf("always: %s: Part: %v", v.Name, err)
		}
		// Read again: verified again.
		if b, err := io.ReadAll(io.NewSectionReader(&it.Data, 0, it.Data.Size())); err != nil || !bytes.Equal(b, want[v.Name]) {
			t.Errorf("always: %s: Part again: %v", v.Name, err)
		}
	}
}

// TestTorchVerifyBigEndian: a big-endian archive's tensors are
// byte-swapped as they are read, so their bytes are not their records':
// VerifyPresent loads them unverified (the plan says why), VerifyAlways
// verifies them by reading their records and finds a flipped bit.
func TestTorchVerifyBigEndian(t *testing.T) {
	views, storages := ptFixture(t)
	path := writePT(t, t.TempDir(), "model.pt", torchArchive(t, views, storages, true))
	p, err := mustOpen(t, path).Plan()
	if err != nil {
		t.Fatal(err)
	}
	for _, tp := range p.Components[0].Tensors {
		if tp.Verify != "not verified: a view of its storage" {
			t.Errorf("present: %s: %q", tp.Name, tp.Verify)
		}
	}
	if p, err = mustOpen(t, path, WithVerify(VerifyAlways)).Plan(); err != nil {
		t.Fatal(err)
	}
	for _, tp := range p.Components[0].Tensors {
		if tp.Verify != "checksum (reads its storage record)" || tp.VerifyReadBytes == 0 {
			t.Errorf("always: %s: %q (%d bytes)", tp.Name, tp.Verify, tp.VerifyReadBytes)
		}
	}
	mustLoad(t, mustOpen(t, path, WithVerify(VerifyAlways)))
	rec, begin, end := flipRecord(t, path, "h.weight", 2)
	mustLoad(t, mustOpen(t, path))
	_, err = mustOpen(t, path, WithVerify(VerifyAlways)).Load(context.Background())
	wantRecordErr(t, "always", err, "model.pt", "h.weight", rec, begin, end)
}

// TestTorchVerifyRank: a rank's part of a PyTorch tensor follows the rule
// of a safetensors tensor's: with VerifyPresent it is not verified ("rank
// part"), with VerifyAlways the rest of the tensor is read to verify it,
// and a bit flipped in the other rank's rows fails it; a part of a view
// reads the view's record.
func TestTorchVerifyRank(t *testing.T) {
	views, storages := ptVerifyFixture(t)
	path := writePT(t, t.TempDir(), "model.pt", torchArchive(t, views, storages, false))
	for _, c := range []struct {
		name, split string
		dim         int
		present     string
		always      string
		readBytes   int64
	}{
		{"w", "w", 0, "not verified: rank part", "checksum (reads the rest of the tensor)", 3 << 20},
		{"w", "w", 1, "not verified: rank part", "checksum (reads the rest of the tensor)", 6 << 20},
		{"enc.rows", "enc.rows", 0, "not verified: a view of its storage", "checksum (reads its storage record)", 192},
	} {
		for _, v := range []Verify{VerifyPresent, VerifyAlways} {
			m := mustOpen(t, path, WithVerify(v), WithRank(0, 2, Split{Pattern: MustParsePattern(c.split), Dim: c.dim}))
			p, err := m.Plan()
			if err != nil {
				t.Fatal(err)
			}
			for _, tp := range p.Components[0].Tensors {
				if tp.Name != c.name {
					continue
				}
				wantText, rb := c.present, int64(0)
				if v == VerifyAlways {
					wantText, rb = c.always, c.readBytes
				}
				if tp.Verify != wantText || tp.VerifyReadBytes != rb {
					t.Errorf("%s dim %d, %s: %q (%d bytes), want %q (%d)", c.name, c.dim, v, tp.Verify, tp.VerifyReadBytes, wantText, rb)
				}
			}
			mustLoad(t, m)
		}
	}
	// A bit flipped in rank 1's rows of w: rank 0's part loads with
	// VerifyPresent, and fails with VerifyAlways.
	rec, begin, end := flipRecord(t, path, "w", 4<<20)
	split := WithRank(0, 2, Split{Pattern: MustParsePattern("w"), Dim: 0})
	mustLoad(t, mustOpen(t, path, split))
	_, err := mustOpen(t, path, split, WithVerify(VerifyAlways)).Load(context.Background())
	wantRecordErr(t, "rank 0, always", err, "model.pt", "w", rec, begin, end)
	_, err = readPartShuffled(&itemOf(t, mustOpen(t, path, split, WithVerify(VerifyAlways)), "w").Data, 3)
	wantRecordErr(t, "rank 0, always, Part", err, "model.pt", "w", rec, begin, end)
	// Rank 1's part holds the flip: present does not verify a part.
	mustLoad(t, mustOpen(t, path, WithRank(1, 2, Split{Pattern: MustParsePattern("w"), Dim: 0})))
}

// TestTorchVerifyEmptyView: a view of no elements of a storage reads
// nothing of its own; with VerifyAlways its record is still read and
// verified (a load, a Part's ReadAt of no bytes asks nothing).
func TestTorchVerifyEmptyView(t *testing.T) {
	views := []ptView{
		{Name: "a", Storage: "0", Shape: []int64{4}, Stride: []int64{1}},
		{Name: "e", Storage: "0", Offset: 2, Shape: []int64{0}, Stride: []int64{1}},
	}
	storages := map[string]ptStorage{"0": {DType: dtype.F32, Data: f32s(1, 2, 3, 4)}}
	path := writePT(t, t.TempDir(), "model.pt", torchArchive(t, views, storages, false))
	for _, v := range []Verify{VerifyPresent, VerifyAlways} {
		m := mustOpen(t, path, WithVerify(v))
		mustLoad(t, m)
		it := itemOf(t, m, "e")
		if n, err := it.Data.ReadAt(nil, 0); n != 0 || err != nil {
			t.Errorf("%s: ReadAt(nil, 0) = %d, %v", v, n, err)
		}
	}
	rec, begin, end := flipRecord(t, path, "a", 5)
	ctx := context.Background()
	if _, err := mustOpen(t, path).LoadTensor(ctx, "e"); err != nil {
		t.Errorf("present: %v", err)
	}
	_, err := mustOpen(t, path, WithVerify(VerifyAlways)).LoadTensor(ctx, "e")
	wantRecordErr(t, "always", err, "model.pt", "e", rec, begin, end)
}

// TestTorchVerifiedConvertSteps: a verified converting load reads, sums
// and converts a piece a step at a time; it gives the bytes and the
// statistics of an unverified one (to F16, the 6 MiB weight overflows in
// every step but the first), with one worker and several.
func TestTorchVerifiedConvertSteps(t *testing.T) {
	views, storages := ptVerifyFixture(t)
	path := writePT(t, t.TempDir(), "model.pt", torchArchive(t, views, storages, false))
	for _, workers := range []int{1, 3} {
		for _, to := range []dtype.DType{dtype.F16, dtype.BF16} {
			ref := mustLoad(t, mustOpen(t, path, WithDType(To(to)), WithVerify(VerifyNever), WithWorkers(workers)))
			got := mustLoad(t, mustOpen(t, path, WithDType(To(to)), WithWorkers(workers)))
			for _, v := range views {
				a, _ := ref.Tensor(v.Name)
				b, _ := got.Tensor(v.Name)
				if !bytes.Equal(a.Bytes(), b.Bytes()) || a.Stats != b.Stats {
					t.Errorf("%s, %d workers: %s: verified %+v, unverified %+v; bytes equal %v", to, workers, v.Name, b.Stats, a.Stats, bytes.Equal(a.Bytes(), b.Bytes()))
				}
			}
			if w, _ := got.Tensor("w"); to == dtype.F16 && w.Stats.Overflow == 0 {
				t.Errorf("no overflow to F16: %+v", w.Stats)
			}
		}
	}
}
