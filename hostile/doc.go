// Package hostile holds no code: its tests run every public entry point of
// packages safetensors, shard and variant on hostile folders (built by
// internal/hostile: FIFOs, character devices, symbolic links out of the
// folder and into a Hugging Face cache, /dev/zero as an index, oversized
// indexes, headers nested around the JSON depth limit) under a deadline, and
// fail on a hang, on a wrong verdict, or on a refusal that is not a typed
// error naming the file concerned. cmd/ckpt's hostile tests hold the
// command line to the same verdicts.
package hostile
