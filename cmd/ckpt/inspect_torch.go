package main

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/ckpt-go/ckpt/torch"
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

// inspectTorch inspects p when it is a PyTorch checkpoint: a file or index
// named as one, or a folder whose weights (resolved as "ckpt resolve"
// does) are PyTorch ones. handled is false for anything else.
func inspectTorch(e *env, p, variantName string, follow, asJSON bool) (handled bool, err error) {
	if b := path.Base(p); strings.HasSuffix(b, ".safetensors") || strings.HasSuffix(b, ".json") && !variant.IsPyTorchName(b) {
		return false, nil // a safetensors file or index: not opened twice
	}
	fsys, name, err := openLocation(p)
	if err != nil {
		return false, nil // openTarget reports it
	}
	defer closeFS(fsys)
	var st fs.FileInfo
	if fsys != nil {
		st, err = fs.Stat(fsys, name)
	} else {
		st, err = os.Stat(name)
	}
	if err != nil {
		return false, nil
	}
	t := &checkpointTarget{path: p, kind: "file", fsys: fsys, name: name}
	file := name
	join := filepath.Join
	base := filepath.Base(name)
	if fsys != nil {
		join, base = path.Join, path.Base(name)
	}
	switch {
	case st.IsDir():
		plan, err := variant.ResolveComponent(name, variantName, variant.WithSource(cliSource(fsys, follow)))
		if err != nil || plan.Format != variant.FormatPyTorch || len(plan.Files) == 0 {
			return false, nil
		}
		t.kind = "folder"
		file = join(plan.Dir, plan.Files[0])
		if plan.Index != "" {
			file = join(plan.Dir, plan.Index)
		}
	case !variant.IsPyTorchName(base):
		return false, nil
	case strings.HasSuffix(strings.ToLower(base), ".json"):
		t.kind = "index"
	}
	var ck *torch.Checkpoint
	if fsys != nil {
		ck, err = torch.OpenFS(fsys, file)
	} else {
		var opts []torch.Option
		if follow {
			opts = append(opts, torch.WithSymlinkRoot("/"))
		}
		ck, err = torch.Open(file, opts...)
	}
	if err != nil {
		return true, err
	}
	defer ck.Close()
	rep := buildTorchReport(t, ck)
	if asJSON {
		return true, e.printJSON(rep)
	}
	return true, printTorchReport(e, rep)
}

func buildTorchReport(t *checkpointTarget, ck *torch.Checkpoint) *torchInspectReport {
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
		n := int64(1)
		for _, d := range shape {
			n *= d
		}
		rep.Tensors = append(rep.Tensors, torchInspectTensor{Name: name, DType: tn.DType().String(), Shape: shape, Bytes: tn.ByteLen(),
			Storage: tn.Storage(), StorageOffset: tn.StorageOffset(), Strides: tn.Strides(), Contiguous: tn.Contiguous(),
			Offset: tn.Offset(), File: file})
		tot.add(inspectTensor{DType: tn.DType().String(), Bytes: tn.ByteLen(), elements: n, dtype: tn.DType()})
	}
	rep.Count, rep.Bytes, rep.Totals = len(rep.Tensors), tot.bytes, tot.list()
	return rep
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
	writeTable(w, len(rep.Tensors)+1, func(buf []byte, ends []int, i int) ([]byte, []int) {
		if i == 0 {
			for _, h := range header {
				buf = append(buf, h...)
				ends = append(ends, len(buf))
			}
			return buf, ends
		}
		t := &rep.Tensors[i-1]
		buf = append(buf, t.Name...)
		ends = append(ends, len(buf))
		buf = append(buf, t.DType...)
		ends = append(ends, len(buf))
		buf = appendShape(buf, t.Shape)
		ends = append(ends, len(buf))
		buf = strconv.AppendInt(buf, t.Bytes, 10)
		ends = append(ends, len(buf))
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
