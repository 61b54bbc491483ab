// Command load loads a diffusers pipeline with a per-component dtype
// policy under a memory budget: it prints the plan — per component the
// files, the quantization layout, the read strategy and the bytes, then
// the peak against the budget — and loads only when the plan fits.
//
// The policy: BF16 by default; a transformer keeps scaled low-precision
// weights (FP8 with their scales) quantized for the executor; a VAE or an
// image encoder stays F32 (convolutions); norms and biases stay F32
// everywhere.
//
//	go run ./examples/load                                   # a small sample pipeline it writes (sample.go), variant fp8
//	go run ./examples/load -variant bf16 -budget 24GiB ./my-pipeline
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"slices"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/shard"
)

func main() {
	variant := flag.String("variant", "", "precision variant to load (bf16, fp16, fp8, ...); the sample uses fp8")
	budget := flag.String("budget", "", "memory budget (24GiB, 16GB, bytes); default: what this process can get")
	flag.Parse()
	if flag.NArg() > 1 {
		log.Fatal("usage: load [-variant V] [-budget SIZE] [PIPELINE]")
	}

	root := flag.Arg(0)
	if root == "" {
		// A small sample pipeline (sample.go): a transformer in F32, BF16
		// and DeepSeek-style FP8 block-scaled variants, a text encoder, an
		// image encoder and a scheduler.
		dir, err := os.MkdirTemp("", "ckpt-load-")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(dir)
		if err := writeSample(dir); err != nil {
			log.Fatal(err)
		}
		root = dir
		if *variant == "" {
			*variant = "fp8"
		}
	}
	if err := run(root, *variant, *budget); err != nil {
		var be *ckpt.BudgetError
		if errors.As(err, &be) {
			fmt.Println("the plan does not fit: nothing was loaded")
			os.Exit(1)
		}
		log.Fatal(err)
	}
}

func run(root, variant, budget string) error {
	// The components' names: a policy may only name components the model
	// has (ckpt.Open refuses a target for a missing one).
	probe, err := ckpt.Open(root, ckpt.WithVariant(variant))
	if err != nil {
		return err
	}
	names := probe.Components()
	probe.Close()

	policy := ckpt.Policy{
		Default:    ckpt.To(dtype.BF16),
		Components: map[string]ckpt.Target{},
		Rules:      ckpt.KeepNormsAndBiasesF32(),
	}
	for _, name := range names {
		switch name {
		case "transformer", "unet":
			policy.Components[name] = ckpt.Quantized
		case "vae", "image_encoder":
			policy.Components[name] = ckpt.To(dtype.F32)
		}
	}
	opts := []ckpt.Option{ckpt.WithVariant(variant), ckpt.WithPolicy(policy)}
	if budget != "" {
		n, err := shard.ParseSize(budget)
		if err != nil {
			return fmt.Errorf("-budget: %w", err)
		}
		opts = append(opts, ckpt.WithBudget(n))
	}
	m, err := ckpt.Open(root, opts...)
	if err != nil {
		return err
	}
	defer m.Close()

	plan, err := m.Plan()
	if err != nil {
		return err
	}
	fmt.Printf("plan of %s (variant %q):\n%s", root, variant, plan)
	// Plan.Warnings holds the pipeline's warnings and each component's
	// again, prefixed with its name: print each once.
	seen := map[string]bool{}
	for _, c := range plan.Components {
		for _, w := range c.Warnings {
			seen[w], seen[c.Name+": "+w] = true, true
			fmt.Printf("warning: %s: %s\n", c.Name, w)
		}
	}
	for _, w := range plan.Warnings {
		if !seen[w] {
			fmt.Println("warning:", w)
		}
	}

	// Load checks the plan against the budget first and refuses, having
	// allocated nothing, with a *ckpt.BudgetError when it does not fit.
	w, err := m.Load(context.Background())
	if err != nil {
		return err
	}
	defer w.Close()
	fmt.Printf("\nloaded %d tensors:\n", w.Len())
	for _, name := range names {
		var n, views, quantized int
		var owned int64
		dts := map[string]int{}
		for _, t := range w.Component(name) {
			n++
			dts[t.DType.String()]++
			switch {
			case t.Action() == ckpt.ActionQuantized:
				quantized++
			case !t.Location.Owned:
				views++
			default:
				owned += int64(len(t.Bytes()))
			}
		}
		var kinds []string
		for d, c := range dts {
			kinds = append(kinds, fmt.Sprintf("%d %s", c, d))
		}
		slices.Sort(kinds)
		fmt.Printf("  %-14s %3d tensors (%v): %d zero-copy views, %d kept quantized, %d bytes owned\n",
			name, n, kinds, views, quantized, owned)
	}
	fmt.Printf("conversions: %s\n", w.Stats())
	return nil
}
