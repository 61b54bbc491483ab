package main

import (
	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/quant"
)

// writeSample writes a small diffusers pipeline under root with the public
// builders of ckpttest (deterministic tensor contents) and quant:
//
//	transformer/    F32 weights in two shards with an index, a BF16
//	                single-file variant and an FP8 variant in DeepSeek's
//	                block-scaled layout (F8_E4M3 P.weight, F32
//	                P.weight_scale_inv per 16×16 block), declared by a
//	                quantization_config in the file's __metadata__
//	text_encoder/   F32 weights and a BF16 variant
//	image_encoder/  F32 convolution weights only (no variants)
//	scheduler/      configuration only, no weights
func writeSample(root string) error {
	transformer := ckpttest.MustParseTensors(`
		blocks.0.attn.qkv.weight:F32[48,16] blocks.0.attn.qkv.bias:F32[48] blocks.0.attn.out.weight:F32[16,16]
		blocks.0.mlp.fc1.weight:F32[64,16] blocks.0.mlp.fc2.weight:F32[16,64]
		blocks.1.attn.qkv.weight:F32[48,16] blocks.1.attn.qkv.bias:F32[48] blocks.1.attn.out.weight:F32[16,16]
		blocks.1.mlp.fc1.weight:F32[64,16] blocks.1.mlp.fc2.weight:F32[16,64]
		norm_out.weight:F32[16] proj_out.weight:F32[4,16]`)
	transformerBF16, err := as(transformer, dtype.BF16)
	if err != nil {
		return err
	}
	fp8, err := fp8BlockScaled(transformer, 16)
	if err != nil {
		return err
	}
	textEncoder := ckpttest.MustParseTensors(`
		embeddings.token_embedding.weight:F32[32,16] encoder.layers.0.self_attn.q_proj.weight:F32[16,16]
		encoder.layers.0.self_attn.k_proj.weight:F32[16,16] encoder.layers.0.self_attn.v_proj.weight:F32[16,16]
		encoder.layers.0.mlp.fc1.weight:F32[32,16] final_layer_norm.weight:F32[16]`)
	textEncoderBF16, err := as(textEncoder, dtype.BF16)
	if err != nil {
		return err
	}
	imageEncoder := ckpttest.MustParseTensors(`
		conv1.weight:F32[8,3,3,3] conv1.bias:F32[8] conv2.weight:F32[16,8,3,3] conv2.bias:F32[16] proj.weight:F32[16,64]`)

	meta := map[string]string{"format": "pt"}
	return ckpttest.WritePipeline(root, ckpttest.Pipeline{
		Class: "DemoPipeline",
		Components: []ckpttest.Component{{
			Name: "transformer", Class: "DemoTransformer2DModel",
			Weights: []ckpttest.Weights{
				{Prefix: ckpttest.DiffusersPrefix, Shards: 2, Tensors: transformer, Metadata: meta},
				{Prefix: ckpttest.DiffusersPrefix, Variant: "bf16", Tensors: transformerBF16, Metadata: meta},
				{Prefix: ckpttest.DiffusersPrefix, Variant: "fp8", Tensors: fp8, Metadata: map[string]string{
					"format": "pt",
					// The declaration DeepSeek-V3 puts in config.json; here the
					// variants share config.json, so it lives with the file.
					"quantization_config": `{"activation_scheme":"dynamic","fmt":"e4m3","quant_method":"fp8","weight_block_size":[16,16]}`,
				}},
			},
			Files: map[string]string{"config.json": `{"_class_name": "DemoTransformer2DModel", "num_layers": 2, "hidden_size": 16}` + "\n"},
		}, {
			Name: "text_encoder", Library: "transformers", Class: "DemoTextModel",
			Weights: []ckpttest.Weights{
				{Tensors: textEncoder, Metadata: meta},
				{Variant: "bf16", Tensors: textEncoderBF16, Metadata: meta},
			},
			Files: map[string]string{"config.json": `{"architectures": ["DemoTextModel"], "hidden_size": 16}` + "\n"},
		}, {
			Name: "image_encoder", Library: "transformers", Class: "DemoVisionModel",
			Weights: []ckpttest.Weights{{Tensors: imageEncoder, Metadata: meta}},
			Files:   map[string]string{"config.json": `{"architectures": ["DemoVisionModel"], "num_channels": 3}` + "\n"},
		}, {
			Name: "scheduler", Class: "FlowMatchEulerDiscreteScheduler",
			Files: map[string]string{"scheduler_config.json": `{"_class_name": "FlowMatchEulerDiscreteScheduler", "num_train_timesteps": 1000}` + "\n"},
		}},
	})
}

// as returns the F32 tensors ts converted to dt (rounded to nearest): a
// variant holds the same weights in another precision.
func as(ts []ckpttest.Tensor, dt dtype.DType) ([]ckpttest.Tensor, error) {
	out := make([]ckpttest.Tensor, len(ts))
	for i, t := range ts {
		src, err := t.Contents()
		if err != nil {
			return nil, err
		}
		dst := make([]byte, len(src)/4*dt.Bits()/8)
		if _, err := dtype.Convert(dst, dt, src, dtype.F32, dtype.Options{}); err != nil {
			return nil, err
		}
		out[i] = ckpttest.Tensor{Name: t.Name, DType: dt, Shape: t.Shape, Data: dst}
	}
	return out, nil
}

// fp8BlockScaled quantizes each 2-D F32 weight P.weight to F8_E4M3 in
// DeepSeek's layout: per block×block block an F32 P.weight_scale_inv, so
// that weight ≈ fp8 × scale_inv. Other tensors (biases, norms) stay F32.
func fp8BlockScaled(ts []ckpttest.Tensor, block int64) ([]ckpttest.Tensor, error) {
	var out []ckpttest.Tensor
	for _, t := range ts {
		if len(t.Shape) != 2 {
			out = append(out, t)
			continue
		}
		raw, err := t.Contents()
		if err != nil {
			return nil, err
		}
		v := make([]float32, len(raw)/4)
		if _, err := dtype.DecodeFloat32(v, raw, dtype.F32); err != nil {
			return nil, err
		}
		q, err := quant.NewFP8Quantizer(dtype.F8_E4M3, t.Shape, quant.PerBlock, block)
		if err != nil {
			return nil, err
		}
		if err := q.Observe(0, v); err != nil {
			return nil, err
		}
		codes := make([]byte, len(v))
		if _, err := q.Quantize(codes, 0, v, dtype.Options{}); err != nil {
			return nil, err
		}
		out = append(out,
			ckpttest.Tensor{Name: t.Name, DType: dtype.F8_E4M3, Shape: t.Shape, Data: codes},
			ckpttest.Tensor{Name: t.Name + "_scale_inv", DType: dtype.F32, Shape: q.ScaleShape(), Data: dtype.Float32Bytes(q.Scales())})
	}
	return out, nil
}
