package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/executor/cpu"
	"github.com/ckpt-go/ckpt/internal/mlpdemo"
)

// The example's copy of the MLP (model.go, public API only) writes the same
// checkpoint as internal/mlpdemo, which `ckpt run-mlp` runs, and computes
// the same outputs.
func TestSameAsMLPDemo(t *testing.T) {
	ctx := context.Background()
	s := shape{Blocks: 2, Hidden: 48, FFN: 96, Out: 5, FP8Block: 32}
	bf, f8, err := build(ctx, t.TempDir(), s, 3)
	if err != nil {
		t.Fatal(err)
	}
	dbf, df8, err := mlpdemo.Build(ctx, t.TempDir(), mlpdemo.Shape(s), 3)
	if err != nil {
		t.Fatal(err)
	}
	ex, err := cpu.New()
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	const rows = 3
	x := input(rows, s.Hidden, 4)
	if !slices.Equal(x, mlpdemo.Input(rows, s.Hidden, 4)) {
		t.Error("inputs differ")
	}
	for _, v := range [][2]string{{bf, dbf}, {f8, df8}} {
		for _, f := range []string{"config.json", "model.safetensors"} {
			a, err := os.ReadFile(filepath.Join(v[0], f))
			if err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(filepath.Join(v[1], f))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(a, b) {
				t.Errorf("%s: the example writes another %s than internal/mlpdemo", filepath.Base(v[0]), f)
			}
		}
		for _, act := range []dtype.DType{dtype.F32, dtype.F16} {
			got, err := run(ctx, ex, v[0], s.Blocks, x, rows, act)
			if err != nil {
				t.Fatal(err)
			}
			want, err := mlpdemo.Run(ctx, ex, v[1], x, rows, act)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.Out, want.Out) || got.Weights != want.Weights || got.Bytes != want.Bytes ||
				!slices.Equal(got.Quantize, want.Quantize) {
				t.Errorf("%s, %s activations: the example computes another result than internal/mlpdemo", filepath.Base(v[0]), act)
			}
		}
	}
	if d, sc := maxDiff([]float32{1, -2}, []float32{0.5, 1}); d != 3 || sc != 1 {
		t.Errorf("maxDiff = %v, %v", d, sc)
	}
}
