// Package quant recognizes the scaled low-precision layouts of checkpoints
// found in the wild and computes the logical tensors they stand for.
//
// Detect looks at one component's stored tensors (names, dtypes, shapes:
// the headers) and its configuration texts, never at file names, and
// returns a Scheme: the logical quantized Weights, which stored tensors they
// consume, the activation scales kept for the caller, and what it could not
// interpret. Weight.Dequantize turns a weight's raw bytes into its logical
// tensor in any float dtype.
//
// # Layouts
//
// P is a module name ("model.layers.0.mlp.down_proj"); [R, C] is the
// logical tensor viewed as a matrix (C its last dimension). q is the exact
// value of a narrow code: F8_E4M3 (0x80 is −0, 0x7F/0xFF NaN), F8_E5M2, or
// E2M1 (F4: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and negatives, code 8 is −0) stored
// two per byte, element 2i in the low nibble.
//
//   - deepseek-fp8-block (config quant_method "fp8", DeepSeek-V3/R1):
//     P.weight F8_E4M3 [out,in], P.weight_scale_inv F32 [ceil(out/B0),
//     ceil(in/B1)], B = weight_block_size, [128,128] when the config omits
//     it; edge blocks may be partial. value = q × scale_inv (a product,
//     despite the name). Without any config, taken only when the shapes
//     determine B (ErrInvalidLayout otherwise: "block size unknown").
//   - fp8-scaled (quant_method "fp8" with P.weight_scale, AutoFP8): value =
//     q × scale, the scale per tensor ([] or [1]) or per row ([out,1]).
//   - compressed-tensors-fp8 (quant_method "compressed-tensors", format
//     "float-quantized"): P.weight FP8 and P.weight_scale (F32, BF16 or
//     F16) per tensor, channel ([out,1]), group ([out, in/g]) or block
//     (strategy "block", block_structure [B0,B1]) as the config group that
//     targets P declares (exact name, then "re:" regular expression, then
//     a class name such as "Linear"). value = q × scale.
//   - compressed-tensors-nvfp4 (format "nvfp4-pack-quantized"):
//     P.weight_packed U8 [out, in/2], P.weight_scale F8_E4M3 [out, in/16],
//     P.weight_global_scale F32 [1]. value = q × scale ÷ global_scale: the
//     one dividing layout. Returned as P.weight [out, in].
//   - modelopt-fp8 / modelopt-nvfp4 (hf_quant_config.json quant_algo "FP8"
//     or "NVFP4", or config.json quant_method "modelopt"): FP8 P.weight with
//     a scalar P.weight_scale; NVFP4 P.weight U8 [out, in/2], P.weight_scale
//     F8_E4M3 [out, in/group_size], P.weight_scale_2 F32 scalar, value = q ×
//     scale × scale_2. exclude_modules globs stay plain.
//   - mxfp4 (gpt-oss; quant_method "mxfp4", or the tensors alone):
//     P_blocks U8 [..., G, 16] (32 E2M1 values per block, low nibble first),
//     P_scales U8 (E8M0) [..., G]. value = q × 2^(scale−127), scale 255 is
//     NaN. Returned as P, shape [..., G·32], in the stored order
//     (transformers transposes gpt-oss' expert matrices afterwards for its
//     kernels; ckpt does not).
//   - fbgemm-fp8 (quant_method "fbgemm_fp8", Llama 3.1 405B FP8): P.weight
//     F8_E4M3, P.weight_scale F32 [out,1]. The activation bound
//     activation_scale_ub comes from the config (Scheme.ActivationScaleUB).
//   - comfy-scaled-fp8 (ComfyUI): the legacy layout (a scaled_fp8 marker
//     tensor, P.scale_weight scalar, optional P.scale_input) and the newer
//     one (__metadata__ "_quantization_metadata" {"layers": {P: {"format":
//     "float8_e4m3fn"}}} and/or per-layer P.comfy_quant U8 JSON tensors,
//     with P.weight_scale). value = q × scale. Biases and norms stored in
//     FP8 without a scale are plain tensors; a wide weight with a dummy
//     scale_weight stays plain and its scale is reported.
//
// Scale tensors and markers are consumed (Scheme.Consumed), not returned as
// weights; an executor that dequantizes on the device can take a Weight's
// Data and Scales instead. P.input_scale, P.input_global_scale, P.k_scale,
// P.v_scale and P.scale_input are listed in Scheme.Kept and stay plain
// tensors for the caller. compressed-tensors' ignore, ModelOpt's
// exclude_modules and transformers' modules_to_not_convert leave modules
// plain.
//
// # Unknown layouts
//
// A layout is reported, not guessed: a config declaring something else
// (GPTQ, AWQ, bitsandbytes, a ComfyUI format other than FP8, ...) is listed
// in Scheme.Unsupported, and stored tensors that look like scales or packed
// data but that no rule consumed are listed in Scheme.Unconsumed, so that a
// loader can refuse rather than return FP8 codes as if they were values.
//
// # Rounding
//
// The product of a narrow value (at most 4 significant bits) and a scale
// (at most 24: F32, BF16, F16, an 8-bit float or a power of two) is exact in
// float64, and so is a product with a second, per-tensor scale (at most 52
// bits). Dequantize computes it there and rounds once to the target, so F32,
// BF16 and F16 results are the correctly rounded exact values; the dividing
// layout computes one correctly rounded float64 quotient and rounds that
// once. The target's overflow rule applies (BF16 and F16 overflow to ±Inf,
// F8_E4M3 to NaN; dtype.Options.Saturate clamps to ±max).
//
// This differs from the usual `(w.float() * s).to(torch.bfloat16)`, which
// rounds the product to float32 first and then again to BF16: when the
// float32 product lands exactly on a midpoint between two BF16 (or F16)
// values, the second rounding breaks the tie to even, whichever side of the
// midpoint the exact product lay on. With random F32 scales this is rare
// (TestSingleRoundingVersusUsual: 120 of 4,161,536 E4M3 × F32 products to
// F16, none of them to BF16); scales for which the float32 product is a
// midpoint make it happen in about 4 cases of 10, for products and for the
// dividing layout alike. For F32 targets both agree: the float32 product is
// already the single rounding.
//
// For the same reason a reference implementation must not use ml_dtypes'
// float64 → bfloat16 cast, which rounds through float32 (1+2⁻⁸+2⁻³⁰ becomes
// 1, not 1+2⁻⁷).
//
// Weight.DequantizeRows computes a range of rows only, so that a large
// weight can be dequantized in bounded pieces.
//
// # Quantizing
//
// FP8Quantizer is the inverse for the FP8 layouts: it turns a float weight
// [out, in] into F8_E4M3 or F8_E5M2 codes with F32 scales per tensor ([1]),
// per output channel ([out, 1]) or per N×N block ([ceil(out/N),
// ceil(in/N)]), scale = amax / max-finite (1 for an all-zero group), each
// code the nearest to the exact quotient x / scale, ties to even. It works
// on pieces of rows (Observe, then Quantize) and reports the rounding's
// statistics and the largest absolute and relative errors of q × scale
// against x. Package convert writes its output as compressed-tensors or
// DeepSeek checkpoints, which Detect reads back.
package quant
