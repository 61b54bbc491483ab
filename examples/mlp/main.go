// Command mlp builds a small MLP checkpoint with ckpt — BF16 weights and an
// FP8 variant in DeepSeek's block-scaled layout (F8_E4M3 weights, F32
// weight_scale_inv per 128×128 block, declared in config.json) — loads each
// variant with the loader, keeping the FP8 weights narrow, runs it on the
// best executor this program has (CUDA when executor/cuda is built in and a
// GPU is there, otherwise the pure-Go CPU reference) and prints which
// executor ran and the largest difference between the FP8 and BF16 outputs.
//
//	go run ./examples/mlp
//	go run ./examples/mlp -act f16 -check-finite -rows 64
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/executor"
	_ "github.com/ckpt-go/ckpt/executor/cpu"  // the "cpu" backend
	_ "github.com/ckpt-go/ckpt/executor/cuda" // the "cuda" backend: used when a driver and a device are found
	"github.com/ckpt-go/ckpt/executor/mlp"
)

func main() {
	act := flag.String("act", "bf16", "activation dtype: f32, bf16 or f16")
	rows := flag.Int("rows", 16, "rows of the input batch")
	check := flag.Bool("check-finite", false, "report the first op whose output holds NaN or Inf")
	keep := flag.String("dir", "", "write the checkpoint here and keep it (default: a temporary folder)")
	flag.Parse()
	actDT, err := dtype.Parse(*act)
	if err != nil || !executor.IsActivation(actDT) {
		log.Fatalf("-act %q: want f32, bf16 or f16", *act)
	}
	ctx := context.Background()

	dir := *keep
	if dir == "" {
		if dir, err = os.MkdirTemp("", "mlp-"); err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(dir)
	}
	s := mlp.Shape{Blocks: 4, Hidden: 512, FFN: 2048, Out: 64, FP8Block: 128}
	bf16Dir, fp8Dir, err := mlp.Build(ctx, dir, s, 1)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("checkpoint: %d blocks of %d→%d→%d, proj_out %d; %s (BF16) and %s (F8_E4M3, 128×128 block scales)\n",
		s.Blocks, s.Hidden, s.FFN, s.Hidden, s.Out, bf16Dir, fp8Dir)

	var opts []executor.Option
	if *check {
		opts = append(opts, executor.WithCheckFinite())
	}
	ex, skipped, err := executor.NewBest(opts...)
	if err != nil {
		log.Fatal(err)
	}
	defer ex.Close()
	for _, st := range skipped {
		fmt.Printf("not using %s: %v\n", st.Name, st.Err)
	}
	info := ex.Info()
	fmt.Printf("executor: %s (%s, %.1f GiB free)\n", info.Kind, info.Name, float64(info.FreeBytes)/(1<<30))

	x := mlp.Input(*rows, s.Hidden, 2)
	var outs [2][]float32
	for i, v := range []struct{ name, dir string }{{"BF16", bf16Dir}, {"FP8", fp8Dir}} {
		start := time.Now()
		res, err := mlp.Run(ctx, ex, v.dir, x, int64(*rows), actDT)
		if err != nil {
			log.Fatalf("%s: %v", v.name, err)
		}
		outs[i] = res.Out
		layout := "plain"
		if len(res.Quantize) > 0 {
			layout = fmt.Sprint(res.Quantize)
		}
		fmt.Printf("%-4s weights: %d tensors, %d bytes on the executor (%s), forward of %d rows with %s activations in %v\n",
			v.name, res.Weights, res.Bytes, layout, *rows, actDT, time.Since(start).Round(time.Millisecond))
	}
	diff, scale := mlp.MaxDiff(outs[1], outs[0])
	fmt.Printf("max |FP8 − BF16| = %.4g (outputs up to %.4g: %.2f%%)\n", diff, scale, 100*diff/scale)
}
