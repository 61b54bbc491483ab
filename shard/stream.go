package shard

import (
	"context"
	"io"

	"github.com/ckpt-go/ckpt/safetensors"
)

// WriteStream writes a checkpoint set in dir like WriteFrom, but each
// tensor's bytes are streamed: write is called once per tensor, in the order
// of the files' layouts (shard by shard, each in safetensors.Writer's
// Order), and must write exactly the tensor's ByteLen bytes into w, in as
// many Write calls as it likes. So a converter can produce a tensor chunk by
// chunk and memory does not grow with the tensor. Packing, naming, metadata,
// the replacement of the previous set and its crash-atomic commit are
// WriteFrom's (see there).
//
// An error returned by write aborts the save: the new files are removed and
// the previous set is untouched. It is returned as an *Error of kind
// ErrWrite naming the shard and the tensor and wrapping it (saying
// "canceled" when it is ctx's error after ctx is done, so that errors.Is
// matches context.Canceled or context.DeadlineExceeded; an *Error of this package is
// returned as it is). A write that returns nil having written fewer or more
// bytes than the tensor has fails with ErrInvalidArgument. WithOrder tells the
// caller the whole order before the first call.
func WriteStream(ctx context.Context, dir, prefix, variant string, specs []safetensors.TensorSpec, write func(spec safetensors.TensorSpec, w io.Writer) error, metadata map[string]string, opts ...WriteOption) (*WriteResult, error) {
	return writeSet(ctx, dir, prefix, variant, specs, write, metadata, opts)
}

// WithOrder makes Write, WriteFrom and WriteStream call f once, after the
// arguments are validated and before any file is created, with every
// tensor in the order its data will be requested: shard after shard, each
// in its file's layout order. A streaming writer uses it to prepare tensors
// ahead of the one being written.
func WithOrder(f func(order []safetensors.TensorSpec)) WriteOption {
	return func(c *writeConfig) { c.order = f }
}
