package executor

import "github.com/ckpt-go/ckpt"

// Options configure an executor. Backends' constructors take Option values
// and read the result of Apply.
type Options struct {
	// CheckFinite makes every op count NaN and Inf in its output; the first
	// op with any fails with a *NonFiniteError (unless FiniteReport is set).
	CheckFinite bool
	// FiniteReport, when set, receives the report of every op whose output
	// holds NaN or Inf, in order, and the ops go on (implies CheckFinite).
	FiniteReport func(*NonFiniteError)
	// Workers bounds the CPU goroutines of an op (0: GOMAXPROCS).
	Workers int
	// Device is the device ordinal (CUDA), 0 by default.
	Device int
}

// Option configures an executor.
type Option func(*Options)

// WithCheckFinite makes every op count NaN and Inf in its output on the
// device; the first op whose output holds any returns a *NonFiniteError
// (matching ErrNonFinite) naming the op, the layer and the counts, and
// frees its output.
func WithCheckFinite() Option { return func(o *Options) { o.CheckFinite = true } }

// WithFiniteReport is WithCheckFinite that records instead of failing:
// report is called with each op whose output holds NaN or Inf, in order
// (the first call names the first op), and the op returns its output.
// report must be quick and must not call the executor.
func WithFiniteReport(report func(*NonFiniteError)) Option {
	return func(o *Options) { o.CheckFinite, o.FiniteReport = true, report }
}

// WithWorkers bounds the goroutines of CPU work (0: GOMAXPROCS).
func WithWorkers(n int) Option { return func(o *Options) { o.Workers = n } }

// WithDevice selects a device by ordinal (CUDA).
func WithDevice(ordinal int) Option { return func(o *Options) { o.Device = ordinal } }

// Apply returns the Options that opts set.
func Apply(opts ...Option) Options {
	var o Options
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	return o
}

// Finite is what an executor calls after an op when o.CheckFinite is set,
// with the op's report (its counts may be zero). It returns nil when the
// output is finite or when a FiniteReport callback took the report, and r
// itself otherwise.
func (o *Options) Finite(r *NonFiniteError) error {
	if !o.CheckFinite || r.NaN+r.Inf == 0 {
		return nil
	}
	if o.FiniteReport != nil {
		o.FiniteReport(r)
		return nil
	}
	return r
}

// UploadOptions configure one UploadModel.
type UploadOptions struct {
	// Progress is called after each finished piece (bytes done out of the
	// total, the tensor finished), from one goroutine at a time.
	Progress func(ckpt.Progress)
	// Readers is the number of parallel file readers (0: the executor's
	// default).
	Readers int
	// StagingBytes is the host staging memory (CUDA: the pinned ring), 0
	// for the executor's default.
	StagingBytes int64
	// BudgetBytes is the device memory the model may take: 0 means the
	// device's free memory, negative disables the check.
	BudgetBytes int64
}

// UploadOption configures one UploadModel.
type UploadOption func(*UploadOptions)

// WithProgress sets UploadOptions.Progress.
func WithProgress(f func(ckpt.Progress)) UploadOption {
	return func(o *UploadOptions) { o.Progress = f }
}

// WithReaders sets UploadOptions.Readers.
func WithReaders(n int) UploadOption { return func(o *UploadOptions) { o.Readers = n } }

// WithStaging sets UploadOptions.StagingBytes.
func WithStaging(bytes int64) UploadOption { return func(o *UploadOptions) { o.StagingBytes = bytes } }

// WithDeviceBudget sets UploadOptions.BudgetBytes.
func WithDeviceBudget(bytes int64) UploadOption {
	return func(o *UploadOptions) { o.BudgetBytes = bytes }
}

// ApplyUpload returns the UploadOptions that opts set.
func ApplyUpload(opts ...UploadOption) UploadOptions {
	var o UploadOptions
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	return o
}
