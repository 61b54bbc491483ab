package convert

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/safetensors"
)

// The checksums of what Run reads and writes: see Run and
// MetaSourceCRC32C. Tensors copied as stored carry their source's
// checksums as claims (the writer checks the bytes written against them);
// the others get fresh ones.

// srcFile is a source weights file that names checksums.
type srcFile struct {
	name   string // as the source lists it (a path, or a location)
	sums   map[string]uint32
	digest uint32 // the whole file's CRC-32C
}

// checkSources applies Options.Policy.Verify to c's source files before
// anything is written: it refuses damaged checksums, and with
// VerifyAlways files without any, and notes the files whose tensors are
// verified as they are read (c.srcFiles).
func (r *runner) checkSources(c *component) error {
	mode := r.opts.Policy.Verify
	if mode == ckpt.VerifyNever {
		return nil
	}
	if mode != ckpt.VerifyPresent && mode != ckpt.VerifyAlways {
		return &Error{Kind: ErrOption, Field: "Policy.Verify", Msg: fmt.Sprintf("unknown value %d", mode)}
	}
	files, index := c.store.files()
	if _, ok := c.store.(*torchStore); ok {
		if mode == ckpt.VerifyAlways {
			name := cmp.Or(index, files[0])
			return &Error{Kind: ErrSource, Path: name, Component: c.name, Err: &safetensors.Error{Kind: safetensors.ErrChecksum, File: name,
				Msg: "a PyTorch checkpoint names no checksums, and Policy.Verify is VerifyAlways: convert it with VerifyPresent, or verify it otherwise"}}
		}
		return nil
	}
	first := map[int]string{} // a tensor of each file
	for _, e := range c.store.entries() {
		if _, ok := first[e.file]; !ok && e.file >= 0 {
			first[e.file] = e.name
		}
	}
	c.srcFiles = map[*safetensors.File]*srcFile{}
	for _, fi := range slices.Sorted(maps.Keys(first)) {
		name := files[fi]
		t, err := c.store.tensor(first[fi])
		if err != nil {
			return &Error{Kind: ErrSource, Path: name, Component: c.name, Tensor: first[fi], Err: err}
		}
		st, ok := t.(*safetensors.Tensor)
		if !ok {
			continue
		}
		f := st.File()
		sums, err := f.Header().Checksums()
		if err != nil {
			return &Error{Kind: ErrSource, Path: name, Component: c.name, Err: withFile(err, name)}
		}
		if sums == nil {
			if mode == ckpt.VerifyAlways {
				return &Error{Kind: ErrSource, Path: name, Component: c.name, Err: &safetensors.Error{Kind: safetensors.ErrChecksum, File: name,
					Msg: "the file names no checksums, and Policy.Verify is VerifyAlways (ckpt checksum adds them)"}}
			}
			continue
		}
		crc, err := f.HeaderBytesChecksum()
		if err != nil {
			return &Error{Kind: ErrSource, Path: name, Component: c.name, Err: err}
		}
		for _, ti := range f.Header().Tensors {
			crc = safetensors.CombineChecksums(crc, sums[ti.Name], ti.ByteLen())
			if ti.ByteLen() == 0 && sums[ti.Name] != 0 {
				// No bytes to read: checked now.
				return &Error{Kind: ErrSource, Path: name, Component: c.name, Tensor: ti.Name,
					Err: &safetensors.ChecksumError{File: name, Tensor: ti.Name, Begin: f.Header().DataOffset + ti.Begin, End: f.Header().DataOffset + ti.End, Want: sums[ti.Name]}}
			}
		}
		c.srcFiles[f] = &srcFile{name: name, sums: sums, digest: crc}
	}
	return nil
}

// withFile names the file of a safetensors error that has none.
func withFile(err error, name string) error {
	var se *safetensors.Error
	if errors.As(err, &se) && se.File == "" {
		e := *se
		e.File = name
		return &e
	}
	return err
}

// checked returns t, verified as it is read when its file names
// checksums (checkSources).
func (r *runner) checked(c *component, t srcTensor) srcTensor {
	st, ok := t.(*safetensors.Tensor)
	if !ok || c.srcFiles == nil {
		return t
	}
	sf := c.srcFiles[st.File()]
	if sf == nil {
		return t
	}
	want, ok := sf.sums[st.Name()]
	if !ok || st.ByteLen() == 0 {
		return t
	}
	return &checkedTensor{Tensor: st, file: sf.name, want: want, pool: &r.rawPool}
}

// sourceMetadata returns the source's metadata as the output carries it:
// without the source's checksums and provenance digests (they describe
// other files), with a claim for each tensor copied from a file that
// names checksums (verified end to end by the writer) and the digest of
// each such file.
func (r *runner) sourceMetadata(c *component, meta map[string]string) map[string]string {
	for k := range meta {
		if safetensors.IsChecksumKey(k) || strings.HasPrefix(k, MetaSourceCRC32C) {
			delete(meta, k)
		}
	}
	for _, t := range c.tasks {
		if ct, ok := t.src.(*checkedTensor); ok && t.kind == kCopy {
			meta[safetensors.ChecksumPrefix+t.spec.Name] = safetensors.FormatChecksum(ct.want)
		}
	}
	for _, sf := range c.srcFiles {
		meta[MetaSourceCRC32C+filepath.Base(filepath.FromSlash(sf.name))] = safetensors.FormatChecksum(sf.digest)
	}
	return meta
}

// sourceDigests returns the digests of c's source files, for the report.
func sourceDigests(c *component) map[string]string {
	if len(c.srcFiles) == 0 {
		return nil
	}
	out := map[string]string{}
	for _, sf := range c.srcFiles {
		out[filepath.Base(filepath.FromSlash(sf.name))] = safetensors.FormatChecksum(sf.digest)
	}
	return out
}

// checkedTensor is a stored tensor whose bytes are checked against the
// checksum its file names as they are read, in pieces, in any order, from
// several goroutines: the CRC of each piece is kept until the pieces cover
// the tensor, then combined in order and compared. Pieces read again once
// it is checked (a second pass) are not.
type checkedTensor struct {
	*safetensors.Tensor
	file string
	want uint32
	pool *sync.Pool // raw buffers for converting reads

	mu   sync.Mutex
	runs safetensors.ChecksumRuns // the pieces read so far, by offset in the tensor
	done bool
	err  error
}

// finished reports whether the tensor has been checked.
func (c *checkedTensor) finished() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.done
}

// observe notes that b holds the stored bytes at offset off of the tensor;
// the piece that completes it returns the verdict.
func (c *checkedTensor) observe(off int64, b []byte) error {
	if len(b) == 0 || c.finished() {
		return nil
	}
	return c.observeSum(off, int64(len(b)), safetensors.Checksum(b))
}

// observeSum notes that the n stored bytes at offset off of the tensor have
// the CRC-32C crc (summed by the caller as it read them); the piece that
// completes the tensor returns the verdict.
func (c *checkedTensor) observeSum(off, n int64, crc uint32) error {
	if n == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return nil
	}
	if !c.runs.Add(off, off+n, crc) {
		return nil // read before
	}
	size := c.ByteLen()
	got, whole := c.runs.Whole(0, size)
	if !whole {
		return nil
	}
	c.done = true
	c.runs.Reset()
	if got != c.want {
		begin := c.Offset()
		c.err = &safetensors.ChecksumError{File: c.file, Tensor: c.Name(), Begin: begin, End: begin + size, Want: c.want, Got: got}
	}
	return c.err
}

// ConvertElementsTo reads the elements' stored bytes, checks them, and
// converts them (dtype.Convert, as safetensors.Tensor does).
func (c *checkedTensor) ConvertElementsTo(to dtype.DType, dst []byte, first int64, opts dtype.Options) (dtype.Stats, error) {
	from := c.DType()
	if c.finished() {
		return c.Tensor.ConvertElementsTo(to, dst, first, opts)
	}
	off := first * int64(from.Bits()) / 8
	if to == from {
		st, err := c.Tensor.ConvertElementsTo(to, dst, first, opts)
		if err == nil {
			err = c.observe(off, dst)
		}
		return st, err
	}
	tb := int64(to.Bits())
	if tb <= 0 || int64(len(dst))*8%tb != 0 {
		return c.Tensor.ConvertElementsTo(to, dst, first, opts) // its error
	}
	n := int64(len(dst)) * 8 / tb
	rb := c.raw((n*int64(from.Bits()) + 7) / 8)
	defer c.pool.Put(rb)
	raw := *rb
	if _, err := c.Tensor.ConvertElementsTo(from, raw, first, opts); err != nil {
		return dtype.Stats{}, err
	}
	if err := c.observe(off, raw); err != nil {
		return dtype.Stats{}, err
	}
	st, err := dtype.Convert(dst, to, raw, from, opts)
	if err != nil {
		return st, &safetensors.Error{Kind: safetensors.ErrInvalidArgument, File: c.file, Tensor: c.Name(), Msg: fmt.Sprintf("convert %s to %s", from, to), Err: err}
	}
	return st, nil
}

// raw returns a buffer of n bytes from the pool.
func (c *checkedTensor) raw(n int64) *[]byte {
	if b, ok := c.pool.Get().(*[]byte); ok && int64(cap(*b)) >= n {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n)
	return &b
}

// observeView checks b, the stored bytes at offset off of src (a view of
// Bytes), when src is verified as it is read.
func observeView(src srcTensor, off int64, b []byte) error {
	if c, ok := src.(*checkedTensor); ok {
		return c.observe(off, b)
	}
	return nil
}
