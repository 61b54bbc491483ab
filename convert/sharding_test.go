package convert

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/testutil"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/shard"
)

var shardPartRE = regexp.MustCompile(`-(\d{5})-of-(\d{5})`)

// shardNum returns the "00002-of-00003" of a shard's name ("" for a single
// file).
func shardNum(name string) string {
	if m := shardPartRE.FindStringSubmatch(name); m != nil {
		return m[1] + "-of-" + m[2]
	}
	return ""
}

// checkSharding checks the set that index names: every file holds exactly
// the tensors the weight map gives it, total_size is their data, and each
// tensor is in the shard of the same number as the source tensor it comes
// from (srcOf, default itself) in the source's weight map.
func checkSharding(t *testing.T, what, index string, srcMap map[string]string, srcOf func(string) string) {
	t.Helper()
	ix, err := shard.ReadIndex(index)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	files := map[string]bool{}
	for name, f := range ix.WeightMap {
		files[f] = true
		src := name
		if srcOf != nil {
			src = srcOf(name)
		}
		if sf, ok := srcMap[src]; !ok || shardNum(sf) != shardNum(f) {
			t.Errorf("%s: %s in %s, its source %s in %s", what, name, f, src, sf)
		}
	}
	srcFiles := map[string]bool{}
	for _, f := range srcMap {
		srcFiles[shardNum(f)] = true
	}
	if len(files) != len(srcFiles) {
		t.Errorf("%s: %d files, the source has %d", what, len(files), len(srcFiles))
	}
	var total int64
	for f := range files {
		sf, err := safetensors.Open(filepath.Join(filepath.Dir(index), f))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		for _, n := range sf.Names() {
			tn, _ := sf.Tensor(n)
			b, _ := tn.Bytes()
			total += int64(len(b))
			if ix.WeightMap[n] != f {
				t.Errorf("%s: %s is in %s, the index says %s", what, n, f, ix.WeightMap[n])
			}
		}
		if len(sf.Names()) == 0 {
			t.Errorf("%s: %s is empty", what, f)
		}
		sf.Close()
	}
	if ix.TotalSize != total {
		t.Errorf("%s: total_size %d, the shards hold %d bytes", what, ix.TotalSize, total)
	}
}

// loadAllStored loads every tensor of path (with opts) and returns their
// dtypes, shapes and bytes.
func loadAllStored(t *testing.T, path string, opts ...ckpt.Option) map[string]string {
	t.Helper()
	m, err := ckpt.Open(path, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	w, err := m.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	out := map[string]string{}
	for name, tn := range w.All() {
		out[name] = fmt.Sprintf("%s %v %s", tn.DType, tn.Shape, tn.Bytes())
	}
	return out
}

// A sharded folder converts to as many shards, each tensor in the shard of
// its source tensor (FP8 scales with their weights), the index rewritten;
// the converted files are not listed as left out.
func TestRunKeepsSourceShards(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	src := ckpttest.Dir(t, ckpttest.Weights{Tensors: llama(rng, dtype.BF16), Shards: 3})
	srcIndex, err := shard.ReadIndex(filepath.Join(src, "model.safetensors.index.json"))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(slices.Compact(slices.Sorted(maps.Values(srcIndex.WeightMap)))); n != 3 {
		t.Fatalf("the source has %d shards", n)
	}
	scaleOf := func(n string) string { return strings.TrimSuffix(n, "_scale") }

	// F32: the same tensors, in the same shards, as a direct load to F32.
	dst := filepath.Join(t.TempDir(), "f32")
	policy := ckpt.Policy{Default: target(t, "F32")}
	rep := run(t, src, dst, Options{Policy: policy})
	if len(rep.Skipped) != 0 || len(rep.Components[0].Files) != 3 || rep.Components[0].Index != "model.safetensors.index.json" {
		t.Errorf("F32: report %+v, skipped %v", rep.Components, rep.Skipped)
	}
	if s := rep.String(); strings.Contains(s, "left out") {
		t.Errorf("F32: the report says %q", s)
	}
	checkSharding(t, "F32", filepath.Join(dst, "model.safetensors.index.json"), srcIndex.WeightMap, nil)
	want := loadAllStored(t, src, ckpt.WithPolicy(policy))
	if got := loadAllStored(t, dst); !mapsEqual(got, want) {
		t.Errorf("F32: the output loads differently from a direct load with the policy")
	}

	// FP8 with block scales: each scale in its weight's shard; the values
	// are those of the same conversion into one file.
	dst = filepath.Join(t.TempDir(), "fp8")
	opts := Options{Policy: ckpt.Policy{Default: target(t, "F8_E4M3")}, Scale: Scale{Granularity: 3, Block: 16}}
	rep = run(t, src, dst, opts)
	if len(rep.Skipped) != 0 || len(rep.Components[0].Files) != 3 {
		t.Errorf("FP8: report %+v, skipped %v", rep.Components, rep.Skipped)
	}
	checkSharding(t, "FP8", filepath.Join(dst, "model.safetensors.index.json"), srcIndex.WeightMap, scaleOf)
	one := filepath.Join(t.TempDir(), "one")
	opts.MaxShardSize = 1 << 40
	run(t, src, one, opts)
	if files := testutil.Entries(t, one); !slices.Equal(files, []string{"model.safetensors"}) {
		t.Errorf("FP8 with a large MaxShardSize: %v", files)
	}
	if got, want := loadAllStored(t, dst), loadAllStored(t, one); !mapsEqual(got, want) {
		t.Errorf("FP8: the sharded output differs from the single file")
	}

	// BF16 as a variant beside the source: three shards of the variant.
	beside := ckpttest.Dir(t, ckpttest.Weights{Tensors: llama(rng, dtype.F32), Shards: 3})
	besideIndex, _ := shard.ReadIndex(filepath.Join(beside, "model.safetensors.index.json"))
	policy = ckpt.Policy{Default: target(t, "BF16")}
	rep = run(t, beside, beside, Options{Policy: policy, Variant: "bf16"})
	if len(rep.Skipped) != 0 || len(rep.Components[0].Files) != 3 || rep.Components[0].Index != "model.safetensors.index.bf16.json" {
		t.Errorf("BF16 beside: report %+v, skipped %v", rep.Components, rep.Skipped)
	}
	for _, f := range rep.Components[0].Files {
		if !strings.HasPrefix(f, "model.bf16-0000") {
			t.Errorf("BF16 beside: %s", f)
		}
	}
	checkSharding(t, "BF16 beside", filepath.Join(beside, "model.safetensors.index.bf16.json"), besideIndex.WeightMap, nil)
	want = loadAllStored(t, beside, ckpt.WithPolicy(policy))
	if got := loadAllStored(t, beside, ckpt.WithVariant("bf16")); !mapsEqual(got, want) {
		t.Errorf("BF16 beside: the variant loads differently from a direct load with the policy")
	}

	// MaxShardSize re-shards by size.
	dst = filepath.Join(t.TempDir(), "resharded")
	rep = run(t, src, dst, Options{Policy: ckpt.Policy{Default: target(t, "F32")}, MaxShardSize: 8000})
	if n := len(rep.Components[0].Files); n <= 3 {
		t.Errorf("MaxShardSize 8000: %d files", n)
	}
	if len(rep.Skipped) != 0 {
		t.Errorf("MaxShardSize: skipped %v", rep.Skipped)
	}
}

// A source whose third shard holds only the scales of weights that are
// dequantized converts to two shards; requantized, the new scales go with
// their weights.
func TestRunShardOfScalesOnly(t *testing.T) {
	rng := rand.New(rand.NewPCG(43, 44))
	fp8 := func(name string, shape ...int64) ckpttest.Tensor {
		b := make([]byte, shape[0]*shape[1])
		for i := range b {
			b[i] = byte(rng.UintN(0x70))
		}
		return ckpttest.Tensor{Name: name, DType: dtype.F8_E4M3, Shape: shape, Data: b}
	}
	scale := func(name string, shape ...int64) ckpttest.Tensor {
		b := make([]byte, 4*shape[0]*shape[1])
		for i := 0; i < len(b); i += 4 {
			putF32(b[i:], float32(rng.Float64()*0.01+1e-4))
		}
		return ckpttest.Tensor{Name: name, DType: dtype.F32, Shape: shape, Data: b}
	}
	src := t.TempDir()
	shards := map[string][]ckpttest.Tensor{
		"model-00001-of-00003.safetensors": {fp8("model.layers.0.mlp.down_proj.weight", 300, 200), randTensor(rng, "model.norm.weight", dtype.BF16, 128)},
		"model-00002-of-00003.safetensors": {fp8("model.layers.0.mlp.up_proj.weight", 128, 128), randTensor(rng, "lm_head.weight", dtype.BF16, 16, 128)},
		"model-00003-of-00003.safetensors": {scale("model.layers.0.mlp.down_proj.weight_scale_inv", 3, 2), scale("model.layers.0.mlp.up_proj.weight_scale_inv", 1, 1)},
	}
	weightMap := map[string]string{}
	for f, ts := range shards {
		if err := ckpttest.WriteFile(filepath.Join(src, f), ts, map[string]string{"format": "pt"}); err != nil {
			t.Fatal(err)
		}
		for _, tn := range ts {
			weightMap[tn.Name] = f
		}
	}
	if err := ckpttest.WriteIndex(filepath.Join(src, "model.safetensors.index.json"), weightMap, nil); err != nil {
		t.Fatal(err)
	}
	cfg := `{"model_type": "deepseek_v3", "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}}`
	if err := os.WriteFile(filepath.Join(src, "config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	// The source's weight map with the scales where their weights are.
	withWeights := map[string]string{}
	for n := range weightMap {
		withWeights[n] = weightMap[strings.TrimSuffix(n, "_scale_inv")]
	}

	dst := filepath.Join(t.TempDir(), "bf16")
	rep := run(t, src, dst, Options{Policy: ckpt.Policy{Default: target(t, "BF16")}})
	if len(rep.Dropped) != 2 || len(rep.Skipped) != 0 {
		t.Errorf("dequantized: dropped %v, skipped %v", rep.Dropped, rep.Skipped)
	}
	// Two shards, renumbered: model-0000k-of-00002.
	want := []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}
	if !slices.Equal(rep.Components[0].Files, want) {
		t.Errorf("dequantized: files %v, want %v", rep.Components[0].Files, want)
	}
	ix, err := shard.ReadIndex(filepath.Join(dst, "model.safetensors.index.json"))
	if err != nil {
		t.Fatal(err)
	}
	for n, f := range ix.WeightMap {
		if w := shardNum(weightMap[n])[:5]; shardNum(f)[:5] != w {
			t.Errorf("dequantized: %s in %s, its source in shard %s", n, f, w)
		}
	}

	// Kept in their layout, the weights and scales stay where they are.
	dst = filepath.Join(t.TempDir(), "kept")
	rep = run(t, src, dst, Options{Policy: ckpt.Policy{Default: target(t, "F8_E4M3")}, ScaleFormat: DeepSeek})
	if len(rep.Skipped) != 0 || len(rep.Components[0].Files) != 3 {
		t.Errorf("kept: files %v, skipped %v", rep.Components[0].Files, rep.Skipped)
	}
	checkSharding(t, "kept", filepath.Join(dst, "model.safetensors.index.json"), weightMap, nil)

	dst = filepath.Join(t.TempDir(), "fp8")
	rep = run(t, src, dst, Options{Policy: ckpt.Policy{Default: target(t, "F8_E5M2")}, ScaleFormat: DeepSeek, Scale: Scale{Granularity: 3, Block: 64}})
	if len(rep.Skipped) != 0 || !slices.Equal(rep.Components[0].Files, want) {
		t.Errorf("requantized: files %v, skipped %v", rep.Components[0].Files, rep.Skipped)
	}
	ix, err = shard.ReadIndex(filepath.Join(dst, "model.safetensors.index.json"))
	if err != nil {
		t.Fatal(err)
	}
	for n, f := range ix.WeightMap {
		if w := shardNum(withWeights[n])[:5]; shardNum(f)[:5] != w {
			t.Errorf("requantized: %s in %s, its weight in shard %s", n, f, w)
		}
	}
	var requantized int
	for _, tr := range rep.Tensors {
		if tr.Action == ActionRequantize {
			requantized++
		}
	}
	if len(ix.WeightMap) != 6 || requantized != 2 {
		t.Errorf("requantized %d: weight map %v", requantized, ix.WeightMap)
	}
}

// A sharded PyTorch checkpoint keeps its shards, named as safetensors
// shards; its .bin files and index are converted, not left out.
func TestRunTorchKeepsShards(t *testing.T) {
	dir := testutil.Fixtures(t, "torch", "cases.json")
	src := t.TempDir()
	for _, f := range []string{"pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin", "pytorch_model.bin.index.json"} {
		b, err := os.ReadFile(filepath.Join(dir, "sharded", f))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(src, f), b, 0o644)
	}
	dst := filepath.Join(t.TempDir(), "out")
	rep := run(t, src, dst, Options{Verify: true})
	want := []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}
	if !slices.Equal(rep.Components[0].Files, want) || len(rep.Skipped) != 0 {
		t.Errorf("files %v, skipped %v", rep.Components[0].Files, rep.Skipped)
	}
	var srcIndex struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if b, err := os.ReadFile(filepath.Join(src, "pytorch_model.bin.index.json")); err != nil || json.Unmarshal(b, &srcIndex) != nil {
		t.Fatalf("the source index: %v %s", err, b)
	}
	ix, err := shard.ReadIndex(filepath.Join(dst, "model.safetensors.index.json"))
	if err != nil {
		t.Fatal(err)
	}
	for n, f := range ix.WeightMap {
		if sf, ok := srcIndex.WeightMap[n]; !ok || shardNum(sf) != shardNum(f) {
			t.Errorf("%s in %s, its source in %s", n, f, sf)
		}
	}
	if !bytes.Contains([]byte(rep.String()), []byte("model-00002-of-00002.safetensors")) {
		t.Errorf("report %s", rep)
	}
}
