package convert

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/quant"
)

// Options configure Run. The zero Options copy every tensor as stored into
// the destination's layout.
type Options struct {
	// Policy chooses each tensor's target, as the loader's policy does
	// (the same value can be given to ckpt.WithPolicy): the first matching
	// rule (ckpt.ParseRule reads the CLI's "PATTERN=D"), then the
	// component's target, then the default; with none, as stored. Run
	// applies it with ckpt.Policy.NarrowLinearOnly set, whatever the field
	// says: a default or component target that is a float dtype of 16 bits
	// or more casts every floating tensor to it (and dequantizes scaled
	// low-precision weights); an 8-bit or narrower one applies only to the
	// 2-D weights of linear layers (see ckpt.LinearWeight), which FP8
	// targets quantize with scales (Scale), while norms, biases,
	// embeddings, lm_head and non-float tensors stay as they are. A rule
	// decides whatever the tensor is (it may cast an integer tensor or
	// quantize an embedding). ckpt.AsStored (or the zero Policy) keeps
	// every tensor. Its Verify field chooses which source tensors are
	// checked against their files' checksums as they are read (see Run).
	Policy ckpt.Policy

	// SourceVariant selects the precision variant of a source folder or
	// pipeline to read ("" for its untagged weights).
	SourceVariant string
	// Variant names the output's precision variant: its files are named
	// PREFIX.V.safetensors, or PREFIX.V-0000k-of-0000n.safetensors with
	// PREFIX.safetensors.index.V.json, so that package variant (and
	// transformers and diffusers) resolve them for variant V. With Variant
	// set and the destination equal to the source folder, the files are
	// written beside the source's.
	Variant string

	// Scale is how FP8 targets are quantized: per tensor, per output
	// channel (the default for compressed-tensors) or per block (the
	// default, 128×128, and the only choice for DeepSeek's layout); see
	// ParseScale. Scale.Unscaled casts to FP8 without scales instead.
	//
	// A source weight already stored as scaled FP8 whose target is its
	// element type is copied as stored (the report says so) unless Scale
	// or ScaleFormat asks for something else: Scale set, or a ScaleFormat
	// other than the one it is stored in. It is then relabelled when the
	// request keeps its codes (the same element type and the same scale
	// grid, only the format's names differ: DeepSeek's weight_scale_inv
	// becomes compressed-tensors' weight_scale or the reverse, codes and
	// scale values bit for bit), and requantized otherwise (dequantized
	// exactly, then quantized with the requested scales). With Scale zero
	// such weights keep their stored grid when the format can store it.
	Scale Scale
	// ScaleFormat says how scales are stored and declared: compressed-tensors
	// (P.weight_scale) or DeepSeek (P.weight_scale_inv). Its zero value,
	// AutoScaleFormat, is DeepSeek's for a component whose weights are
	// stored in DeepSeek's layout (when it can store Scale) and
	// compressed-tensors otherwise.
	ScaleFormat ScaleFormat
	// AllowCkptOnlyQuant writes FP8 weights with a quantization_config
	// into components whose library does not read it (a diffusers model:
	// diffusers reads neither compressed-tensors nor DeepSeek's format).
	// The output is for ckpt and vLLM; diffusers will not load it, and the
	// report's warnings say so. Without it Run refuses such a component
	// (ErrCast, "unreadable") before writing anything.
	AllowCkptOnlyQuant bool
	// FailOnOverflow fails the conversion, before anything is committed,
	// when a finite value overflows its target (to Inf, to NaN or, with
	// Policy.Saturate, to ±max) or becomes NaN or Inf: the FP16-activation
	// trap.
	FailOnOverflow bool

	// MaxShardSize, when set, re-shards the output by size: shards of at
	// most this many bytes of tensor data (a larger tensor gets one of its
	// own), PREFIX[.V]-0000k-of-0000n.safetensors with an index when there
	// are several, one file when it all fits. 0 keeps the source's
	// sharding: as many files as the source's set has, each output tensor
	// in the file its source tensor is in (a new FP8 scale in its
	// weight's), named PREFIX[.V]-0000k-of-0000n.safetensors with the index
	// rewritten (its total_size and weight_map), or one file for a
	// single-file source; the files' sizes change with the dtypes. A source
	// file left with no tensor (one that held only the scales of weights
	// that are dequantized) makes no output file. A PyTorch source keeps
	// its number of files the same way. A file destination whose name no
	// set can have is one file either way, of at most MaxShardSize
	// (shard.DefaultMaxShardSize, 5 GB, when 0).
	MaxShardSize int64
	// Verify reads the output back after the commit and checks it tensor
	// by tensor (see Report.Verified).
	Verify bool
	// FollowSymlinks lets the source's files be symbolic links that leave
	// their folder (a Hugging Face cache snapshot); without it such links
	// are refused, as the loader refuses them.
	FollowSymlinks bool
	// Overwrite lets Run replace the weights already at a destination of
	// a registered sink (s3://...): the new shards are uploaded under new
	// names, the index is replaced last, and the old files are removed
	// after it. Without it such a destination that holds weights of the
	// set is refused (ErrExists) before anything is written. A local
	// folder's set is replaced atomically by package shard either way.
	Overwrite bool
	// Workers bounds the goroutines that convert (0: GOMAXPROCS).
	Workers int
	// ChunkBytes is the size of the pieces large tensors are converted in
	// (default 8 MiB of source or staging data). The memory of a
	// conversion is a few chunks per worker, whatever the model's size. A
	// piece of a weight that is quantized or dequantized holds whole rows
	// (whole blocks of rows for block scales, and at least 8 rows), so a
	// weight whose rows are wider than a chunk goes a row group at a time.
	ChunkBytes int64
	// Progress, when set, is called after each written piece, from one
	// goroutine at a time, with Done increasing. It must be quick.
	Progress func(ckpt.Progress)
}

// Scale says how a weight is quantized to FP8.
type Scale struct {
	// Granularity is quant.PerTensor, PerChannel or PerBlock; zero means the
	// default of the ScaleFormat.
	Granularity quant.Granularity
	// Block is the block size N of PerBlock (128 when 0).
	Block int64
	// Unscaled casts to FP8 without scales (a plain cast that saturates or
	// overflows and flushes small values to zero; the report says how
	// many).
	Unscaled bool
}

// DefaultBlock is the default block size of block scales, DeepSeek's.
const DefaultBlock = 128

// ParseScale reads the CLI's --fp8-scale: "tensor", "channel", "block",
// "block:N" or "none" (unscaled casts).
func ParseScale(s string) (Scale, error) {
	name, arg, hasArg := strings.Cut(strings.ToLower(strings.TrimSpace(s)), ":")
	var sc Scale
	switch name {
	case "tensor":
		sc.Granularity = quant.PerTensor
	case "channel":
		sc.Granularity = quant.PerChannel
	case "block":
		sc.Granularity = quant.PerBlock
		if hasArg {
			n, err := strconv.ParseInt(arg, 10, 64)
			if err != nil || n < 1 || n > 1<<20 {
				return Scale{}, &Error{Kind: ErrOption, Field: "Scale", Msg: fmt.Sprintf("block size %q is not a whole number from 1 to %d", arg, 1<<20)}
			}
			sc.Block = n
		}
	case "none", "unscaled":
		sc.Unscaled = true
	default:
		return Scale{}, &Error{Kind: ErrOption, Field: "Scale", Msg: fmt.Sprintf("%q is not tensor, channel, block, block:N or none", s)}
	}
	if hasArg && name != "block" {
		return Scale{}, &Error{Kind: ErrOption, Field: "Scale", Msg: fmt.Sprintf("%q: only block takes a size", s)}
	}
	return sc, nil
}

// String returns the scale as ParseScale reads it.
func (s Scale) String() string {
	switch {
	case s.Unscaled:
		return "none"
	case s.Granularity == quant.PerBlock && s.Block == 0:
		return "block"
	case s.Granularity == quant.PerBlock:
		return "block:" + strconv.FormatInt(s.Block, 10)
	case s.Granularity == 0:
		return "default"
	}
	return s.Granularity.String()
}

// ScaleFormat says how FP8 scales are stored and declared.
type ScaleFormat int

const (
	// AutoScaleFormat, the zero value: DeepSeek for a component whose
	// weights are stored in DeepSeek's layout (when it can store the
	// Scale), compressed-tensors otherwise.
	AutoScaleFormat ScaleFormat = iota
	// CompressedTensors writes P.weight_scale (F32) and the config
	// {"quant_method": "compressed-tensors", "format": "float-quantized",
	// ...} that transformers, vLLM and ckpt read. Its default granularity is
	// per channel.
	CompressedTensors
	// DeepSeek writes P.weight_scale_inv (F32, a factor despite its name)
	// in blocks and the config {"quant_method": "fp8", "fmt": "e4m3",
	// "activation_scheme": "dynamic", "weight_block_size": [N, N]}.
	DeepSeek
)

// ParseScaleFormat reads "compressed-tensors", "deepseek", or "auto" (or
// "") for AutoScaleFormat.
func ParseScaleFormat(s string) (ScaleFormat, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "auto", "":
		return AutoScaleFormat, nil
	case "compressed-tensors", "compressed_tensors", "ct":
		return CompressedTensors, nil
	case "deepseek", "fp8", "weight_scale_inv":
		return DeepSeek, nil
	}
	return 0, &Error{Kind: ErrOption, Field: "ScaleFormat", Msg: fmt.Sprintf("%q is not compressed-tensors, deepseek or auto", s)}
}

// String returns "compressed-tensors", "deepseek" or "auto".
func (f ScaleFormat) String() string {
	switch f {
	case DeepSeek:
		return "deepseek"
	case AutoScaleFormat:
		return "auto"
	}
	return "compressed-tensors"
}

// resolveScale returns s with format f's defaults filled in (f is not
// AutoScaleFormat), or an error for a combination the format cannot store.
func resolveScale(s Scale, f ScaleFormat) (Scale, error) {
	if s.Unscaled {
		return s, nil
	}
	if s.Granularity == 0 {
		s.Granularity = quant.PerChannel
		if f == DeepSeek {
			s.Granularity = quant.PerBlock
		}
	}
	switch s.Granularity {
	case quant.PerTensor, quant.PerChannel, quant.PerBlock:
	default:
		return s, &Error{Kind: ErrOption, Field: "Scale", Msg: "unknown granularity " + s.Granularity.String()}
	}
	if s.Granularity == quant.PerBlock && s.Block == 0 {
		s.Block = DefaultBlock
	}
	if s.Block < 0 {
		return s, &Error{Kind: ErrOption, Field: "Scale", Msg: fmt.Sprintf("block size %d is not positive", s.Block)}
	}
	if f == DeepSeek && s.Granularity != quant.PerBlock {
		return s, &Error{Kind: ErrOption, Field: "Scale", Msg: "DeepSeek's weight_scale_inv layout has block scales only, not " + s.Granularity.String() + " (--fp8-scale block or block:N, or --scale-format compressed-tensors)"}
	}
	return s, nil
}
