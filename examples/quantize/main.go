// Command quantize quantizes a checkpoint to FP8 with block scales, loads
// the result back with the loader (which dequantizes it through package
// quant), and prints the error report: the converter's, measured while
// writing, and the one measured here from what the loader returns.
//
// Without an argument it quantizes a small generated transformer-like
// model (F32, normally distributed weights with a few outliers).
//
//	go run ./examples/quantize                          # the generated model, 128×128 blocks
//	go run ./examples/quantize -block 64 -elem F8_E5M2 ./my-model
//	go run ./examples/quantize -format deepseek ./model.safetensors
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/convert"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/quant"
)

func main() {
	block := flag.Int64("block", 128, "block size N of the N×N scale blocks")
	elem := flag.String("elem", "F8_E4M3", "FP8 element type: F8_E4M3 or F8_E5M2")
	format := flag.String("format", "compressed-tensors", "scale format: compressed-tensors (weight_scale) or deepseek (weight_scale_inv)")
	flag.Parse()
	if flag.NArg() > 1 {
		log.Fatal("usage: quantize [-block N] [-elem F8_E4M3|F8_E5M2] [-format compressed-tensors|deepseek] [CHECKPOINT]")
	}
	work, err := os.MkdirTemp("", "ckpt-quantize-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(work)
	src := flag.Arg(0)
	if src == "" {
		src = filepath.Join(work, "model.safetensors")
		if err := generate(src); err != nil {
			log.Fatal(err)
		}
	}
	if err := run(src, filepath.Join(work, "fp8"), *elem, *format, *block); err != nil {
		log.Fatal(err)
	}
}

func run(src, dst, elemName, formatName string, block int64) error {
	elem, err := dtype.Parse(elemName)
	if err != nil {
		return err
	}
	format, err := convert.ParseScaleFormat(formatName)
	if err != nil {
		return err
	}
	// Quantize: the 2-D weights of linear layers become FP8 with one F32
	// scale per block; norms, biases, embeddings and lm_head stay as they
	// are. Verify reads the output back tensor by tensor.
	rep, err := convert.Run(context.Background(), src, dst, convert.Options{
		Policy:      ckpt.Policy{Default: ckpt.To(elem)},
		Scale:       convert.Scale{Granularity: quant.PerBlock, Block: block},
		ScaleFormat: format,
		Verify:      true,
	})
	if err != nil {
		return err
	}
	fmt.Println("== convert.Run's report")
	fmt.Print(rep.String())

	// Load both back as F32: the loader finds the quantization config
	// (config.json, or the files' metadata) and dequantizes each weight.
	orig, err := loadF32(src)
	if err != nil {
		return err
	}
	back, err := loadF32(dst)
	if err != nil {
		return err
	}
	fmt.Printf("\n== loaded back through ckpt.Open(%s) + Load(F32)\n", filepath.Base(dst))
	fmt.Printf("%-46s %-9s %9s %11s %11s %11s\n", "tensor", "action", "max |x|", "max abs err", "rms rel err", "max rel err")
	names := make([]string, 0, len(orig))
	for n := range orig {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		x, y := orig[n], back[n]
		var maxX, maxAbs, maxRel, sse, ss float64
		for i := range x {
			a, b := float64(x[i]), float64(y[i])
			d := math.Abs(a - b)
			maxX, maxAbs = max(maxX, math.Abs(a)), max(maxAbs, d)
			sse, ss = sse+d*d, ss+a*a
			if a != 0 {
				maxRel = max(maxRel, d/math.Abs(a))
			}
		}
		rms := 0.0
		if ss > 0 {
			rms = math.Sqrt(sse / ss)
		}
		action := "as stored"
		for _, t := range rep.Tensors {
			if t.Name == n {
				action = t.Action
			}
		}
		fmt.Printf("%-46s %-9s %9.4g %11.4g %10.3g%% %10.3g%%\n", n, action, maxX, maxAbs, 100*rms, 100*maxRel)
	}
	return nil
}

// loadF32 loads every float tensor of a checkpoint as float32.
func loadF32(path string) (map[string][]float32, error) {
	m, err := ckpt.Open(path, ckpt.WithDType(ckpt.To(dtype.F32)))
	if err != nil {
		return nil, err
	}
	defer m.Close()
	w, err := m.Load(context.Background())
	if err != nil {
		return nil, err
	}
	defer w.Close()
	out := map[string][]float32{}
	for name, t := range w.All() {
		if t.DType != dtype.F32 {
			continue // integer tensors stay as they are
		}
		v, err := t.Float32s()
		if err != nil {
			return nil, err
		}
		out[name] = v
	}
	return out, nil
}

// generate writes a small transformer-like F32 model.
func generate(path string) error {
	rng := rand.New(rand.NewPCG(1, 2))
	const hidden, inter, vocab = 256, 704, 512
	tensor := func(name string, scale float64, shape ...int64) ckpttest.Tensor {
		n := int64(1)
		for _, d := range shape {
			n *= d
		}
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * scale)
			if rng.IntN(1000) == 0 {
				v[i] *= 20 // outliers, which per-block scales confine to their block
			}
		}
		b := make([]byte, 4*n)
		dtype.EncodeFloat32(b, dtype.F32, v, dtype.Options{})
		return ckpttest.Tensor{Name: name, DType: dtype.F32, Shape: shape, Data: b}
	}
	ts := []ckpttest.Tensor{tensor("model.embed_tokens.weight", 1, vocab, hidden)}
	for l := range 2 {
		p := fmt.Sprintf("model.layers.%d.", l)
		ts = append(ts,
			tensor(p+"input_layernorm.weight", 0.1, hidden),
			tensor(p+"self_attn.q_proj.weight", 0.05, hidden, hidden),
			tensor(p+"self_attn.k_proj.weight", 0.05, hidden, hidden),
			tensor(p+"self_attn.v_proj.weight", 0.05, hidden, hidden),
			tensor(p+"self_attn.o_proj.weight", 0.05, hidden, hidden),
			tensor(p+"post_attention_layernorm.weight", 0.1, hidden),
			tensor(p+"mlp.gate_proj.weight", 0.03, inter, hidden),
			tensor(p+"mlp.up_proj.weight", 0.03, inter, hidden),
			tensor(p+"mlp.down_proj.weight", 0.03, hidden, inter))
	}
	ts = append(ts, tensor("model.norm.weight", 0.1, hidden), tensor("lm_head.weight", 0.05, vocab, hidden))
	return ckpttest.WriteFile(path, ts, map[string]string{"format": "pt"})
}
