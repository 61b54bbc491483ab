package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/ckpt-go/ckpt/dtype"
)

func inspectCommand() *command {
	c := &command{
		name:    "inspect",
		args:    "PATH",
		summary: "list the tensors, metadata and totals of a file, index or folder",
		help: `Prints every tensor of a checkpoint — name, dtype, shape, bytes, data
offsets and the file holding it — then the metadata and totals by dtype.
PATH is a .safetensors file, a *.safetensors.index.json, or a component
folder (resolved like "ckpt resolve": --variant picks the precision variant).
Only headers are read; no tensor data is touched.

Examples:
  ckpt inspect model.safetensors
  ckpt inspect --json transformer/diffusion_pytorch_model.safetensors.index.json
  ckpt inspect --variant bf16 transformer/`,
	}
	c.run = func(e *env, args []string) error {
		fs := newFlags(e, c)
		asJSON := fs.Bool("json", false, "print JSON")
		variantName := fs.String("variant", "", "precision variant to resolve in a folder (e.g. bf16, fp16)")
		pos, err := parseFlags(e, c, fs, args)
		if err != nil {
			return err
		}
		if len(pos) != 1 {
			return usageError{msg: "inspect takes exactly one PATH"}
		}
		t, err := openTarget(pos[0], *variantName)
		if err != nil {
			return err
		}
		defer t.Close()
		rep := buildInspectReport(t)
		if *asJSON {
			enc := json.NewEncoder(e.stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(rep)
		}
		printInspectReport(e, rep)
		return nil
	}
	return c
}

type inspectTensor struct {
	Name    string   `json:"name"`
	DType   string   `json:"dtype"`
	Shape   []int64  `json:"shape"`
	Bytes   int64    `json:"bytes"`
	Offsets [2]int64 `json:"data_offsets"`
	File    string   `json:"file,omitempty"`
}

type dtypeTotal struct {
	DType    string `json:"dtype"`
	Tensors  int    `json:"tensors"`
	Elements int64  `json:"elements"`
	Bytes    int64  `json:"bytes"`
}

type inspectReport struct {
	Path     string            `json:"path"`
	Kind     string            `json:"kind"`
	Files    []string          `json:"files"`
	Warnings []string          `json:"warnings,omitempty"`
	Metadata map[string]string `json:"metadata"`
	Tensors  []inspectTensor   `json:"tensors"`
	Totals   []dtypeTotal      `json:"totals"`
	Count    int               `json:"tensor_count"`
	Bytes    int64             `json:"total_bytes"`
}

func buildInspectReport(t *checkpointTarget) *inspectReport {
	rep := &inspectReport{Path: t.path, Kind: t.kind, Metadata: t.ckpt.Metadata(), Warnings: t.ckpt.Warnings()}
	if rep.Metadata == nil {
		rep.Metadata = map[string]string{}
	}
	files := t.ckpt.Files()
	for _, f := range files {
		rep.Files = append(rep.Files, relTo(t.path, f))
	}
	totals := map[dtype.DType]*dtypeTotal{}
	// The headers read by Open describe every tensor: no shard is opened.
	for _, name := range t.ckpt.Names() {
		info, file, _ := t.ckpt.Info(name)
		it := inspectTensor{Name: name, DType: info.DType.String(), Shape: info.Shape,
			Bytes: info.ByteLen(), Offsets: [2]int64{info.Begin, info.End}}
		if len(files) > 1 {
			it.File = relTo(t.path, file)
		}
		if it.Shape == nil {
			it.Shape = []int64{}
		}
		rep.Tensors = append(rep.Tensors, it)
		tot := totals[info.DType]
		if tot == nil {
			tot = &dtypeTotal{DType: info.DType.String()}
			totals[info.DType] = tot
		}
		tot.Tensors++
		tot.Elements += info.NumElements()
		tot.Bytes += info.ByteLen()
		rep.Bytes += info.ByteLen()
	}
	rep.Count = len(rep.Tensors)
	for _, tot := range totals {
		rep.Totals = append(rep.Totals, *tot)
	}
	sort.Slice(rep.Totals, func(i, j int) bool { return rep.Totals[i].Bytes > rep.Totals[j].Bytes })
	return rep
}

func printInspectReport(e *env, rep *inspectReport) {
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t[%d, %d)", t.Name, t.DType, formatShape(t.Shape), t.Bytes, t.Offsets[0], t.Offsets[1])
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

func formatShape(shape []int64) string {
	parts := make([]string, len(shape))
	for i, d := range shape {
		parts[i] = fmt.Sprint(d)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
