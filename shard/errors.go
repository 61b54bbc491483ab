package shard

import (
	"io/fs"

	"github.com/ckpt-go/ckpt/internal/errkind"
	"github.com/ckpt-go/ckpt/safetensors"
)

// ErrorKind classifies the failures of this package. Each kind is also an
// error, so callers can test for it with errors.Is:
//
//	if errors.Is(err, shard.ErrMissingShard) { ... }
//
// The general kinds (ErrInvalidIndex, ErrInvalidArgument) leave the detail
// to the message, which names the check that failed ("index too large",
// "invalid weight_map", "invalid tensor", ...).
type ErrorKind int

// The kinds of Error. Their String forms (snake_case) are stable and meant
// for machine-readable output.
const (
	// ErrIndexRead: the index file could not be read.
	ErrIndexRead ErrorKind = iota + 1
	// ErrInvalidIndex: the index is malformed or contradicts its shards.
	// The message names the check: the index is too large (over
	// MaxIndexSize); invalid JSON (not a well-formed JSON object); a missing
	// weight_map; an invalid weight_map (not a non-empty object of strings,
	// or mapping an empty tensor name); a duplicate tensor (listed twice);
	// invalid metadata (present but not an object); an invalid shard name
	// (empty, with control characters or not ending in ".safetensors"); a
	// tensor missing from its shard (the index maps a tensor to a shard
	// whose header does not have it).
	ErrInvalidIndex
	// ErrInsecurePath: a shard name is a path (separators, "..", an
	// absolute path, a drive letter), or a file of the folder is a symlink
	// that leads out of it (see WithFollowSymlinks).
	ErrInsecurePath
	// ErrMissingShard: a shard the index names does not exist.
	ErrMissingShard
	// ErrInvalidShard: a shard exists but is not a readable safetensors file.
	ErrInvalidShard
	// ErrTensorNotFound: the checkpoint has no tensor of that name. Errors
	// of this kind also match safetensors.ErrTensorNotFound.
	ErrTensorNotFound
	// ErrClosed: the checkpoint was closed.
	ErrClosed
	// ErrInvalidArgument: the caller's misuse; the message names the check:
	// an unsupported path (Open given something that is neither an index nor
	// a safetensors file, a folder for example); an invalid size (ParseSize
	// or WithMaxShardSize); an invalid variant name (not matching
	// ^[A-Za-z0-9_]+$); a duplicate tensor (Write given two tensors of one
	// name); an invalid tensor (Write given a tensor whose name, dtype,
	// shape or data length is unusable).
	ErrInvalidArgument
	// ErrInvalidPrefix: Write got an unusable file name prefix.
	ErrInvalidPrefix
	// ErrWrite: writing a new file failed; the previous set is intact.
	ErrWrite
	// ErrCommit: moving the new set into place failed; the previous set is
	// untouched (the message says otherwise in the one case where the new
	// set is in place but the folder could not be fsynced).
	ErrCommit
	// ErrNotRegular: the index, a shard or the file given to Open is not a
	// regular file once its symbolic links are followed (a FIFO, a device,
	// a socket). It is refused before anything is read, without blocking.
	ErrNotRegular
)

var kindNames = [...]string{
	ErrIndexRead:       "index_read",
	ErrInvalidIndex:    "invalid_index",
	ErrInsecurePath:    "insecure_path",
	ErrMissingShard:    "missing_shard",
	ErrInvalidShard:    "invalid_shard",
	ErrTensorNotFound:  "tensor_not_found",
	ErrClosed:          "closed",
	ErrInvalidArgument: "invalid_argument",
	ErrInvalidPrefix:   "invalid_prefix",
	ErrWrite:           "write",
	ErrCommit:          "commit",
	ErrNotRegular:      "not_regular_file",
}

// String returns the kind's snake_case name, e.g. "missing_shard".
func (k ErrorKind) String() string { return errkind.Name(kindNames[:], k) }

// Error makes a kind usable as an errors.Is target.
func (k ErrorKind) Error() string { return "shard: " + k.String() }

// Error is the error type of this package. It names the index or file
// (Path), the shard and the tensor concerned, where they apply.
type Error struct {
	Kind   ErrorKind
	Path   string // the index, checkpoint file or output folder
	Shard  string // the shard file name, as the index spells it
	Tensor string // the tensor name
	Msg    string // what went wrong, for people
	Err    error  // the underlying error, if any
}

// Error formats the kind, the file, shard and tensor, and the cause.
func (e *Error) Error() string {
	return errkind.NewMessage("shard").Add(e.Kind.String()).Add(e.Path).Quote("shard", e.Shard).Quote("tensor", e.Tensor).
		Add(e.Msg).Err(e.Err).String()
}

// Is reports whether target is e's kind. Conditions that several packages
// share are one value each: ErrTensorNotFound and ErrNotRegular errors also
// match safetensors' kinds of those names, ErrClosed ones fs.ErrClosed.
func (e *Error) Is(target error) bool {
	if k, ok := target.(ErrorKind); ok {
		return k == e.Kind
	}
	switch e.Kind {
	case ErrTensorNotFound:
		return target == safetensors.ErrTensorNotFound
	case ErrNotRegular:
		return target == safetensors.ErrNotRegular
	case ErrClosed:
		return target == fs.ErrClosed
	}
	return false
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }
