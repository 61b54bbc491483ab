package safetensors

import (
	"cmp"
	"io/fs"
	"strconv"
	"strings"

	"github.com/ckpt-go/ckpt/internal/errkind"
)

// ErrorKind classifies a failure. It implements error, so a kind can be the
// target of errors.Is:
//
//	if errors.Is(err, safetensors.ErrHeaderTooLarge) { ... }
//
// Every *Error matches its own Kind.
type ErrorKind int

// The kinds of failure. The first ones follow the reference implementation's
// validation steps, in its order.
const (
	// ErrHeaderTooSmall: the file is shorter than the 8-byte length field.
	ErrHeaderTooSmall ErrorKind = iota + 1
	// ErrHeaderTooLarge: the header length field exceeds MaxHeaderSize.
	ErrHeaderTooLarge
	// ErrInvalidHeaderLength: the header extends past the end of the file.
	ErrInvalidHeaderLength
	// ErrInvalidUTF8: the header is not valid UTF-8.
	ErrInvalidUTF8
	// ErrInvalidJSON: the header is not valid JSON (syntax, nesting too deep,
	// trailing characters, invalid escapes).
	ErrInvalidJSON
	// ErrInvalidHeader: valid JSON of the wrong shape: not an object, a
	// missing or mistyped field, a non-string metadata value, ...
	ErrInvalidHeader
	// ErrInvalidOffset: data_offsets that leave a hole, overlap, or end
	// before they begin.
	ErrInvalidOffset
	// ErrIncompleteBuffer: the tensors do not cover the data section exactly
	// (trailing bytes, or a truncated file).
	ErrIncompleteBuffer
	// ErrOverflow: a shape whose element or byte count overflows.
	ErrOverflow
	// ErrMisalignedSlice: a sub-byte dtype whose elements (or slice) do not
	// fill whole bytes.
	ErrMisalignedSlice
	// ErrTensorSizeMismatch: data_offsets span a different number of bytes
	// than dtype and shape require (also: wrong data length given to a
	// writer).
	ErrTensorSizeMismatch
	// ErrUnknownDType: a dtype name that is neither built in nor registered.
	ErrUnknownDType
	// ErrDuplicateKey: a key that appears twice in the header (tensor name,
	// __metadata__, metadata key, or a field of a tensor entry), or a tensor
	// declared twice to a writer.
	ErrDuplicateKey
	// ErrTensorNotFound: no tensor of that name.
	ErrTensorNotFound
	// ErrClosed: the File or Writer was closed.
	ErrClosed
	// ErrIO: reading or writing the underlying file failed, or a memory
	// fault (SIGBUS) struck while reading mapped data, typically because the
	// file was truncated by another process while mapped (the message then
	// starts with "fault").
	ErrIO
	// ErrInvalidArgument: the caller's misuse; the message says which: a
	// destination buffer of the wrong length, a bad option value, an invalid
	// shape or a tensor named __metadata__ given to a writer ("reserved
	// name"), slice ranges that do not fit the tensor's shape ("invalid
	// slice"), writer calls out of the declared order, too many or too few
	// bytes, or Close before every tensor is complete ("write order"), a
	// dtype conversion that cannot be done ("convert FROM to TO", wrapping
	// the dtype error).
	ErrInvalidArgument
	// ErrFileChanged: the file's size or header bytes differ from those of
	// the Header given to WithHeader: it was replaced or rewritten since.
	ErrFileChanged
	// ErrNotRegular: the path (its symbolic links followed) is not a regular
	// file: a FIFO, a device, a socket or a folder. It is refused before
	// anything is read, without blocking.
	ErrNotRegular
	// ErrChecksum: a tensor's stored bytes differ from the checksum its
	// file's header names (a *ChecksumError), or the header's checksums are
	// damaged (see ChecksumPrefix).
	ErrChecksum

	numKinds // keep last
)

var kindNames = [...]string{
	ErrHeaderTooSmall:      "header_too_small",
	ErrHeaderTooLarge:      "header_too_large",
	ErrInvalidHeaderLength: "invalid_header_length",
	ErrInvalidUTF8:         "invalid_utf8",
	ErrInvalidJSON:         "invalid_json",
	ErrInvalidHeader:       "invalid_header",
	ErrInvalidOffset:       "invalid_offset",
	ErrIncompleteBuffer:    "incomplete_buffer",
	ErrOverflow:            "overflow",
	ErrMisalignedSlice:     "misaligned_slice",
	ErrTensorSizeMismatch:  "tensor_size_mismatch",
	ErrUnknownDType:        "unknown_dtype",
	ErrDuplicateKey:        "duplicate_key",
	ErrTensorNotFound:      "tensor_not_found",
	ErrClosed:              "closed",
	ErrIO:                  "io",
	ErrInvalidArgument:     "invalid_argument",
	ErrFileChanged:         "file_changed",
	ErrNotRegular:          "not_regular_file",
	ErrChecksum:            "checksum",
}

// String returns the snake_case name of the kind, e.g. "header_too_large".
// These names are stable; tools print them in JSON output.
func (k ErrorKind) String() string {
	if k > 0 && k < numKinds {
		return kindNames[k]
	}
	return "unknown_error_" + strconv.Itoa(int(k))
}

// Error returns "safetensors: " followed by the kind's name.
func (k ErrorKind) Error() string { return "safetensors: " + k.String() }

// Error is the error type of this package. It names what failed (Kind) and
// where: the file (when opened from a path), the tensor and the header field
// concerned, when there is one.
type Error struct {
	Kind   ErrorKind
	File   string // path of the file, "" when not opened from a path
	Tensor string // tensor or header key concerned, if any
	Field  string // header field concerned (e.g. "shape"), if any
	Msg    string // human-readable detail
	Err    error  // underlying error (I/O, dtype), if any
}

// Error formats the error as
// "safetensors: FILE: tensor "NAME": FIELD: MESSAGE: CAUSE".
func (e *Error) Error() string {
	return errkind.NewMessage("safetensors").Add(e.File).Quote("tensor", e.Tensor).Add(e.Field).
		Add(cmp.Or(e.Msg, strings.ReplaceAll(e.Kind.String(), "_", " "))).Err(e.Err).String()
}

// Is reports whether target is e's Kind.
//
// Conditions that several packages share are one value each: an ErrClosed
// error also matches fs.ErrClosed.
func (e *Error) Is(target error) bool {
	if k, ok := target.(ErrorKind); ok {
		return k == e.Kind
	}
	return e.Kind == ErrClosed && target == fs.ErrClosed
}

// Unwrap returns the underlying error, if any.
func (e *Error) Unwrap() error { return e.Err }

func newErr(kind ErrorKind, tensor, field, msg string) *Error {
	return &Error{Kind: kind, Tensor: tensor, Field: field, Msg: msg}
}

// withFile sets the file name on a *Error (if err is one without a name).
func withFile(err error, file string) error {
	if e, ok := err.(*Error); ok && e.File == "" && file != "" {
		e2 := *e
		e2.File = file
		return &e2
	}
	if e, ok := err.(*ChecksumError); ok && e.File == "" && file != "" {
		e2 := *e
		e2.File = file
		return &e2
	}
	return err
}
