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
