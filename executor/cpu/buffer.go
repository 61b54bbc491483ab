package cpu

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/executor"
	"github.com/ckpt-go/ckpt/quant"
)

// buffer is the CPU executor's Buffer: little-endian bytes in Go memory
// (or, for UploadModel, the loader's memory, borrowed).
type buffer struct {
	ex    *Executor
	dt    dtype.DType
	shape []int64
	name  string
	size  int64

	mu    sync.Mutex
	data  []byte // nil once freed
	freed atomic.Bool
	// linear caches the F32 values of a weight whose data this buffer is,
	// for Linear (see Executor.Linear).
	linear *f32Cache
}

// f32Cache is a weight's values in F32, with what they were computed from.
type f32Cache struct {
	q      *quant.Weight
	scales []executor.Buffer
	vals   []float32
}

func (b *buffer) DType() dtype.DType { return b.dt }
func (b *buffer) Shape() []int64     { return slices.Clone(b.shape) }
func (b *buffer) Bytes() int64       { return b.size }
func (b *buffer) Name() string       { return b.name }

// bytes returns the buffer's memory, or nil once freed.
func (b *buffer) bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.data
}
