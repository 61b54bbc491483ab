package variant

import (
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/ckpt-go/ckpt/internal/setname"
)

// Weights prefixes: X in the naming rules.
const (
	// TransformersPrefix is the weights prefix of transformers models.
	TransformersPrefix = "model"
	// DiffusersPrefix is the weights prefix of diffusers models.
	DiffusersPrefix = "diffusion_pytorch_model"
)

var prefixes = []string{TransformersPrefix, DiffusersPrefix}

// Formats of weights files: a plan loads files of one format only.
const (
	// FormatSafetensors is safetensors weights: X[.V].safetensors, their
	// indexes and shards.
	FormatSafetensors = "safetensors"
	// FormatPyTorch is PyTorch weights as transformers and diffusers save
	// them (torch.save archives): the names of the safetensors rules with
	// ".bin" for ".safetensors" and the prefix "pytorch_model" for
	// transformers' "model" (pytorch_model.bin, pytorch_model.fp16.bin,
	// pytorch_model.bin.index.fp16.json, pytorch_model.fp16-00001-of-00002.bin,
	// diffusers' legacy diffusion_pytorch_model-00001-of-00002.fp16.bin, ...).
	// Package variant only names them; the caller opens them (package
	// torch reads them without executing their pickles).
	FormatPyTorch = "pytorch"
)

// torchPrefix is the prefix of transformers' PyTorch weights
// (pytorch_model.bin); diffusers' PyTorch weights have DiffusersPrefix.
const torchPrefix = "pytorch_model"

// formats are the formats in the order they are preferred, each with its
// file extension and its prefixes in the order of prefixes (transformers',
// diffusers').
var formats = []struct {
	name, ext string
	prefixes  []string
}{
	{FormatSafetensors, ".safetensors", prefixes},
	{FormatPyTorch, ".bin", []string{torchPrefix, DiffusersPrefix}},
}

// nameRE is the rule for variant names: ASCII letters, digits and "_",
// compared case-sensitively.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9_]+$`)

// ValidName reports whether v is a valid variant name.
func ValidName(v string) bool { return nameRE.MatchString(v) }

type fileKind int

const (
	kindSingle fileKind = iota + 1
	kindIndex
	kindShard
)

// candidate is a file whose name is one of the recognized weights names.
type candidate struct {
	name    string
	format  string // FormatSafetensors or FormatPyTorch
	prefix  string
	variant string // "" for untagged
	kind    fileKind
	legacy  bool   // legacy naming: index X.safetensors.V.index.json, shard X-N-of-M.V.safetensors
	swap    string // TOKEN of a shard under package shard's swap name X[.V]-N-of-M.swap-TOKEN.safetensors
	num, of int    // shard numbers
}

const v = `([A-Za-z0-9_]+)`
const nn = `(\d{5})-of-(\d{5})`

// swap is the tag of a shard that package shard committed under a swap
// name because a file of the previous set had its standard name; such
// names last only while a save runs, or after it was killed.
const swap = `\.swap-(` + setname.SwapToken + `)`

func swapped(p pattern) pattern { p.swap = true; return p }

type pattern struct {
	re     *regexp.Regexp
	kind   fileKind
	legacy bool
	swap   bool // the last submatch is the swap token
	varIdx int  // submatch of the variant, 0 for none
	numIdx int  // submatch of the shard number (the shard count follows it), 0 for none
	prefix string
	format string
}

// patterns are the naming rules, one set per format and prefix: the
// safetensors names, and the same names with ".bin" for PyTorch weights
// (whose sets package shard never writes, so they have no swap names).
var patterns = func() []pattern {
	var ps []pattern
	for _, f := range formats {
		x := regexp.QuoteMeta(f.ext)
		for _, p := range f.prefixes {
			q := regexp.QuoteMeta(p)
			mk := func(expr string, k fileKind, legacy bool, varIdx, numIdx int) pattern {
				return pattern{re: regexp.MustCompile(`^` + q + expr + `$`), kind: k, legacy: legacy, varIdx: varIdx, numIdx: numIdx, prefix: p, format: f.name}
			}
			// Order matters where names overlap: current names come first.
			ps = append(ps,
				mk(x, kindSingle, false, 0, 0),
				mk(x+`\.index\.json`, kindIndex, false, 0, 0),
				mk(x+`\.index\.`+v+`\.json`, kindIndex, false, 1, 0),
				mk(x+`\.`+v+`\.index\.json`, kindIndex, true, 1, 0),
				mk(`-`+nn+x, kindShard, false, 0, 1),
				mk(`\.`+v+`-`+nn+x, kindShard, false, 1, 2),
				mk(`-`+nn+`\.`+v+x, kindShard, true, 3, 1),
			)
			if f.name == FormatSafetensors {
				ps = append(ps,
					swapped(mk(`-`+nn+swap+x, kindShard, false, 0, 1)),
					swapped(mk(`\.`+v+`-`+nn+swap+x, kindShard, false, 1, 2)))
			}
			ps = append(ps, mk(`\.`+v+x, kindSingle, false, 1, 0))
		}
	}
	return ps
}()

// classify recognizes the exact weights names of the naming rules.
func classify(name string) (candidate, bool) {
	for _, p := range patterns {
		m := p.re.FindStringSubmatch(name)
		if m == nil {
			continue
		}
		c := candidate{name: name, format: p.format, prefix: p.prefix, kind: p.kind, legacy: p.legacy}
		if p.swap {
			c.swap = m[len(m)-1]
		}
		if p.varIdx > 0 {
			c.variant = m[p.varIdx]
		}
		if p.numIdx > 0 {
			c.num, _ = strconv.Atoi(m[p.numIdx])
			c.of, _ = strconv.Atoi(m[p.numIdx+1])
		}
		return c, true
	}
	return candidate{}, false
}

// FormatOf returns the format (FormatSafetensors, FormatPyTorch) of a
// file named by the naming rules of ResolveComponent, from its base name
// alone; "" for any other name.
func FormatOf(name string) string {
	c, _ := classify(name)
	return c.format
}

// SafetensorsName returns the safetensors name of the file that plays
// the role of the PyTorch weights file name (a base name) in a set of the
// same variant: the ".bin" becomes ".safetensors" and transformers'
// prefix "pytorch_model" becomes "model" (pytorch_model.bin.index.fp16.json
// becomes model.safetensors.index.fp16.json,
// diffusion_pytorch_model-00001-of-00002.fp16.bin
// diffusion_pytorch_model-00001-of-00002.fp16.safetensors). ok is false
// for a name that is not PyTorch weights under these rules.
func SafetensorsName(name string) (string, bool) {
	c, ok := classify(name)
	if !ok || c.format != FormatPyTorch {
		return "", false
	}
	rest := name[len(c.prefix):]
	if c.kind == kindIndex { // X.bin.index[.V].json, X.bin.V.index.json
		rest = ".safetensors" + strings.TrimPrefix(rest, ".bin")
	} else {
		rest = strings.TrimSuffix(rest, ".bin") + ".safetensors"
	}
	prefix := c.prefix
	if prefix == torchPrefix {
		prefix = TransformersPrefix
	}
	return prefix + rest, true
}

// weightsLike reports whether an unrecognized file name looks like model
// weights or an index, so it is worth listing as ignored.
func weightsLike(name string) bool {
	lower := strings.ToLower(name)
	for _, ext := range []string{".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".msgpack", ".h5", ".gguf", ".onnx", ".pb", ".ot", ".npz", ".zst", ".bak", ".tmp"} {
		if strings.HasSuffix(lower, ext) {
			return true
		}
	}
	return strings.Contains(lower, ".safetensors") || strings.HasSuffix(lower, "index.json")
}

func describeVariant(v string) string {
	if v == "" {
		return "untagged"
	}
	return "variant " + strconv.Quote(v)
}

// currentShardName is the current-format name of a shard, for warnings.
func currentShardName(format, prefix, variant string) string {
	return inFormat(format, strings.Replace(setname.ShardName(prefix, variant, 1, 1), "-00001-of-00001.", "-00001-of-0000N.", 1))
}

func currentIndexName(format, prefix, variant string) string {
	return inFormat(format, setname.IndexName(prefix, variant))
}

// inFormat turns a safetensors name of package setname into the name of
// the same file in format: ".safetensors" becomes the format's extension.
func inFormat(format, name string) string {
	for _, f := range formats {
		if f.name == format {
			return strings.Replace(name, ".safetensors", f.ext, 1)
		}
	}
	return name
}

// pyTorchEndings are the endings of the names of PyTorch checkpoint files
// and indexes, longest first.
var pyTorchEndings = []string{".bin.index.json", ".pt.index.json", ".bin", ".pt", ".pth", ".ckpt"}

// TrimPyTorchName returns a file name without the ending that names it a
// PyTorch checkpoint (".bin", ".pt", ".pth", ".ckpt") or a PyTorch index
// (".bin.index.json", ".pt.index.json"), compared without case: the name
// stem, and whether name has such an ending.
func TrimPyTorchName(name string) (stem string, ok bool) {
	l := strings.ToLower(name)
	for _, e := range pyTorchEndings {
		if strings.HasSuffix(l, e) {
			return name[:len(name)-len(e)], true
		}
	}
	return name, false
}

// IsPyTorchName reports whether a file's name (a path or a base name)
// names a PyTorch checkpoint file or index: by its ending
// (TrimPyTorchName), or as the naming rules of ResolveComponent name
// PyTorch weights (a variant's index, pytorch_model.bin.index.fp16.json).
// It is the one rule by which ckpt tells PyTorch files from safetensors
// ones by name.
func IsPyTorchName(name string) bool {
	_, ok := TrimPyTorchName(name)
	return ok || FormatOf(path.Base(name)) == FormatPyTorch
}
