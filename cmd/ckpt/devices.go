package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/executor"
	"github.com/ckpt-go/ckpt/executor/mlp"
	"github.com/ckpt-go/ckpt/internal/sysmem"
)

func devicesCommand() *command {
	c := &command{
		name:    "devices",
		summary: "list the executors (CPU, CUDA) this program can run, and why not",
		help: `Starts each executor built into ckpt, prints its device (name, memory,
compute capability) and closes it. An executor that cannot run here says
why: CUDA without a driver (libcuda.so.1 not found), without a device, or
not built into this binary. The first available one is what run-mlp uses
by default.

Examples:
  ckpt devices
  ckpt devices --json | jq '.[] | select(.available)'`,
	}
	c.run = func(e *env, args []string) error {
		fs := newFlags(e, c)
		asJSON := fs.Bool("json", false, "print JSON instead of a table")
		pos, err := parseFlags(e, c, fs, args)
		if err != nil {
			return err
		}
		if len(pos) != 0 {
			return usageError{msg: "devices takes no arguments"}
		}
		return printDevices(e, executor.Probe(), *asJSON)
	}
	return c
}

type deviceRow struct {
	Executor          string `json:"executor"`
	Available         bool   `json:"available"`
	Device            string `json:"device,omitempty"`
	TotalBytes        int64  `json:"total_bytes,omitempty"`
	FreeBytes         int64  `json:"free_bytes,omitempty"`
	ComputeCapability string `json:"compute_capability,omitempty"`
	Driver            string `json:"driver,omitempty"`
	Reason            string `json:"reason,omitempty"`
}

func printDevices(e *env, sts []executor.Status, asJSON bool) error {
	rows := make([]deviceRow, 0, len(sts))
	for _, s := range sts {
		r := deviceRow{Executor: s.Name, Available: s.Available()}
		if s.Available() {
			r.Device, r.TotalBytes, r.FreeBytes = s.Info.Name, s.Info.TotalBytes, s.Info.FreeBytes
			r.ComputeCapability, r.Driver = s.Info.ComputeCapability, s.Info.Driver
		} else {
			r.Reason = reason(s.Err)
		}
		rows = append(rows, r)
	}
	if asJSON {
		return e.printJSON(rows)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "EXECUTOR\tSTATUS\tDEVICE\tMEMORY (FREE/TOTAL)\tCC\tDRIVER")
	for _, r := range rows {
		if !r.Available {
			fmt.Fprintf(tw, "%s\tunavailable\t%s\t\t\t\n", r.Executor, r.Reason)
			continue
		}
		mem := "unknown"
		if r.TotalBytes > 0 {
			mem = sysmem.FormatSize(r.FreeBytes) + " / " + sysmem.FormatSize(r.TotalBytes)
		}
		fmt.Fprintf(tw, "%s\tavailable\t%s\t%s\t%s\t%s\n", r.Executor, r.Device, mem, dash(r.ComputeCapability), dash(r.Driver))
	}
	return tw.Flush()
}

// reason says why an executor is unavailable, without the error's
// "executor: unavailable: NAME" prefix that the table's columns give.
func reason(err error) string {
	var xe *executor.Error
	if !errors.As(err, &xe) || xe.Msg == "" {
		return err.Error()
	}
	if xe.Err != nil {
		return xe.Msg + ": " + xe.Err.Error()
	}
	return xe.Msg
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func runMLPCommand() *command {
	c := &command{
		name:    "run-mlp",
		args:    "[BF16DIR FP8DIR]",
		summary: "run a small MLP on the best executor, FP8 weights against BF16",
		help: `Loads two variants of a model with the loader — BF16 weights and FP8
weights kept narrow with their scales — uploads each to an executor, runs
the same MLP on both (for each block N: h += fc2(GELU(fc1(RMSNorm(h))));
then proj_out(RMSNorm(h)·norm_out)) and prints which executor ran and the
largest difference between the FP8 and BF16 outputs.

Without arguments it runs on the MLP blocks of the bundled sample's
transformer (its bf16 and fp8 variants; the FP8 one is DeepSeek's
block-scaled layout); with two folders, on those (for example the ones
"go run ./examples/mlp -dir D" writes: D/bf16 and D/fp8).

--executor picks one (cpu, cuda); auto, the default, takes the first that
runs here and says why the others did not. --check-finite stops at the
first op whose output holds NaN or Inf and names it and its layer.

Examples:
  ckpt run-mlp
  ckpt run-mlp --act f16 --check-finite
  ckpt run-mlp --executor cpu /tmp/mlp/bf16 /tmp/mlp/fp8`,
	}
	c.run = func(e *env, args []string) error {
		fs := newFlags(e, c)
		name := fs.String("executor", "auto", "executor: auto, cpu or cuda")
		act := fs.String("act", "f32", "activation dtype: f32, bf16 or f16")
		rows := fs.Int("rows", 8, "rows of the input batch")
		check := fs.Bool("check-finite", false, "report the first op whose output holds NaN or Inf")
		pos, err := parseFlags(e, c, fs, args)
		if err != nil {
			return err
		}
		if len(pos) != 0 && len(pos) != 2 {
			return usageError{msg: "run-mlp takes no arguments or two folders (BF16 and FP8)"}
		}
		actDT, err := dtype.Parse(*act)
		if err != nil || !executor.IsActivation(actDT) {
			return usageError{msg: fmt.Sprintf("--act %q: want f32, bf16 or f16", *act)}
		}
		if *rows < 1 || *rows > 1<<16 {
			return usageError{msg: fmt.Sprintf("--rows %d: want 1 to 65536", *rows)}
		}
		var opts []executor.Option
		if *check {
			opts = append(opts, executor.WithCheckFinite())
		}
		ex, err := startExecutor(e, *name, opts)
		if err != nil {
			return err
		}
		defer ex.Close()
		type variant struct {
			label, dir string
			opts       []ckpt.Option
		}
		var vs []variant
		if len(pos) == 2 {
			vs = []variant{{"BF16", pos[0], nil}, {"FP8", pos[1], nil}}
		} else {
			tmp, err := os.MkdirTemp("", "ckpt-run-mlp-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(tmp)
			root, err := extractSample(tmp)
			if err != nil {
				return fmt.Errorf("extract sample: %w", err)
			}
			dir := root + "/transformer"
			fmt.Fprintf(e.stdout, "model: the MLP blocks of the bundled sample's transformer (attention weights unused)\n")
			vs = []variant{{"BF16", dir, []ckpt.Option{ckpt.WithVariant("bf16")}}, {"FP8", dir, []ckpt.Option{ckpt.WithVariant("fp8")}}}
		}
		return runMLP(e, ex, vs[0].label, vs[0].dir, vs[0].opts, vs[1].label, vs[1].dir, vs[1].opts, actDT, *rows)
	}
	return c
}

// startExecutor starts the named executor, or the best one for "auto",
// printing which ran and why the others did not.
func startExecutor(e *env, name string, opts []executor.Option) (executor.Executor, error) {
	var ex executor.Executor
	if name == "auto" {
		var skipped []executor.Status
		var err error
		ex, skipped, err = executor.NewBest(opts...)
		for _, s := range skipped {
			fmt.Fprintf(e.stdout, "not using %s: %s\n", s.Name, reason(s.Err))
		}
		if err != nil {
			return nil, err
		}
	} else {
		b, ok := executor.Lookup(name)
		if !ok {
			return nil, usageError{msg: fmt.Sprintf("--executor %q is not built into this program (see ckpt devices)", name)}
		}
		var err error
		if ex, err = b.New(opts...); err != nil {
			return nil, err
		}
	}
	info := ex.Info()
	fmt.Fprintf(e.stdout, "executor: %s (%s)\n", info.Kind, info.Name)
	return ex, nil
}

func runMLP(e *env, ex executor.Executor, label1, dir1 string, opts1 []ckpt.Option, label2, dir2 string, opts2 []ckpt.Option, act dtype.DType, rows int) error {
	ctx := context.Background()
	var outs [2][]float32
	var hidden int
	for i, v := range []struct {
		label, dir string
		opts       []ckpt.Option
	}{{label1, dir1, opts1}, {label2, dir2, opts2}} {
		if hidden == 0 {
			d, err := hiddenSize(v.dir, v.opts)
			if err != nil {
				return err
			}
			hidden = d
		}
		start := time.Now()
		res, err := mlp.Run(ctx, ex, v.dir, mlp.Input(rows, hidden, 1), int64(rows), act, v.opts...)
		if err != nil {
			return fmt.Errorf("%s: %w", v.label, err)
		}
		outs[i] = res.Out
		layout := "plain"
		if len(res.Quantize) > 0 {
			layout = fmt.Sprint(res.Quantize)
		}
		fmt.Fprintf(e.stdout, "%-4s %d tensors, %s on the executor (%s); %d rows, %s activations, %v\n",
			v.label, res.Weights, sysmem.FormatSize(res.Bytes), layout, rows, act, time.Since(start).Round(time.Microsecond))
	}
	diff, scale := mlp.MaxDiff(outs[1], outs[0])
	rel := 0.0
	if scale > 0 {
		rel = 100 * diff / scale
	}
	fmt.Fprintf(e.stdout, "max |%s − %s| = %.4g (outputs up to %.4g: %.2f%%)\n", label2, label1, diff, scale, rel)
	return nil
}

// hiddenSize reads D from norm_out.weight's shape in the model's plan.
func hiddenSize(dir string, opts []ckpt.Option) (int, error) {
	m, err := ckpt.Open(dir, opts...)
	if err != nil {
		return 0, err
	}
	defer m.Close()
	p, err := m.Plan()
	if err != nil {
		return 0, err
	}
	for _, c := range p.Components {
		for _, t := range c.Tensors {
			if t.Name == "norm_out.weight" && len(t.Shape) == 1 && t.Shape[0] > 0 && t.Shape[0] <= 1<<20 {
				return int(t.Shape[0]), nil
			}
		}
	}
	return 0, fmt.Errorf("%s: no norm_out.weight [D]: not an MLP run-mlp knows", dir)
}

// demoExecutor is the demo's last step: the sample transformer's MLP
// blocks on the best executor, FP8 weights kept narrow against BF16.
func demoExecutor(d *demo, root, _ string) error {
	d.section("run the transformer's MLP blocks on an executor: FP8 weights kept narrow vs BF16 (ckpt run-mlp)")
	ex, err := startExecutor(d.e, "auto", nil)
	if err != nil {
		return err
	}
	defer ex.Close()
	dir := root + "/transformer"
	return runMLP(d.e, ex, "BF16", dir, []ckpt.Option{ckpt.WithVariant("bf16")}, "FP8", dir, []ckpt.Option{ckpt.WithVariant("fp8")}, dtype.F32, 8)
}
