// Package variant decides exactly which weights files of a model folder to
// load, for a precision variant (fp16, bf16, ...) or for the untagged
// weights, and explains its choice: the files it ignored and why, and
// warnings. It never mixes variants: a plan for fp16 uses only fp16-tagged
// files, a plan without a variant only untagged ones, and an index that maps
// tensors to shards of another tag is an error rather than a silent F32
// load.
//
// A component's weights may also be PyTorch ones, as transformers and
// diffusers saved them before safetensors (pytorch_model.bin,
// diffusion_pytorch_model.fp16.bin, pytorch_model.bin.index.json and its
// shards, ...: the safetensors names with ".bin", see FormatPyTorch). They
// follow the same rules, variants and fallbacks included; the variant is
// chosen first, then the format: for that variant, safetensors weights win
// over PyTorch ones (listed as ignored, with the reason), and a plan never
// mixes the two. A PyTorch plan (Plan.Format) only names its files, checked
// by name and kind (tags, shards present, regular files); the caller opens
// them (package ckpt does, with package torch) from Plan.Entry and checks
// with Plan.CheckFiles that it opened the planned ones.
//
// ResolveComponent handles one model folder; ResolvePipeline handles a
// diffusers pipeline (model_index.json and one folder per component), where
// a component without the requested variant falls back to its untagged
// weights with a warning. Resolve picks between the two. The plans marshal
// to JSON (files, ignored, warnings, error.kind, error.message) and
// Plan.Open opens exactly the planned files with package shard (handing
// over the checkpoint resolution opened to check them, when they are
// unchanged since).
//
// # Files and symbolic links
//
// One rule covers every file a folder resolves to: the index, the shards,
// the single weights file, model_index.json, and a pipeline's component
// folders. Its symbolic links evaluated, each must stay inside its folder
// (the component folder for weights and indexes, the pipeline root for
// model_index.json and component folders), or resolution refuses it with
// ErrInsecurePath naming it. The one opt-in is shard.WithFollowSymlinks,
// given through WithShardOptions: it lets links lead anywhere, which the
// Hugging Face cache needs (models--org--name/snapshots/REV/FILE links to
// ../../blobs/SHA). The folder passed to ResolveComponent, ResolvePipeline
// or Resolve is the caller's and may itself be reached through links.
// Whatever a link leads to must be a regular file: a FIFO, a device, a
// socket or a folder with a weights file's name is refused with
// ErrNotRegular, without blocking and before a byte is read, and
// model_index.json and indexes are size-checked before they are read.
// Plan.Open checks the rule again before it opens the planned files.
//
// Errors are *Error values with one ErrorKind per distinct failure, usable
// with errors.Is; errors from package shard stay wrapped, so
// errors.Is(err, shard.ErrMissingShard) works too.
package variant
