package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode/utf8"

	"github.com/ckpt-go/ckpt/dtype"
)

func inspectCommand() *command {
	c := &command{
		remote:  true,
		name:    "inspect",
		args:    "PATH",
		summary: "list the tensors, metadata and totals of a file, index or folder",
		help: `Prints every tensor of a checkpoint — name, dtype, shape, bytes, data
offsets and the file holding it — then the metadata and totals by dtype.
PATH is a .safetensors file, a *.safetensors.index.json, or a component
folder (resolved like "ckpt resolve": --variant picks the precision variant).
Only headers are read; no tensor data is touched.

A PyTorch checkpoint (a .bin, .pt, .pth or .ckpt file, a
pytorch_model.bin.index.json, or a folder whose weights are PyTorch ones)
is listed from its pickle, which is read without being executed: each
tensor's name, dtype, shape, bytes, its storage (data/KEY in the archive)
and its view of it ("contiguous", or its strides, and the element it
starts from), then the tied names (one view under two names), the
non-tensor values as metadata and the totals. --json gives {"path",
"kind", "format": "pytorch", "files", "metadata", "tensors": [{"name",
"dtype", "shape", "bytes", "storage", "storage_offset", "strides",
"contiguous", "offset", "file"}], "aliases", "totals", "tensor_count",
"total_bytes"}.

The files a folder or an
index resolves to must not be symlinks that lead out of it, unless
--follow-symlinks is given (a Hugging Face cache snapshot needs it).

Files are named by one rule, in the table, in "files" and in every
tensor's "file" of --json (always present): relative to the root opened —
the folder given, or the folder holding the file or index given — with
slashes: "model.safetensors" for a file or a single-file folder,
"model-00001-of-00002.safetensors" for a sharded folder or its index.

Examples:
  ckpt inspect model.safetensors
  ckpt inspect pytorch_model.bin
  ckpt inspect --json transformer/diffusion_pytorch_model.safetensors.index.json
  ckpt inspect --variant bf16 transformer/
  ckpt inspect --follow-symlinks ~/.cache/huggingface/hub/models--org--name/snapshots/REV`,
	}
	c.run = func(e *env, args []string) error {
		fs := newFlags(e, c)
		asJSON := fs.Bool("json", false, "print JSON")
		variantName := fs.String("variant", "", "precision variant to resolve in a folder (e.g. bf16, fp16)")
		follow := followFlag(fs)
		pos, err := parseFlags(e, c, fs, args)
		if err != nil {
			return err
		}
		if len(pos) != 1 {
			return usageError{msg: "inspect takes exactly one PATH"}
		}
		t, err := openTarget(pos[0], *variantName, *follow, true)
		if err != nil {
			return withHint(err)
		}
		defer t.Close()
		if t.torch != nil {
			rep, err := buildTorchReport(t)
			if err != nil {
				return err
			}
			if *asJSON {
				return e.printJSON(rep)
			}
			return printTorchReport(e, rep)
		}
		if *asJSON {
			// Streamed tensor by tensor: memory stays that of the open
			// checkpoint, whatever the number of tensors.
			w := bufio.NewWriterSize(e.stdout, 64<<10)
			if err := writeInspectJSON(w, t); err != nil {
				return err
			}
			return w.Flush()
		}
		return printInspectReport(e, buildInspectReport(t))
	}
	return c
}

type inspectTensor struct {
	Name    string   `json:"name"`
	DType   string   `json:"dtype"`
	Shape   []int64  `json:"shape"`
	Bytes   int64    `json:"bytes"`
	Offsets [2]int64 `json:"data_offsets"`
	// File is the file holding the tensor, always present: relative to
	// the root opened (the folder given, or the folder of the file or
	// index given) and slash-separated, as in files: "model.safetensors"
	// for a file or a single-file folder, "model-00001-of-00002.safetensors"
	// for a sharded folder or its index.
	File string `json:"file"`

	elements int64       // for the totals
	dtype    dtype.DType // for the totals
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
		rep.Files = append(rep.Files, t.rel(f))
	}
	var tot totaler
	if n := t.ckpt.Len(); n > 0 { // no tensors: nil, "null" in JSON
		rep.Tensors = make([]inspectTensor, 0, n)
	}
	for _, name := range t.ckpt.Names() {
		it := tensorEntry(t, name)
		rep.Tensors = append(rep.Tensors, it)
		tot.add(it)
	}
	rep.Count, rep.Bytes, rep.Totals = len(rep.Tensors), tot.bytes, tot.list()
	return rep
}

// tensorEntry describes the tensor name of t, from the headers read by
// Open: no shard is opened.
func tensorEntry(t *checkpointTarget, name string) inspectTensor {
	info, file, _ := t.ckpt.Info(name)
	it := inspectTensor{Name: name, DType: info.DType.String(), Shape: info.Shape,
		Bytes: info.ByteLen(), Offsets: [2]int64{info.Begin, info.End}, File: t.relFile(file),
		elements: info.NumElements(), dtype: info.DType}
	if it.Shape == nil {
		it.Shape = []int64{}
	}
	return it
}

// totaler adds tensors up by dtype.
type totaler struct {
	byDType map[dtype.DType]*dtypeTotal
	bytes   int64
}

func (tt *totaler) add(it inspectTensor) {
	if tt.byDType == nil {
		tt.byDType = map[dtype.DType]*dtypeTotal{}
	}
	tot := tt.byDType[it.dtype]
	if tot == nil {
		tot = &dtypeTotal{DType: it.DType}
		tt.byDType[it.dtype] = tot
	}
	tot.Tensors++
	tot.Elements += it.elements
	tot.Bytes += it.Bytes
	tt.bytes += it.Bytes
}

// list returns the totals, largest first (ties by dtype name); nil when
// there are no tensors.
func (tt *totaler) list() []dtypeTotal {
	var out []dtypeTotal
	for _, tot := range tt.byDType {
		out = append(out, *tot)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Bytes != out[j].Bytes {
			return out[i].Bytes > out[j].Bytes
		}
		return out[i].DType < out[j].DType
	})
	return out
}

// writeInspectJSON writes the inspectReport of t as JSON, exactly as
// json.Encoder with SetIndent("", "  ") would, but tensor by tensor
// instead of from a report built in memory.
func writeInspectJSON(w *bufio.Writer, t *checkpointTarget) error {
	var files []string
	ckptFiles := t.ckpt.Files()
	for _, f := range ckptFiles {
		files = append(files, t.rel(f))
	}
	meta := t.ckpt.Metadata()
	if meta == nil {
		meta = map[string]string{}
	}
	jw := jsonWriter{w: w}
	w.WriteString("{\n  \"path\": ")
	jw.str(t.path)
	w.WriteString(",\n  \"kind\": ")
	jw.str(t.kind)
	w.WriteString(",\n  \"files\": ")
	jw.strings(files, "  ")
	if warnings := t.ckpt.Warnings(); len(warnings) > 0 {
		w.WriteString(",\n  \"warnings\": ")
		jw.strings(warnings, "  ")
	}
	w.WriteString(",\n  \"metadata\": ")
	if len(meta) == 0 {
		w.WriteString("{}")
	} else {
		keys := make([]string, 0, len(meta))
		for k := range meta {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		w.WriteString("{")
		for i, k := range keys {
			if i > 0 {
				w.WriteByte(',')
			}
			w.WriteString("\n    ")
			jw.str(k)
			w.WriteString(": ")
			jw.str(meta[k])
		}
		w.WriteString("\n  }")
	}
	w.WriteString(",\n  \"tensors\": ")
	var tot totaler
	names := t.ckpt.Names()
	if len(names) == 0 {
		w.WriteString("null")
	} else {
		w.WriteString("[")
		for i, name := range names {
			if i > 0 {
				w.WriteByte(',')
			}
			it := tensorEntry(t, name)
			tot.add(it)
			w.WriteString("\n    {\n      \"name\": ")
			jw.str(it.Name)
			w.WriteString(",\n      \"dtype\": ")
			jw.str(it.DType)
			w.WriteString(",\n      \"shape\": ")
			jw.ints(it.Shape, "      ")
			w.WriteString(",\n      \"bytes\": ")
			jw.int(it.Bytes)
			w.WriteString(",\n      \"data_offsets\": ")
			jw.ints(it.Offsets[:], "      ")
			w.WriteString(",\n      \"file\": ")
			jw.str(it.File)
			w.WriteString("\n    }")
		}
		w.WriteString("\n  ]")
	}
	w.WriteString(",\n  \"totals\": ")
	if totals := tot.list(); len(totals) == 0 {
		w.WriteString("null")
	} else {
		w.WriteString("[")
		for i, d := range totals {
			if i > 0 {
				w.WriteByte(',')
			}
			w.WriteString("\n    {\n      \"dtype\": ")
			jw.str(d.DType)
			w.WriteString(",\n      \"tensors\": ")
			jw.int(int64(d.Tensors))
			w.WriteString(",\n      \"elements\": ")
			jw.int(d.Elements)
			w.WriteString(",\n      \"bytes\": ")
			jw.int(d.Bytes)
			w.WriteString("\n    }")
		}
		w.WriteString("\n  ]")
	}
	w.WriteString(",\n  \"tensor_count\": ")
	jw.int(int64(len(names)))
	w.WriteString(",\n  \"total_bytes\": ")
	jw.int(tot.bytes)
	w.WriteString("\n}\n")
	return jw.err
}

// jsonWriter writes JSON values as encoding/json does (HTML-safe string
// escapes, indented arrays) to a bufio.Writer, keeping the first error.
type jsonWriter struct {
	w   *bufio.Writer
	buf []byte
	err error
}

// str writes s as a JSON string. Printable ASCII without characters that
// need escaping is written as is; anything else goes through
// encoding/json, so the escapes are exactly its own.
func (j *jsonWriter) str(s string) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, err := json.Marshal(s)
			if err != nil && j.err == nil {
				j.err = err
			}
			j.w.Write(b)
			return
		}
	}
	j.w.WriteByte('"')
	j.w.WriteString(s)
	j.w.WriteByte('"')
}

func (j *jsonWriter) int(v int64) {
	j.buf = strconv.AppendInt(j.buf[:0], v, 10)
	j.w.Write(j.buf)
}

// ints writes an array of integers, one per line at indent+2 spaces; []
// when empty.
func (j *jsonWriter) ints(vs []int64, indent string) { writeArray(j, vs, indent, j.int) }

// strings writes an array of strings like ints; null when nil.
func (j *jsonWriter) strings(vs []string, indent string) {
	if vs == nil {
		j.w.WriteString("null")
		return
	}
	writeArray(j, vs, indent, j.str)
}

// writeArray writes vs as an array, each element by elem, one per line at
// indent+2 spaces; [] when empty.
func writeArray[T any](j *jsonWriter, vs []T, indent string, elem func(T)) {
	if len(vs) == 0 {
		j.w.WriteString("[]")
		return
	}
	j.w.WriteByte('[')
	for i, v := range vs {
		if i > 0 {
			j.w.WriteByte(',')
		}
		j.w.WriteString("\n  ")
		j.w.WriteString(indent)
		elem(v)
	}
	j.w.WriteString("\n")
	j.w.WriteString(indent)
	j.w.WriteByte(']')
}

func printInspectReport(e *env, rep *inspectReport) error {
	w := bufio.NewWriterSize(e.stdout, 64<<10)
	fmt.Fprintf(w, "%s (%s, %d file(s): %s)\n", rep.Path, rep.Kind, len(rep.Files), strings.Join(rep.Files, ", "))
	for _, warn := range rep.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
	header := []string{"TENSOR", "DTYPE", "SHAPE", "BYTES", "OFFSETS"}
	fileCol := len(rep.Files) > 1
	if fileCol {
		header = append(header, "FILE")
	}
	writeTable(w, header, len(rep.Tensors), func(buf []byte, ends []int, i int) ([]byte, []int) {
		return tensorCells(buf, ends, &rep.Tensors[i], fileCol)
	})
	printPairs(w, "metadata", rep.Metadata)
	printTotals(w, rep.Count, rep.Bytes, rep.Totals)
	return w.Flush()
}

// printPairs prints a map under its title, a "KEY = VALUE" line for each
// key in order; nothing for an empty map.
func printPairs(w io.Writer, title string, m map[string]string) {
	if len(m) == 0 {
		return
	}
	fmt.Fprintln(w, title+":")
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(w, "  %s = %s\n", k, m[k])
	}
}

// printTotals prints the tensor count and bytes of an inspected file, and
// the totals per dtype.
func printTotals(w io.Writer, count int, bytes int64, totals []dtypeTotal) {
	fmt.Fprintf(w, "totals: %d tensors, %s\n", count, humanBytes(bytes))
	for _, tot := range totals {
		fmt.Fprintf(w, "  %-12s %4d tensors %12d elements %10s\n", tot.DType, tot.Tensors, tot.Elements, humanBytes(tot.Bytes))
	}
}

// tensorCells appends the cells of t's table row to buf, recording where
// each ends in ends: name, dtype, shape, bytes, offsets, and the file when
// fileCol is set.
func tensorCells(buf []byte, ends []int, t *inspectTensor, fileCol bool) ([]byte, []int) {
	buf, ends = leadCells(buf, ends, t.Name, t.DType, t.Shape, t.Bytes)
	buf = append(buf, '[')
	buf = strconv.AppendInt(buf, t.Offsets[0], 10)
	buf = append(buf, ", "...)
	buf = strconv.AppendInt(buf, t.Offsets[1], 10)
	buf = append(buf, ')')
	ends = append(ends, len(buf))
	if fileCol {
		buf = append(buf, t.File...)
		ends = append(ends, len(buf))
	}
	return buf, ends
}

// leadCells appends the first cells of a tensor's table row, those of
// safetensors and PyTorch files alike: name, dtype, shape and bytes.
func leadCells(buf []byte, ends []int, name, dt string, shape []int64, bytes int64) ([]byte, []int) {
	buf = append(buf, name...)
	ends = append(ends, len(buf))
	buf = append(buf, dt...)
	ends = append(ends, len(buf))
	buf = appendShape(buf, shape)
	ends = append(ends, len(buf))
	buf = strconv.AppendInt(buf, bytes, 10)
	return buf, append(ends, len(buf))
}

// tableSpecial are the bytes text/tabwriter does not take as text: cell
// and line terminators, and its Escape.
var tableSpecial = [256]bool{'\t': true, '\v': true, '\n': true, '\f': true, tabwriter.Escape: true}

// tablePadding is the space between columns.
const tablePadding = 2

// writeTable writes the row header, then n rows of as many cells, aligned
// in columns exactly as text/tabwriter.NewWriter(w, 0, 0, tablePadding,
// ' ', 0) did with the cells joined by tabs: every cell but the last of
// its row padded with spaces to its column's widest cell, counted in
// runes, plus tablePadding. row appends row i's cells to buf (given
// empty) and their ends to ends. The widths are measured in a first pass
// over the rows and the rows formatted again in the second: no cell is
// kept, and nothing is buffered per cell as tabwriter does (seconds for a
// million rows). A cell holding a byte tabwriter treats specially
// (tableSpecial) sends the whole table through tabwriter itself, whose
// output it stays.
func writeTable(w *bufio.Writer, header []string, n int, row func(buf []byte, ends []int, i int) ([]byte, []int)) {
	writeRows(w, n+1, func(buf []byte, ends []int, i int) ([]byte, []int) {
		if i > 0 {
			return row(buf, ends, i-1)
		}
		for _, h := range header {
			buf = append(buf, h...)
			ends = append(ends, len(buf))
		}
		return buf, ends
	})
}

// writeRows is writeTable without the header: n rows.
func writeRows(w *bufio.Writer, n int, row func(buf []byte, ends []int, i int) ([]byte, []int)) {
	var buf []byte
	var ends, widths []int
	for i := range n {
		buf, ends = row(buf[:0], ends[:0], i)
		for _, c := range buf {
			if tableSpecial[c] {
				writeTableTabwriter(w, n, row)
				return
			}
		}
		for j, start := 0, 0; j < len(ends)-1; j++ { // the last cell is not padded
			if j == len(widths) {
				widths = append(widths, 0)
			}
			widths[j] = max(widths[j], utf8.RuneCount(buf[start:ends[j]]))
			start = ends[j]
		}
	}
	for i := range n {
		buf, ends = row(buf[:0], ends[:0], i)
		start := 0
		for j, end := range ends {
			w.Write(buf[start:end])
			if j < len(ends)-1 {
				for pad := widths[j] + tablePadding - utf8.RuneCount(buf[start:end]); pad > 0; pad-- {
					w.WriteByte(' ')
				}
			}
			start = end
		}
		w.WriteByte('\n')
	}
}

// writeTableTabwriter is writeTable through text/tabwriter.
func writeTableTabwriter(w *bufio.Writer, n int, row func(buf []byte, ends []int, i int) ([]byte, []int)) {
	tw := tabwriter.NewWriter(w, 0, 0, tablePadding, ' ', 0)
	var buf, line []byte
	var ends []int
	for i := range n {
		buf, ends = row(buf[:0], ends[:0], i)
		line = line[:0]
		start := 0
		for j, end := range ends {
			if j > 0 {
				line = append(line, '\t')
			}
			line = append(line, buf[start:end]...)
			start = end
		}
		line = append(line, '\n')
		tw.Write(line)
	}
	tw.Flush()
}

func formatShape(shape []int64) string {
	return string(appendShape(nil, shape))
}

// appendShape appends shape as formatShape writes it: "[4096, 11008]".
func appendShape(buf []byte, shape []int64) []byte {
	buf = append(buf, '[')
	for i, d := range shape {
		if i > 0 {
			buf = append(buf, ", "...)
		}
		buf = strconv.AppendInt(buf, d, 10)
	}
	return append(buf, ']')
}
