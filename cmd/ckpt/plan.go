package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/internal/sysmem"
)

func planCommand() *command {
	c := &command{
		remote:  true,
		name:    "plan",
		args:    "PATH",
		summary: "show what loading would do: dtypes and their rules, layouts, bytes, and whether it fits",
		help: `Plans a load of PATH without reading any tensor data: a .safetensors file,
a *.safetensors.index.json, a component folder or a pipeline root (with
model_index.json; every component with weights), or a PyTorch checkpoint
(.bin, .pt, .pth, .ckpt, a *.bin.index.json set, or components holding
only PyTorch weights), read without executing anything of its pickle
(nothing but its zip directory and state dict is read to plan it). For
each component it prints the files (resolved for --variant), the
quantization layout detected, the read strategy and why, the bytes that
stay mapped (zero-copy views of the files) and owned (converted,
dequantized or pread copies), the size under other uniform targets, and
each dtype decision with the rule that made it (--tensors lists every
tensor, with how it is verified).
Then the totals: resident bytes plus the load's staging buffers is the
peak, compared with the budget, and what a load verifies against the
checksums the files name (--verify).

The budget is --budget, or else the memory this process can get (the
smaller of MemAvailable and the cgroup's limit minus its usage); "none"
disables the check. Sizes are bytes, or a number with KiB, MiB, GiB, TiB
(binary) or KB, MB, GB, TB (decimal): 24GiB, 1.5GB.

With --rank R --world N and --split rules the plan is rank R's: the
shapes, bytes and peak of its parts, the bytes it reads of each component
and in total (per split rule, and with --tensors per tensor with its part
and the byte ranges of the files it reads: OFFSET+LENGTH, or
OFFSET+LENGTH×COUNT/STRIDE for COUNT ranges STRIDE bytes apart).

` + policyHelp + `

Exit status: 0 when the load fits, 1 when it does not (the plan, and with
--json the JSON, is still printed, with what would fit) or when PATH cannot
be planned, 2 for usage errors (a bad flag, size, rule or dtype; a
--component or rule naming no component of the model).

Examples:
  ckpt plan ./flux-dev --variant bf16 --budget 24GiB
  ckpt plan ./flux-dev --dtype bf16 --component vae=F32 --keep '**.bias=F32'
  ckpt plan ./model.safetensors --dtype F8_E4M3 --preset keep-norms-f32 --tensors
  ckpt plan ./pipeline --budget 16GB --json | jq '.components[] | {name, resident_bytes}'
  ckpt plan ./llama --rank 1 --world 4 --split '**.q_proj.weight=0' --split '**.o_proj.weight=1' --tensors`,
	}
	c.run = func(e *env, args []string) error {
		fs := newFlags(e, c)
		var pf policyFlags
		pf.register(fs)
		budget := sizeFlag{none: "none"}
		fs.Var(&budget, "budget", "memory budget `SIZE` (24GiB, 16GB, bytes) or \"none\"; default: what this process can get")
		tensors := fs.Bool("tensors", false, "list every tensor's decision instead of grouping equal decisions")
		asJSON := fs.Bool("json", false, "print the plan as JSON (every tensor, exact bytes)")
		pos, err := parseFlags(e, c, fs, args)
		if err != nil {
			return err
		}
		if len(pos) != 1 {
			return usageError{msg: "plan takes exactly one PATH"}
		}
		opts, err := pf.options()
		if err != nil {
			return err
		}
		if budget.set {
			opts = append(opts, ckpt.WithBudget(budget.n))
		}
		m, err := openModel(pos[0], opts)
		if err != nil {
			return err
		}
		defer m.Close()
		p, err := m.Plan()
		if err != nil {
			return err
		}
		if budget.set && budget.n > 0 {
			p.BudgetSource = "--budget"
		}
		if *asJSON {
			b, err := json.MarshalIndent(p, "", "  ")
			if err != nil {
				return err
			}
			if _, err := e.stdout.Write(append(b, '\n')); err != nil {
				return err
			}
		} else {
			printLoadPlan(e.stdout, p, *tensors)
		}
		if !p.Fits {
			return exitError{code: 1}
		}
		return nil
	}
	return c
}

// printLoadPlan writes a plan for people: each component, then the totals
// and whether the load fits.
func printLoadPlan(w io.Writer, p *ckpt.Plan, allTensors bool) {
	v := p.Variant
	if v == "" {
		v = "(untagged)"
	}
	fmt.Fprintf(w, "%s — variant %s, %d workers\n", p.Path, v, p.Workers)
	// The pipeline's warnings repeat the components' (and Plan.Warnings
	// repeats those prefixed with the component): print those under their
	// component only.
	own := map[string]bool{}
	for _, c := range p.Components {
		for _, warn := range c.Warnings {
			own[warn], own[c.Name+": "+warn] = true, true
		}
	}
	for _, warn := range p.Warnings {
		if !own[warn] {
			fmt.Fprintf(w, "  warning: %s\n", warn)
		}
	}
	for _, c := range p.Components {
		fmt.Fprintf(w, "\n%s:", c.Name)
		var about []string
		if c.Layout != "" {
			about = append(about, c.Layout)
		}
		if c.Variant != "" {
			about = append(about, "variant "+c.Variant)
		}
		if c.Target != "" {
			about = append(about, "target "+c.Target)
		}
		if len(about) > 0 {
			fmt.Fprintf(w, " %s", strings.Join(about, ", "))
		}
		fmt.Fprintln(w)
		for _, f := range c.Files {
			fmt.Fprintf(w, "  load     %s\n", relTo(c.Dir, f))
		}
		for _, ig := range c.Ignored {
			fmt.Fprintf(w, "  ignore   %s — %s\n", ig.File, ig.Reason)
		}
		q := c.Quant
		if q.Layout == "" || q.Layout == "none" {
			fmt.Fprintf(w, "  quant    none detected\n")
		} else {
			fmt.Fprintf(w, "  quant    %s (from %s), %d weights\n", q.Layout, q.Source, q.Weights)
		}
		if len(q.Unconsumed) > 0 {
			fmt.Fprintf(w, "  quant    %d scale-like tensors no layout consumed (loaded as ordinary tensors): %s\n",
				len(q.Unconsumed), strings.Join(firstOf(q.Unconsumed, 5), ", "))
		}
		fmt.Fprintf(w, "  read     %s (%s)\n", c.ReadStrategy, c.ReadStrategyReason)
		fmt.Fprintf(w, "  bytes    %s resident = %s mapped + %s owned (%s stored)\n",
			sysmem.FormatSize(c.ResidentBytes), sysmem.FormatSize(c.MappedBytes), sysmem.FormatSize(c.OwnedBytes), sysmem.FormatSize(c.StoredBytes))
		if p.Rank != nil {
			fmt.Fprintf(w, "  rank     %d of %d reads %s of %s stored (%s)\n", p.Rank.Rank, p.Rank.World,
				sysmem.FormatSize(c.ReadBytes), sysmem.FormatSize(c.StoredBytes), percent(c.ReadBytes, c.StoredBytes))
			printSplits(w, c)
		}
		if len(c.Alternatives) > 0 {
			alts := make([]string, len(c.Alternatives))
			for i, a := range c.Alternatives {
				alts[i] = fmt.Sprintf("%s %s", a.Target, sysmem.FormatSize(a.ResidentBytes))
			}
			fmt.Fprintf(w, "  as       %s\n", strings.Join(alts, ", "))
		}
		printDecisions(w, c, allTensors, p.Rank != nil)
		for _, warn := range c.Warnings {
			fmt.Fprintf(w, "  warning  %s\n", warn)
		}
	}
	fmt.Fprintf(w, "\ntotal: %s resident (%s mapped + %s owned) + %s staging = %s peak (%d bytes)\n",
		sysmem.FormatSize(p.TotalResidentBytes), sysmem.FormatSize(p.TotalMappedBytes), sysmem.FormatSize(p.TotalOwnedBytes),
		sysmem.FormatSize(p.StagingBytes), sysmem.FormatSize(p.PeakBytes), p.PeakBytes)
	fmt.Fprintln(w, p.Verify.String())
	if p.Rank != nil {
		fmt.Fprintf(w, "read: rank %d of %d reads %s of %s stored (%d of %d bytes, %s)\n", p.Rank.Rank, p.Rank.World,
			sysmem.FormatSize(p.TotalReadBytes), sysmem.FormatSize(p.TotalStoredBytes), p.TotalReadBytes, p.TotalStoredBytes, percent(p.TotalReadBytes, p.TotalStoredBytes))
	}
	if p.BudgetBytes >= 0 {
		fmt.Fprintf(w, "budget: %s (%d bytes, %s): ", sysmem.FormatSize(p.BudgetBytes), p.BudgetBytes, p.BudgetSource)
	} else {
		fmt.Fprintf(w, "budget: %s: ", p.BudgetSource) // "no budget (disabled)", "unknown (...)"
	}
	if p.Fits {
		fmt.Fprintln(w, "fits")
	} else {
		fmt.Fprintf(w, "does NOT fit, %s short\n  %s\n", sysmem.FormatSize(p.Shortfall), p.Advice)
	}
}

// printDecisions writes a component's dtype decisions: one line per
// distinct (stored, dtype, action, rule) with the count and bytes, or with
// all every tensor.
func printDecisions(w io.Writer, c *ckpt.ComponentPlan, all, ranked bool) {
	if len(c.Tensors) == 0 {
		fmt.Fprintln(w, "  tensors  none")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if all && ranked {
		fmt.Fprintln(tw, "  TENSOR\tSTORED\tSHAPE\tAS\tACTION\tBYTES\tREAD\tPART\tRANGES\tRULE\tVERIFY")
		for _, t := range c.Tensors {
			part := "replicated"
			if t.Split != nil {
				part = formatPart(t.Split)
			}
			ranges := make([]string, len(t.Ranges))
			for i, r := range t.Ranges {
				ranges[i] = relTo(c.Dir, r.File) + "@" + r.ByteRange.String()
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", t.Name, t.Stored, formatShape(t.Shape), t.DType, t.Action, t.Bytes,
				t.ReadBytes, part, strings.Join(ranges, " "), t.Rule, t.Verify)
		}
		tw.Flush()
		return
	}
	if all {
		fmt.Fprintln(tw, "  TENSOR\tSTORED\tSHAPE\tAS\tACTION\tBYTES\tRULE\tVERIFY")
		for _, t := range c.Tensors {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", t.Name, t.Stored, formatShape(t.Shape), t.DType, t.Action, t.Bytes, t.Rule, t.Verify)
		}
		tw.Flush()
		return
	}
	type key struct{ stored, dtype, action, rule string }
	type group struct {
		n     int
		bytes int64
		first string
	}
	var order []key
	groups := map[key]*group{}
	for _, t := range c.Tensors {
		k := key{t.Stored, t.DType, t.Action, t.Rule}
		g := groups[k]
		if g == nil {
			g = &group{first: t.Name}
			groups[k] = g
			order = append(order, k)
		}
		g.n++
		g.bytes += t.Bytes
	}
	fmt.Fprintln(tw, "  STORED\tAS\tACTION\tTENSORS\tBYTES\tRULE\tE.G.")
	for _, k := range order {
		g := groups[k]
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%s\t%s\t%s\n", k.stored, k.dtype, k.action, g.n, sysmem.FormatSize(g.bytes), k.rule, g.first)
	}
	tw.Flush()
}

// printSplits writes one line per split rule of a component: the tensors
// it matched and the bytes the rank reads of them.
func printSplits(w io.Writer, c *ckpt.ComponentPlan) {
	type group struct {
		n            int
		read, stored int64
	}
	var order []string
	groups := map[string]*group{}
	rep := &group{}
	for _, t := range c.Tensors {
		g := rep
		if t.Split != nil {
			if g = groups[t.Split.Rule]; g == nil {
				g = &group{}
				groups[t.Split.Rule] = g
				order = append(order, t.Split.Rule)
			}
		}
		g.n++
		g.read += t.ReadBytes
		g.stored += t.StoredBytes
	}
	for _, rule := range order {
		g := groups[rule]
		fmt.Fprintf(w, "  split    %s: %s, reads %s of %s (%s)\n", rule, tensorCount(g.n), sysmem.FormatSize(g.read), sysmem.FormatSize(g.stored), percent(g.read, g.stored))
	}
	if rep.n > 0 {
		fmt.Fprintf(w, "  split    none: %s replicated, %s read whole\n", tensorCount(rep.n), sysmem.FormatSize(rep.read))
	}
}

func tensorCount(n int) string {
	if n == 1 {
		return "1 tensor"
	}
	return fmt.Sprintf("%d tensors", n)
}

// formatPart writes a split tensor's part: "dim 0 [4:8) of [16, 32]".
func formatPart(s *ckpt.SliceInfo) string {
	return fmt.Sprintf("dim %d [%d:%d) of %s", s.Dim, s.Start, s.Stop, formatShape(s.Shape))
}

// percent writes part/whole as a percentage.
func percent(part, whole int64) string {
	if whole <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(part)/float64(whole))
}

func firstOf(s []string, n int) []string {
	if len(s) <= n {
		return s
	}
	return append(append([]string(nil), s[:n]...), fmt.Sprintf("… (%d more)", len(s)-n))
}
