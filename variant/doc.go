// Package variant decides exactly which weights files of a model folder to
// load, for a precision variant (fp16, bf16, ...) or for the untagged
// weights, and explains its choice: the files it ignored and why, and
// warnings. It never mixes variants: a plan for fp16 uses only fp16-tagged
// files, a plan without a variant only untagged ones, and an index that maps
// tensors to shards of another tag is an error rather than a silent F32
// load.
//
// ResolveComponent handles one model folder; ResolvePipeline handles a
// diffusers pipeline (model_index.json and one folder per component), where
// a component without the requested variant falls back to its untagged
// weights with a warning. Resolve picks between the two. The plans marshal
// to JSON (files, ignored, warnings, error.kind, error.message) and
// Plan.Open opens exactly the planned files with package shard.
//
// Errors are *Error values with one ErrorKind per distinct failure, usable
// with errors.Is; errors from package shard stay wrapped, so
// errors.Is(err, shard.ErrMissingShard) works too.
package variant
