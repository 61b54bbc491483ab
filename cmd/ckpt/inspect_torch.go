package main

import (
	"bufio"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/ckpt-go/ckpt/internal/shapes"
	"github.com/ckpt-go/ckpt/variant"
)

// torchInspectTensor is a tensor of a PyTorch checkpoint in `ckpt
// inspect`: the view it is of its storage record.
type torchInspectTensor struct {
	Name  string  `json:"name"`
	DType string  `json:"dtype"`
	Shape []int64 `json:"shape"`
	Bytes int64   `json:"bytes"`
	// Storage is the storage's key: its record is data/KEY in the archive.
	Storage       string  `json:"storage"`
	StorageOffset int64   `json:"storage_offset"`
	Strides       []int64 `json:"strides"`
	Contiguous    bool    `json:"contiguous"`
	// Offset is the file offset of the view's first element.
	Offset int64  `json:"offset"`
	File   string `json:"file"`
}

// torchInspectReport is `ckpt inspect` of a PyTorch checkpoint.
type torchInspectReport struct {
	Path     string               `json:"path"`
	Kind     string               `json:"kind"`
	Format   string               `json:"format"`
	Files    []string             `json:"files"`
	Metadata map[string]string    `json:"metadata"`
	Tensors  []torchInspectTensor `json:"tensors"`
	Aliases  map[string]string    `json:"aliases"`
	Totals   []dtypeTotal         `json:"totals"`
	Count    int                  `json:"tensor_count"`
	Bytes    int64                `json:"total_bytes"`
}

// buildTorchReport is the report of t, a PyTorch checkpoint (t.torch).
func buildTorchReport(t *checkpointTarget) (*torchInspectReport, error) {
	ck := t.torch
	rep := &torchInspectReport{Path: t.path, Kind: t.kind, Format: variant.FormatPyTorch, Files: []string{},
		Metadata: ck.Metadata(), Aliases: ck.Aliases(), Tensors: []torchInspectTensor{}}
	if rep.Metadata == nil {
		rep.Metadata = map[string]string{}
	}
	if rep.Aliases == nil {
		rep.Aliases = map[string]string{}
	}
	var tot totaler
	for name, tn := range ck.Tensors() {
		file := t.relFile(tn.File())
		if !slices.Contains(rep.Files, file) {
			rep.Files = append(rep.Files, file)
		}
		shape := tn.Shape()
		n, err := shapes.Elements(shape)
		if err != nil {
			return nil, fmt.Errorf("%s: tensor %q: %w", file, name, err)
		}
		rep.Tensors = append(rep.Tensors, torchInspectTensor{Name: name, DType: tn.DType().String(), Shape: shape, Bytes: tn.ByteLen(),
			Storage: tn.Storage(), StorageOffset: tn.StorageOffset(), Strides: tn.Strides(), Contiguous: tn.Contiguous(),
			Offset: tn.Offset(), File: file})
		tot.add(inspectTensor{DType: tn.DType().String(), Bytes: tn.ByteLen(), elements: n, dtype: tn.DType()})
	}
	rep.Count, rep.Bytes, rep.Totals = len(rep.Tensors), tot.bytes, tot.list()
	return rep, nil
}

// printTorchReport writes the table of a PyTorch checkpoint: each tensor
// with its storage and view (contiguous, or its strides and offset in
// the storage), then the tied names, the metadata and the totals.
func printTorchReport(e *env, rep *torchInspectReport) error {
	w := bufio.NewWriterSize(e.stdout, 64<<10)
	fmt.Fprintf(w, "%s (PyTorch %s, %d file(s): %s)\n", rep.Path, rep.Kind, len(rep.Files), strings.Join(rep.Files, ", "))
	header := []string{"TENSOR", "DTYPE", "SHAPE", "BYTES", "STORAGE", "VIEW"}
	fileCol := len(rep.Files) > 1
	if fileCol {
		header = append(header, "FILE")
	}
	writeTable(w, header, len(rep.Tensors), func(buf []byte, ends []int, i int) ([]byte, []int) {
		t := &rep.Tensors[i]
		buf, ends = leadCells(buf, ends, t.Name, t.DType, t.Shape, t.Bytes)
		buf = append(buf, "data/"+t.Storage...)
		ends = append(ends, len(buf))
		if t.Contiguous {
			buf = append(buf, "contiguous"...)
		} else {
			buf = append(buf, "strides "...)
			buf = appendShape(buf, t.Strides)
		}
		if t.StorageOffset != 0 {
			buf = append(buf, " from element "...)
			buf = strconv.AppendInt(buf, t.StorageOffset, 10)
		}
		ends = append(ends, len(buf))
		if fileCol {
			buf = append(buf, t.File...)
			ends = append(ends, len(buf))
		}
		return buf, ends
	})
	printPairs(w, "tied (the same view under another name)", rep.Aliases)
	printPairs(w, "metadata", rep.Metadata)
	printTotals(w, rep.Count, rep.Bytes, rep.Totals)
	return w.Flush()
}
