package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"maps"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/safeopen"
)

// ReadMode selects how Tensor.ReadTo and Tensor.ConvertTo fetch the bytes of
// a memory-mapped file. Zero-copy views (Bytes, contiguous slices) always use
// the mapping.
type ReadMode int

const (
	// ReadAuto picks what measured fastest (see BENCHMARKS.md): on a mapped
	// file, raw copies (ReadTo) and converting reads (ConvertTo, Float32s)
	// both read the mapping (conversions chunk by chunk, in parallel, under
	// fault protection); without a mapping, pread.
	ReadAuto ReadMode = iota
	// ReadPread always reads with pread (ReadAt) into the destination or a
	// reused cache-sized buffer (no page faults on the mapping, which matters
	// on machines where faulting in fresh mappings is slow).
	ReadPread
	// ReadMapped reads from the mapping (what ReadAuto does today on a
	// mapped file).
	ReadMapped
)

// OpenOption configures Open, NewReader and OpenBytes.
type OpenOption func(*openConfig)

type openConfig struct {
	readAt bool
	mode   ReadMode
	header *Header // WithHeader
}

// WithReadAt makes Open read through ReadAt (pread) instead of mapping the
// file. Bytes then returns a copy.
func WithReadAt() OpenOption { return func(c *openConfig) { c.readAt = true } }

// WithReadMode sets how converting and copying reads fetch data from a
// mapped file (default ReadAuto).
func WithReadMode(m ReadMode) OpenOption { return func(c *openConfig) { c.mode = m } }

// File is an open safetensors file. Its methods are safe for concurrent use.
//
// Close releases the mapping: slices returned by Bytes (and SliceView.Bytes)
// must not be used after Close, and Close must not run while another
// goroutine still uses them. Every method that reads tensor data checks for
// Close and returns an error of kind ErrClosed; header accessors (Names,
// Header, Metadata, ...) keep working.
type File struct {
	path   string
	hdr    *Header
	data   []byte      // the whole file: a mapping or the caller's bytes; nil for the ReadAt backend; never reset (Close sets closed)
	ra     io.ReaderAt // pread source; nil for OpenBytes
	closer io.Closer   // owned file, closed by Close
	mapped bool
	mode   ReadMode
	chunk  int64 // converting-read chunk size; 0 means convertChunk (tests lower it)

	mu      sync.RWMutex // held for reading while mapped memory is accessed
	closed  atomic.Bool
	scratch sync.Pool // *[]byte chunks for converting reads
	views   []Tensor  // one per header entry, in file order

	sumsOnce sync.Once
	sums     map[string]uint32 // the header's checksums (Header.Checksums)
	sumsErr  error
}

// checksums returns the header's checksums, parsed once.
func (f *File) checksums() (map[string]uint32, error) {
	f.sumsOnce.Do(func() { f.sums, f.sumsErr = f.hdr.Checksums() })
	return f.sums, f.sumsErr
}

// Open opens the safetensors file at path, validates its header and maps it
// read-only into memory (on platforms without mmap, or with WithReadAt, it
// reads through pread instead). Opening does not touch tensor data, so it
// costs the same for a 4 MiB and a 4 GiB file. Errors name the file.
//
// path is followed through symbolic links (the caller named it), and what
// it leads to must be a regular file: a FIFO, a device, a socket or a
// folder is refused with ErrNotRegular, without blocking and before any
// byte is read.
func Open(path string, opts ...OpenOption) (*File, error) {
	cfg := buildConfig(opts)
	osf, size, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	return openOSFile(osf, path, size, cfg)
}

// openRegular opens path with package safeopen (no blocking, regular files
// only) and returns the file and its size. Errors are *Error values naming
// path: ErrNotRegular, or ErrIO.
func openRegular(path string) (*os.File, int64, error) {
	f, st, err := safeopen.Open(path)
	if err != nil {
		var nr *safeopen.NotRegularError
		if errors.As(err, &nr) {
			return nil, 0, notRegular(path, nr.Mode)
		}
		return nil, 0, &Error{Kind: ErrIO, File: path, Msg: "open", Err: err}
	}
	return f, st.Size(), nil
}

func notRegular(path string, mode fs.FileMode) *Error {
	return &Error{Kind: ErrNotRegular, File: path, Msg: safeopen.Describe(mode) + ", not a regular file"}
}

// regularSize returns the size of the open file fh (path in errors). Unless
// it is a regular file whose size Stat tells, it closes fh and fails.
func regularSize(fh fs.File, path string) (int64, error) {
	st, err := fh.Stat()
	if err != nil {
		fh.Close()
		return 0, &Error{Kind: ErrIO, File: path, Msg: "stat", Err: err}
	}
	if !st.Mode().IsRegular() {
		fh.Close()
		return 0, notRegular(path, st.Mode().Type())
	}
	return st.Size(), nil
}

// openOSFile validates the header of an open file and maps it (unless
// configured otherwise). The File owns osf on success; on failure osf is
// closed.
func openOSFile(osf *os.File, path string, size int64, cfg openConfig) (*File, error) {
	hdr, err := cfg.readHeader(osf, size)
	if err != nil {
		osf.Close()
		return nil, withFile(err, path)
	}
	f := newFile(&File{path: path, hdr: hdr, ra: osf, closer: osf, mode: cfg.mode})
	if !cfg.readAt && mmapSupported {
		data, err := mmapFile(osf, size)
		if err != nil {
			osf.Close()
			return nil, &Error{Kind: ErrIO, File: path, Msg: "mmap", Err: err}
		}
		f.data = data
		f.mapped = true
	}
	return f, nil
}

// NewReader reads a safetensors file of the given size through r. Tensor
// data is read on demand with ReadAt; Bytes returns copies. Close does not
// close r.
func NewReader(r io.ReaderAt, size int64, opts ...OpenOption) (*File, error) {
	cfg := buildConfig(opts)
	hdr, err := cfg.readHeader(r, size)
	if err != nil {
		return nil, err
	}
	return newFile(&File{hdr: hdr, ra: r, mode: cfg.mode}), nil
}

// OpenBytes reads a safetensors file held in memory. Tensor views alias
// data (zero-copy), so data must not be modified while the File is in use.
func OpenBytes(data []byte, opts ...OpenOption) (*File, error) {
	cfg := buildConfig(opts)
	if cfg.header != nil {
		hdr, err := cfg.readHeader(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return nil, err
		}
		return newFile(&File{hdr: hdr, data: data, mode: cfg.mode}), nil
	}
	if len(data) < 8 {
		return nil, newErr(ErrHeaderTooSmall, "", "", fmt.Sprintf("file is %d bytes, shorter than the 8-byte header length", len(data)))
	}
	n := binary.LittleEndian.Uint64(data)
	if err := checkHeaderLen(n, int64(len(data))); err != nil {
		return nil, err
	}
	hdr, err := parseHeader(string(data[8:8+n]), int64(len(data))-8-int64(n))
	if err != nil {
		return nil, err
	}
	return newFile(&File{hdr: hdr, data: data, mode: cfg.mode}), nil
}

// newFile preallocates the tensor views, so that looking a tensor up does
// not allocate.
func newFile(f *File) *File {
	f.views = make([]Tensor, len(f.hdr.Tensors))
	for i := range f.views {
		f.views[i] = Tensor{f: f, info: &f.hdr.Tensors[i]}
	}
	return f
}

func buildConfig(opts []OpenOption) openConfig {
	var c openConfig
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return c
}

// Close unmaps the file and closes it. It is safe to call more than once.
func (f *File) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed.Swap(true) {
		return nil
	}
	var err error
	if f.mapped {
		if e := munmap(f.data); e != nil {
			err = &Error{Kind: ErrIO, File: f.path, Msg: "munmap", Err: e}
		}
	}
	if f.closer != nil {
		if e := f.closer.Close(); e != nil && err == nil {
			err = &Error{Kind: ErrIO, File: f.path, Msg: "close", Err: e}
		}
	}
	return err
}

// Path returns the path given to Open, or "" for NewReader and OpenBytes.
func (f *File) Path() string { return f.path }

// Mapped reports whether the file is memory-mapped.
func (f *File) Mapped() bool { return f.mapped }

// Header returns the parsed header. It is shared: do not modify it.
func (f *File) Header() *Header { return f.hdr }

// Len returns the number of tensors.
func (f *File) Len() int { return len(f.hdr.Tensors) }

// Names returns the tensor names in file (offset) order.
func (f *File) Names() []string {
	out := make([]string, len(f.hdr.Tensors))
	for i := range f.hdr.Tensors {
		out[i] = f.hdr.Tensors[i].Name
	}
	return out
}

// Has reports whether the file holds a tensor named name.
func (f *File) Has(name string) bool {
	_, ok := f.hdr.indexOf(name)
	return ok
}

// Metadata returns a copy of the __metadata__ map; nil when the header has
// none or it is null.
func (f *File) Metadata() map[string]string {
	if f.hdr.Metadata == nil {
		return nil
	}
	return maps.Clone(f.hdr.Metadata)
}

// Tensor returns a view of the tensor named name. A missing name yields an
// *Error of kind ErrTensorNotFound.
func (f *File) Tensor(name string) (*Tensor, error) {
	if f.closed.Load() {
		return nil, f.err(ErrClosed, name, "file is closed")
	}
	i, ok := f.hdr.indexOf(name)
	if !ok {
		return nil, f.err(ErrTensorNotFound, name, "no such tensor")
	}
	return &f.views[i], nil
}

// TensorAt returns a view of the i-th tensor of the header, in file
// (offset) order: the position Header.Index gives, without looking the
// name up again. It panics when i is out of range, as a slice does.
func (f *File) TensorAt(i int) (*Tensor, error) {
	if f.closed.Load() {
		return nil, f.err(ErrClosed, f.hdr.Tensors[i].Name, "file is closed")
	}
	return &f.views[i], nil
}

// Tensors iterates over the tensors in file (offset) order.
func (f *File) Tensors() iter.Seq2[string, *Tensor] {
	return func(yield func(string, *Tensor) bool) {
		for i := range f.views {
			t := &f.views[i]
			if !yield(t.info.Name, t) {
				return
			}
		}
	}
}

func (f *File) err(kind ErrorKind, tensor, msg string) *Error {
	return &Error{Kind: kind, File: f.path, Tensor: tensor, Msg: msg}
}

// rlock locks the file for a read of mapped memory; it fails after Close.
func (f *File) rlock(tensor string) error {
	f.mu.RLock()
	if f.closed.Load() {
		f.mu.RUnlock()
		return f.err(ErrClosed, tensor, "file is closed")
	}
	return nil
}

// protect runs fn, turning a memory fault (SIGBUS on a mapping whose file
// was truncated) into an error of kind ErrIO whose message starts with "fault".
func (f *File) protect(tensor string, fn func()) (err error) {
	if !f.mapped {
		fn()
		return nil
	}
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			if fe, ok := r.(interface{ Addr() uintptr }); ok {
				err = &Error{Kind: ErrIO, File: f.path, Tensor: tensor,
					Msg: fmt.Sprintf("fault: memory fault reading the mapped file at address %#x: was the file truncated or modified while open?", fe.Addr())}
				return
			}
			panic(r)
		}
	}()
	fn()
	return nil
}

// readAt reads len(dst) bytes at absolute offset off through the ReadAt
// backend.
func (f *File) readAt(tensor string, dst []byte, off int64) error {
	if len(dst) == 0 {
		return nil
	}
	n, err := f.ra.ReadAt(dst, off)
	if n == len(dst) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return &Error{Kind: ErrIO, File: f.path, Tensor: tensor,
		Msg: fmt.Sprintf("read %d of %d bytes at offset %d (was the file truncated?)", n, len(dst), off), Err: err}
}

// usePread tells whether raw copies (ReadTo) use pread rather than the
// mapping. Copying out of a mapping measured faster than pread on the
// development VM (BENCHMARKS.md), so only ReadPread, or a file without a
// mapping, uses pread.
func (f *File) usePread() bool {
	if f.data == nil {
		return true
	}
	if f.ra == nil {
		return false
	}
	return f.mode == ReadPread
}

func (f *File) getScratch(n int) *[]byte {
	if v, ok := f.scratch.Get().(*[]byte); ok && cap(*v) >= n {
		*v = (*v)[:n]
		return v
	}
	b := make([]byte, n)
	return &b
}

// putScratch returns a buffer from getScratch to the pool; nil is ignored.
func (f *File) putScratch(b *[]byte) {
	if b != nil {
		f.scratch.Put(b)
	}
}

// validDType reports whether d can be converted (a sanity check for
// user-facing conversions).
func validDType(d dtype.DType) bool { return d.Valid() && d.Bits() > 0 }
