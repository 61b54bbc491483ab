package cuda

import (
	"strconv"
	"strings"

	"github.com/ckpt-go/ckpt/executor"
	"github.com/ckpt-go/ckpt/internal/errkind"
)

// Error is the CUDA executor's error from the driver's side: it names the
// driver call and its result code, the JIT log of a module that failed to
// load, the tensor. Its Kind is the executor's condition it is, so callers
// test one set of conditions whichever backend failed:
// errors.Is(err, executor.ErrUnavailable) when no driver or no usable
// device is there, executor.ErrDevice when a driver call failed (the
// executor's ops wrap it in an *executor.Error of the op).
type Error struct {
	// Kind is the executor's condition: executor.ErrUnavailable,
	// ErrDevice, ErrBudget (the device is out of memory), ErrArgument,
	// ErrRead or ErrClosed.
	Kind executor.ErrorKind
	// Op is the executor operation ("upload", "linear", "dequantize", ...).
	Op string
	// Call is the driver entry point that failed ("cuMemAlloc_v2").
	Call string
	// Code is the CUresult the call returned (0 when no call failed), Name
	// the driver's name for it ("CUDA_ERROR_OUT_OF_MEMORY").
	Code int
	Name string
	// Tensor is the tensor concerned, when there is one.
	Tensor string
	Msg    string
	// Log is the JIT compiler's error log when a module failed to load.
	Log string
	Err error
}

// Error formats the kind, what it concerns and the cause.
func (e *Error) Error() string {
	call := e.Call
	if e.Call != "" && e.Name != "" {
		call += " returned " + e.Name + " (" + strconv.Itoa(e.Code) + ")"
	} else if e.Call != "" && e.Code != 0 {
		call += " returned " + strconv.Itoa(e.Code)
	}
	s := errkind.NewMessage("cuda").Add(e.Kind.String()).Add(e.Op).Quote("tensor", e.Tensor).Add(call).
		Add(e.Msg).Err(e.Err).String()
	if e.Log != "" {
		s += "\nJIT log:\n" + strings.TrimRight(e.Log, "\n")
	}
	return s
}

// Is reports whether target is the condition e's Kind is, as for an
// *executor.Error of that kind (executor.ErrClosed also matches fs.ErrClosed).
func (e *Error) Is(target error) bool { return (&executor.Error{Kind: e.Kind}).Is(target) }

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// Result codes of the driver API that this package treats specially.
const (
	cudaSuccess            = 0
	cudaErrorOutOfMemory   = 2
	cudaErrorNotInit       = 3
	cudaErrorNoDevice      = 100
	cudaErrorInvalidDevice = 101
	cudaErrorInvalidPTX    = 218
	cudaErrorNotReady      = 600
)

// driverError is the error of a driver call that returned code (named
// name by the driver): its kind is ErrUnavailable for no device,
// ErrBudget for out of memory, ErrDevice otherwise.
func driverError(call string, code int, name string) *Error {
	kind := executor.ErrDevice
	switch code {
	case cudaErrorNoDevice, cudaErrorInvalidDevice:
		kind = executor.ErrUnavailable
	case cudaErrorOutOfMemory:
		kind = executor.ErrBudget
	}
	return &Error{Kind: kind, Call: call, Code: code, Name: name}
}

// withOp fills in e.Op (and e.Tensor) on a *Error that has none and
// returns it; other errors are wrapped as a driver failure.
func withOp(err error, op, tensor string) error {
	if err == nil {
		return nil
	}
	if e, ok := err.(*Error); ok {
		if e.Op == "" {
			e.Op = op
		}
		if e.Tensor == "" {
			e.Tensor = tensor
		}
		return e
	}
	return &Error{Kind: executor.ErrDevice, Op: op, Tensor: tensor, Err: err}
}
