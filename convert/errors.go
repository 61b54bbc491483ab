package convert

import (
	"errors"
	"fmt"
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

// Is reports whether target is e's kind.
func (e *Error) Is(target error) bool {
	k, ok := target.(ErrorKind)
	return ok && k == e.Kind
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// ErrorKind classifies the failures of this package. Each kind is also an
// error, so callers can test for it with errors.Is:
//
//	if errors.Is(err, convert.ErrBusy) { ... }
type ErrorKind int

// The kinds of Error. Their String forms (snake_case) are stable and meant
// for machine-readable output.
const (
	// ErrOption: an option has an unusable value (a negative KeepLast, a
	// checkpoint name that is a path, ...).
	ErrOption ErrorKind = iota + 1
	// ErrName: a tensor name the format refuses (empty, "__metadata__",
	// invalid UTF-8, control characters).
	ErrName
	// ErrDuplicate: two tensors have the same name.
	ErrDuplicate
	// ErrDType: a tensor's dtype is neither built in nor registered.
	ErrDType
	// ErrShape: a tensor's shape is unusable (a negative dimension, an
	// element count that overflows or that does not fill whole bytes for a
	// sub-byte dtype).
	ErrShape
	// ErrDataLength: a tensor's data does not have the length its dtype
	// and shape need.
	ErrDataLength
	// ErrMetadata: metadata that the format refuses (invalid UTF-8) or
	// that clashes with a field Save writes itself (step, epoch).
	ErrMetadata
	// ErrHeader: a shard's header would exceed safetensors.MaxHeaderSize.
	ErrHeader
	// ErrTarget: the target folder cannot be written (not a folder, no
	// permission, read-only file system).
	ErrTarget
	// ErrNoSpace: the target's file system has less free space than the
	// checkpoint needs.
	ErrNoSpace
	// ErrExists: a checkpoint of that name exists and Overwrite is not set.
	ErrExists
	// ErrBusy: a save of the same folder is running in this process and
	// the options say RefusePrevious.
	ErrBusy
	// ErrWrite: writing the checkpoint failed before it was committed;
	// nothing was left behind and earlier checkpoints are untouched.
	ErrWrite
	// ErrCommit: renaming the checkpoint into place failed; earlier
	// checkpoints are untouched.
	ErrCommit
	// ErrSource: Run could not open or read its source (the wrapped error
	// is the loader's, package shard's or package torch's).
	ErrSource
	// ErrCopy: a non-weight file of Run's source folder cannot be copied:
	// it is not a regular file (a FIFO, a device, a socket), or it is a
	// symbolic link that leads out of its folder (see
	// Options.FollowSymlinks). Nothing was written.
	ErrCopy
	// ErrCast: a tensor cannot take the target the policy gives it (a
	// complex tensor to a real dtype, scaled quantization to a dtype
	// without a scaled layout, a weight already in another scaled layout
	// next to new FP8 weights, ...). Nothing was written.
	ErrCast
	// ErrOverflow: Options.FailOnOverflow is set and a finite value
	// overflowed its target or became NaN or Inf. Nothing was committed.
	ErrOverflow
	// ErrVerify: reading Run's output back found a tensor that differs
	// from what was written, or a quantized weight that the loader does
	// not read back as such.
	ErrVerify
	// ErrIncomplete: Commit found a rank of the save missing or
	// incomplete (no completion marker, a shard missing, of another size,
	// or whose header differs from the one its marker records); Ranks
	// lists them. Nothing was committed: the previous checkpoint is what
	// readers load, and the ranks' files stay for a later Commit.
	ErrIncomplete
	// ErrConflict: the location changed under a save: another writer
	// committed a checkpoint there since the ranks began (their shards
	// were saved onto another checkpoint), or wrote the index first (a
	// conditional write refused to replace it). Nothing was committed by
	// this call.
	ErrConflict
	// ErrUnreadable: Run would write a component with a quantization that
	// the library owning it does not load (FP8 weights with a
	// compressed-tensors or DeepSeek quantization_config in a diffusers
	// model). Component names it; Msg says how to keep it loadable.
	// Nothing was written.
	ErrUnreadable
)

var kindNames = [...]string{
	ErrOption:     "option",
	ErrName:       "name",
	ErrDuplicate:  "duplicate",
	ErrDType:      "dtype",
	ErrShape:      "shape",
	ErrDataLength: "data_length",
	ErrMetadata:   "metadata",
	ErrHeader:     "header",
	ErrTarget:     "target",
	ErrNoSpace:    "no_space",
	ErrExists:     "exists",
	ErrBusy:       "busy",
	ErrWrite:      "write",
	ErrCommit:     "commit",
	ErrSource:     "source",
	ErrCopy:       "copy",
	ErrCast:       "cast",
	ErrOverflow:   "overflow",
	ErrVerify:     "verify",
	ErrIncomplete: "incomplete",
	ErrConflict:   "conflict",
	ErrUnreadable: "unreadable",
}

// String returns the kind's snake_case name, e.g. "no_space".
func (k ErrorKind) String() string {
	if k > 0 && int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return fmt.Sprintf("ErrorKind(%d)", int(k))
}

// Error makes a kind usable as an errors.Is target.
func (k ErrorKind) Error() string { return "convert: " + k.String() }

// Kinds returns every ErrorKind, in declaration order (for documentation
// and exhaustive tests).
func Kinds() []ErrorKind {
	out := make([]ErrorKind, 0, len(kindNames)-1)
	for k := ErrOption; int(k) < len(kindNames); k++ {
		out = append(out, k)
	}
	return out
}

// withCtxErr returns err when it already wraps the context's error ctxErr,
// otherwise an error wrapping both, so that a canceled operation's error
// always matches context.Canceled or context.DeadlineExceeded.
func withCtxErr(ctxErr, err error) error {
	if ctxErr == nil || errors.Is(err, ctxErr) {
		return err
	}
	return fmt.Errorf("%w: %w", ctxErr, err)
}
