package safetensors

import (
	"fmt"
	"io"
)

// ReadAt reads len(p) bytes of the tensor's data starting at byte off of the
// tensor (not of the file), so that a Tensor is an io.ReaderAt over its own
// bytes: it is how a caller reads part of a tensor, for example one rank's
// rows or columns (see package ckpt's WithRank), without touching the rest.
// Files opened from a path or with NewReader read with one ReadAt of the
// underlying reader (pread) when they are not mapped or use ReadPread; mapped
// files copy from the mapping under fault protection. As io.ReaderAt requires,
// fewer than len(p) bytes come only with an error: io.EOF when the read
// reaches the tensor's end, or an *Error (ErrIO, including a memory fault,
// ErrClosed, ErrInvalidArgument for a negative offset).
func (t *Tensor) ReadAt(p []byte, off int64) (int, error) {
	size := t.info.ByteLen()
	if off < 0 {
		return 0, t.err(ErrInvalidArgument, fmt.Sprintf("negative offset %d", off))
	}
	if len(p) == 0 {
		return 0, nil
	}
	if off >= size {
		return 0, io.EOF
	}
	n := min(int64(len(p)), size-off)
	if err := t.f.readRange(t.info.Name, p[:n], t.f.hdr.DataOffset+t.info.Begin+off); err != nil {
		return 0, err
	}
	if n < int64(len(p)) {
		return int(n), io.EOF
	}
	return int(n), nil
}
