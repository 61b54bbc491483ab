package source

import (
	"context"
	"io/fs"
)

// RangeFS is an fs.FS whose files are best read with few large ranged
// requests, many at a time: an object store or an HTTP server (package
// remote). ckpt's Load reads the tensor data of such a source with
// ReadRanges: neighbouring tensors coalesced into one request of up to
// Chunk bytes (when the bytes between them are at most MaxGap),
// Concurrency requests at once, each straight into the destination
// buffers (conversions through staging buffers bounded by
// ckpt.WithStaging), with progress and cancellation as for local files.
type RangeFS interface {
	fs.FS
	// ReadRanges reads the bytes of file name at each span's Off into its
	// Dst, every Dst in full, with one request when it can: spans are
	// sorted by offset and do not overlap; the bytes between them are read
	// and discarded. The file must still be the version its first open
	// saw (an error otherwise, never bytes of two versions). Cancelling
	// ctx stops it promptly.
	ReadRanges(ctx context.Context, name string, spans []Span) error
	// RangeConfig returns how reads from it should be batched and
	// scheduled.
	RangeConfig() RangeConfig
}

// Span is a byte range of a file and the buffer that receives it.
type Span struct {
	Off int64
	Dst []byte
}

// RangeConfig tunes the reads made from a RangeFS.
type RangeConfig struct {
	// Concurrency is the number of requests in flight (at least 1).
	Concurrency int
	// Chunk is the most bytes one request covers (neighbouring tensors
	// are coalesced up to it; a larger piece is one request of its own).
	Chunk int64
	// MaxGap is the most unused bytes between two spans that are still
	// read in one request.
	MaxGap int64
}
