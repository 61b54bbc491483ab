package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/dtype"
)

// The demo's loads: the sample's fp8 variant with two workers under a
// budget of 170 KiB, which the load fits with the transformer kept FP8
// (about 20 KiB resident plus the workers' 128 KiB) and not with it
// dequantized to BF16 (about 26 KiB plus 160 KiB: dequantizing workers
// need scratch).
const (
	demoWorkers  = 2 // the staging the plan counts depends on the workers
	demoBudget   = "170KiB"
	demoBudgetN  = 170 << 10 // demoBudget in bytes
	demoLayout   = "deepseek-fp8-block"
	demoVariant  = "fp8"
	demoFP8Shape = "16×16"
	fp8Block     = 16 // the sample's weight_block_size
)

// demoOpen opens the sample pipeline's fp8 variant, BF16 by default with
// the image encoder forced to F32, under the demo's budget, plus opts.
func demoOpen(root string, opts ...ckpt.Option) (*ckpt.Model, error) {
	base := []ckpt.Option{
		ckpt.WithVariant(demoVariant),
		ckpt.WithDType(ckpt.To(dtype.BF16)),
		ckpt.WithComponentDType("image_encoder", ckpt.To(dtype.F32)),
		ckpt.WithBudget(demoBudgetN),
		ckpt.WithWorkers(demoWorkers),
	}
	return ckpt.Open(root, append(base, opts...)...)
}

func demoPlan(d *demo, root, _ string) error {
	d.section(fmt.Sprintf("plan the %s pipeline under a %s budget: BF16 does not fit", demoVariant, demoBudget))
	d.printf("policy: variant %s, default BF16, image_encoder F32 (convolutions), %d workers; budget %s\n", demoVariant, demoWorkers, demoBudget)
	d.printf("for the weights and the workers' scratch. Only headers are read.\n\n")
	m, err := demoOpen(root)
	if err != nil {
		return err
	}
	defer m.Close()
	p, err := m.Plan()
	if err != nil {
		return err
	}
	printLoadPlan(d.e.stdout, p, false)
	if p.Fits {
		return fmt.Errorf("the BF16 plan fits %s: the demo's budget no longer tells BF16 from FP8", demoBudget)
	}
	_, err = m.Load(context.Background())
	var be *ckpt.BudgetError
	if !errors.As(err, &be) {
		return fmt.Errorf("Load under a plan that does not fit: %v, want a *ckpt.BudgetError", err)
	}
	d.printf("\nLoad refuses before allocating anything: a *ckpt.BudgetError (errors.Is(err, ckpt.ErrBudget) = %v), %d bytes short\n",
		errors.Is(err, ckpt.ErrBudget), be.Plan.Shortfall)

	d.section("as the plan advises, keep the transformer as stored (FP8 with its scales): it fits")
	m2, err := demoOpen(root, ckpt.WithComponentDType("transformer", ckpt.AsStored))
	if err != nil {
		return err
	}
	defer m2.Close()
	p2, err := m2.Plan()
	if err != nil {
		return err
	}
	d.printf("%s", p2)
	if !p2.Fits {
		return fmt.Errorf("the FP8 plan does not fit %s", demoBudget)
	}
	return nil
}

func demoLoad(d *demo, root, _ string) error {
	d.section("load it: the image encoder stays F32 while the default is BF16")
	m, err := demoOpen(root, ckpt.WithComponentDType("transformer", ckpt.AsStored))
	if err != nil {
		return err
	}
	defer m.Close()
	w, err := m.Load(context.Background())
	if err != nil {
		return err
	}
	defer w.Close()
	for _, comp := range m.Components() {
		type key struct{ dt, action, rule string }
		var order []key
		count := map[key]int{}
		for _, t := range w.Component(comp) {
			k := key{t.DType.String(), t.Action().String(), t.Decision.Rule}
			if count[k] == 0 {
				order = append(order, k)
			}
			count[k]++
			if comp == "image_encoder" && (t.DType != dtype.F32 || t.Action() == ckpt.ActionConvert) {
				return fmt.Errorf("image_encoder/%s loaded as %s by %s, want its stored F32", t.Name, t.DType, t.Action())
			}
		}
		for _, k := range order {
			d.printf("  %-13s %2d tensors %-8s %-10s (%s)\n", comp, count[k], k.dt, k.action, k.rule)
		}
	}
	qkv, err := w.Tensor("transformer/blocks.0.attn.qkv.weight")
	if err != nil {
		return err
	}
	where := "a zero-copy view of"
	if qkv.Location.Owned {
		where = "read from"
	}
	d.printf("  transformer/%s: %s %s by %s, %s %s at offset %d\n", qkv.Name, qkv.DType, formatShape(qkv.Shape), qkv.Action(),
		where, filepath.Base(qkv.Location.File), qkv.Location.Offset)
	for _, s := range qkv.Scales {
		d.printf("    scale %s %s %s (%s): the executor applies it\n", s.Name, s.DType, formatShape(s.Shape), s.Role)
	}
	d.printf("  %d tensors; values: %s\n", w.Len(), w.Stats())
	return nil
}

func demoDequantize(d *demo, root, _ string) error {
	d.section(fmt.Sprintf("dequantize the %s layout (%s blocks) to F32 and compare with the F32 weights", demoLayout, demoFP8Shape))
	m, err := ckpt.Open(root, ckpt.WithVariant(demoVariant), ckpt.WithComponentDType("transformer", ckpt.To(dtype.F32)))
	if err != nil {
		return err
	}
	defer m.Close()
	p, err := m.Plan()
	if err != nil {
		return err
	}
	for _, c := range p.Components {
		if c.Name != "transformer" {
			continue
		}
		if c.Quant.Layout != demoLayout {
			return fmt.Errorf("transformer: quantization layout %q detected in %s, want %s: package quant did not recognize the FP8 variant's weight_scale_inv tensors and quantization_config",
				c.Quant.Layout, strings.Join(c.Files, ", "), demoLayout)
		}
		d.printf("  transformer: quantization %s (from %s), %d weights\n", c.Quant.Layout, c.Quant.Source, c.Quant.Weights)
	}
	ref, err := ckpt.Open(filepath.Join(root, "transformer")) // the untagged F32 shards
	if err != nil {
		return err
	}
	defer ref.Close()
	ctx := context.Background()
	for _, name := range []string{"blocks.0.attn.qkv.weight", "blocks.1.mlp.fc2.weight"} {
		t, err := m.LoadTensor(ctx, "transformer/"+name)
		if err != nil {
			return err
		}
		if t.Action() != ckpt.ActionDequantize || t.Layout != demoLayout {
			return fmt.Errorf("transformer/%s: loaded by %q with layout %q, want %q of the %s layout: package quant did not detect the FP8 variant's scales",
				name, t.Action(), t.Layout, "dequantize", demoLayout)
		}
		got, err := t.Float32s()
		if err != nil {
			return err
		}
		r, err := ref.LoadTensor(ctx, name)
		if err != nil {
			return err
		}
		want, err := r.Float32s()
		if err != nil {
			return err
		}
		// The largest error, in the worst block and in all the others.
		cols := int(t.Shape[1])
		blockErr := map[int]float64{}
		var maxRef float64
		for i, v := range got {
			b := (i/cols/fp8Block)*1000 + (i%cols)/fp8Block
			blockErr[b] = math.Max(blockErr[b], math.Abs(float64(v)-float64(want[i])))
			maxRef = math.Max(maxRef, math.Abs(float64(want[i])))
		}
		worst, others := -1, 0.0
		for b, e := range blockErr {
			if worst < 0 || e > blockErr[worst] || e == blockErr[worst] && b < worst {
				worst = b
			}
		}
		for b, e := range blockErr {
			if b != worst {
				others = math.Max(others, e)
			}
		}
		d.printf("  %-24s %s %s -> %s by %s: max |error| %.3g of max |w| %.4g; other %d blocks ≤ %.3g\n",
			name, t.Stored, formatShape(t.Shape), t.DType, t.Action(), blockErr[worst], maxRef, len(blockErr)-1, others)
	}
	d.printf("  (each 16×16 block has its own scale: fc2's outliers up to 1000 cost precision in their block only)\n")
	return nil
}
