package interop_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/convert"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/safetensors"
)

// TestSaveReadByReference: a training checkpoint written by convert.Save
// (every built-in dtype, FP8 weights and optimizer state, sharded) is read
// by the reference safetensors library with the same names, dtypes, shapes
// and bytes, and with __metadata__ holding "format": "pt" (which
// transformers requires), the step and the epoch.
func TestSaveReadByReference(t *testing.T) {
	python(t)
	dir := t.TempDir()
	var ts []safetensors.TensorData
	for i, dt := range dtype.Builtins() {
		shape := []int64{int64(4 * (i + 1)), 8}
		b, err := ckpttest.Fill(dt.String(), dt, shape)
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, safetensors.TensorData{Name: fmt.Sprintf("params.%s", dt), DType: dt, Shape: shape, Data: b})
	}
	p, err := convert.Save(context.Background(), dir, ts, convert.SaveOptions{Step: 4000, Epoch: 1.25, MaxShardSize: 2048})
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Files) < 2 {
		t.Fatalf("want a sharded checkpoint: %v", res.Files)
	}
	var paths []string
	for _, f := range res.Files {
		paths = append(paths, filepath.Join(res.Path, f))
	}
	want := map[string]safetensors.TensorData{}
	for _, td := range ts {
		want[td.Name] = td
	}
	seen := 0
	for _, r := range pyReadFiles(t, dir, paths) {
		if !r.OK {
			t.Fatalf("%s: the reference refuses it: %s", r.File, r.Error)
		}
		if r.Metadata["format"] != "pt" || r.Metadata["step"] != "4000" || r.Metadata["epoch"] != "1.25" {
			t.Errorf("%s: metadata %v", r.File, r.Metadata)
		}
		for _, got := range r.Tensors {
			w, ok := want[got.Name]
			if !ok || got.DType != w.DType.String() || !slices.Equal(got.Shape, w.Shape) || got.SHA256 != sha(w.Data) {
				t.Errorf("%s: reference reads %s %s%v, saved %s%v", r.File, got.Name, got.DType, got.Shape, w.DType, w.Shape)
			}
			seen++
		}
	}
	if seen != len(ts) {
		t.Errorf("the reference read %d tensors, saved %d", seen, len(ts))
	}
}
