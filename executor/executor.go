package executor

import (
	"context"
	"errors"
	"slices"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/quant"
)

// The names of the ops, as errors and NaN reports spell them.
const (
	OpUpload     = "Upload"
	OpFromHost   = "FromHost"
	OpDequantize = "Dequantize"
	OpLinear     = "Linear"
	OpAdd        = "Add"
	OpGELU       = "GELU"
	OpSiLU       = "SiLU"
	OpRMSNorm    = "RMSNorm"
	OpDownload   = "Download"
	OpFree       = "Free"
)

// Buffer is memory owned by one executor: device memory for CUDA, Go memory
// for the CPU. It is immutable once made.
type Buffer interface {
	// DType and Shape describe the elements (row-major, little-endian
	// when downloaded).
	DType() dtype.DType
	Shape() []int64
	// Bytes is the size in bytes, as Download writes it.
	Bytes() int64
	// Name is the tensor it came from, or for an op's output the layer it
	// descends from (see the package documentation); it names the layer in
	// NaN reports.
	Name() string
}

// Weight is an uploaded tensor: its data as stored and, for a weight kept
// quantized, its scales and their layout.
type Weight struct {
	// Data holds the values as stored: a plain tensor of any dtype, or a
	// quantized weight's narrow codes (F8_E4M3, F8_E5M2, or F4 packed two
	// per byte, whose Buffer dtype is the stored container).
	Data Buffer
	// Scales are the scale tensors of a quantized weight, in the order of
	// Quant.Scales (nil for a plain tensor).
	Scales []Buffer
	// Quant describes a quantized weight (layout, element type, logical
	// shape, each scale's role and block); nil for a plain tensor.
	Quant *quant.Weight
}

// Name returns the weight's name (its data's).
func (w *Weight) Name() string { return w.Data.Name() }

// DType returns the element type: the quantized element type (F8_E4M3,
// F4, ...) or the plain tensor's dtype.
func (w *Weight) DType() dtype.DType {
	if w.Quant != nil {
		return w.Quant.Elem
	}
	return w.Data.DType()
}

// Shape returns the logical shape (a quantized weight's [out, in]).
func (w *Weight) Shape() []int64 {
	if w.Quant != nil {
		return slices.Clone(w.Quant.Shape)
	}
	return w.Data.Shape()
}

// Quantized reports whether the weight carries scales.
func (w *Weight) Quantized() bool { return w.Quant != nil }

// Bytes returns the device bytes of the data and the scales.
func (w *Weight) Bytes() int64 {
	n := w.Data.Bytes()
	for _, s := range w.Scales {
		n += s.Bytes()
	}
	return n
}

// DeviceInfo describes the device an executor runs on.
type DeviceInfo struct {
	// Kind is the backend: "cpu", "cuda".
	Kind string
	// Name is the device's name ("NVIDIA H100 80GB HBM3", "cpu: 16 cores
	// linux/amd64").
	Name string
	// TotalBytes and FreeBytes are the device's memory (for the CPU: the
	// machine's memory and what the process can get; 0 when unknown).
	TotalBytes, FreeBytes int64
	// ComputeCapability is the CUDA compute capability ("9.0"); "" on CPU.
	ComputeCapability string
	// Driver is the driver's version, when there is one.
	Driver string
}

// Executor runs ops on one device. Its methods are safe for concurrent
// use. Every Buffer an op returns belongs to the caller, who frees it with
// Free; Close frees what is left.
type Executor interface {
	// Info describes the device (memory figures are current).
	Info() DeviceInfo
	// Upload copies one loaded tensor (a view of the file or owned bytes,
	// any dtype) to the executor. A weight kept quantized (t.QuantWeight()
	// non-nil) becomes a Weight with its scales, still narrow. The tensor
	// may be released once Upload returns.
	Upload(ctx context.Context, t *ckpt.Tensor) (*Weight, error)
	// UploadModel puts every tensor of a model on the device, in the
	// dtypes its policy decides (conversions happen on the device), with
	// progress and cancellation. It refuses with ErrBudget before
	// allocating when the model does not fit; a failed or cancelled upload
	// frees everything it allocated.
	UploadModel(ctx context.Context, m *ckpt.Model, opts ...UploadOption) (*Model, error)
	// FromHost copies little-endian host bytes of the given dtype and
	// shape to the executor, as a Buffer named name.
	FromHost(ctx context.Context, data []byte, dt dtype.DType, shape []int64, name string) (Buffer, error)
	// Dequantize returns w's logical tensor in dtype to, bit-exact with
	// quant.Weight.Dequantize (dtype.Convert for a plain weight).
	Dequantize(ctx context.Context, w *Weight, to dtype.DType) (Buffer, error)
	// Linear returns y = x·Wᵀ + b in dtype out, summed in F32 (bias may be
	// nil). See the package documentation for the exact semantics.
	Linear(ctx context.Context, x Buffer, w *Weight, bias Buffer, out dtype.DType) (Buffer, error)
	// Add returns a + b (same shapes) in a's dtype, named after b (a when
	// b has no name): Add(residual, branch).
	Add(ctx context.Context, a, b Buffer) (Buffer, error)
	// GELU returns 0.5·x·(1 + erf(x/√2)) elementwise, in x's dtype.
	GELU(ctx context.Context, x Buffer) (Buffer, error)
	// SiLU returns x·σ(x) elementwise, in x's dtype.
	SiLU(ctx context.Context, x Buffer) (Buffer, error)
	// RMSNorm returns x / sqrt(mean(x²) + eps) · w over x's last
	// dimension, in x's dtype; w may be nil.
	RMSNorm(ctx context.Context, x Buffer, w Buffer, eps float32) (Buffer, error)
	// Download copies b's bytes into dst, which must be exactly b.Bytes()
	// long.
	Download(ctx context.Context, b Buffer, dst []byte) error
	// Free releases b. Using b afterwards is an ErrClosed error.
	Free(b Buffer) error
	// Close frees every buffer still allocated and releases the device.
	Close() error
}

// FreeWeight frees a Weight's data and scales.
func FreeWeight(ex Executor, w *Weight) error {
	if w == nil {
		return nil
	}
	var errs []error
	if w.Data != nil {
		errs = append(errs, ex.Free(w.Data))
	}
	for _, s := range w.Scales {
		errs = append(errs, ex.Free(s))
	}
	return errors.Join(errs...)
}

// IsActivation reports whether d is an activation dtype: F32, BF16 or F16.
func IsActivation(d dtype.DType) bool { return d == dtype.F32 || d == dtype.BF16 || d == dtype.F16 }

// IsLinearWeight reports whether d is an element type Linear takes for its
// weight: F32, BF16, F16, F8_E4M3 or F8_E5M2.
func IsLinearWeight(d dtype.DType) bool {
	return IsActivation(d) || d == dtype.F8_E4M3 || d == dtype.F8_E5M2
}
