package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

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
Only headers are read; no tensor data is touched. The files a folder or an
index resolves to must not be symlinks that lead out of it, unless
--follow-symlinks is given (a Hugging Face cache snapshot needs it).

Files are named by one rule, in the table, in "files" and in every
tensor's "file" of --json (always present): relative to the root opened —
the folder given, or the folder holding the file or index given — with
slashes: "model.safetensors" for a file or a single-file folder,
"model-00001-of-00002.safetensors" for a sharded folder or its index.

Examples:
  ckpt inspect model.safetensors
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
		t, err := openTarget(pos[0], *variantName, *follow)
		if err != nil {
			return withHint(err)
		}
		defer t.Close()
		if *asJSON {
			// Streamed tensor by tensor: memory stays that of the open
			// checkpoint, whatever the number of tensors.
			w := bufio.NewWriterSize(e.stdout, 64<<10)
			if err := writeInspectJSON(w, t); err != nil {
				return err
			}
			return w.Flush()
		}
		printInspectReport(e, buildInspectReport(t))
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
