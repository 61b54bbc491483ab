// Command fp8checkpoint saves F32 weights as an F8_E4M3 safetensors
// checkpoint and loads them back upcast to F32 — the save that an old
// safetensors build lost with `KeyError: torch.float8_e4m3fn`.
//
//	go run ./examples/fp8checkpoint
//
// It shows the two FP8 overflow modes and their statistics, the atomic save
// (the previous checkpoint survives any failure), and the round-trip error.
package main

import (
	"context"
	"fmt"
	"log"
	"math"
	"os"
	"path/filepath"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/safetensors"
)

func main() {
	dir, err := os.MkdirTemp("", "fp8checkpoint-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// Weights with a few outliers beyond F8_E4M3's largest finite value, 448.
	weights := make([]float32, 1024)
	for i := range weights {
		weights[i] = float32(math.Sin(float64(i))) * 300
	}
	weights[7], weights[8] = 1000, -464
	src := dtype.Float32Bytes(weights)
	fp8 := make([]byte, len(weights))

	for _, sat := range []bool{false, true} {
		st, err := dtype.Convert(fp8, dtype.F8_E4M3, src, dtype.F32, dtype.Options{Saturate: sat})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("F32 -> F8_E4M3 saturate=%-5v %s\n", sat, st)
	}

	// fp8 now holds the saturated conversion. Save it atomically.
	path := filepath.Join(dir, "model.safetensors")
	tensors := []safetensors.TensorData{{Name: "layer.weight", DType: dtype.F8_E4M3, Shape: []int64{32, 32}, Data: fp8}}
	if err := safetensors.Save(context.Background(), path, tensors, map[string]string{"format": "pt"}); err != nil {
		log.Fatal(err)
	}

	f, err := safetensors.Open(path)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	t, err := f.Tensor("layer.weight")
	if err != nil {
		log.Fatal(err)
	}
	back, err := t.Float32s() // exact FP8 -> F32 upcast
	if err != nil {
		log.Fatal(err)
	}
	var maxRel float64
	for i, w := range weights {
		if a := math.Abs(float64(w)); a > 448 || a < 0x1p-6 {
			continue // saturated outliers, and subnormals (absolute error ≤ 2^-10)
		}
		maxRel = math.Max(maxRel, math.Abs(float64(back[i]-w))/math.Abs(float64(w)))
	}
	fmt.Printf("saved %s as %s %v; reloaded as F32: max relative error of normal values %.2f%% (≤ 2^-4: E4M3 keeps 3 mantissa bits)\n",
		t.Name(), t.DType(), t.Shape(), 100*maxRel)
	fmt.Printf("outliers: 1000 -> %g, -464 -> %g (464 is a tie that rounds to 448)\n", back[7], back[8])
}
