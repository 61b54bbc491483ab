// Package integrity checks whole checkpoints and adds checksums to them:
// what `ckpt verify` and `ckpt checksum` do.
//
// Verify takes a safetensors file, a shard index, a folder (every variant
// in it), a diffusers pipeline, a Hugging Face hub cache snapshot or a
// remote location (s3://, https:// through package source's registry:
// import package remote), and returns a Report of every Problem it finds:
// tensors whose bytes differ from the CRC-32C their file's header names
// (safetensors.ChecksumPrefix), every byte read in parallel pieces with
// bounded memory; and, for every checkpoint, with or without checksums,
// the structural damage of a truncated or mixed-up copy: a header that
// does not parse, a file shorter or longer than its header says, damaged
// checksum metadata, an index whose weight_map disagrees with its shards'
// headers or whose metadata.total_size disagrees with its tensors, a
// missing shard, and a hub blob whose content does not hash to its name.
//
// PyTorch checkpoints (torch.save archives: pytorch_model.bin and its
// variants, indexes and shards, .pt/.pth/.ckpt files, components of PyTorch
// weights; named as the loader names them) are checked the same way with
// what their format records: package torch opens each (its zip directory,
// its pickle, every tensor's bounds: a truncated or damaged archive is an
// InvalidArchive problem naming the file), and every record's bytes are
// compared with the CRC-32 its zip directory and local header give (a
// mismatch is a ChecksumMismatch naming the record and each tensor that
// views its storage). Their tensors count in Report.ArchiveTensors, not as
// checksummed ones; Checksum skips them (Skipped), never rewriting one.
//
// Each Problem is one line naming the file (relative to the location), the
// tensor and the byte range where they apply, and its Kind classifies it
// (the "kind" of `ckpt verify --json`). As an error it matches the
// conditions other packages share, one value each: a checksum mismatch
// matches safetensors.ErrChecksum, as ckpt.ErrChecksum does, and unwraps to
// a *safetensors.ChecksumError; a symlink out of the folder matches
// shard.ErrInsecurePath, a missing shard shard.ErrMissingShard.
//
// Checksum rewrites the files of a checkpoint that have no checksums with
// them, each atomically, after a Verify that found nothing wrong: it never
// writes checksums over data that disagree with the ones they have.
//
// The package reads through packages source, shard, torch and variant and
// writes through safetensors.Create and package sink; it never imports
// the loader, the converter or an object-store client.
package integrity
