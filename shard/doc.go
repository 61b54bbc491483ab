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
// # Files and symbolic links
//
// No file is opened in a way that can block: every open is non-blocking
// and checked with fstat, so a FIFO, a device or a socket where an index or
// a shard is expected is refused with ErrNotRegular (naming it) before a
// byte is read; sizes (MaxIndexSize) are checked before reading. A path the
// caller names (the index or file given to Open, the path given to
// ReadIndex) is followed through its links wherever they lead. The files
// that a folder resolves to (the shards of an index) must, their links
// evaluated, stay inside that folder: a link leading out is refused with
// ErrInsecurePath, unless the caller opts in with WithFollowSymlinks, the
// one option that allows it (for the Hugging Face cache, whose snapshots
// link into ../../blobs). ResolveFile applies the same rule to any file;
// package variant uses it for the indexes, single files, model_index.json
// and component folders it resolves. The rule is checked again when a shard
// is opened lazily, and what is opened is the file that was checked.
//
// Open opens a sharded set (or a single file) as one logical Checkpoint:
// before any tensor is read, every shard must exist and every mapped tensor
// must be in its shard's header. Shards are then opened lazily, on first
// use, and the Checkpoint is safe for concurrent use.
//
// Write, WriteFrom and WriteStream pack tensors greedily into shards of at
// most a maximum size (5 GB by default; ParseSize reads "5GB" or "4GiB"),
// name them as huggingface_hub does, and replace any previous set of the
// same prefix and variant. Write takes the tensors' bytes, WriteFrom fetches
// each tensor's bytes when it is written, and WriteStream lets the caller
// stream each tensor into an io.Writer piece by piece, so that memory does
// not grow with the tensor. Every shard names the CRC-32C of each of its
// tensors in its header (safetensors.ChecksumPrefix), filled in once its
// data is written; checksum keys in the metadata given are claims the
// data must match. On Linux the writers start the disk writes of a
// shard every 32 MiB as they go (sync_file_range, asynchronous), so that
// the fsync of the commit waits for little more than the last piece.
//
// The replacement is crash-atomic. If the writing process is killed at any
// instant, every reader that opens the folder afterwards (package variant,
// Open on the index or the single file, transformers, diffusers), with no
// repair run first, loads either the complete previous set or the complete
// new one; a save never changes or removes a file of the previous set before
// the new set is complete and in place. New files are written under hidden
// temporary names and fsynced; shards then take their standard names when
// these are free, else swap names PREFIX[.V]-00001-of-0000N.swap-TOKEN.safetensors
// (the index names them, so every index-following reader accepts them, and
// package variant recognizes them); a single rename of the index (or of the
// single file) switches readers, and only then is the previous set removed.
// A set committed under swap names is moved to its standard names by a
// second index switch over hard links. A kill may leave files that no index
// names; the next save of the same set removes them, and Leftovers lists
// them. A lock file, ".PREFIX[.V].safetensors.lock", serializes saves of one
// set and keeps a save from removing a live save's temporary files. WriteFrom
// documents each step.
//
// Choosing which files of a folder to load (variants such as fp16 or bf16,
// legacy diffusers names) is package variant's job.
//
// Errors are *Error values whose Kind can be tested with errors.Is, for
// example errors.Is(err, shard.ErrMissingShard).
package shard
