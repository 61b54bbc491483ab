package cuda

import (
	"io/fs"
	"strconv"
	"strings"

	"github.com/ckpt-go/ckpt/internal/errkind"
)

// ErrorKind classifies the CUDA executor's errors. Each kind is an error,
// so callers test with errors.Is(err, cuda.ErrNoDriver).
type ErrorKind int

// The kinds of Error.
const (
	// ErrNoDriver: libcuda.so.1 could not be loaded, or lacks an entry
	// point this package needs (the driver is too old). Programs fall back
	// to the CPU executor.
	ErrNoDriver ErrorKind = iota + 1
	// ErrNoDevice: the driver loaded but reports no CUDA device (or not the
	// ordinal asked for).
	ErrNoDevice
	// ErrDriver: a driver call returned an error code; Error.Call and
	// Error.Code name it (Error.Name is the driver's name for it, from
	// cuGetErrorName).
	ErrDriver
	// ErrModule: a PTX module failed to load; Error.Log holds the JIT's
	// error log.
	ErrModule
	// ErrDeviceMemory: the device memory plan does not fit the free device
	// memory; nothing was allocated.
	ErrDeviceMemory
	// ErrArgument: an argument is invalid (a dtype or shape the operation
	// does not take, a buffer of another executor, a wrong length).
	ErrArgument
	// ErrUnsupported: the operation is valid but this executor does not
	// implement it (a quantization layout, a dtype).
	ErrUnsupported
	// ErrRead: reading tensor bytes from a file failed.
	ErrRead
	// ErrClosed: the executor or the buffer was already closed or freed.
	ErrClosed
)

var kindNames = [...]string{
	ErrNoDriver:     "no_driver",
	ErrNoDevice:     "no_device",
	ErrDriver:       "driver",
	ErrModule:       "module",
	ErrDeviceMemory: "device_memory",
	ErrArgument:     "argument",
	ErrUnsupported:  "unsupported",
	ErrRead:         "read",
	ErrClosed:       "closed",
}

// String returns the kind's snake_case name.
func (k ErrorKind) String() string { return errkind.Name(kindNames[:], k) }

// Kinds returns every ErrorKind in declaration order.
func Kinds() []ErrorKind { return errkind.All[ErrorKind](kindNames[:]) }

// Error makes a kind usable as an errors.Is target.
func (k ErrorKind) Error() string { return "cuda: " + k.String() }

// Error is the CUDA executor's error type. It names what it concerns: the
// operation, the driver call and its result code, the tensor.
type Error struct {
	Kind ErrorKind
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

// Is reports whether target is e's kind.
//
// An ErrClosed error also matches fs.ErrClosed, the condition every
// package's closed errors share.
func (e *Error) Is(target error) bool {
	if k, ok := target.(ErrorKind); ok {
		return k == e.Kind
	}
	return e.Kind == ErrClosed && target == fs.ErrClosed
}

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

// withOp fills in e.Op (and e.Tensor) on a *Error that has none and
// returns it; other errors are wrapped as kind.
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
	return &Error{Kind: ErrDriver, Op: op, Tensor: tensor, Err: err}
}
