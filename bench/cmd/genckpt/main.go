// Command genckpt writes a synthetic transformer-like F32 checkpoint of
// about the requested size, for the conversion benchmark (bench/convert.sh):
// layers of seven 2-D linear weights (q, k, v, o, gate, up, down; HxH
// each) with normally distributed values (a few outliers), and their norm
// vectors. It streams the file with safetensors.Create, so its memory is
// one tensor.
//
//	go run ./cmd/genckpt -size 2GiB -hidden 4096 /tmp/model.safetensors
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"math/rand/v2"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/shard"
)

func main() {
	size := flag.String("size", "2GiB", "approximate size of the checkpoint (at least this much)")
	hidden := flag.Int64("hidden", 4096, "hidden size H: linear weights are HxH")
	flag.Parse()
	if flag.NArg() != 1 {
		log.Fatal("usage: genckpt [-size 2GiB] [-hidden 4096] OUT.safetensors")
	}
	want, err := shard.ParseSize(*size)
	if err != nil {
		log.Fatal(err)
	}
	h := *hidden
	matrix := h * h * 4
	layers := (want + 7*matrix - 1) / (7 * matrix)
	var specs []safetensors.TensorSpec
	for l := int64(0); l < layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		for _, n := range []string{"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"} {
			specs = append(specs, safetensors.TensorSpec{Name: p + n + ".weight", DType: dtype.F32, Shape: []int64{h, h}})
		}
		specs = append(specs,
			safetensors.TensorSpec{Name: p + "input_layernorm.weight", DType: dtype.F32, Shape: []int64{h}},
			safetensors.TensorSpec{Name: p + "post_attention_layernorm.weight", DType: dtype.F32, Shape: []int64{h}})
	}
	fw, err := safetensors.Create(context.Background(), flag.Arg(0), specs, map[string]string{"format": "pt"})
	if err != nil {
		log.Fatal(err)
	}
	defer fw.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]float32, h*h)
	for {
		s, w, err := fw.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			log.Fatal(err)
		}
		n := int64(1)
		for _, d := range s.Shape {
			n *= d
		}
		v := buf[:n]
		scale := 1 / math.Sqrt(float64(h))
		for i := range v {
			x := rng.NormFloat64() * scale
			if rng.IntN(4096) == 0 {
				x *= 30
			}
			v[i] = float32(x)
		}
		if _, err := w.Write(dtype.Float32Bytes(v)); err != nil {
			log.Fatal(err)
		}
	}
	if err := fw.Commit(); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s: %d layers, %d tensors, %d bytes of data\n", flag.Arg(0), layers, len(specs), layers*(7*matrix+2*h*4))
}
