// Package safetensors reads and writes safetensors checkpoints, to the
// letter of the reference implementation (huggingface/safetensors) and
// stricter where it is lax.
//
// # Reading
//
// Open maps a file read-only and validates its header in the reference's
// order: the 8-byte length (too small, over MaxHeaderSize, past the end of
// the file), UTF-8, strict JSON (whitespace only as space, tab, CR, LF;
// nesting at most 127 containers deep, counting the header object, as
// serde_json's default limit allows), the header's shape (an object;
// "__metadata__" a string map or null; each tensor a known dtype, an integer
// shape and two integer data_offsets, keys in any order, unknown keys
// ignored), then the offsets: sorted by offset the tensors must tile the data
// section exactly from 0, with sizes computed with overflow checks and
// sub-byte dtypes filling whole bytes. Where the reference accepts what
// ckpt refuses, ckpt refuses by design: duplicate keys are an error
// (ErrDuplicateKey; the reference keeps one of them), and so is a dimension
// of 2^63 or more (ErrOverflow), even beside a 0 dimension where the
// reference, counting in unsigned 64-bit integers, accepts the empty
// tensor (shapes are int64 here). Every failure is an *Error whose Kind can
// be tested with errors.Is (errors.Is(err, safetensors.ErrInvalidOffset))
// and which names the file, tensor and field concerned. A hostile header
// never causes a panic or an allocation larger than the file.
//
// Open and ReadHeaderFile follow the path they are given through its
// symbolic links (the caller named it; package shard and variant decide
// which links a folder may hold), then check, on the open descriptor, that
// it is a regular file: a FIFO, a device, a socket or a folder is refused
// with ErrNotRegular, naming the path, without blocking (the open is
// non-blocking) and before a byte is read. OpenFS checks the same with
// fs.StatFS before opening, where fsys has it.
//
// Tensor views are cheap: Bytes is zero-copy on the mapping, ReadTo and
// ConvertTo copy (converting through package dtype, so a BF16 or FP8 tensor
// reads as F32 in one call), and Slice selects a sub-range along any
// dimensions, zero-copy when it is contiguous. NewReader reads through an
// io.ReaderAt and OpenBytes from memory.
//
// # Writing
//
// NewWriter streams a file: it writes the header for the declared tensors,
// then takes each tensor's bytes in layout order, so memory use does not
// depend on tensor sizes. The layout is the reference writer's, byte for
// byte: tensors by dtype (widest first, in the reference's enum order) then
// by name, metadata keys sorted, the header padded with spaces so the data
// starts at a multiple of 8 (WithAlignment for more). Create and Save write
// atomically (temporary file, fsync, rename, directory fsync): on any error
// or cancellation the previous file is untouched and nothing is left behind.
//
// # Checksums
//
// The writer records a CRC-32C of every tensor's stored bytes, and one of
// the header itself, in __metadata__ (ChecksumPrefix, HeaderChecksumKey),
// where other readers ignore them; WithoutChecksums writes the reference's
// bytes exactly. Header.Checksums reads them, Tensor.Verify checks a
// tensor, and a mismatch is a *ChecksumError (ErrChecksum) naming the file,
// the tensor and its bytes. The loader, package convert and package
// integrity verify as they read.
package safetensors
