package safetensors

import (
	"encoding/binary"
	"fmt"
	"io"
)

// WithHeader makes Open (and OpenFS, NewReader, OpenBytes) reuse h, the
// header parsed from the same file earlier by ReadHeaderFile, ReadHeader or
// File.Header, instead of parsing it again. The file must still be that
// file: its size and its header bytes are compared with h's (a read of the
// header and a byte comparison, no parse), and a difference fails with
// ErrFileChanged. The comparison is exact, so the File behaves as if it had
// parsed the header itself. A Header not produced by this package (h == nil
// is ignored) is refused with ErrInvalidArgument.
func WithHeader(h *Header) OpenOption { return func(c *openConfig) { c.header = h } }

// readHeader returns the header of the file of the given size read through
// r: WithHeader's if the file still matches it, else a fresh parse.
func (c *openConfig) readHeader(r io.ReaderAt, size int64) (*Header, error) {
	if c.header == nil {
		return ReadHeader(r, size)
	}
	return verifyHeader(r, size, c.header)
}

// verifyChunk is the most verifyHeader reads at once.
const verifyChunk = 64 << 10

// verifyHeader checks that the file of the given size read through r has
// exactly h's length field, header bytes and data length, and returns h.
// It allocates at most verifyChunk bytes, whatever the file says.
func verifyHeader(r io.ReaderAt, size int64, h *Header) (*Header, error) {
	if h.raw == "" || uint64(len(h.raw)) != h.HeaderLen || h.DataLen < 0 {
		return nil, newErr(ErrInvalidArgument, "", "", "WithHeader needs a header parsed by this package from a whole file")
	}
	if want := h.DataOffset + h.DataLen; size != want {
		return nil, newErr(ErrFileChanged, "", "", fmt.Sprintf("file is %d bytes, was %d when its header was parsed", size, want))
	}
	var lenBuf [8]byte
	if _, err := r.ReadAt(lenBuf[:], 0); err != nil {
		return nil, &Error{Kind: ErrIO, Msg: "reading header length", Err: err}
	}
	if n := binary.LittleEndian.Uint64(lenBuf[:]); n != h.HeaderLen {
		return nil, newErr(ErrFileChanged, "", "", fmt.Sprintf("header length is %d, was %d when the header was parsed", n, h.HeaderLen))
	}
	buf := make([]byte, min(len(h.raw), verifyChunk))
	for off := 0; off < len(h.raw); off += len(buf) {
		b := buf[:min(len(buf), len(h.raw)-off)]
		if _, err := r.ReadAt(b, 8+int64(off)); err != nil {
			return nil, &Error{Kind: ErrIO, Msg: "reading header", Err: err}
		}
		if string(b) != h.raw[off:off+len(b)] {
			return nil, newErr(ErrFileChanged, "", "", "header differs from the one parsed")
		}
	}
	return h, nil
}
