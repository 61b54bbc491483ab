// Package convert writes checkpoints: whole-checkpoint conversion (Run:
// casting, FP8 quantization with scales, resharding, with a numerics
// report) and the save path of training programs (Save and Check).
//
// # Training checkpoints
//
// Save writes in-memory tensors (any dtype: FP8/FP6/FP4 weights, F8_E8M0
// scales, optimizer state in F32, integer step counters, dtypes added with
// dtype.Register) as one sharded checkpoint folder, DIR/checkpoint-STEP by
// default, with the step, the epoch and the caller's metadata in every
// shard's __metadata__ and a small manifest, checkpoint.json, beside the
// shards. The folder is written under a hidden temporary name, fsynced and
// renamed into place, so a checkpoint appears whole or not at all: if the
// process is killed at any instant, every complete checkpoint stays
// loadable and no partial one is ever visible under a final name. The next
// save of the folder removes what killed saves left.
//
// SaveOptions.KeepLast keeps only the newest N checkpoints, removing the
// older ones after the new one is committed. SaveOptions.Background returns
// at once with a *Pending while the save goes on: the caller hands over the
// tensors' buffers and must not modify them until the Pending is done. A
// save of a folder whose previous save is still running waits for it
// (WaitForPrevious, the default) or is refused with ErrBusy
// (RefusePrevious).
//
// Check validates the tensors' names, dtypes and shapes, the options and
// the target folder (writable, room for the data) with the rules Save
// applies, without the data, so that a training program can prove its save
// path at step 0 instead of failing at the end of a long run. Every problem
// is reported at once, as an errors.Join of *Error values naming the tensor
// or the field concerned.
package convert
