package variant_test

import (
	"testing"

	"github.com/ckpt-go/ckpt/variant"
)

func TestTrimPyTorchName(t *testing.T) {
	for _, c := range []struct {
		name, stem string
		ok         bool
	}{
		{"pytorch_model.bin", "pytorch_model", true},
		{"model.PT", "model", true},
		{"x.pth", "x", true},
		{"sd.ckpt", "sd", true},
		{"pytorch_model.bin.index.json", "pytorch_model", true},
		{"m.pt.index.json", "m", true},
		{"model.safetensors", "model.safetensors", false},
		{"model.safetensors.index.json", "model.safetensors.index.json", false},
		{"bin", "bin", false},
	} {
		if stem, ok := variant.TrimPyTorchName(c.name); stem != c.stem || ok != c.ok {
			t.Errorf("TrimPyTorchName(%q) = %q, %v; want %q, %v", c.name, stem, ok, c.stem, c.ok)
		}
		if got := variant.IsPyTorchName("dir/" + c.name); got != c.ok {
			t.Errorf("IsPyTorchName(dir/%s) = %v", c.name, got)
		}
	}
}

func TestIsPyTorchNameVariantIndex(t *testing.T) {
	if !variant.IsPyTorchName("pytorch_model.bin.index.fp16.json") || variant.IsPyTorchName("model.safetensors.index.fp16.json") {
		t.Error("a variant's PyTorch index is named by package variant's rules")
	}
}
