package ckpt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/safetensors"
)

// Small tensors are converted in batches (prep.small): across batch,
// shard and component boundaries, between tensors that are not batched
// (large ones, views, integers, empty ones), each tensor gets the bytes and
// the statistics of a load of itself alone, which converts it in a piece of
// its own.
func TestSmallTensorsInBatches(t *testing.T) {
	var ts []ckpttest.Tensor
	for i := range 2500 {
		switch {
		case i%700 == 5:
			ts = append(ts, ckpttest.T(fmt.Sprintf("big.%d", i), dtype.F32, 200, 100)) // 80 KB out: a piece of its own
		case i%300 == 7:
			ts = append(ts, ckpttest.T(fmt.Sprintf("ids.%d", i), dtype.I64, 3)) // a view
		case i%500 == 9:
			ts = append(ts, ckpttest.T(fmt.Sprintf("empty.%d", i), dtype.F32, 0, 4))
		default:
			ts = append(ts, ckpttest.T(fmt.Sprintf("w.%d", i), dtype.F32, 4, int64(1+i%7)))
		}
	}
	for _, shards := range []int{1, 3} {
		dir := ckpttest.Dir(t, ckpttest.Weights{Shards: shards, Tensors: ts})
		path := filepath.Join(dir, "model.safetensors")
		if shards > 1 {
			path = filepath.Join(dir, "model.safetensors.index.json")
		}
		// F8_E4M3: the conversions round and saturate, so that every
		// tensor has statistics of its own.
		m := mustOpen(t, path, WithDType(To(dtype.F8_E4M3)), WithBudget(-1))
		w := mustLoad(t, m)
		var total dtype.Stats
		n := 0
		for name, got := range w.All() {
			one, err := m.LoadTensor(context.Background(), name)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Bytes(), one.Bytes()) || got.Stats != one.Stats || got.Action() != one.Action() {
				t.Fatalf("%d shards: %s: loaded %s with %+v, alone %s with %+v", shards, name, got.Action(), got.Stats, one.Action(), one.Stats)
			}
			if got.Action() == ActionConvert && !bytes.Equal(got.Bytes(), want(t, got.Name, got.Stored, got.Shape, dtype.F8_E4M3)) {
				t.Fatalf("%s: wrong bytes", name)
			}
			total.Add(got.Stats)
			n++
		}
		if n != len(ts) || w.Stats() != total || total.Elements == 0 {
			t.Errorf("%d shards: %d tensors, stats %+v, sum %+v", shards, n, w.Stats(), total)
		}
	}
}

// A load of small tensors stops at a canceled context, and a batch that
// faults on the mapping (the file was truncated after Open) fails the
// load with ErrRead naming the tensor it faulted on.
func TestSmallTensorsCanceledOrTruncated(t *testing.T) {
	var ts []ckpttest.Tensor
	for i := range 3000 {
		ts = append(ts, ckpttest.T(fmt.Sprintf("w.%05d", i), dtype.BF16, 4, 4))
	}
	path := ckpttest.File(t, ts...)
	m := mustOpen(t, path, WithDType(To(dtype.F32)))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if w, err := m.Load(ctx); w != nil || !errors.Is(err, context.Canceled) {
		t.Errorf("Load with a canceled context: %v, %v", w, err)
	}

	// Keep the header and the first tensors' page: the tensors from the
	// next page on fault.
	h, err := safetensors.ReadHeaderFile(path)
	if err != nil {
		t.Fatal(err)
	}
	keep := (h.DataOffset/4096 + 1) * 4096
	if err := os.Truncate(path, keep); err != nil {
		t.Fatal(err)
	}
	w, err := m.Load(context.Background())
	var le *Error
	if w != nil || !errors.As(err, &le) || le.Kind != ErrRead || !strings.Contains(err.Error(), "memory fault") {
		t.Fatalf("Load of a truncated file: %v, %v", w, err)
	}
	info, ok := h.Lookup(le.Tensor)
	if !ok || h.DataOffset+info.End <= keep {
		t.Errorf("the error names %q (%+v), not a tensor past the file's end at %d", le.Tensor, info, keep)
	}
}
