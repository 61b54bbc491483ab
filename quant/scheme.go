package quant

import (
	"slices"

	"github.com/ckpt-go/ckpt/dtype"
)

// Layout names a scaled low-precision layout.
type Layout int

// The layouts Detect recognizes. Their String names are stable.
const (
	// None: no scaled layout; every tensor is plain.
	None Layout = iota
	// DeepSeekFP8Block: F8_E4M3 P.weight [out,in] with F32
	// P.weight_scale_inv [ceil(out/B0), ceil(in/B1)], value = fp8 ×
	// scale_inv (DeepSeek-V3/R1, transformers' "fp8" quant_method).
	DeepSeekFP8Block
	// FP8Scaled: quant_method "fp8" checkpoints with P.weight_scale instead
	// of a block scale_inv (AutoFP8, vLLM's fp8): per-tensor or per-channel
	// scale, value = fp8 × scale.
	FP8Scaled
	// CompressedTensorsFP8: compressed-tensors "float-quantized" FP8
	// P.weight with P.weight_scale per tensor, channel, group or block.
	CompressedTensorsFP8
	// CompressedTensorsNVFP4: compressed-tensors "nvfp4-pack-quantized":
	// P.weight_packed, P.weight_scale (F8_E4M3 per 16), P.weight_global_scale;
	// value = e2m1 × scale ÷ global_scale.
	CompressedTensorsNVFP4
	// ModelOptFP8: NVIDIA ModelOpt FP8: P.weight with a per-tensor (or
	// per-channel) P.weight_scale.
	ModelOptFP8
	// ModelOptNVFP4: NVIDIA ModelOpt NVFP4: packed P.weight, P.weight_scale
	// (F8_E4M3 per group), P.weight_scale_2; value = e2m1 × scale × scale_2.
	ModelOptNVFP4
	// MXFP4: gpt-oss style P_blocks (32 E2M1 values per 16 bytes) and
	// P_scales (E8M0); value = e2m1 × 2^(scale−127).
	MXFP4
	// FBGEMMFP8: FBGEMM row-wise FP8 (Llama 3.1 405B FP8): P.weight with
	// P.weight_scale [out,1].
	FBGEMMFP8
	// ComfyScaledFP8: ComfyUI scaled FP8, legacy (scaled_fp8 marker,
	// P.scale_weight) or newer (_quantization_metadata / P.comfy_quant,
	// P.weight_scale).
	ComfyScaledFP8
	// Mixed: Scheme.Layout when the weights use more than one layout (a
	// compressed-tensors or ModelOpt checkpoint mixing FP8 and NVFP4); each
	// Weight names its own.
	Mixed
)

var layoutNames = [...]string{
	None:                   "none",
	DeepSeekFP8Block:       "deepseek-fp8-block",
	FP8Scaled:              "fp8-scaled",
	CompressedTensorsFP8:   "compressed-tensors-fp8",
	CompressedTensorsNVFP4: "compressed-tensors-nvfp4",
	ModelOptFP8:            "modelopt-fp8",
	ModelOptNVFP4:          "modelopt-nvfp4",
	MXFP4:                  "mxfp4",
	FBGEMMFP8:              "fbgemm-fp8",
	ComfyScaledFP8:         "comfy-scaled-fp8",
	Mixed:                  "mixed",
}

// String returns the layout's stable name, e.g. "deepseek-fp8-block".
func (l Layout) String() string {
	if l >= 0 && int(l) < len(layoutNames) {
		return layoutNames[l]
	}
	return "unknown"
}

// MarshalText encodes the layout as its name (for JSON plans).
func (l Layout) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// Stored describes one tensor as stored in the checkpoint (from headers
// only).
type Stored struct {
	Name  string
	DType dtype.DType
	Shape []int64
}

// Sources holds the configuration texts of one component. Any may be nil.
type Sources struct {
	// ConfigJSON is the component's config.json.
	ConfigJSON []byte
	// HFQuantConfig is the component's hf_quant_config.json (ModelOpt).
	HFQuantConfig []byte
	// Metadata is the safetensors __metadata__ (of the single file, or of
	// the first shard).
	Metadata map[string]string
	// ReadTensor, when set, returns the bytes of a small stored tensor.
	// Detect calls it only for ComfyUI's per-layer P.comfy_quant tensors
	// (U8 JSON text, at most MaxMarkerBytes); without it such layers are
	// recognized from their tensors' dtypes alone.
	ReadTensor func(name string) ([]byte, error)
}

// MaxMarkerBytes is the largest P.comfy_quant tensor Detect reads.
const MaxMarkerBytes = 64 << 10

// Scale roles. The role says how a scale combines with the narrow value.
const (
	// RoleScale multiplies: value = q × scale.
	RoleScale = "scale"
	// RoleScaleInv multiplies too, despite its name (DeepSeek's
	// weight_scale_inv is stored already inverted).
	RoleScaleInv = "scale_inv"
	// RoleScale2 is ModelOpt NVFP4's second, per-tensor factor: multiplies.
	RoleScale2 = "scale_2"
	// RoleGlobalScale divides: value = (q × scale) ÷ global_scale
	// (compressed-tensors NVFP4).
	RoleGlobalScale = "global_scale"
	// RoleE8M0 multiplies by 2^(code−127); the scale is stored as U8 or
	// F8_E8M0, code 255 is NaN (MXFP4).
	RoleE8M0 = "e8m0"
)

// Scale is one stored scale tensor of a Weight.
type Scale struct {
	// Role is one of the Role constants.
	Role string
	Stored
	// Block is the number of logical rows and columns one scale element
	// covers, in the two-dimensional view of the logical tensor [R, C]
	// (C the last dimension, R the product of the others): scale element
	// (i, j) of the [ceil(R/Block[0]), ceil(C/Block[1])] grid applies to
	// rows i·Block[0]... and columns j·Block[1]...; blocks at the far edges
	// may be partial. A per-tensor scale has Block [R, C].
	Block [2]int64
}

// Weight is one logical quantized weight: the stored narrow values, the
// scales that turn them into real values, and the name and shape under
// which the dequantized tensor is returned.
type Weight struct {
	// Name is the logical name: "P.weight" (also when stored as
	// P.weight_packed), "P" for MXFP4's P_blocks.
	Name string
	// Shape is the logical shape: [out,in]; [..., G·32] for MXFP4.
	Shape []int64
	// Elem is the element type of the quantized values: F8_E4M3, F8_E5M2
	// (or an FNUZ variant), or F4 (E2M1, two per byte, element 2i in the low
	// nibble).
	Elem dtype.DType
	// Layout is the layout the weight was found in.
	Layout Layout
	// Data is the stored tensor holding the quantized values (its dtype may
	// be a U8 container).
	Data Stored
	// Scales are the stored scale tensors, in the order Dequantize takes
	// their bytes: at most one that varies over the tensor, then at most one
	// per-tensor factor.
	Scales []Scale
}

// Scheme is what Detect found for one component.
type Scheme struct {
	// Layout is the layout of the weights (Mixed when they use several; the
	// declared layout, with no Weights, when a config declares one and no
	// tensor is stored in it).
	Layout Layout
	// Source says what declared the layout: "config.json
	// quantization_config", "hf_quant_config.json", "__metadata__
	// quantization_config", "__metadata__ _quantization_metadata",
	// "comfy_quant tensors", "scaled_fp8 marker" or "tensor names"; "" for
	// None.
	Source string
	// QuantMethod is the declared method as written (quant_method,
	// quant_algo), "" when none was declared.
	QuantMethod string
	// Weights are the logical quantized weights, sorted by Name.
	Weights []*Weight
	// Kept lists the recognized activation and KV-cache scales
	// (P.input_scale, P.input_global_scale, P.k_scale, P.v_scale,
	// P.scale_input): they are not weights' scales and are returned as plain
	// tensors for the caller. Sorted.
	Kept []string
	// Markers lists the layout's marker tensors (scaled_fp8, P.comfy_quant),
	// consumed and not returned. Sorted.
	Markers []string
	// Unconsumed lists the stored tensors that look like scales or packed
	// data (a last name component containing "_scale" or "zero_point" or
	// "quant_state", starting with "scale_", ending in "_blocks" or
	// "_packed", or one of qweight, qzeros, scales, g_idx, absmax,
	// quant_map, SCB, scaled_fp8, comfy_quant) that no rule consumed and
	// that are not Kept: evidence of a layout ckpt does not decode,
	// reported rather than guessed. Sorted.
	Unconsumed []string
	// Unsupported lists declared layouts ckpt does not decode, e.g.
	// `quant_method "gptq"` or `layer "x": comfy format "nvfp4"`.
	Unsupported []string
	// Ignore lists the config's patterns of modules left unquantized
	// (compressed-tensors ignore, ModelOpt exclude_modules, transformers'
	// modules_to_not_convert, AutoFP8 ignored_layers), as written.
	Ignore []string
	// BlockSize is the weight block size the config declares or implies
	// ([128,128] for quant_method "fp8" without weight_block_size), zero
	// when none applies.
	BlockSize [2]int64
	// GroupSize is the NVFP4 group size the config declares (16 when
	// implied), zero when none applies.
	GroupSize int64
	// ActivationScaleUB is FBGEMM's activation_scale_ub, from the config
	// (0 when absent).
	ActivationScaleUB float64

	consumed map[string]bool // stored names of every Weight's Data and Scales, and Markers
}

// Consumed reports whether the stored tensor is the data or a scale of one
// of the Weights, or a marker: it is not returned as a plain tensor.
func (s *Scheme) Consumed(stored string) bool {
	return s != nil && s.consumed[stored]
}

// Weight returns the Weight of the given logical name, nil if none.
func (s *Scheme) Weight(name string) *Weight {
	if s == nil {
		return nil
	}
	i, ok := slices.BinarySearchFunc(s.Weights, name, func(w *Weight, n string) int {
		switch {
		case w.Name < n:
			return -1
		case w.Name > n:
			return 1
		}
		return 0
	})
	if !ok {
		return nil
	}
	return s.Weights[i]
}
