package shard

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/testutil"
	"github.com/ckpt-go/ckpt/safetensors"
)

// TestWriteStream writes tensors in small pieces and reads back what
// Write would have written, in the order WithOrder announced.
func TestWriteStream(t *testing.T) {
	ts := []safetensors.TensorData{td("z.weight", dtype.F32, 64), td("a.bias", dtype.BF16, 3), td("m.scale", dtype.F32, 1), td("empty", dtype.F16, 0), td("q", dtype.F8_E4M3, 100)}
	specs := make([]safetensors.TensorSpec, len(ts))
	data := map[string][]byte{}
	for i, d := range ts {
		specs[i] = safetensors.TensorSpec{Name: d.Name, DType: d.DType, Shape: d.Shape}
		data[d.Name] = d.Data
	}
	for _, max := range []int64{1 << 20, 200} {
		dir, ref := t.TempDir(), t.TempDir()
		var order, calls []string
		write := func(s safetensors.TensorSpec, w io.Writer) error {
			calls = append(calls, s.Name)
			b := data[s.Name]
			for len(b) > 0 { // 7 bytes at a time
				n := min(7, len(b))
				if _, err := w.Write(b[:n]); err != nil {
					return err
				}
				b = b[n:]
			}
			return nil
		}
		got, err := WriteStream(context.Background(), dir, "model", "", specs, write, map[string]string{"k": "v"},
			WithMaxShardSize(max), WithOrder(func(o []safetensors.TensorSpec) {
				for _, s := range o {
					order = append(order, s.Name)
				}
			}))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(order, calls) || len(order) != len(ts) {
			t.Errorf("max %d: announced order %v, calls %v", max, order, calls)
		}
		want, err := Write(context.Background(), ref, "model", "", ts, map[string]string{"k": "v"}, WithMaxShardSize(max))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.Files, want.Files) {
			t.Fatalf("files %v, want %v", got.Files, want.Files)
		}
		for _, f := range append(got.Files, got.Index) {
			if f == "" {
				continue
			}
			a, err1 := os.ReadFile(filepath.Join(dir, f))
			b, err2 := os.ReadFile(filepath.Join(ref, f))
			if err1 != nil || err2 != nil || !bytes.Equal(a, b) {
				t.Errorf("max %d: %s differs from Write's", max, f)
			}
		}
	}
}

// TestWriteStreamFailures: a failing or short write aborts the save and
// leaves the previous set as it was, with no temporary file.
func TestWriteStreamFailures(t *testing.T) {
	dir := t.TempDir()
	if _, err := Write(context.Background(), dir, "model", "", gen(1, 4), nil, WithMaxShardSize(128)); err != nil {
		t.Fatal(err)
	}
	before := snap(t, dir)
	specs := []safetensors.TensorSpec{}
	for _, d := range gen(2, 4) {
		specs = append(specs, safetensors.TensorSpec{Name: d.Name, DType: d.DType, Shape: d.Shape})
	}
	for _, tc := range []struct {
		name  string
		write func(n int, w io.Writer) error
		kind  failure
		msg   string
	}{
		{"error mid-tensor", func(n int, w io.Writer) error {
			w.Write(make([]byte, 32))
			if n == 2 {
				return errors.New("disk on fire")
			}
			_, err := w.Write(make([]byte, 32))
			return err
		}, failure{Kind: ErrWrite, What: ""}, "disk on fire"},
		{"short", func(n int, w io.Writer) error {
			_, err := w.Write(make([]byte, 63))
			return err
		}, invalidTensor, "63 bytes written"},
		{"long", func(n int, w io.Writer) error {
			_, err := w.Write(make([]byte, 65))
			return err
		}, failure{Kind: ErrWrite, What: ""}, "too many bytes"},
	} {
		n := 0
		_, err := WriteStream(context.Background(), dir, "model", "", specs, func(s safetensors.TensorSpec, w io.Writer) error {
			n++
			return tc.write(n, w)
		}, nil, WithMaxShardSize(128))
		var e *Error
		if !errors.As(err, &e) || !tc.kind.Matches(err) || e.Kind != tc.kind.Kind || e.Tensor == "" || e.Shard == "" || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: %v", tc.name, err)
		}
		after := snap(t, dir)
		if len(after) != len(before) {
			t.Fatalf("%s: folder %v", tc.name, testutil.Entries(t, dir))
		}
		for f, h := range before {
			if after[f] != h {
				t.Fatalf("%s: %s changed", tc.name, f)
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := WriteStream(ctx, dir, "model", "", specs, func(s safetensors.TensorSpec, w io.Writer) error {
		cancel()
		return ctx.Err()
	}, nil)
	if !errors.Is(err, ErrWrite) || !errors.Is(err, context.Canceled) {
		t.Errorf("canceled: %v", err)
	}
	if len(snap(t, dir)) != len(before) {
		t.Errorf("canceled: folder %v", testutil.Entries(t, dir))
	}
}
