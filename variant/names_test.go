package variant

import (
	"fmt"
	"testing"
)

// format rebuilds a file name from a classified candidate.
func format(c candidate) string {
	ext := ".safetensors"
	if c.format == FormatPyTorch {
		ext = ".bin"
	}
	num := fmt.Sprintf("%05d-of-%05d", c.num, c.of)
	if c.swap != "" {
		num += ".swap-" + c.swap
	}
	switch {
	case c.kind == kindSingle && c.variant == "":
		return c.prefix + ext
	case c.kind == kindSingle:
		return c.prefix + "." + c.variant + ext
	case c.kind == kindIndex && c.variant == "":
		return c.prefix + ext + ".index.json"
	case c.kind == kindIndex && c.legacy:
		return c.prefix + ext + "." + c.variant + ".index.json"
	case c.kind == kindIndex:
		return c.prefix + ext + ".index." + c.variant + ".json"
	case c.variant == "":
		return c.prefix + "-" + num + ext
	case c.legacy:
		return c.prefix + "-" + num + "." + c.variant + ext
	default:
		return c.prefix + "." + c.variant + "-" + num + ext
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ok      bool
		kind    fileKind
		variant string
		legacy  bool
		swap    string
	}{
		{"model.safetensors", true, kindSingle, "", false, ""},
		{"model.fp16.safetensors", true, kindSingle, "fp16", false, ""},
		{"diffusion_pytorch_model.bf16.safetensors", true, kindSingle, "bf16", false, ""},
		{"model.safetensors.index.json", true, kindIndex, "", false, ""},
		{"model.safetensors.index.fp16.json", true, kindIndex, "fp16", false, ""},
		{"model.safetensors.fp16.index.json", true, kindIndex, "fp16", true, ""},
		{"model-00001-of-00002.safetensors", true, kindShard, "", false, ""},
		{"model.fp16-00001-of-00002.safetensors", true, kindShard, "fp16", false, ""},
		{"model-00001-of-00002.fp16.safetensors", true, kindShard, "fp16", true, ""},
		{"model.FP16.safetensors", true, kindSingle, "FP16", false, ""},
		{"model.fp16x.safetensors", true, kindSingle, "fp16x", false, ""},
		{"model-1-of-2.safetensors", false, 0, "", false, ""},
		{"model.fp-16.safetensors", false, 0, "", false, ""},
		{"model.safetensors.bak", false, 0, "", false, ""},
		{"pytorch_model.safetensors", false, 0, "", false, ""},
		{"model.bin", false, 0, "", false, ""},
		{"Model.safetensors", false, 0, "", false, ""},
		{"model..safetensors", false, 0, "", false, ""},
		{"model.safetensors.index.json.tmp", false, 0, "", false, ""},
		{"model-00001-of-00002.swap-0123456789ab.safetensors", true, kindShard, "", false, "0123456789ab"},
		{"model.fp16-00001-of-00002.swap-0123456789ab.safetensors", true, kindShard, "fp16", false, "0123456789ab"},
		{"model-00001-of-00002.swap-0123456789AB.safetensors", false, 0, "", false, ""},
		{"model-00001-of-00002.swap-0123.safetensors", false, 0, "", false, ""},
		{"model-00001-of-00002.fp16.swap-0123456789ab.safetensors", false, 0, "", false, ""},
	} {
		c, ok := classify(tc.name)
		if ok != tc.ok || c.kind != tc.kind || c.variant != tc.variant || c.legacy != tc.legacy || c.swap != tc.swap {
			t.Errorf("classify(%q) = %+v, %v", tc.name, c, ok)
		}
	}
}

// FuzzClassify: every recognized name is exactly one of the naming rules
// (rebuilding it from its parts gives the same name) and has a valid
// variant.
func FuzzClassify(f *testing.F) {
	for _, s := range []string{"model.safetensors", "model.fp16-00001-of-00002.safetensors", "model-00001-of-00002.fp16.safetensors",
		"diffusion_pytorch_model.safetensors.bf16.index.json", "model.safetensors.index.index.json", "model.x.y.safetensors",
		"model.fp16-00001-of-00002.swap-0123456789ab.safetensors", "pytorch_model.bin.index.fp16.json", "pytorch_model-00001-of-00002.fp16.bin",
		"diffusion_pytorch_model.bin.bin.index.json", "pytorch_model.safetensors.bin"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		c, ok := classify(name)
		if !ok {
			return
		}
		if c.variant != "" && !ValidName(c.variant) {
			t.Fatalf("%q: invalid variant %q", name, c.variant)
		}
		if got := format(c); got != name {
			t.Fatalf("%q classified as %+v, which formats as %q", name, c, got)
		}
		// A PyTorch name's safetensors name is the same file of the same
		// set in the other format.
		st, ok := SafetensorsName(name)
		if ok != (c.format == FormatPyTorch) {
			t.Fatalf("%q (%s): SafetensorsName ok %v", name, c.format, ok)
		}
		if sc, isST := classify(st); ok && (!isST || sc.format != FormatSafetensors || sc.kind != c.kind || sc.variant != c.variant || sc.legacy != c.legacy || sc.num != c.num || sc.of != c.of) {
			t.Fatalf("%q: safetensors name %q is %+v", name, st, sc)
		}
	})
}
