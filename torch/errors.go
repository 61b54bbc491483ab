package torch

import (
	"cmp"
	"github.com/ckpt-go/ckpt/safetensors"
	"io/fs"
	"strings"

	"github.com/ckpt-go/ckpt/internal/errkind"
)

// ErrorKind classifies the failures of this package. Each kind is also an
// error, so callers can test for it with errors.Is:
//
//	if errors.Is(err, torch.ErrForbiddenGlobal) { ... }
type ErrorKind int

// The kinds of Error. Their String forms (snake_case) are stable and meant
// for machine-readable output.
const (
	// ErrIO: opening, stat-ing or reading a file failed.
	ErrIO ErrorKind = iota + 1
	// ErrUnsupportedPath: the path is not a regular file (a folder, a FIFO,
	// a device).
	ErrUnsupportedPath
	// ErrLegacyFormat: the file is in the pre-1.6 non-zip format (a bare
	// pickle stream starting with PyTorch's magic number, or the older tar
	// archive).
	ErrLegacyFormat
	// ErrInvalidArchive: not a zip archive, a malformed one, no data.pkl or
	// more than one, or a record name that appears twice.
	ErrInvalidArchive
	// ErrInvalidPickle: data.pkl is malformed: truncated, a stack or mark
	// underflow, a memo miss, arguments of the wrong type or count, bytes
	// after STOP.
	ErrInvalidPickle
	// ErrUnsupportedOpcode: data.pkl uses a pickle opcode that the restricted
	// unpickler does not implement (INST, OBJ, NEWOBJ, EXT1, the text
	// opcodes of protocol 0, ...).
	ErrUnsupportedOpcode
	// ErrForbiddenGlobal: data.pkl imports a global outside the allow-list.
	// Error.Global spells it as the pickle does ("posix system").
	ErrForbiddenGlobal
	// ErrLimit: a bound on the pickle was exceeded (size, objects, stack,
	// memo, nesting, dimensions, integer length).
	ErrLimit
	// ErrUnsupportedDType: a tensor's dtype has no safetensors equivalent
	// (complex128, quantized types, packed sub-byte types).
	ErrUnsupportedDType
	// ErrUnsupportedValue: a value that is well-formed but cannot be
	// converted: a top level that is not a dict, bytes, dict keys that are
	// not strings or integers, a tensor with backward hooks or a negated or
	// conjugated view, a self-referential container.
	ErrUnsupportedValue
	// ErrMissingRecord: a storage's data/<key> record is not in the archive.
	ErrMissingRecord
	// ErrCompressedRecord: a storage record is compressed; torch.save
	// stores tensor data uncompressed, and so must the archive.
	ErrCompressedRecord
	// ErrStorageSize: a storage record's size differs from numel times the
	// element size the pickle gives, or two references to one storage
	// disagree on its type or size.
	ErrStorageSize
	// ErrTensorBounds: a tensor's offset, shape and strides reach outside
	// its storage, or overflow.
	ErrTensorBounds
	// ErrByteOrder: the byteorder record is neither "little" nor "big".
	ErrByteOrder
	// ErrDuplicateName: two values flatten to the same dotted name, or a
	// metadata key collides with one this package writes.
	ErrDuplicateName
	// ErrInvalidIndex: a pytorch_model.bin.index.json that is too large,
	// not JSON, or has no usable "weight_map".
	ErrInvalidIndex
	// ErrInsecurePath: a shard name is a path (separators, "..", an
	// absolute path, a drive letter) or a symlink that leaves the folder.
	ErrInsecurePath
	// ErrMissingShard: a shard the index names does not exist.
	ErrMissingShard
	// ErrIndexMismatch: the index maps a tensor its shard does not hold, or
	// a shard holds a tensor the index does not map to it.
	ErrIndexMismatch
	// ErrTensorNotFound: the checkpoint has no tensor of that name.
	ErrTensorNotFound
	// ErrClosed: the checkpoint was closed.
	ErrClosed
	// ErrInvalidArgument: a destination buffer of the wrong length, a nil
	// checkpoint.
	ErrInvalidArgument
	// ErrWrite: writing the safetensors file failed (Err is the
	// safetensors or context error); the previous file is intact.
	ErrWrite
)

var kindNames = [...]string{
	ErrIO:                "io",
	ErrUnsupportedPath:   "unsupported_path",
	ErrLegacyFormat:      "legacy_format",
	ErrInvalidArchive:    "invalid_archive",
	ErrInvalidPickle:     "invalid_pickle",
	ErrUnsupportedOpcode: "unsupported_opcode",
	ErrForbiddenGlobal:   "forbidden_global",
	ErrLimit:             "limit",
	ErrUnsupportedDType:  "unsupported_dtype",
	ErrUnsupportedValue:  "unsupported_value",
	ErrMissingRecord:     "missing_record",
	ErrCompressedRecord:  "compressed_record",
	ErrStorageSize:       "storage_size",
	ErrTensorBounds:      "tensor_bounds",
	ErrByteOrder:         "byte_order",
	ErrDuplicateName:     "duplicate_name",
	ErrInvalidIndex:      "invalid_index",
	ErrInsecurePath:      "insecure_path",
	ErrMissingShard:      "missing_shard",
	ErrIndexMismatch:     "index_mismatch",
	ErrTensorNotFound:    "tensor_not_found",
	ErrClosed:            "closed",
	ErrInvalidArgument:   "invalid_argument",
	ErrWrite:             "write",
}

// String returns the kind's snake_case name, e.g. "forbidden_global".
func (k ErrorKind) String() string { return errkind.Name(kindNames[:], k) }

// Kinds returns every ErrorKind, in declaration order (for documentation
// and exhaustive tests).
func Kinds() []ErrorKind { return errkind.All[ErrorKind](kindNames[:]) }

// Error makes a kind usable as an errors.Is target.
func (k ErrorKind) Error() string { return "torch: " + k.String() }

// Error is the error type of this package. It names the file, the archive
// record, the tensor and the pickle global concerned, where they apply.
type Error struct {
	Kind   ErrorKind
	File   string // the checkpoint, shard or index file ("" for NewReader without a name)
	Record string // the archive record, e.g. "archive/data.pkl" or "archive/data/3"
	Tensor string // the tensor's dotted name
	Global string // the global as the pickle spells it: module, a space, name ("posix system")
	Msg    string // what went wrong, for people
	Err    error  // the underlying error, if any
}

// Error formats the error as
// `torch: FILE: RECORD: tensor "NAME": global "MOD NAME": MESSAGE: CAUSE`,
// leaving out the parts that do not apply.
func (e *Error) Error() string {
	return errkind.NewMessage("torch").Add(e.File).Add(e.Record).Quote("tensor", e.Tensor).Quote("global", e.Global).
		Add(cmp.Or(e.Msg, strings.ReplaceAll(e.Kind.String(), "_", " "))).Err(e.Err).String()
}

// Is reports whether target is e's kind.
//
// Conditions that several packages share are one value each: an ErrClosed
// error also matches fs.ErrClosed, an ErrTensorNotFound one
// safetensors.ErrTensorNotFound.
func (e *Error) Is(target error) bool {
	if k, ok := target.(ErrorKind); ok {
		return k == e.Kind
	}
	switch e.Kind {
	case ErrClosed:
		return target == fs.ErrClosed
	case ErrTensorNotFound:
		return target == safetensors.ErrTensorNotFound
	}
	return false
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// withFile returns err with File (and Record, when it has none) filled in,
// if err is an *Error that lacks them.
func withFile(err error, file, record string) error {
	e, ok := err.(*Error)
	if !ok {
		return err
	}
	e2 := *e
	if e2.File == "" {
		e2.File = file
	}
	if e2.Record == "" {
		e2.Record = record
	}
	return &e2
}
