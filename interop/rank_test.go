package interop_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/safetensors"
)

// TestRankPartsAgreeWithArraySplit: random tensors of 1 to 4 dimensions
// split along each dimension over worlds of 1 to 5 ranks: every rank's
// part as ckpt.WithRank loads it (shape and bytes) is
// numpy.array_split(a, world, axis=dim)[rank] (the same parts as
// torch.tensor_split), with either read strategy.
func TestRankPartsAgreeWithArraySplit(t *testing.T) {
	python(t)
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(11, 0x4a4b))
	dts := []dtype.DType{dtype.U8, dtype.I16, dtype.F16, dtype.F32, dtype.I64}
	type tcase struct {
		File   string `json:"file"`
		Tensor string `json:"tensor"`
		Dim    int    `json:"dim"`
		World  int    `json:"world"`
	}
	var cases []tcase
	path := filepath.Join(dir, "model.safetensors")
	var tds []safetensors.TensorData
	for ti := range 10 {
		dt := dts[r.IntN(len(dts))]
		shape := make([]int64, 1+r.IntN(4))
		for i := range shape {
			shape[i] = int64(1 + r.IntN(9))
		}
		data := randData(r, dt, shape)
		name := fmt.Sprintf("t%d", ti)
		tds = append(tds, safetensors.TensorData{Name: name, DType: dt, Shape: shape, Data: data})
		for d := range shape {
			for world := 1; world <= 5; world++ {
				cases = append(cases, tcase{File: path, Tensor: name, Dim: d, World: world})
			}
		}
	}
	if err := safetensors.Save(context.Background(), path, tds, nil); err != nil {
		t.Fatal(err)
	}
	in, out := filepath.Join(dir, "cases.json"), filepath.Join(dir, "parts.json")
	b, _ := json.Marshal(cases)
	if err := os.WriteFile(in, b, 0o644); err != nil {
		t.Fatal(err)
	}
	runPy(t, "rank_oracle.py", in, out)
	var want [][]struct {
		Shape  []int64 `json:"shape"`
		SHA256 string  `json:"sha256"`
	}
	readJSON(t, out, &want)
	for ci, c := range cases {
		for rank := range c.World {
			for _, rs := range []string{"mmap", "pread"} {
				m, err := ckpt.Open(path, ckpt.WithReadStrategy(rs), ckpt.WithRank(rank, c.World,
					ckpt.Split{Pattern: ckpt.MustParsePattern(c.Tensor), Dim: c.Dim}))
				if err != nil {
					t.Fatal(err)
				}
				tt, err := m.LoadTensor(context.Background(), c.Tensor)
				if err != nil {
					t.Fatal(err)
				}
				sum := sha(tt.Bytes())
				w := want[ci][rank]
				if !slices.Equal(tt.Shape, w.Shape) || sum != w.SHA256 {
					t.Errorf("%s %v dim %d world %d rank %d (%s): shape %v, want %v; bytes agree: %v",
						c.Tensor, tds[c.Tensor[1]-'0'].Shape, c.Dim, c.World, rank, rs, tt.Shape, w.Shape, sum == w.SHA256)
				}
				m.Close()
			}
		}
	}
}
