package quant

import (
	"fmt"

	"github.com/ckpt-go/ckpt/internal/errkind"
)

// ErrorKind classifies a failure of Detect, Dequantize or a quantizer. A
// kind is an error, so callers test with errors.Is(err,
// quant.ErrInvalidLayout); every *Error matches its own kind. The message
// says which check failed ("missing scale", "scale shape", ...).
type ErrorKind int

// The kinds of Error.
const (
	// ErrConfig: a quantization config that is not valid JSON, or a field of
	// the wrong type or with an impossible value (a non-integer block size,
	// an invalid regular expression in an ignore list, ...). Field names it.
	ErrConfig ErrorKind = iota + 1
	// ErrInvalidLayout: the stored tensors do not form the layout they or
	// the config declare. The message names the check: a missing scale; an
	// orphan scale (without the quantized tensor it scales); a scale shape or
	// scale dtype the layout does not allow (U8 only as MXFP4's E8M0
	// carrier); a data shape impossible for the layout (wrong rank, a packed
	// dimension of the wrong size, a shape that overflows); a block size
	// that does not divide its dimension, or that no config states and the
	// shapes leave open (block size unknown: Detect refuses to guess); a
	// conflict (two stored tensors claiming one logical weight, a name
	// appearing twice); a mismatch with the declared scheme (an FP8 weight
	// where the config declares 4-bit values, a format the layer's metadata
	// does not name).
	ErrInvalidLayout
	// ErrInvalidArgument: a Weight given to Dequantize whose fields do not
	// describe a layout it can compute (invalid weight), a byte slice whose
	// length does not match the tensor it stands for (length), or a
	// quantizer's shape or block size that cannot be used.
	ErrInvalidArgument
	// ErrTarget: Dequantize or a quantizer was asked for a target dtype it
	// cannot produce (a dequantization target that is not a float type).
	ErrTarget
)

var kindNames = [...]string{
	ErrConfig:          "config",
	ErrInvalidLayout:   "invalid_layout",
	ErrInvalidArgument: "invalid_argument",
	ErrTarget:          "target",
}

// String returns the kind's stable snake_case name, e.g. "invalid_layout".
func (k ErrorKind) String() string { return errkind.Name(kindNames[:], k) }

// Error returns "quant: " followed by the kind's name.
func (k ErrorKind) Error() string { return "quant: " + k.String() }

// Error is the error type of this package. It names the tensor concerned
// (the stored name: the scale for a scale problem, the quantized tensor
// otherwise) and, for config problems, the config and field.
type Error struct {
	Kind   ErrorKind
	Tensor string // stored tensor concerned, if any
	Field  string // config source and field, e.g. `config.json quantization_config.weight_block_size`
	Msg    string // what is wrong
	Err    error  // underlying error (JSON syntax, context), if any
}

// Error formats the error as `quant: KIND: tensor "NAME": FIELD: MSG: CAUSE`.
func (e *Error) Error() string {
	return errkind.NewMessage("quant").Add(e.Kind.String()).Quote("tensor", e.Tensor).Add(e.Field).
		Add(e.Msg).Err(e.Err).String()
}

// Is reports whether target is e's Kind.
func (e *Error) Is(target error) bool {
	k, ok := target.(ErrorKind)
	return ok && k == e.Kind
}

// Unwrap returns the underlying error, if any.
func (e *Error) Unwrap() error { return e.Err }

// layoutErr is an ErrInvalidLayout error about tensor whose message starts
// with what: the check that failed ("missing scale", "scale shape", ...).
func layoutErr(what, tensor, msg string) *Error {
	return &Error{Kind: ErrInvalidLayout, Tensor: tensor, Msg: what + ": " + msg}
}

// argErr is an ErrInvalidArgument error whose message starts with what
// ("length", "invalid weight", ...).
func argErr(what, tensor, msg string) *Error {
	return &Error{Kind: ErrInvalidArgument, Tensor: tensor, Msg: what + ": " + msg}
}

func configErr(field, msg string, err error) *Error {
	return &Error{Kind: ErrConfig, Field: field, Msg: msg, Err: err}
}

// canceledErr is the error of a dequantization stopped because its context
// was done: it names the tensor, says "canceled" and wraps the context's
// error, so errors.Is matches context.Canceled or context.DeadlineExceeded.
func canceledErr(tensor string, err error) error {
	return fmt.Errorf("quant: tensor %q: canceled: %w", tensor, err)
}
