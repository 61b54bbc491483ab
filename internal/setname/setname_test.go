package setname

import "testing"

func TestNames(t *testing.T) {
	for _, c := range []struct {
		name string
		want File
	}{
		{"model.safetensors", File{"model", "", Single}},
		{"model.fp16.safetensors", File{"model", "fp16", Single}},
		{"model.safetensors.index.json", File{"model", "", Index}},
		{"diffusion_pytorch_model.safetensors.index.fp16.json", File{"diffusion_pytorch_model", "fp16", Index}},
		{"model.safetensors.fp16.index.json", File{"model", "fp16", LegacyIndex}},
		{"model-00001-of-00003.safetensors", File{"model", "", Shard}},
		{"model.fp16-00001-of-00003.safetensors", File{"model", "fp16", Shard}},
		{"model-00001-of-00003.fp16.safetensors", File{"model", "fp16", LegacyShard}},
		{"model-00001-of-00003.swap-0123456789ab.safetensors", File{"model", "", SwapShard}},
		{".model.safetensors.tmp-123", File{"model", "", Temp}},
		{".model-00001-of-00003.safetensors.old-0123456789ab", File{"model", "", Backup}},
		{".model.fp16.safetensors.lock", File{"model", "fp16", Lock}},
	} {
		if got, ok := Parse(c.name); !ok || got != c.want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", c.name, got, ok, c.want)
		}
	}
	for _, n := range []string{"config.json", ".model.safetensors.index.json.lock", "model.bin"} {
		if f, ok := Parse(n); ok {
			t.Errorf("Parse(%q) = %+v", n, f)
		}
	}
	if got := ShardName("model", "fp16", 2, 3); got != "model.fp16-00002-of-00003.safetensors" {
		t.Errorf("ShardName = %q", got)
	}
	if got := SwapName("model-00002-of-00003.safetensors", "0123456789ab"); got != "model-00002-of-00003.swap-0123456789ab.safetensors" {
		t.Errorf("SwapName = %q", got)
	}
	if SingleName("m", "") != "m.safetensors" || IndexName("m", "v") != "m.safetensors.index.v.json" {
		t.Error("SingleName or IndexName")
	}
	if !Member("model-00001-of-00002.fp16.safetensors", "model", "fp16") || Member("model.fp16.safetensors", "model", "") {
		t.Error("Member")
	}
}
