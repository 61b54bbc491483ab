package ckpt

import (
	"io/fs"
	"strconv"

	"github.com/ckpt-go/ckpt/internal/errkind"
)

// ErrorKind classifies the loader's errors. Each kind is an error, so
// callers can test with errors.Is(err, ckpt.ErrBudget). Errors from the
// lower packages (variant, shard, safetensors, dtype, quant) are wrapped and
// keep their own kinds: errors.Is(err, variant.ErrVariantNotFound) works
// through a *ckpt.Error.
type ErrorKind int

// The kinds of Error.
const (
	// ErrPattern: a rule's pattern is malformed.
	ErrPattern ErrorKind = iota + 1
	// ErrTarget: a dtype target is unknown or cannot be applied (for
	// example C64 to a real type, or a non-float target for a quantized
	// weight).
	ErrTarget
	// ErrOption: an option is invalid (negative workers or budget, a
	// component rule naming no component of the model, ...).
	ErrOption
	// ErrResolve: the path could not be resolved into files (the wrapped
	// error is a *variant.Error or *shard.Error).
	ErrResolve
	// ErrConfig: a config file (config.json, hf_quant_config.json) could not
	// be read or is not a JSON object.
	ErrConfig
	// ErrQuant: a scaled low-precision layout is malformed (the wrapped
	// error is a *quant.Error naming the tensor).
	ErrQuant
	// ErrBudget: the plan does not fit the memory budget; nothing was
	// allocated. The error is a *BudgetError with the plan.
	ErrBudget
	// ErrNotFound: no tensor or component of that name.
	ErrNotFound
	// ErrAmbiguous: a bare tensor name exists in several components of a
	// pipeline; name it as COMPONENT/NAME.
	ErrAmbiguous
	// ErrBuffer: a caller's buffer has the wrong size.
	ErrBuffer
	// ErrRead: reading or converting tensor data failed (the wrapped error
	// says why: I/O, a truncated file, a conversion error).
	ErrRead
	// ErrClosed: the model or the loaded weights were closed.
	ErrClosed
	// ErrSplit: a tensor cannot be split as the rank option asks (see
	// WithRank): sub-byte elements whose part would not start and end on
	// whole bytes, or a quantized weight whose part would not fall on its
	// scale's blocks.
	ErrSplit
)

var kindNames = [...]string{
	ErrPattern:   "pattern",
	ErrTarget:    "target",
	ErrOption:    "option",
	ErrResolve:   "resolve",
	ErrConfig:    "config",
	ErrQuant:     "quant",
	ErrBudget:    "budget",
	ErrNotFound:  "not_found",
	ErrAmbiguous: "ambiguous",
	ErrBuffer:    "buffer",
	ErrRead:      "read",
	ErrClosed:    "closed",
	ErrSplit:     "split",
}

// String returns the kind's snake_case name.
func (k ErrorKind) String() string { return errkind.Name(kindNames[:], k) }

// Error makes a kind usable as an errors.Is target.
func (k ErrorKind) Error() string { return "ckpt: " + k.String() }

// Error is the loader's error type. It names what it concerns: the path,
// the component, the tensor, the pattern or the option.
type Error struct {
	Kind      ErrorKind
	Path      string // the file or folder concerned
	Component string // the component concerned
	Tensor    string // the tensor concerned
	Pattern   string // the rule pattern concerned
	Msg       string
	Err       error // the underlying error
}

// Error formats the kind, what it concerns and the cause.
func (e *Error) Error() string {
	m := errkind.NewMessage("ckpt").Add(e.Kind.String()).Add(e.Path).Quote("component", e.Component).Quote("tensor", e.Tensor)
	if e.Pattern != "" || e.Kind == ErrPattern {
		m.Add("pattern " + strconv.Quote(e.Pattern))
	}
	return m.Add(e.Msg).Err(e.Err).String()
}

// Is reports whether target is e's kind.
//
// Conditions that several packages share are one value each: an ErrClosed
// error also matches fs.ErrClosed.
func (e *Error) Is(target error) bool {
	if k, ok := target.(ErrorKind); ok {
		return k == e.Kind
	}
	return e.Kind == ErrClosed && target == fs.ErrClosed
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// BudgetError is returned when a plan's peak does not fit the memory
// budget. Its message says by how much and what would fit; Plan is the full
// plan that was refused. It matches ErrBudget.
type BudgetError struct {
	Plan *Plan
	Msg  string
}

// Error returns the refusal message.
func (e *BudgetError) Error() string { return "ckpt: budget: " + e.Msg }

// Is reports whether target is ErrBudget.
func (e *BudgetError) Is(target error) bool { return target == ErrBudget }
