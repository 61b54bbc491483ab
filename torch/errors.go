package torch

import (
	"cmp"
	"io/fs"
	"strings"

	"github.com/ckpt-go/ckpt/internal/errkind"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/shard"
)

// ErrorKind classifies the failures of this package. Each kind is also an
// error, so callers can test for it with errors.Is:
//
//	if errors.Is(err, torch.ErrForbiddenGlobal) { ... }
//
// The general kinds (ErrInvalidFormat, ErrUnsupported) leave the detail to
// the message, which starts with the check that failed ("invalid pickle",
// "tensor bounds", "legacy format", ...).
type ErrorKind int

// The kinds of Error. Their String forms (snake_case) are stable and meant
// for machine-readable output.
const (
	// ErrIO: opening, stat-ing or reading a file failed.
	ErrIO ErrorKind = iota + 1
	// ErrNotRegular: the path is not a regular file once its symbolic links
	// are followed (a folder, a FIFO, a device). Errors of this kind also
	// match safetensors.ErrNotRegular.
	ErrNotRegular
	// ErrInvalidFormat: the checkpoint is malformed. The message names the
	// check: an invalid archive (not a zip archive, a malformed one, no
	// data.pkl or more than one, a record name that appears twice); an
	// invalid pickle (truncated, a stack or mark underflow, a memo miss,
	// arguments of the wrong type or count, bytes after STOP); a missing
	// record (a storage's data/<key> record is not in the archive); a
	// storage size that differs from numel times the element size, or two
	// references to one storage that disagree; tensor bounds (offset, shape
	// and strides reaching outside the storage, or overflowing); a byte
	// order record neither "little" nor "big"; an invalid index
	// (pytorch_model.bin.index.json too large, not JSON, without a usable
	// "weight_map"); an index mismatch (the index maps a tensor its shard
	// does not hold, or a shard holds a tensor the index does not map to
	// it).
	ErrInvalidFormat
	// ErrUnsupported: a well-formed checkpoint this package does not convert.
	// The message names the check: the legacy format (pre-1.6 non-zip, or
	// the older tar archive); an unsupported opcode of the restricted
	// unpickler (INST, OBJ, NEWOBJ, EXT1, the text opcodes of protocol 0,
	// ...); an unsupported dtype (complex128, quantized types, packed
	// sub-byte types); an unsupported value (a top level that is not a dict,
	// bytes, dict keys that are not strings or integers, a tensor with
	// backward hooks or a negated or conjugated view, a self-referential
	// container); a compressed record (torch.save stores tensor data
	// uncompressed); a limit exceeded (size, objects, stack, memo, nesting,
	// dimensions, integer length); a duplicate name (two values flatten to
	// the same dotted name, or a metadata key collides with one this
	// package writes).
	ErrUnsupported
	// ErrForbiddenGlobal: data.pkl imports a global outside the allow-list.
	// Error.Global spells it as the pickle does ("posix system").
	ErrForbiddenGlobal
	// ErrInsecurePath: a shard name is a path (separators, "..", an
	// absolute path, a drive letter) or a symlink that leaves the folder.
	// Errors of this kind also match shard.ErrInsecurePath.
	ErrInsecurePath
	// ErrMissingShard: a shard the index names does not exist. Errors of
	// this kind also match shard.ErrMissingShard.
	ErrMissingShard
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
	ErrIO:              "io",
	ErrNotRegular:      "not_regular_file",
	ErrInvalidFormat:   "invalid_format",
	ErrUnsupported:     "unsupported",
	ErrForbiddenGlobal: "forbidden_global",
	ErrInsecurePath:    "insecure_path",
	ErrMissingShard:    "missing_shard",
	ErrTensorNotFound:  "tensor_not_found",
	ErrClosed:          "closed",
	ErrInvalidArgument: "invalid_argument",
	ErrWrite:           "write",
}

// String returns the kind's snake_case name, e.g. "forbidden_global".
func (k ErrorKind) String() string { return errkind.Name(kindNames[:], k) }

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
// safetensors.ErrTensorNotFound, an ErrNotRegular one
// safetensors.ErrNotRegular, and ErrInsecurePath and ErrMissingShard ones
// shard's kinds of those names (what a shard set of safetensors files
// fails with in the same case).
func (e *Error) Is(target error) bool {
	if k, ok := target.(ErrorKind); ok {
		return k == e.Kind
	}
	switch e.Kind {
	case ErrClosed:
		return target == fs.ErrClosed
	case ErrTensorNotFound:
		return target == safetensors.ErrTensorNotFound
	case ErrNotRegular:
		return target == safetensors.ErrNotRegular
	case ErrInsecurePath:
		return target == shard.ErrInsecurePath
	case ErrMissingShard:
		return target == shard.ErrMissingShard
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
