// Package convert writes checkpoints: whole-checkpoint conversion (Run:
// casting, FP8 quantization with scales, resharding, with a numerics
// report) and the save path of training programs (Save and Check).
//
// # Converting checkpoints
//
// Run converts anything ckpt.Open accepts — a safetensors file, a shard
// index, a component folder, a diffusers pipeline — into a file, a folder
// with the same layout (component subfolders, configs, tokenizers and
// other regular files copied, weights named and sharded as the source
// names and shards them, or re-sharded by Options.MaxShardSize), or
// precision-variant files beside the source (model.bf16.safetensors,
// X.V-0000k-of-0000n.safetensors with X.safetensors.index.V.json) that
// variant resolution then picks up.
//
// The dtype policy is the loader's (Options.Policy, a ckpt.Policy: a
// default, per-component targets, per-tensor rules; ckpt.ParseRule),
// applied with ckpt.Policy.NarrowLinearOnly set: a target of 16 bits or
// more casts every floating tensor, while an 8-bit or narrower target
// applies only to the 2-D weights of linear layers (ckpt.LinearWeight) and
// leaves norms, biases, embeddings, lm_head and non-float tensors as they
// are. Rules override both.
//
// FP8 targets quantize those weights with F32 scales (quant.FP8Quantizer):
// per tensor ([1]), per output channel ([out, 1]) or per N×N block
// ([ceil(out/N), ceil(in/N)], partial edge blocks), scale = amax / max
// finite (1 for an all-zero group), codes rounded to nearest even from the
// exact quotient. The scales are stored as compressed-tensors
// P.weight_scale (the default) or DeepSeek P.weight_scale_inv, and the
// matching quantization_config goes into the component's config.json (the
// rest of it copied) and into every file's __metadata__, so that ckpt,
// transformers and vLLM read the result as a quantized model, and a bare
// file describes itself. Its ignore list names every linear module left
// unquantized, lm_head included. Scale.Unscaled casts plainly instead, and
// the report says what that lost. A source already in a scaled layout is
// copied with its scales, dequantized through package quant (one rounding
// from the exact product) to a wider target, or dequantized and quantized
// anew (through F32) to an FP8 target with scales.
//
// Memory stays bounded whatever the model's size: tensors are converted in
// pieces of Options.ChunkBytes by a few workers, ahead of the writer by a
// bounded number of bytes; a safetensors source is read through the
// loader (ckpt.Model.Contents: each stored tensor a ckpt.Part, read with
// pread into reused buffers and verified by the loader as it reads), so no
// page of it stays mapped. Every set is committed crash-atomically by one
// protocol (package shard's, through the folder or an object store); on an
// error or cancellation the previous output is intact and no temporary
// file is left.
//
// The Report lists, for every narrowed tensor, the values that became NaN
// or Inf, overflowed, saturated or were flushed to zero, and the largest
// absolute and relative errors against the source, measured in the pass
// that writes it; its Summary names the worst tensors.
// Options.FailOnOverflow stops before the commit when a value overflows,
// and Options.Verify reads the output back through the loader and checks
// it tensor by tensor.
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
// older ones after the new one is committed (a checkpoint copied or renamed
// by the user is theirs and stays); Checkpoints lists them, oldest first,
// for a run to resume from the last. SaveOptions.Background returns
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
//
// # Multi-writer saves
//
// In data- or tensor-parallel training each rank holds part of the state.
// SaveShard writes one rank's part as shard r+1 of world
// (model-0000{r+1}-of-0000{world}.safetensors), fsynced and renamed into
// place, then a small completion marker beside it; ranks need no
// coordination, only the same location, world and step. Once every rank has
// returned, Commit (run once, by any process) checks that every expected
// shard exists and is complete (its marker, its size, its header's SHA-256,
// its tensors, no name in two ranks) and writes the index in one step. Until
// then no index names the new shards and readers load the previous
// checkpoint, whose files are never touched before the switch (the new
// shards take swap names when a checkpoint is there). A missing or damaged
// rank fails Commit with ErrIncomplete naming the ranks; a kill of the
// committing process at any instant leaves either checkpoint loadable.
//
// # Integrity
//
// Every file Save, SaveShard and Run write names the CRC-32C of each of
// its tensors in its __metadata__ (safetensors.ChecksumPrefix), whatever
// the destination: a folder, or an object store (whose uploads hold their
// first part until the header's checksums are filled in). Run verifies
// its source as it reads it, under Options.Policy.Verify: a tensor whose
// bytes differ from the checksum its file names fails the conversion
// before anything is committed, with an error matching ckpt.ErrChecksum
// that names the source file and the tensor. Tensors copied as stored
// keep their source's checksums, which the writer checks again against
// the bytes written; the output's provenance records each source file's
// CRC-32C (MetaSourceCRC32C). Commit's CommitOptions.VerifyData checks
// every tensor of every rank's shard against its header's checksum.
//
// # Where checkpoints are written
//
// Save, SaveShard, Commit and Run write a folder of a local or shared file
// system, or a location of a scheme registered with sink.Register (package
// remote registers s3://), through a sink.Sink whose files appear whole or not
// at all. To an object store each shard is a multipart upload (parts in
// parallel, each with its CRC-32C), the index is written last, so that a
// reader never sees a partial set, and on failure or cancellation the
// uploads are aborted. A location that holds weights already is replaced
// only with Options.Overwrite: new shards under new names, the index
// replaced last, the old shards removed after it. With no rename there,
// Save marks a checkpoint folder (IncompleteName) while it holds files of
// no committed checkpoint, so that a trainer killed in a save saves that
// step again after it resumes, and a killed KeepLast removal is finished by
// the next save; the kill tests run against a real S3 server too.
//
// # Errors
//
// Every error is an *Error naming the folder or file, the component, the
// ranks, the tensor and the option concerned, whichever apply. Its kind,
// matched with errors.Is, answers the question a caller branches on: an
// option to fix (ErrOption), tensors or metadata that cannot be written
// (ErrInvalid), a target that cannot be used or written (ErrTarget), too
// little room (ErrNoSpace), a name taken (ErrExists, also fs.ErrExist), a
// save already running (ErrBusy), another writer in the way (ErrConflict),
// ranks not done (ErrIncomplete), a source that cannot be read or copied
// (ErrSource), a conversion the policy asks for that Run will not write
// (ErrCast), a value that overflowed under Options.FailOnOverflow
// (ErrOverflow), an output that does not read back as written
// (ErrVerify). Where a kind gathers several cases, the message starts with
// the case ("shape: ...", "commit: ..."). A canceled operation's error
// matches context.Canceled or context.DeadlineExceeded.
package convert
