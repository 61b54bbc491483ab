package ckpt

import (
	"errors"
	"io/fs"
	"strings"

	"github.com/ckpt-go/ckpt/internal/errkind"
)

// The conditions of the loader's errors: an *Error's Kind is one of them,
// so callers test with errors.Is(err, ckpt.ErrBudget). They are general;
// the message names the case ("split", "buffer", "config", ...). Errors
// from the lower packages (variant, shard, safetensors, dtype, quant) are
// wrapped and keep their own conditions: errors.Is(err,
// variant.ErrVariantNotFound) works through a *ckpt.Error.
var (
	// ErrOption: an option or argument the caller gave cannot be used: an
	// invalid option (negative workers, a staging size under 1 MiB, a
	// malformed variant name, a component rule naming no component of the
	// model, ...); a malformed rule pattern (the message names the
	// pattern); a tensor that cannot be split as the rank option asks
	// ("split": sub-byte elements whose part would not start and end on
	// whole bytes, a quantized weight whose part would not fall on its
	// scale's blocks); a caller's buffer of the wrong size ("buffer"); a
	// bare tensor name that exists in several components of a pipeline
	// ("ambiguous": name it as COMPONENT/NAME).
	ErrOption = errors.New("ckpt: option")
	// ErrTarget: a dtype target is unknown or cannot be applied (for
	// example C64 to a real type, or a non-float target for a quantized
	// weight).
	ErrTarget = errors.New("ckpt: target")
	// ErrResolve: the path could not be resolved into a checkpoint the
	// loader understands: its files (the wrapped error is a *variant.Error,
	// a *shard.Error or the source's), a config file, config.json or
	// hf_quant_config.json, that cannot be read or is not a JSON object
	// ("config"), or a malformed scaled low-precision layout (the wrapped
	// error is a *quant.Error naming the tensor).
	ErrResolve = errors.New("ckpt: resolve")
	// ErrBudget: the plan does not fit the memory budget; nothing was
	// allocated. The error is a *BudgetError with the plan. An executor's
	// refusal for the device's memory also matches it.
	ErrBudget = errors.New("ckpt: budget")
	// ErrNotFound: no tensor or component of that name.
	ErrNotFound = errors.New("ckpt: not_found")
	// ErrRead: reading or converting tensor data failed (the wrapped error
	// says why: I/O, a truncated file, a conversion error).
	ErrRead = errors.New("ckpt: read")
	// ErrClosed: the model or the loaded weights were closed. An *Error of
	// this kind also matches fs.ErrClosed.
	ErrClosed = errors.New("ckpt: closed")
)

// Error is the loader's error type. It names what it concerns: the path,
// the component, the tensor, the pattern or the option.
type Error struct {
	Kind      error  // the condition: ErrOption, ErrTarget, ErrResolve, ...
	Path      string // the file or folder concerned
	Component string // the component concerned
	Tensor    string // the tensor concerned
	Pattern   string // the rule pattern concerned
	Msg       string
	Err       error // the underlying error
}

// Error formats the kind, what it concerns and the cause:
// `ckpt: KIND: PATH: component "C": tensor "T": pattern "P": MSG: CAUSE`,
// where `ckpt: KIND` is the message of Kind ("ckpt: option").
func (e *Error) Error() string {
	kind := ""
	if e.Kind != nil {
		kind = strings.TrimPrefix(e.Kind.Error(), "ckpt: ")
	}
	return errkind.NewMessage("ckpt").Add(kind).Add(e.Path).Quote("component", e.Component).Quote("tensor", e.Tensor).
		Quote("pattern", e.Pattern).Add(e.Msg).Err(e.Err).String()
}

// Is reports whether target is e's kind.
//
// Conditions that several packages share are one value each: an ErrClosed
// error also matches fs.ErrClosed.
func (e *Error) Is(target error) bool {
	return e.Kind != nil && target == e.Kind || e.Kind == ErrClosed && target == fs.ErrClosed
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
