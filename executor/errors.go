package executor

import (
	"fmt"
	"io/fs"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/internal/errkind"
)

// ErrorKind classifies the errors of executors. Each kind is an error, so
// callers test with errors.Is(err, executor.ErrUnavailable). The kinds are
// general; the message says which case it is (a shape, a dtype, a buffer
// of another executor, out of device memory, …).
type ErrorKind int

// The kinds of Error.
const (
	// ErrUnavailable: the executor cannot start here (no driver, no device,
	// not built into the program). NewBest goes on to the next backend.
	ErrUnavailable ErrorKind = iota + 1
	// ErrArgument: an argument the op does not take: shapes that do not
	// fit (Linear's K, Add's shapes, RMSNorm's D, a data length that is
	// not the shape's), a dtype it does not take (an integer activation,
	// an output dtype other than F32/BF16/F16, an unsupported weight
	// type), a nil buffer, a Buffer made by another executor, a negative
	// or NaN eps, a Weight whose scales do not match its layout.
	ErrArgument
	// ErrClosed: the executor or the model was closed, or a Buffer was
	// used after Free (or freed twice). It also matches fs.ErrClosed.
	ErrClosed
	// ErrBudget: the memory did not suffice: a whole model does not fit
	// the device budget (refused before anything was allocated), or the
	// device has not enough free memory for an op's output (the message
	// says out of memory). It also matches ckpt.ErrBudget, as the loader's
	// refusal for the host's memory does.
	ErrBudget
	// ErrNotFound: no weight of that name in a Model.
	ErrNotFound
	// ErrNonFinite: an op's output holds NaN or Inf while the check-finite
	// option is on. The error is a *NonFiniteError.
	ErrNonFinite
	// ErrDevice: the device or its driver failed (the wrapped error names
	// the driver's error).
	ErrDevice
	// ErrRead: reading a model's tensor data failed (the wrapped error
	// is the loader's or the file system's).
	ErrRead
)

var kindNames = [...]string{
	ErrUnavailable: "unavailable",
	ErrArgument:    "argument",
	ErrClosed:      "closed",
	ErrBudget:      "budget",
	ErrNotFound:    "not_found",
	ErrNonFinite:   "non_finite",
	ErrDevice:      "device",
	ErrRead:        "read",
}

// String returns the kind's stable snake_case name.
func (k ErrorKind) String() string { return errkind.Name(kindNames[:], k) }

// Error makes a kind usable as an errors.Is target.
func (k ErrorKind) Error() string { return "executor: " + k.String() }

// Error is the error type of executors. It names what it concerns: the
// executor ("cpu", "cuda"), the op and the tensor (layer).
type Error struct {
	Kind     ErrorKind
	Executor string // "cpu", "cuda", ...
	Op       string // "Linear", "Upload", ...
	Tensor   string // the tensor or layer concerned
	Msg      string
	Err      error // the underlying error
}

// Error formats the error as `executor: KIND: EXECUTOR: OP: tensor "T": MSG: CAUSE`.
func (e *Error) Error() string {
	return errkind.NewMessage("executor").Add(e.Kind.String()).Add(e.Executor).Add(e.Op).Quote("tensor", e.Tensor).
		Add(e.Msg).Err(e.Err).String()
}

// Is reports whether target is e's kind. ErrBudget also matches
// ckpt.ErrBudget, as the loader's refusal for the host's memory does: one
// condition, whichever memory did not suffice; ErrClosed matches
// fs.ErrClosed.
func (e *Error) Is(target error) bool {
	switch {
	case e.Kind == ErrBudget && target == ckpt.ErrBudget,
		e.Kind == ErrClosed && target == fs.ErrClosed:
		return true
	}
	k, ok := target.(ErrorKind)
	return ok && k == e.Kind
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// NonFiniteError reports the first op whose output holds NaN or Inf under
// the check-finite option (see WithCheckFinite). It matches ErrNonFinite.
type NonFiniteError struct {
	Executor string // "cpu", "cuda", ...
	// Op is the op ("Linear", "Add", "GELU", "SiLU", "RMSNorm",
	// "Dequantize"); Seq its number among the ops the executor ran, from 1.
	Op  string
	Seq int64
	// Tensor is the layer: the name of the op's output (a Linear's weight,
	// an elementwise op's input).
	Tensor string
	// DType is the output's dtype; NaN and Inf count its non-finite
	// elements out of Elements.
	DType    string
	NaN, Inf int64
	Elements int64
}

// Error says which op and layer produced how many NaN and Inf.
func (e *NonFiniteError) Error() string {
	return fmt.Sprintf("executor: non_finite: %s: op %d %s: tensor %q: %d NaN and %d Inf in %d %s elements",
		e.Executor, e.Seq, e.Op, e.Tensor, e.NaN, e.Inf, e.Elements, e.DType)
}

// Is reports whether target is ErrNonFinite.
func (e *NonFiniteError) Is(target error) bool { return target == ErrNonFinite }
