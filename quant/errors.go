package quant

import (
	"fmt"

	"github.com/ckpt-go/ckpt/internal/errkind"
)

// ErrorKind classifies a failure of Detect or Dequantize. A kind is an
// error, so callers test with errors.Is(err, quant.ErrMissingScale); every
// *Error matches its own kind.
type ErrorKind int

// The kinds of Error.
const (
	// ErrConfig: a quantization config that is not valid JSON, or a field of
	// the wrong type or with an impossible value (a non-integer block size,
	// an invalid regular expression in an ignore list, ...). Field names it.
	ErrConfig ErrorKind = iota + 1
	// ErrMissingScale: a quantized tensor without the scale its layout
	// requires.
	ErrMissingScale
	// ErrOrphanScale: a scale tensor of a declared layout without the
	// quantized tensor it scales.
	ErrOrphanScale
	// ErrScaleShape: a scale tensor whose shape is not the one the layout
	// and the quantized tensor's shape require.
	ErrScaleShape
	// ErrScaleDType: a scale tensor of a dtype that is not a float type
	// (U8 is allowed only as the E8M0 carrier of MXFP4).
	ErrScaleDType
	// ErrDataShape: a quantized tensor of an impossible dtype or shape for
	// its layout (wrong rank, a packed dimension of the wrong size, a shape
	// that overflows).
	ErrDataShape
	// ErrBlockSize: a block or group size that does not divide the
	// dimension the layout declares it divides.
	ErrBlockSize
	// ErrBlockSizeUnknown: a block size is needed, no config states it and
	// the shapes do not determine it: Detect refuses to guess.
	ErrBlockSizeUnknown
	// ErrConflict: two stored tensors claim the same logical weight (P.weight
	// and P.weight_packed; P and P_blocks), or a tensor name appears twice.
	ErrConflict
	// ErrMismatch: a stored tensor contradicts the declared scheme (an FP8
	// weight where the config declares 4-bit values, a format the layer's
	// metadata does not name).
	ErrMismatch
	// ErrInvalidWeight: a Weight given to Dequantize whose fields do not
	// describe a layout it can compute (unknown role, too many scales, a
	// block that does not tile the tensor).
	ErrInvalidWeight
	// ErrTarget: Dequantize was asked for a target dtype that is not a
	// float type.
	ErrTarget
	// ErrLength: a byte slice given to Dequantize whose length does not
	// match the tensor it stands for.
	ErrLength
)

var kindNames = [...]string{
	ErrConfig:           "config",
	ErrMissingScale:     "missing_scale",
	ErrOrphanScale:      "orphan_scale",
	ErrScaleShape:       "scale_shape",
	ErrScaleDType:       "scale_dtype",
	ErrDataShape:        "data_shape",
	ErrBlockSize:        "block_size",
	ErrBlockSizeUnknown: "block_size_unknown",
	ErrConflict:         "conflict",
	ErrMismatch:         "mismatch",
	ErrInvalidWeight:    "invalid_weight",
	ErrTarget:           "target",
	ErrLength:           "length",
}

// String returns the kind's stable snake_case name, e.g. "missing_scale".
func (k ErrorKind) String() string { return errkind.Name(kindNames[:], k) }

// Error returns "quant: " followed by the kind's name.
func (k ErrorKind) Error() string { return "quant: " + k.String() }

// Kinds returns every ErrorKind, in declaration order.
func Kinds() []ErrorKind { return errkind.All[ErrorKind](kindNames[:]) }

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

func tensorErr(kind ErrorKind, tensor, msg string) *Error {
	return &Error{Kind: kind, Tensor: tensor, Msg: msg}
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
