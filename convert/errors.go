package convert

import (
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"

	"github.com/ckpt-go/ckpt/internal/errkind"
)

// Error is the error type of this package. It names what it concerns: the
// folder or file (Path), the tensor and the option or field, where they
// apply.
type Error struct {
	Kind      ErrorKind
	Path      string // the target folder or the file concerned
	Component string // the component of a pipeline, for Run
	Tensor    string // the tensor name
	Field     string // the option or field concerned ("KeepLast", "metadata step", ...)
	Ranks     []int  // the ranks concerned, for SaveShard and Commit (nil otherwise)
	Msg       string // what went wrong, for people
	Err       error  // the underlying error, if any
}

// Error formats the kind, what the error concerns and the cause.
func (e *Error) Error() string {
	m := errkind.NewMessage("convert").Add(e.Kind.String()).Add(e.Path).Quote("component", e.Component)
	if len(e.Ranks) == 1 {
		m.Add("rank " + strconv.Itoa(e.Ranks[0]))
	} else if len(e.Ranks) > 1 {
		rs := make([]string, len(e.Ranks))
		for i, r := range e.Ranks {
			rs[i] = strconv.Itoa(r)
		}
		m.Add("ranks " + strings.Join(rs, ", "))
	}
	return m.Quote("tensor", e.Tensor).Add(e.Field).Add(e.Msg).Err(e.Err).String()
}

// Is reports whether target is e's kind; ErrExists also matches
// fs.ErrExist.
func (e *Error) Is(target error) bool {
	if k, ok := target.(ErrorKind); ok {
		return k == e.Kind
	}
	return e.Kind == ErrExists && target == fs.ErrExist
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// ErrorKind classifies the failures of this package. Each kind is also an
// error, so callers can test for it with errors.Is:
//
//	if errors.Is(err, convert.ErrBusy) { ... }
//
// The kinds are general: each answers one question a caller may branch
// on, and the message says which case it is (for the kinds that gather
// several, the message starts with the case: "shape", "write", "copy",
// ...). A canceled operation's error matches context.Canceled or
// context.DeadlineExceeded.
type ErrorKind int

// The kinds of Error. Their String forms (snake_case) are stable and meant
// for machine-readable output.
const (
	// ErrOption: an option has an unusable value (a negative KeepLast, a
	// checkpoint name that is a path, a rule that names no component,
	// ...).
	ErrOption ErrorKind = iota + 1
	// ErrInvalid: the tensors or metadata to write cannot be written. The
	// message starts with the case: "name" (a tensor name the format
	// refuses: empty, "__metadata__", invalid UTF-8, control characters),
	// "duplicate" (two tensors, or two ranks' tensors, of one name),
	// "dtype" (neither built in nor registered), "shape" (a negative
	// dimension, an element count that overflows or does not fill whole
	// bytes for a sub-byte dtype), "data length" (data not of the length
	// its dtype and shape need), "metadata" (invalid UTF-8, a field Save
	// writes itself, a checksum for a tensor not written; Field names
	// it), "header" (a shard's header would exceed
	// safetensors.MaxHeaderSize).
	ErrInvalid
	// ErrTarget: the checkpoint could not be written to its target.
	// Either the target cannot be used (not a folder, no permission, a
	// read-only file system, a lock that cannot be taken, a file name the
	// layout refuses), or, with the message starting "write", writing
	// failed before the commit: nothing was left behind; or, with the
	// message starting "commit", putting the checkpoint into place failed
	// (a rename, the index, the parent folder's sync; the message says
	// whether the new checkpoint is in place). Earlier checkpoints are
	// untouched.
	ErrTarget
	// ErrNoSpace: the target's file system has less free space than the
	// checkpoint needs.
	ErrNoSpace
	// ErrExists: a checkpoint of that name exists and Overwrite is not set.
	// Errors of this kind also match fs.ErrExist.
	ErrExists
	// ErrBusy: a save of the same folder is running in this process and
	// the options say RefusePrevious.
	ErrBusy
	// ErrConflict: the location changed under a save: another writer
	// committed a checkpoint there since the ranks began (their shards
	// were saved onto another checkpoint), or wrote the index first (a
	// conditional write refused to replace it). Nothing was committed by
	// this call.
	ErrConflict
	// ErrIncomplete: Commit found a rank of the save missing or
	// incomplete (no completion marker, a shard missing, of another size,
	// or whose header differs from the one its marker records); Ranks
	// lists them. Nothing was committed: the previous checkpoint is what
	// readers load, and the ranks' files stay for a later Commit.
	ErrIncomplete
	// ErrSource: Run could not open or read its source (the wrapped error
	// is the loader's, package shard's or package torch's), or, with the
	// message starting "copy", a non-weight file of its source folder
	// cannot be copied: it is not a regular file (a FIFO, a device, a
	// socket), or it is a symbolic link that leads out of its folder (see
	// Options.FollowSymlinks). Nothing was written.
	ErrSource
	// ErrCast: Run's policy asks for an output it will not write. A
	// tensor cannot take the target the policy gives it (a complex tensor
	// to a real dtype, scaled quantization to a dtype without a scaled
	// layout, a weight already in another scaled layout next to new FP8
	// weights, ...); or, with the message starting "unreadable", a
	// component would be written with a quantization that the library
	// owning it does not load (FP8 weights with a compressed-tensors or
	// DeepSeek quantization_config in a diffusers model): Component names
	// it, the message says how to keep it loadable
	// (Options.AllowCkptOnlyQuant writes it anyway). Nothing was written.
	ErrCast
	// ErrOverflow: Options.FailOnOverflow is set and a finite value
	// overflowed its target or became NaN or Inf. Nothing was committed.
	ErrOverflow
	// ErrVerify: reading Run's output back (Options.Verify) found a tensor
	// that differs from what was written, or a quantized weight that the
	// loader does not read back as such.
	ErrVerify
)

var kindNames = [...]string{
	ErrOption:     "option",
	ErrInvalid:    "invalid",
	ErrTarget:     "target",
	ErrNoSpace:    "no_space",
	ErrExists:     "exists",
	ErrBusy:       "busy",
	ErrConflict:   "conflict",
	ErrIncomplete: "incomplete",
	ErrSource:     "source",
	ErrCast:       "cast",
	ErrOverflow:   "overflow",
	ErrVerify:     "verify",
}

// String returns the kind's snake_case name, e.g. "no_space".
func (k ErrorKind) String() string { return errkind.Name(kindNames[:], k) }

// Error makes a kind usable as an errors.Is target.
func (k ErrorKind) Error() string { return "convert: " + k.String() }

// withCtxErr returns err when it already wraps the context's error ctxErr,
// otherwise an error wrapping both, so that a canceled operation's error
// always matches context.Canceled or context.DeadlineExceeded.
func withCtxErr(ctxErr, err error) error {
	if ctxErr == nil || errors.Is(err, ctxErr) {
		return err
	}
	return fmt.Errorf("%w: %w", ctxErr, err)
}
