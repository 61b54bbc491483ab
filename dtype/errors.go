package dtype

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors, for errors.Is. The typed errors below match them.
var (
	// ErrUnknown: a dtype name or value the library does not know.
	ErrUnknown = errors.New("unknown dtype")
	// ErrLength: byte or element counts that do not fit the dtype or each other.
	ErrLength = errors.New("length mismatch")
	// ErrUnsupported: a conversion that is not defined (e.g. complex to real).
	ErrUnsupported = errors.New("unsupported conversion")
	// ErrRegister: an invalid or duplicate registration.
	ErrRegister = errors.New("invalid dtype registration")
)

// UnknownError reports a dtype name that Parse does not know.
type UnknownError struct {
	Name  string   // the name as given
	Valid []string // the valid safetensors names
}

// Error names the unknown dtype and lists the valid names.
func (e *UnknownError) Error() string {
	if len(e.Valid) == 0 {
		return fmt.Sprintf("dtype: unknown dtype %q", e.Name)
	}
	return fmt.Sprintf("dtype: unknown dtype %q (valid: %s; framework spellings such as bfloat16, float8_e4m3fn, half are accepted too)",
		e.Name, strings.Join(e.Valid, ", "))
}

// Is reports whether target is ErrUnknown.
func (e *UnknownError) Is(target error) bool { return target == ErrUnknown }

// LengthError reports byte or element counts that do not fit.
type LengthError struct {
	DType    DType  // the dtype concerned
	Elements int64  // element count, when known
	Bytes    int64  // byte count, when known
	Reason   string // what is wrong
}

// Error names the dtype, the problem and the counts.
func (e *LengthError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "dtype: %s: %s", e.DType, e.Reason)
	if e.Elements != 0 {
		fmt.Fprintf(&b, " (%d elements)", e.Elements)
	}
	if e.Bytes != 0 {
		fmt.Fprintf(&b, " (%d bytes)", e.Bytes)
	}
	return b.String()
}

// Is reports whether target is ErrLength.
func (e *LengthError) Is(target error) bool { return target == ErrLength }

// ConvertError reports a conversion that can't be done: mismatched lengths
// (matches ErrLength) or an undefined pair of dtypes (matches ErrUnsupported).
type ConvertError struct {
	From, To DType
	// SrcBytes and DstBytes are the slice lengths given.
	SrcBytes, DstBytes int
	// SrcElements and DstElements are the element counts they hold (-1 when
	// the length is not a whole number of elements).
	SrcElements, DstElements int
	Err                      error // ErrLength, ErrUnsupported or ErrUnknown
	Reason                   string
}

// Error names both dtypes, the problem and, for length errors, both sizes.
func (e *ConvertError) Error() string {
	msg := fmt.Sprintf("dtype: convert %s -> %s: %s", e.From, e.To, e.Reason)
	if errors.Is(e.Err, ErrLength) {
		msg += fmt.Sprintf(" (src %d bytes = %d elements, dst %d bytes = %d elements)",
			e.SrcBytes, e.SrcElements, e.DstBytes, e.DstElements)
	}
	return msg
}

// Unwrap returns the sentinel the error matches.
func (e *ConvertError) Unwrap() error { return e.Err }

// RegisterError reports an invalid or duplicate Register call.
type RegisterError struct {
	Name   string
	Reason string
}

// Error names the dtype being registered and why it was refused.
func (e *RegisterError) Error() string {
	return fmt.Sprintf("dtype: register %q: %s", e.Name, e.Reason)
}

// Is reports whether target is ErrRegister.
func (e *RegisterError) Is(target error) bool { return target == ErrRegister }
