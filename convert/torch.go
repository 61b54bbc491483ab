package convert

import "strings"

// torchExts are the endings of PyTorch weights files and indexes, longest
// first.
var torchExts = []string{".bin.index.json", ".pt.index.json", ".bin", ".pt", ".pth", ".ckpt"}

// torchNaming returns the safetensors name that a source's weights file
// stands for: a PyTorch file's (pytorch_model[-0000k-of-0000n].bin and
// its index become model.safetensors, diffusion_pytorch_model.bin
// diffusion_pytorch_model.safetensors, X.pt X.safetensors), and any other
// name as it is. The loader decides what a PyTorch source is (ckpt.Open);
// this is only how its output is named.
func torchNaming(base string) string {
	stem := ""
	for _, ext := range torchExts {
		if strings.HasSuffix(strings.ToLower(base), ext) {
			stem = base[:len(base)-len(ext)]
			break
		}
	}
	if stem == "" {
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
