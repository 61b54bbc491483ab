package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/convert"
)

func convertCommand() *command {
	c := &command{
		name:    "convert",
		args:    "SRC DST",
		summary: "convert a checkpoint: cast, quantize to FP8 with scales, reshard, write variants",
		help: `Converts SRC into DST tensor by tensor, with bounded memory, and reports what
each narrowing did to the values. SRC is a .safetensors file, an index, a
component folder or a pipeline root (with model_index.json); --source-variant
reads one of its precision variants. SRC may also be a PyTorch checkpoint
(.bin, .pt, .pth, .ckpt, pytorch_model.bin.index.json, or a folder of them), read
without executing anything of its pickle: a checkpoint that names any other
global is refused before anything is written. A file converts to a file (DST is the
output file, or a folder that receives the source's file name); a folder or
a pipeline converts to a folder with the same layout: weights named and
sharded as the source's (the same number of shards, each tensor in the shard
its source tensor is in, an FP8 scale with its weight, the index rewritten;
a PyTorch set's shards become safetensors shards), every other regular file
copied (configs, tokenizers, schedulers), config.json rewritten when the
quantization changes. --max-shard-size re-shards by size instead. Weights of
other variants or formats are left out, and the report lists them. --variant V names the output as precision
variant V (model.V.safetensors, X.V-0000k-of-0000n.safetensors with
X.safetensors.index.V.json); with DST the source folder itself, the variant
files are written beside the source's, for a later --variant V to load.

--dtype D of 16 bits or more casts every floating tensor to D. When D is
8 bits or fewer, only the 2-D weights of linear layers are converted, and
norms, biases, embeddings, lm_head and non-float tensors stay as they are;
to F8_E4M3 or F8_E5M2 those weights are quantized with F32 scales
(--fp8-scale: per tensor, per output channel, or per NxN block, 128 by
default; "none" casts without scales and the report says what that lost),
stored as compressed-tensors weight_scale (--scale-format, the default) or
DeepSeek weight_scale_inv, with the matching quantization_config in
config.json and in the files' metadata, so that ckpt, transformers and vLLM
read the result as a quantized model. --keep rules override everything. A
weight stored in a scaled layout (DeepSeek FP8, compressed-tensors, ...) is
dequantized to a wider float target and requantized to another FP8 type.
An FP8 weight whose target is its own type (or, with no --dtype, any FP8
weight when --fp8-scale or --scale-format is given) is copied with its
scales as stored when neither flag asks for something else (the report
says so); otherwise it is relabelled when only the format's names change
(compressed-tensors block weight_scale <-> DeepSeek weight_scale_inv of the
same block size: every code and scale bit kept) and requantized (dequantized
exactly, then quantized with the requested scales) when the scales differ.
Without --fp8-scale such weights keep their stored grid when the format can
store it; without --scale-format a DeepSeek model stays DeepSeek's.

Every component is written for the library that owns it (model_index.json's
[library, class], or config.json's _diffusers_version): transformers reads
both quantization_configs above, diffusers neither. A diffusers component
(a UNet, a transformer) that would get FP8 weights with scales is refused
before anything is written; keep it in BF16 with --component NAME=BF16 (or
=stored), or write it anyway with --allow-ckpt-only-quant: the result is
for ckpt and vLLM, diffusers will not load it, and the report says so. In a
pipeline, an 8-bit --dtype does not quantize VAEs (Autoencoder*, VQModel)
or image encoders (*VisionModel*, image_encoder): they stay as stored and
the report says why; --component vae=F8_E4M3 or a --keep rule forces it.

Every output set is committed atomically: on an error or Ctrl-C the
previous output is intact and no temporary file is left. At the end the
numerics summary lists, for the narrowed tensors, the values that became NaN
or Inf, overflowed, saturated or were flushed to zero, the largest errors
against the source, and the worst tensors. --fail-on-overflow stops before
the commit when a value overflows its target; --verify reads the output
back and checks it tensor by tensor. On a terminal a progress bar shows
bytes, rate and time left; it is quiet otherwise.

DST may be an s3://BUCKET/PREFIX location (a folder; for a file source, a
location ending in .safetensors names the file): each shard is uploaded as
a multipart upload (parts in parallel, each with its CRC-32C), the index
last, so that a reader never sees a partial set; on an error or Ctrl-C the
uploads are aborted. A location that holds weights already is refused
unless --overwrite: the new shards then take new names, the index is
replaced last and the old shards are removed after it.

` + dtypePolicyHelp + `

Integrity: the source's tensors are checked as they are read against the
CRC-32C their files name (files written by ckpt name one for every tensor),
and PyTorch tensors against the CRC-32 their archive records for their
storage, and the output names the CRC-32C of every tensor it holds. A
damaged source tensor fails the conversion, naming the file, the tensor and
its bytes, before anything is committed. --source-verify present (the
default) checks the files that name checksums and the PyTorch tensors whose
bytes are their whole storage; always also refuses files that name none and
checks PyTorch views of part of a storage (transposed, big-endian) by
reading their storage; never checks nothing.

Exit status: 0 when the conversion is done, 1 when it failed (nothing of a
failed set was committed), 2 for usage errors.

Examples:
  ckpt convert ./llama ./llama-bf16 --dtype bf16
  ckpt convert ./llama ./llama-fp8 --dtype F8_E4M3 --fp8-scale block:128 --verify
  ckpt convert ./flux-dev ./flux-dev --variant bf16 --dtype bf16
  ckpt convert ./model.safetensors ./out --dtype F8_E4M3 --scale-format deepseek --max-shard-size 2GB
  ckpt convert ./deepseek-v3 ./v3-ct --scale-format compressed-tensors   # relabel: codes and scales kept
  ckpt convert ./llama-fp8 ./llama-fp8-b32 --dtype F8_E4M3 --fp8-scale block:32   # requantize
  ckpt convert ./sd15 ./sd15-fp8 --dtype F8_E4M3 --component unet=BF16   # text encoder in FP8
  ckpt convert ./model.safetensors ./model.fp16.safetensors --dtype f16 --fail-on-overflow --json
  ckpt convert ./llama s3://models/llama-fp8 --dtype F8_E4M3 --verify`,
	}
	c.run = func(e *env, args []string) error {
		fs := newFlags(e, c)
		var (
			dtype      targetFlag
			components componentFlags
			rules      ruleFlags
			shardSize  sizeFlag
		)
		fs.Var(&dtype, "dtype", "default target `D`: a dtype, or \"stored\"; 8-bit and narrower targets apply to linear layers' 2-D weights only")
		fs.Var(&components, "component", "target of one component, `NAME=D` (repeatable)")
		fs.Var(&rules, "keep", "per-tensor rule `PATTERN=D` or COMPONENT/PATTERN=D, tried in order before everything else (repeatable)")
		preset := fs.String("preset", "", "add the rules of preset `NAME` after the --keep rules: keep-norms-f32 (norms and biases stay F32)")
		variant := fs.String("variant", "", "write the output as precision variant `V` (beside the source when DST is the source folder)")
		srcVariant := fs.String("source-variant", "", "read the source folder's precision variant `V` (empty: its untagged weights)")
		scale := fs.String("fp8-scale", "", "FP8 scales `S`: tensor, channel, block or block:N, or none for casts without scales (default: channel for compressed-tensors, block:128 for deepseek)")
		format := fs.String("scale-format", "", "how FP8 scales are stored, `F`: compressed-tensors (P.weight_scale; the default) or deepseek (P.weight_scale_inv; the default for a DeepSeek FP8 source)")
		ckptOnly := fs.Bool("allow-ckpt-only-quant", false, "write FP8 weights with scales into components whose library cannot load them (diffusers models): for ckpt and vLLM; diffusers will not load it")
		saturate := fs.Bool("saturate", false, "narrowing casts clamp to ±max instead of overflowing to Inf/NaN")
		fs.Var(&shardSize, "max-shard-size", "re-shard the output by size: largest shard `SIZE` (5GB, 2GiB, bytes); default: the source's sharding")
		failOverflow := fs.Bool("fail-on-overflow", false, "fail, committing nothing, when a value overflows its target or becomes NaN or Inf")
		verify := fs.Bool("verify", false, "read the output back and check it tensor by tensor")
		srcVerify := fs.String("source-verify", "present", "check the source's tensors against the checksums their files name, `MODE`: present (files that name them), always (also refuse files that do not) or never")
		asJSON := fs.Bool("json", false, "print the report as JSON")
		overwrite := fs.Bool("overwrite", false, "replace the weights already at an s3:// DST (a local DST's set is replaced atomically either way)")
		workers := fs.Int("workers", 0, "the `N` goroutines that convert (0: one per CPU)")
		follow := followFlag(fs)
		pos, err := parseFlags(e, c, fs, args)
		if err != nil {
			return err
		}
		if len(pos) != 2 {
			return usageError{msg: "convert takes SRC and DST"}
		}
		sv, err := parseVerify("source-verify", *srcVerify)
		if err != nil {
			return err
		}
		opts := convert.Options{
			Policy: ckpt.Policy{Default: dtype.t, Rules: rules, Saturate: *saturate, Verify: sv}, Variant: *variant, SourceVariant: *srcVariant,
			FailOnOverflow: *failOverflow, Verify: *verify,
			Workers: *workers, FollowSymlinks: *follow, Overwrite: *overwrite, AllowCkptOnlyQuant: *ckptOnly,
		}
		if len(components) > 0 {
			opts.Policy.Components = map[string]ckpt.Target{}
			for _, ct := range components {
				opts.Policy.Components[ct.name] = ct.t
			}
		}
		switch *preset {
		case "":
		case "keep-norms-f32":
			opts.Policy.Rules = append(opts.Policy.Rules, ckpt.KeepNormsAndBiasesF32()...)
		default:
			return usageError{msg: fmt.Sprintf("--preset %q: the presets are keep-norms-f32", *preset)}
		}
		if *scale != "" {
			if opts.Scale, err = convert.ParseScale(*scale); err != nil {
				return usageError{msg: "--fp8-scale: " + err.Error()}
			}
		}
		if opts.ScaleFormat, err = convert.ParseScaleFormat(*format); err != nil {
			return usageError{msg: "--scale-format: " + err.Error()}
		}
		if shardSize.set {
			opts.MaxShardSize = shardSize.n
		}
		if *workers < 0 {
			return usageError{msg: fmt.Sprintf("--workers %d: must be 0 (one per CPU) or more", *workers)}
		}
		var bar *progressBar
		if isTerminal(e.stderr) {
			bar = newProgressBar(e.stderr)
			opts.Progress = func(p ckpt.Progress) { bar.update(p.Phase, p.Done, p.Total, false) }
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		rep, err := convert.Run(ctx, pos[0], pos[1], opts)
		if bar != nil {
			bar.finish()
		}
		if err != nil {
			if errors.Is(err, convert.ErrOption) {
				return usageError{msg: err.Error()}
			}
			return err
		}
		if *asJSON {
			return e.printJSON(rep)
		}
		fmt.Fprint(e.stdout, rep.String())
		return nil
	}
	return c
}
