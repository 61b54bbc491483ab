// Package sample writes the small, deterministic pipeline checkpoint that
// `ckpt demo` runs on. The bytes are generated, never hand-made: run
// `go generate ./cmd/ckpt` to rewrite cmd/ckpt/sample, and the cmd/ckpt
// tests fail if the committed copy differs from what Write produces.
//
// The layout reproduces the cases ckpt exists for:
//
//	model_index.json                 lists transformer, text_encoder, image_encoder, scheduler
//	transformer/                     F32 weights sharded in two files with an index, beside a
//	                                 BF16 single-file variant and an FP8 variant: the folder
//	                                 diffusers once loaded mixed. The FP8 file is DeepSeek's
//	                                 block-scaled layout (F8_E4M3 P.weight, F32
//	                                 P.weight_scale_inv per 16×16 block), declared by a
//	                                 quantization_config in its __metadata__ (the variants
//	                                 share config.json, so the declaration lives with the file)
//	text_encoder/                    F32 and BF16 weights; holds calibration activations
//	                                 beyond F16's range (65504)
//	image_encoder/                   F32 convolution weights only (no variants): a component
//	                                 that must stay F32 while the rest is narrowed
//	scheduler/                       configuration only, no weights
package sample

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/shard"
)

// tensorDef describes one F32 tensor of the sample.
type tensorDef struct {
	name  string
	shape []int64
	scale float64   // magnitude of the pseudo-random values
	spike []float32 // values written at the start (outliers)
}

var transformerTensors = []tensorDef{
	{name: "blocks.0.attn.qkv.weight", shape: []int64{48, 16}, scale: 0.25},
	{name: "blocks.0.attn.qkv.bias", shape: []int64{48}, scale: 0.01},
	{name: "blocks.0.attn.out.weight", shape: []int64{16, 16}, scale: 0.25},
	{name: "blocks.0.mlp.fc1.weight", shape: []int64{64, 16}, scale: 0.2},
	{name: "blocks.0.mlp.fc2.weight", shape: []int64{16, 64}, scale: 0.2},
	{name: "blocks.1.attn.qkv.weight", shape: []int64{48, 16}, scale: 0.25},
	{name: "blocks.1.attn.qkv.bias", shape: []int64{48}, scale: 0.01},
	{name: "blocks.1.attn.out.weight", shape: []int64{16, 16}, scale: 0.25},
	{name: "blocks.1.mlp.fc1.weight", shape: []int64{64, 16}, scale: 0.2},
	// Outliers past F8_E4M3's 448: NaN without saturation, ±448 with it.
	{name: "blocks.1.mlp.fc2.weight", shape: []int64{16, 64}, scale: 0.2, spike: []float32{500, -1000, 464, 460}},
	{name: "norm_out.weight", shape: []int64{16}, scale: 1},
	{name: "proj_out.weight", shape: []int64{4, 16}, scale: 0.5},
}

var textEncoderTensors = []tensorDef{
	{name: "embeddings.token_embedding.weight", shape: []int64{32, 16}, scale: 0.5},
	{name: "encoder.layers.0.self_attn.q_proj.weight", shape: []int64{16, 16}, scale: 0.25},
	{name: "encoder.layers.0.self_attn.k_proj.weight", shape: []int64{16, 16}, scale: 0.25},
	{name: "encoder.layers.0.self_attn.v_proj.weight", shape: []int64{16, 16}, scale: 0.25},
	{name: "encoder.layers.0.mlp.fc1.weight", shape: []int64{32, 16}, scale: 0.2},
	{name: "final_layer_norm.weight", shape: []int64{16}, scale: 1},
	// Activations recorded for calibration; some exceed F16's 65504.
	{name: "calibration.activations", shape: []int64{8, 16}, scale: 2000, spike: []float32{70000, -123456, 65504, 65520, 1e-8}},
}

var imageEncoderTensors = []tensorDef{
	{name: "conv1.weight", shape: []int64{8, 3, 3, 3}, scale: 0.3},
	{name: "conv1.bias", shape: []int64{8}, scale: 0.01},
	{name: "conv2.weight", shape: []int64{16, 8, 3, 3}, scale: 0.1},
	{name: "conv2.bias", shape: []int64{16}, scale: 0.01},
	{name: "proj.weight", shape: []int64{16, 64}, scale: 0.1},
}

// values returns the deterministic F32 contents of a tensor: a splitmix64
// stream seeded by the tensor name, mapped to [-scale, scale).
func (d tensorDef) values() []float32 {
	n := int64(1)
	for _, s := range d.shape {
		n *= s
	}
	seed := uint64(0x9E3779B97F4A7C15)
	for _, c := range []byte(d.name) {
		seed = (seed ^ uint64(c)) * 0x100000001B3
	}
	out := make([]float32, n)
	for i := range out {
		seed += 0x9E3779B97F4A7C15
		z := seed
		z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
		z = (z ^ (z >> 27)) * 0x94D049BB133111EB
		z ^= z >> 31
		u := float64(z>>11) / (1 << 53) // [0, 1)
		out[i] = float32((2*u - 1) * d.scale)
	}
	copy(out, d.spike)
	return out
}

func f32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// build returns the tensors of defs in dtype to (converted from F32 with
// saturation, so that the FP8 sample holds no NaN).
func build(defs []tensorDef, to dtype.DType) ([]safetensors.TensorData, error) {
	out := make([]safetensors.TensorData, 0, len(defs))
	for _, d := range defs {
		src := f32Bytes(d.values())
		n := int64(len(src) / 4)
		size, err := to.ByteLen(n)
		if err != nil {
			return nil, err
		}
		dst := make([]byte, size)
		if _, err := dtype.Convert(dst, to, src, dtype.F32, dtype.Options{Saturate: true, Workers: 1}); err != nil {
			return nil, fmt.Errorf("sample: %s: %w", d.name, err)
		}
		out = append(out, safetensors.TensorData{Name: d.name, DType: to, Shape: d.shape, Data: dst})
	}
	return out, nil
}

// fp8BlockSize is the FP8 variant's block: one scale per 16×16 block of a
// weight (DeepSeek-V3 uses 128×128; the sample's weights are smaller).
const fp8BlockSize = 16

// fp8QuantizationConfig declares the FP8 variant's layout the way
// DeepSeek-V3's config.json does (quant_method "fp8", E4M3, dynamic
// activations, weight_block_size).
const fp8QuantizationConfig = `{"activation_scheme":"dynamic","fmt":"e4m3","quant_method":"fp8","weight_block_size":[16,16]}`

// fp8BlockScaled quantizes each 2-D weight P.weight [out,in] to F8_E4M3 in
// DeepSeek's layout: per 16×16 block an F32 P.weight_scale_inv =
// max|w|/448 over the block (1 for an all-zero block), the stored value
// fp8(w / scale_inv) with saturation, so that w ≈ fp8 × scale_inv. Blocks at
// the far edges may be partial. Other tensors stay F32.
func fp8BlockScaled(defs []tensorDef) ([]safetensors.TensorData, error) {
	var out []safetensors.TensorData
	for _, d := range defs {
		vals := d.values()
		if len(d.shape) != 2 {
			out = append(out, safetensors.TensorData{Name: d.name, DType: dtype.F32, Shape: d.shape, Data: f32Bytes(vals)})
			continue
		}
		rows, cols := int(d.shape[0]), int(d.shape[1])
		br, bc := (rows+fp8BlockSize-1)/fp8BlockSize, (cols+fp8BlockSize-1)/fp8BlockSize
		scales := make([]float32, br*bc)
		for i := range br {
			for j := range bc {
				var maxAbs float64
				for r := i * fp8BlockSize; r < min((i+1)*fp8BlockSize, rows); r++ {
					for c := j * fp8BlockSize; c < min((j+1)*fp8BlockSize, cols); c++ {
						maxAbs = math.Max(maxAbs, math.Abs(float64(vals[r*cols+c])))
					}
				}
				scales[i*bc+j] = 1
				if maxAbs > 0 {
					scales[i*bc+j] = float32(maxAbs / 448)
				}
			}
		}
		scaled := make([]float32, len(vals))
		for r := range rows {
			for c := range cols {
				scaled[r*cols+c] = vals[r*cols+c] / scales[(r/fp8BlockSize)*bc+c/fp8BlockSize]
			}
		}
		q := make([]byte, len(vals))
		if _, err := dtype.Convert(q, dtype.F8_E4M3, f32Bytes(scaled), dtype.F32, dtype.Options{Saturate: true, Workers: 1}); err != nil {
			return nil, fmt.Errorf("sample: %s: %w", d.name, err)
		}
		out = append(out,
			safetensors.TensorData{Name: d.name, DType: dtype.F8_E4M3, Shape: d.shape, Data: q},
			safetensors.TensorData{Name: d.name + "_scale_inv", DType: dtype.F32, Shape: []int64{int64(br), int64(bc)}, Data: f32Bytes(scales)})
	}
	return out, nil
}

// Write generates the sample pipeline into dir (created if needed).
// Existing files of the same names are replaced; the output is the same
// bytes on every run.
func Write(dir string) error {
	ctx := context.Background()
	meta := map[string]string{"format": "pt", "generator": "ckpt internal/sample"}
	files := map[string]any{
		"model_index.json": map[string]any{
			"_class_name":        "DemoPipeline",
			"_diffusers_version": "0.31.0",
			"transformer":        []string{"diffusers", "DemoTransformer2DModel"},
			"text_encoder":       []string{"transformers", "DemoTextModel"},
			"image_encoder":      []string{"transformers", "DemoVisionModel"},
			"scheduler":          []string{"diffusers", "FlowMatchEulerDiscreteScheduler"},
		},
		"transformer/config.json":         map[string]any{"_class_name": "DemoTransformer2DModel", "num_layers": 2, "hidden_size": 16},
		"text_encoder/config.json":        map[string]any{"architectures": []string{"DemoTextModel"}, "hidden_size": 16},
		"image_encoder/config.json":       map[string]any{"architectures": []string{"DemoVisionModel"}, "num_channels": 3},
		"scheduler/scheduler_config.json": map[string]any{"_class_name": "FlowMatchEulerDiscreteScheduler", "num_train_timesteps": 1000},
	}
	for name, v := range files {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}

	// transformer: F32 in two shards + index, BF16 single file, FP8 single file.
	f32, err := build(transformerTensors, dtype.F32)
	if err != nil {
		return err
	}
	tdir := filepath.Join(dir, "transformer")
	if _, err := shard.Write(ctx, tdir, "diffusion_pytorch_model", "", f32, meta, shard.WithMaxShardSize(16384)); err != nil {
		return err
	}
	bf16, err := build(transformerTensors, dtype.BF16)
	if err != nil {
		return err
	}
	if err := safetensors.Save(ctx, filepath.Join(tdir, "diffusion_pytorch_model.bf16.safetensors"), bf16, meta); err != nil {
		return err
	}
	fp8, err := fp8BlockScaled(transformerTensors)
	if err != nil {
		return err
	}
	fp8Meta := map[string]string{"format": "pt", "generator": "ckpt internal/sample", "quantization_config": fp8QuantizationConfig}
	if err := safetensors.Save(ctx, filepath.Join(tdir, "diffusion_pytorch_model.fp8.safetensors"), fp8, fp8Meta); err != nil {
		return err
	}

	// text_encoder: F32 and BF16 single files.
	for _, v := range []struct {
		file string
		dt   dtype.DType
	}{{"model.safetensors", dtype.F32}, {"model.bf16.safetensors", dtype.BF16}} {
		ts, err := build(textEncoderTensors, v.dt)
		if err != nil {
			return err
		}
		if err := safetensors.Save(ctx, filepath.Join(dir, "text_encoder", v.file), ts, meta); err != nil {
			return err
		}
	}

	// image_encoder: F32 only.
	img, err := build(imageEncoderTensors, dtype.F32)
	if err != nil {
		return err
	}
	return safetensors.Save(ctx, filepath.Join(dir, "image_encoder", "model.safetensors"), img, meta)
}
