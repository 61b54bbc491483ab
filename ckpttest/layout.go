package ckpttest

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Weights prefixes used by Hugging Face libraries.
const (
	// TransformersPrefix is the weights prefix of transformers models.
	TransformersPrefix = "model"
	// DiffusersPrefix is the weights prefix of diffusers models.
	DiffusersPrefix = "diffusion_pytorch_model"
	// TorchPrefix is the prefix of transformers' PyTorch weights
	// (pytorch_model.bin); diffusers' PyTorch weights have DiffusersPrefix.
	TorchPrefix = "pytorch_model"
)

// Layout selects the file naming of a sharded variant set.
type Layout int

const (
	// Current is today's naming: shards PREFIX.V-00001-of-0000N.safetensors
	// and index PREFIX.safetensors.index.V.json (no ".V" without a variant).
	Current Layout = iota
	// Legacy is diffusers' older variant naming: shards
	// PREFIX-00001-of-0000N.V.safetensors with index
	// PREFIX.safetensors.index.V.json.
	Legacy
	// LegacyIndexName is Legacy with the other legacy index name,
	// PREFIX.safetensors.V.index.json.
	LegacyIndexName
)

// Weights describes the weights of one model in one precision variant.
type Weights struct {
	// Prefix is the file name prefix; "" means TransformersPrefix ("model").
	Prefix string
	// Variant is the precision variant ("fp16", "bf16", ...); "" for none.
	Variant string
	// Shards is the number of shard files. 0 or 1 writes a single file
	// PREFIX[.V].safetensors with no index; more writes shards and an index.
	// Tensors are split into Shards contiguous runs of nearly equal count.
	Shards int
	// Layout chooses the naming of shards and index; ignored for single files.
	Layout Layout
	// Tensors are the tensors, in file order.
	Tensors []Tensor
	// Metadata goes into every file's __metadata__.
	Metadata map[string]string
	// PyTorch writes the set as PyTorch weights, as transformers and
	// diffusers save them with torch.save: each file an EncodeTorch archive
	// of its tensors (TorchOf), named as above with ".bin" for
	// ".safetensors" (pytorch_model.fp16.bin, pytorch_model.bin.index.fp16.json,
	// ...), and the default prefix TorchPrefix. Metadata is not written.
	PyTorch bool
}

var variantRE = regexp.MustCompile(`^[A-Za-z0-9_]+$`)

func (w Weights) prefix() string {
	switch {
	case w.Prefix != "":
		return w.Prefix
	case w.PyTorch:
		return TorchPrefix
	}
	return TransformersPrefix
}

// name is a file name of the set: a safetensors name, or for PyTorch
// weights the same with ".bin".
func (w Weights) name(safetensorsName string) string {
	if w.PyTorch {
		return strings.Replace(safetensorsName, ".safetensors", ".bin", 1)
	}
	return safetensorsName
}

// encode encodes one file of the set.
func (w Weights) encode(tensors []Tensor) ([]byte, error) {
	if !w.PyTorch {
		return Encode(tensors, w.Metadata)
	}
	views, storages, err := TorchOf(tensors)
	if err != nil {
		return nil, err
	}
	return EncodeTorch(views, storages, false)
}

// SingleName returns the single-file name PREFIX.safetensors or
// PREFIX.V.safetensors.
func SingleName(prefix, variant string) string {
	if variant == "" {
		return prefix + ".safetensors"
	}
	return prefix + "." + variant + ".safetensors"
}

// ShardName returns the name of shard i (1-based) of n in the given layout.
func ShardName(prefix, variant string, i, n int, layout Layout) string {
	num := fmt.Sprintf("%05d-of-%05d", i, n)
	switch {
	case variant == "":
		return prefix + "-" + num + ".safetensors"
	case layout == Current:
		return prefix + "." + variant + "-" + num + ".safetensors"
	default:
		return prefix + "-" + num + "." + variant + ".safetensors"
	}
}

// IndexName returns the index file name for a layout.
func IndexName(prefix, variant string, layout Layout) string {
	switch {
	case variant == "":
		return prefix + ".safetensors.index.json"
	case layout == LegacyIndexName:
		return prefix + ".safetensors." + variant + ".index.json"
	default:
		return prefix + ".safetensors.index." + variant + ".json"
	}
}

// WriteWeights writes the files of w into dir (created if needed) and
// returns their base names, index last. A sharded set's index maps every
// tensor to its shard and records metadata.total_size, like transformers.
func WriteWeights(dir string, w Weights) ([]string, error) {
	prefix := w.prefix()
	if w.Variant != "" && !variantRE.MatchString(w.Variant) {
		return nil, &Error{Op: "write", Path: dir, Msg: fmt.Sprintf("invalid variant %q", w.Variant)}
	}
	if w.Shards <= 1 {
		name := w.name(SingleName(prefix, w.Variant))
		b, err := w.encode(w.Tensors)
		if err != nil {
			return nil, &Error{Op: "write", Path: filepath.Join(dir, name), Err: err}
		}
		if err := writeBytes(filepath.Join(dir, name), b); err != nil {
			return nil, err
		}
		return []string{name}, nil
	}
	if w.Shards > len(w.Tensors) {
		return nil, &Error{Op: "write", Path: dir, Msg: fmt.Sprintf("%d shards for %d tensors", w.Shards, len(w.Tensors))}
	}
	var names []string
	weightMap := make(map[string]string, len(w.Tensors))
	var total int64
	for i := range w.Shards {
		lo := i * len(w.Tensors) / w.Shards
		hi := (i + 1) * len(w.Tensors) / w.Shards
		name := w.name(ShardName(prefix, w.Variant, i+1, w.Shards, w.Layout))
		part := w.Tensors[lo:hi]
		b, err := w.encode(part)
		if err != nil {
			return nil, &Error{Op: "write", Path: filepath.Join(dir, name), Err: err}
		}
		if err := writeBytes(filepath.Join(dir, name), b); err != nil {
			return nil, err
		}
		for _, t := range part {
			weightMap[t.Name] = name
			c, _ := t.Contents() // Encode succeeded, so this does too
			total += int64(len(c))
		}
		names = append(names, name)
	}
	idx := w.name(IndexName(prefix, w.Variant, w.Layout))
	if err := WriteIndex(filepath.Join(dir, idx), weightMap, map[string]any{"total_size": total}); err != nil {
		return nil, err
	}
	return append(names, idx), nil
}

// WriteIndex writes a shard index file as transformers does (keys sorted,
// indent 2, trailing newline). weightMap and metadata are written as given,
// so it can also produce the broken or hostile indexes tests need; metadata
// is omitted when nil.
func WriteIndex(path string, weightMap map[string]string, metadata map[string]any) error {
	doc := map[string]any{"weight_map": weightMap}
	if metadata != nil {
		doc["metadata"] = metadata
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return &Error{Op: "write", Path: path, Err: err}
	}
	return writeBytes(path, append(b, '\n'))
}

// Component is one folder of a pipeline.
type Component struct {
	// Name is the folder name and the model_index.json key.
	Name string
	// Library and Class go into model_index.json as [Library, Class];
	// defaults "diffusers" and "ModelMixin".
	Library, Class string
	// Unlisted leaves the component out of model_index.json (its folder is
	// still written).
	Unlisted bool
	// Weights are written into the folder, one entry per variant or layout.
	Weights []Weights
	// Files are extra files (name → contents), e.g. config.json or strays.
	Files map[string]string
}

// Pipeline describes a diffusers pipeline folder.
type Pipeline struct {
	// Class is model_index.json's _class_name; default "DiffusionPipeline".
	Class string
	// Components are the component folders.
	Components []Component
	// Null lists names recorded in model_index.json as [null, null]
	// (optional components that are absent).
	Null []string
	// Root holds weights written directly in the root folder.
	Root []Weights
	// Files are extra files in the root (name → contents).
	Files map[string]string
}

// WritePipeline writes the pipeline p under root: model_index.json, one
// folder per component and any root files.
func WritePipeline(root string, p Pipeline) error {
	class := p.Class
	if class == "" {
		class = "DiffusionPipeline"
	}
	mi := map[string]any{"_class_name": class, "_diffusers_version": "0.31.0"}
	for _, n := range p.Null {
		mi[n] = []any{nil, nil}
	}
	for _, c := range p.Components {
		if c.Name == "" || c.Name != filepath.Base(c.Name) || c.Name == "." || c.Name == ".." {
			return &Error{Op: "write", Path: root, Msg: fmt.Sprintf("invalid component name %q", c.Name)}
		}
		dir := filepath.Join(root, c.Name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return &Error{Op: "write", Path: dir, Err: err}
		}
		for _, w := range c.Weights {
			if _, err := WriteWeights(dir, w); err != nil {
				return err
			}
		}
		if err := writeFiles(dir, c.Files); err != nil {
			return err
		}
		if !c.Unlisted {
			lib, cls := c.Library, c.Class
			if lib == "" {
				lib = "diffusers"
			}
			if cls == "" {
				cls = "ModelMixin"
			}
			mi[c.Name] = []string{lib, cls}
		}
	}
	for _, w := range p.Root {
		if _, err := WriteWeights(root, w); err != nil {
			return err
		}
	}
	if err := writeFiles(root, p.Files); err != nil {
		return err
	}
	b, err := json.MarshalIndent(mi, "", "  ")
	if err != nil {
		return &Error{Op: "write", Path: root, Err: err}
	}
	return writeBytes(filepath.Join(root, "model_index.json"), append(b, '\n'))
}

func writeFiles(dir string, files map[string]string) error {
	names := slices.Sorted(maps.Keys(files))
	for _, n := range names {
		if err := writeBytes(filepath.Join(dir, n), []byte(files[n])); err != nil {
			return err
		}
	}
	return nil
}
