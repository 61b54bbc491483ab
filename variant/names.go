package variant

import (
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
}

var patterns = func() []pattern {
	var ps []pattern
	for _, p := range prefixes {
		q := regexp.QuoteMeta(p)
		mk := func(expr string, k fileKind, legacy bool, varIdx, numIdx int) pattern {
			return pattern{re: regexp.MustCompile(`^` + q + expr + `$`), kind: k, legacy: legacy, varIdx: varIdx, numIdx: numIdx, prefix: p}
		}
		// Order matters where names overlap: current names come first.
		ps = append(ps,
			mk(`\.safetensors`, kindSingle, false, 0, 0),
			mk(`\.safetensors\.index\.json`, kindIndex, false, 0, 0),
			mk(`\.safetensors\.index\.`+v+`\.json`, kindIndex, false, 1, 0),
			mk(`\.safetensors\.`+v+`\.index\.json`, kindIndex, true, 1, 0),
			mk(`-`+nn+`\.safetensors`, kindShard, false, 0, 1),
			mk(`\.`+v+`-`+nn+`\.safetensors`, kindShard, false, 1, 2),
			mk(`-`+nn+`\.`+v+`\.safetensors`, kindShard, true, 3, 1),
			swapped(mk(`-`+nn+swap+`\.safetensors`, kindShard, false, 0, 1)),
			swapped(mk(`\.`+v+`-`+nn+swap+`\.safetensors`, kindShard, false, 1, 2)),
			mk(`\.`+v+`\.safetensors`, kindSingle, false, 1, 0),
		)
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
		c := candidate{name: name, prefix: p.prefix, kind: p.kind, legacy: p.legacy}
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
func currentShardName(prefix, variant string) string {
	return strings.Replace(setname.ShardName(prefix, variant, 1, 1), "-00001-of-00001.", "-00001-of-0000N.", 1)
}

func currentIndexName(prefix, variant string) string { return setname.IndexName(prefix, variant) }
