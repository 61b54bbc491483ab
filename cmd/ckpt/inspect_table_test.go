package main

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"text/tabwriter"
)

// printInspectReportTabwriter is printInspectReport as it was, every row
// through text/tabwriter: the reference its output must equal.
func printInspectReportTabwriter(e *env, rep *inspectReport) {
	w := e.stdout
	fmt.Fprintf(w, "%s (%s, %d file(s): %s)\n", rep.Path, rep.Kind, len(rep.Files), strings.Join(rep.Files, ", "))
	for _, warn := range rep.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fileCol := len(rep.Files) > 1
	if fileCol {
		fmt.Fprintln(tw, "TENSOR\tDTYPE\tSHAPE\tBYTES\tOFFSETS\tFILE")
	} else {
		fmt.Fprintln(tw, "TENSOR\tDTYPE\tSHAPE\tBYTES\tOFFSETS")
	}
	for _, t := range rep.Tensors {
		parts := make([]string, len(t.Shape))
		for i, d := range t.Shape {
			parts[i] = fmt.Sprint(d)
		}
		shape := "[" + strings.Join(parts, ", ") + "]"
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t[%d, %d)", t.Name, t.DType, shape, t.Bytes, t.Offsets[0], t.Offsets[1])
		if fileCol {
			fmt.Fprintf(tw, "\t%s", t.File)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	if len(rep.Metadata) > 0 {
		fmt.Fprintln(w, "metadata:")
		keys := make([]string, 0, len(rep.Metadata))
		for k := range rep.Metadata {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "  %s = %s\n", k, rep.Metadata[k])
		}
	}
	fmt.Fprintf(w, "totals: %d tensors, %s\n", rep.Count, humanBytes(rep.Bytes))
	for _, tot := range rep.Totals {
		fmt.Fprintf(w, "  %-12s %4d tensors %12d elements %10s\n", tot.DType, tot.Tensors, tot.Elements, humanBytes(tot.Bytes))
	}
}

// The table is written byte for byte as tabwriter wrote it: names of
// every width, unicode (counted in runes, as tabwriter does), invalid
// UTF-8, and the bytes tabwriter treats specially, with one file or
// several, with and without tensors.
func TestInspectTableAsTabwriter(t *testing.T) {
	pieces := []string{"a", "layers", ".", "0", "weight", "é", "中文", "😀", "e\u0301", "\xc3", "\x80", " ", "<b>", "&", "\r",
		"\t", "\n", "\v", "\f", "\xff", "\xff\xff"}
	rng := rand.New(rand.NewPCG(1, 2))
	name := func(special bool) string {
		var b strings.Builder
		for range rng.IntN(6) {
			p := pieces[rng.IntN(len(pieces))]
			if !special && strings.ContainsAny(p, "\t\n\v\f") || !special && strings.Contains(p, "\xff") {
				continue
			}
			b.WriteString(p)
		}
		return b.String()
	}
	for trial := range 2000 {
		special := trial%4 == 0
		rep := &inspectReport{Path: "x" + name(false), Kind: "folder", Metadata: map[string]string{}}
		for i := range 1 + rng.IntN(3) {
			rep.Files = append(rep.Files, fmt.Sprintf("model-%05d%s.safetensors", i, name(special)))
		}
		if trial%3 == 0 {
			rep.Warnings = []string{"w " + name(false)}
			rep.Metadata["format"] = "pt"
		}
		var tot totaler
		for range rng.IntN(12) {
			shape := make([]int64, rng.IntN(4))
			for j := range shape {
				shape[j] = rng.Int64N(1 << uint(1+rng.IntN(40)))
			}
			begin := rng.Int64N(1 << uint(1+rng.IntN(50)))
			it := inspectTensor{Name: name(special), DType: []string{"F32", "BF16", "F8_E4M3", "U8"}[rng.IntN(4)], Shape: shape,
				Bytes: rng.Int64N(1 << 40), Offsets: [2]int64{begin, begin + rng.Int64N(1<<30)},
				File: rep.Files[rng.IntN(len(rep.Files))], elements: 1}
			rep.Tensors = append(rep.Tensors, it)
			tot.add(it)
		}
		rep.Count, rep.Bytes, rep.Totals = len(rep.Tensors), tot.bytes, tot.list()
		var got, want bytes.Buffer
		if err := printInspectReport(&env{stdout: &got}, rep); err != nil {
			t.Fatal(err)
		}
		printInspectReportTabwriter(&env{stdout: &want}, rep)
		if got.String() != want.String() {
			t.Fatalf("trial %d: got\n%q\nwant\n%q", trial, got.String(), want.String())
		}
	}
}
