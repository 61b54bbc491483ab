// Package shard reads and writes sharded safetensors checkpoints: a set of
// *.safetensors files described by a *.safetensors.index.json index
// ({"metadata": {"total_size": N}, "weight_map": {tensor: shard file}}), as
// written by Hugging Face transformers, diffusers and huggingface_hub.
//
// ReadIndex parses and validates an index. An index is untrusted input:
// every shard must be a bare file name ending in ".safetensors" in the
// index's own folder (paths, "..", absolute paths, drive letters and
// symlinks leaving the folder are refused with ErrInsecurePath).
//
// Open opens a sharded set (or a single file) as one logical Checkpoint:
// before any tensor is read, every shard must exist and every mapped tensor
// must be in its shard's header. Shards are then opened lazily, on first
// use, and the Checkpoint is safe for concurrent use.
//
// Write and WriteFrom pack tensors greedily into shards of at most a
// maximum size (5 GB by default; ParseSize reads "5GB" or "4GiB"), name them
// as huggingface_hub does, and replace any previous set of the same prefix
// and variant atomically.
//
// Choosing which files of a folder to load (variants such as fp16 or bf16,
// legacy diffusers names) is package variant's job.
//
// Errors are *Error values whose Kind can be tested with errors.Is, for
// example errors.Is(err, shard.ErrMissingShard).
package shard
