// Package torch reads PyTorch checkpoints (pytorch_model.bin, .pt, .pth,
// and sharded sets through pytorch_model.bin.index.json) without executing
// anything, and converts them to safetensors.
//
// # Why not a pickle library
//
// torch.load unpickles data.pkl, and unpickling imports and calls whatever
// globals the pickle names: a checkpoint can run any command. Even
// torch.load's weights_only mode has been bypassed (CVE-2025-32434). This
// package never imports or calls anything: its unpickler is a small virtual
// machine that understands only what torch.save writes for a state dict,
// and interprets those few globals by itself.
//
// # What is accepted
//
// The file must be the zip archive torch.save writes since PyTorch 1.6.
// Its top folder has no fixed name (archive/, the file's stem, anything):
// data.pkl is found by suffix (the shallowest one; two at the same depth
// are ambiguous and refused), and the other records are looked up beside
// it: byteorder ("little" or "big"; little when absent) and data/KEY for
// each storage. The legacy formats (a bare pickle stream that starts with
// PyTorch's magic number, written before 1.6 or with
// _use_new_zipfile_serialization=False, and the older tar archive) are
// refused with ErrUnsupported ("legacy format"), whose message says to
// re-save the file.
//
// data.pkl may use the opcodes of pickle protocol 2, which torch.save
// writes, and the few of protocols 3 to 5 that other tools emit: PROTO,
// FRAME, GLOBAL, STACK_GLOBAL, the memo (BINPUT, LONG_BINPUT, MEMOIZE,
// BINGET, LONG_BINGET), MARK, POP, POP_MARK, DUP, the containers
// (EMPTY_DICT, DICT, SETITEM(S), EMPTY_LIST, LIST, APPEND(S), EMPTY_TUPLE,
// TUPLE, TUPLE1-3), the scalars (BININT, BININT1, BININT2, LONG1, LONG4,
// BINFLOAT, NEWTRUE, NEWFALSE, NONE, BINUNICODE, SHORT_BINUNICODE,
// BINUNICODE8, BINBYTES, SHORT_BINBYTES, BINBYTES8), REDUCE, BUILD,
// BINPERSID and STOP. Any other opcode (the text opcodes of protocol 0,
// INST, OBJ, NEWOBJ, EXT1, ...) fails with ErrUnsupported ("unsupported
// opcode").
//
// The only globals are the ones a state dict needs:
//
//   - collections.OrderedDict, called with no arguments; BUILD may then set
//     its attributes (state_dict()'s _metadata of module versions), which
//     are not items and are dropped;
//   - torch._utils._rebuild_tensor_v2 and _rebuild_tensor_v3 (whose extra
//     argument is a dtype), _rebuild_parameter and
//     _rebuild_parameter_with_state (with no state);
//   - the typed storages torch.FloatStorage, DoubleStorage, HalfStorage,
//     BFloat16Storage, LongStorage, IntStorage, ShortStorage, CharStorage,
//     ByteStorage, BoolStorage and ComplexFloatStorage, and
//     torch.storage.UntypedStorage, in persistent ids ("storage", type,
//     key, location, numel);
//   - the dtypes of _rebuild_tensor_v3, as torch.save writes for the types
//     without a typed storage: torch.float8_e4m3fn, float8_e5m2,
//     float8_e4m3fnuz, float8_e5m2fnuz, float8_e8m0fnu, uint16, uint32,
//     uint64, and the others above.
//
// Any other global fails with ErrForbiddenGlobal, and Error.Global spells
// it as the pickle does ("posix system", "commands Popen"). Known PyTorch
// types with no safetensors dtype (complex128, the quantized types, packed
// sub-byte types) fail with ErrUnsupported ("unsupported dtype") instead. The unpickler is
// bounded whatever its input: data.pkl at most MaxPickleSize, a cap on the
// objects created, the stack, the memo, tensor dimensions and integer
// lengths; every length field is checked against the bytes that remain
// before anything is sliced, so no allocation is sized by a hostile field.
//
// # From pickle to tensors
//
// The pickle's top level must be a dict. Nested dicts, lists and tuples
// flatten to dotted names: a training checkpoint {"model": state_dict,
// "epoch": 3} gives "model.enc.weight". Values that are not tensors (int,
// float, str, bool, None, a dtype, an empty container) go into Metadata as
// text under their dotted names; bytes, classes and anything else fail with
// ErrUnsupported ("unsupported value"), as do tensors with backward hooks
// or a negated or conjugated view. Two values with one dotted name fail
// with ErrUnsupported ("duplicate name").
//
// Open checks every tensor before returning. Its storage record must exist
// (ErrInvalidFormat, "missing record"), be stored uncompressed as torch.save
// writes it (ErrUnsupported, "compressed record") and hold exactly numel
// times the element size bytes (ErrInvalidFormat, "storage size"). The
// view's offset, shape and strides (non-negative, without overflow) must
// stay inside the record, and it may not have more elements than the record
// holds, so no copy outgrows the file (ErrInvalidFormat, "tensor bounds"). A contiguous view reads in one copy; any other view
// (transposed, sliced with a step) is gathered into contiguous row-major
// bytes. A big-endian archive is byte-swapped to little-endian as it is
// read. A tensor is read whole (ReadTo, Bytes, WriteTo) or in any range of
// its contiguous bytes (ReadAt), which reads the storage that range spans,
// or its own elements line by line along the view's least stride where
// those reads cost less (a system call each on an *os.File, a request each
// on any other reader). A reader of many pieces of a view that is not
// contiguous (a transposed weight, whose every piece of a few rows spans
// the whole storage) reads its storage once with Gather, and its pieces
// from the Gathered copy.
//
// Open reads the operating system's files, OpenFS those of an fs.FS (an
// os.DirFS, an object store), NewReader one archive through an
// io.ReaderAt.
//
// Names that are the same view of the same storage (tied weights, such as
// an embedding and an output projection) are one tensor: Tensors yields the
// first name, and Aliases maps the others to it. Different views of one
// storage are separate tensors, each read as its own contiguous copy.
//
// # Sharded checkpoints
//
// Open on a path ending in ".json" reads an index
// ({"weight_map": {tensor: shard}}). Every shard must be a bare file name
// in the index's folder: separators, "..", absolute paths and drive letters
// fail with ErrInsecurePath, and so does a symlink that resolves outside
// the folder (WithSymlinkRoot widens it). Files are opened without blocking
// and must be regular files, so a FIFO fails with ErrNotRegular instead
// of hanging. Each shard must hold exactly the tensors the index maps to it
// (ErrInvalidFormat, "index mismatch").
//
// # Verifying
//
// Open checks the structure (the zip directory, data.pkl's CRC, every
// tensor against its storage record) but reads no storage's bytes.
// Checkpoint.VerifyRecords reads every record once and compares it with
// the CRC-32 and sizes the archive records (a *RecordError, matching
// safetensors.ErrChecksum, names the record, its bytes and the tensors
// that view it); ParseIndex parses an index for a caller that checks it
// against its shards itself (package integrity, behind `ckpt verify`). A
// reader that verifies tensors as it reads them (the loader, package ckpt)
// asks Tensor.RecordCRC for the record's CRC-32 and whether the tensor's
// bytes are the record's, and reads the record itself with
// Tensor.ReadRecordAt where they are not.
//
// # Converting
//
// WriteSafetensors streams the tensors, one at a time, into a safetensors
// file that appears atomically, with the aliases as JSON under AliasesKey
// (FormatAliases; ParseAliases reads them back, and ckpt.Open loads each
// alias again as a tensor of its own) and the non-tensor values under
// their names.
//
// Every failure is an *Error whose Kind can be tested with errors.Is
// (errors.Is(err, torch.ErrForbiddenGlobal)) and which names the file, the
// archive record, the tensor and the global concerned.
package torch
