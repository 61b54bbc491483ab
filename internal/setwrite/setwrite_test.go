package setwrite

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"testing"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/safetensors"
)

func TestPack(t *testing.T) {
	got := Pack([]int64{4, 4, 9, 1, 1}, 8)
	want := [][]int{{0, 1}, {2}, {3, 4}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("Pack = %v, want %v", got, want)
	}
	if got := Pack(nil, 8); len(got) != 1 || len(got[0]) != 0 {
		t.Errorf("Pack(nil) = %v", got)
	}
}

func TestAssign(t *testing.T) {
	got := Assign([]int{2, 0, 2, 5, 0})
	want := [][]int{{1, 4}, {0, 2}, {3}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("Assign = %v, want %v", got, want)
	}
	if got := Assign(nil); len(got) != 1 || len(got[0]) != 0 {
		t.Errorf("Assign(nil) = %v", got)
	}
}

func TestStream(t *testing.T) {
	specs := []safetensors.TensorSpec{{Name: "a", DType: dtype.F32, Shape: []int64{2}}}
	ctx := context.Background()
	var buf bytes.Buffer
	ok := func(_ safetensors.TensorSpec, w io.Writer) error { _, err := w.Write(make([]byte, 8)); return err }
	if err := Stream(ctx, &buf, specs, ok, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := safetensors.NewReader(bytes.NewReader(buf.Bytes()), int64(buf.Len())); err != nil {
		t.Errorf("the file does not read back: %v", err)
	}
	short := func(_ safetensors.TensorSpec, w io.Writer) error { _, err := w.Write(make([]byte, 4)); return err }
	var le *LengthError
	if err := Stream(ctx, io.Discard, specs, short, nil); !errors.As(err, &le) || le.N != 4 || le.Want() != 8 {
		t.Errorf("short data: %v", err)
	}
	cause := errors.New("no data")
	var te *TensorError
	fail := func(safetensors.TensorSpec, io.Writer) error { return cause }
	if err := Stream(ctx, io.Discard, specs, fail, nil); !errors.As(err, &te) || te.Tensor != "a" || !errors.Is(err, cause) {
		t.Errorf("failing data: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := Stream(cctx, io.Discard, specs, ok, nil); err != context.Canceled {
		t.Errorf("cancelled: %v", err)
	}
}

func TestIndexJSON(t *testing.T) {
	b, err := IndexJSON(8, map[string]string{"a": "m-00001-of-00002.safetensors"})
	want := "{\n  \"metadata\": {\n    \"total_size\": 8\n  },\n  \"weight_map\": {\n    \"a\": \"m-00001-of-00002.safetensors\"\n  }\n}\n"
	if err != nil || string(b) != want {
		t.Errorf("IndexJSON = %q, %v", b, err)
	}
}

// patchBuffer is a growing buffer that can be patched (an io.WriterAt)
// and records what Reserve asked for.
type patchBuffer struct {
	b        []byte
	reserved int64
	writes   int // Write calls before Reserve
}

func (p *patchBuffer) Write(b []byte) (int, error) { p.b = append(p.b, b...); return len(b), nil }

func (p *patchBuffer) WriteAt(b []byte, off int64) (int, error) {
	if off+int64(len(b)) > p.reserved {
		return 0, errors.New("patch beyond the reserved bytes")
	}
	return copy(p.b[off:], b), nil
}

func (p *patchBuffer) Reserve(n int64) error {
	if len(p.b) > 0 {
		return errors.New("Reserve after a write")
	}
	p.reserved = n
	return nil
}

func TestStreamChecksums(t *testing.T) {
	specs := []safetensors.TensorSpec{{Name: "a", DType: dtype.F32, Shape: []int64{2}}, {Name: "b", DType: dtype.U8, Shape: []int64{3}}}
	data := map[string][]byte{"a": {1, 2, 3, 4, 5, 6, 7, 8}, "b": {9, 10, 11}}
	write := func(s safetensors.TensorSpec, w io.Writer) error { _, err := w.Write(data[s.Name]); return err }
	ctx := context.Background()
	md := map[string]string{"format": "pt", safetensors.ChecksumPrefix + "other": "00000000"}

	// Patchable: every tensor's checksum, the set's claims for other
	// files dropped, the header reserved.
	var pb patchBuffer
	if err := Stream(ctx, &pb, specs, write, md); err != nil {
		t.Fatal(err)
	}
	n, err := HeaderLen(specs, md)
	if err != nil || pb.reserved != n || n <= 8 {
		t.Errorf("reserved %d, HeaderLen %d, %v", pb.reserved, n, err)
	}
	f, err := safetensors.OpenBytes(pb.b)
	if err != nil {
		t.Fatal(err)
	}
	sums, err := f.Header().Checksums()
	if err != nil || len(sums) != 2 || sums["a"] != safetensors.Checksum(data["a"]) || sums["b"] != safetensors.Checksum(data["b"]) {
		t.Errorf("checksums %v, %v", sums, err)
	}
	if int64(len(pb.b)) != n+11 {
		t.Errorf("file of %d bytes, header %d", len(pb.b), n)
	}

	// Not patchable, no claims: no checksums.
	var buf bytes.Buffer
	if err := Stream(ctx, &buf, specs, write, md); err != nil {
		t.Fatal(err)
	}
	f, err = safetensors.OpenBytes(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if sums, err := f.Header().Checksums(); sums != nil || err != nil {
		t.Errorf("a stream got checksums %v, %v", sums, err)
	}

	// A claim the data contradict fails the file.
	bad := map[string]string{safetensors.ChecksumPrefix + "b": "00000000"}
	var ce *safetensors.ChecksumError
	if err := Stream(ctx, &patchBuffer{}, specs, write, bad); !errors.As(err, &ce) || ce.Tensor != "b" {
		t.Errorf("wrong claim: %v", err)
	}

	// Order and FileMetadata keep a file's own claims only.
	if got := FileMetadata(md, specs); len(got) != 1 || got["format"] != "pt" {
		t.Errorf("FileMetadata = %v", got)
	}
	if got := CheckClaims(md, specs); got != safetensors.ChecksumPrefix+"other" {
		t.Errorf("CheckClaims = %q", got)
	}
	if _, err := Order([][]safetensors.TensorSpec{specs[:1], specs[1:]}, map[string]string{safetensors.ChecksumPrefix + "b": "00000000"}); err != nil {
		t.Errorf("Order with a claim of the second file: %v", err)
	}
}
