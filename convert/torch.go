package convert

import (
	"strings"

	"github.com/ckpt-go/ckpt/internal/setname"
	"github.com/ckpt-go/ckpt/variant"
)

// torchNaming returns the safetensors name that a source's weights file
// stands for: a PyTorch file's (package variant's names for PyTorch
// weights, variants kept: pytorch_model.fp16.bin becomes
// model.fp16.safetensors, the index pytorch_model.bin.index.fp16.json
// model.safetensors.index.fp16.json, a shard its set's single name;
// otherwise X.pt becomes X.safetensors), and any other name as it is.
// The loader decides what a PyTorch source is (ckpt.Open); this is only
// how its output is named.
func torchNaming(base string) string {
	if n, ok := variant.SafetensorsName(base); ok {
		// PyTorch weights as transformers and diffusers name them,
		// variants included: a shard stands for its set.
		if f, ok := setname.ParseVisible(n); ok && f.IsShard() {
			return f.Target()
		}
		return n
	}
	stem, ok := variant.TrimPyTorchName(base)
	if !ok {
		return base
	}
	if m := shardRE.FindStringSubmatch(stem); m != nil && m[3] == "" {
		stem = m[1]
		if m[2] != "" {
			stem += "." + m[2]
		}
	}
	if stem == "pytorch_model" || strings.HasPrefix(stem, "pytorch_model.") {
		stem = "model" + strings.TrimPrefix(stem, "pytorch_model")
	}
	return stem + ".safetensors"
}
