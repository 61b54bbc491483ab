package safetensors

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/atomicfile"
)

// TensorSpec declares a tensor to a Writer.
type TensorSpec struct {
	Name  string
	DType dtype.DType
	Shape []int64
}

// ByteLen returns the size of the tensor's data, checking the dtype, the
// shape (non-negative, no overflow) and that sub-byte elements fill whole
// bytes.
func (s TensorSpec) ByteLen() (int64, error) {
	if !s.DType.Valid() || s.DType.Bits() == 0 {
		return 0, newErr(ErrUnknownDType, s.Name, "dtype", fmt.Sprintf("invalid dtype %v", s.DType))
	}
	for _, d := range s.Shape {
		if d < 0 {
			return 0, newErr(ErrInvalidArgument, s.Name, "shape", fmt.Sprintf("negative dimension in shape %v", s.Shape))
		}
	}
	return shapeByteLen(s.Name, s.DType, s.Shape)
}

// TensorData is a tensor with its raw little-endian bytes, for Save and
// Serialize.
type TensorData struct {
	Name  string
	DType dtype.DType
	Shape []int64
	Data  []byte
}

// WriteOption configures a writer.
type WriteOption func(*writeConfig)

type writeConfig struct {
	align       int
	noChecksums bool
}

// WithoutChecksums writes no checksums (see ChecksumPrefix) and drops
// checksum keys from the metadata given: the file is then byte for byte
// what the reference writer writes.
func WithoutChecksums() WriteOption { return func(c *writeConfig) { c.noChecksums = true } }

// WithAlignment makes the data section start at a multiple of n bytes in
// the file (default 8, as the reference writer), by padding the header with
// spaces. n must be a positive multiple of 8, e.g. 4096 for direct I/O. With
// the default layout every tensor is then aligned to its element size.
func WithAlignment(n int) WriteOption { return func(c *writeConfig) { c.align = n } }

// layoutRank orders dtypes as the reference implementation's Dtype enum
// does; the writer lays tensors out by descending rank, then by name, so
// that the widest elements come first and every tensor stays aligned.
// Dtypes the reference lacks are slotted in next to those of equal width.
func layoutRank(d dtype.DType) int {
	switch d {
	case dtype.BOOL:
		return 0
	case dtype.F4:
		return 10
	case dtype.F6_E2M3:
		return 20
	case dtype.F6_E3M2:
		return 30
	case dtype.U8:
		return 40
	case dtype.I8:
		return 50
	case dtype.F8_E5M2:
		return 60
	case dtype.F8_E4M3:
		return 70
	case dtype.F8_E8M0:
		return 80
	case dtype.F8_E4M3FNUZ:
		return 81
	case dtype.F8_E5M2FNUZ:
		return 82
	case dtype.I16:
		return 90
	case dtype.U16:
		return 100
	case dtype.F16:
		return 110
	case dtype.BF16:
		return 120
	case dtype.I32:
		return 130
	case dtype.U32:
		return 140
	case dtype.F32:
		return 150
	case dtype.C64:
		return 160
	case dtype.F64:
		return 170
	case dtype.I64:
		return 180
	case dtype.U64:
		return 190
	}
	switch b := d.Bits(); {
	case b < 8:
		return 35
	case b < 16:
		return 85
	case b < 32:
		return 125
	case b < 64:
		return 155
	default:
		return 195
	}
}

// plan is a validated layout.
type plan struct {
	order   []TensorSpec
	sizes   []int64
	header  []byte // 8-byte length + JSON + padding
	dataLen int64
	cfg     writeConfig
}

func makePlan(tensors []TensorSpec, metadata map[string]string, opts []WriteOption) (*plan, error) {
	cfg := writeConfig{align: 8}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if cfg.align <= 0 || cfg.align%8 != 0 {
		return nil, newErr(ErrInvalidArgument, "", "", fmt.Sprintf("alignment %d is not a positive multiple of 8", cfg.align))
	}
	p := &plan{order: make([]TensorSpec, len(tensors)), sizes: make([]int64, len(tensors)), cfg: cfg}
	seen := make(map[string]struct{}, len(tensors))
	for i, t := range tensors {
		if t.Name == MetadataKey {
			return nil, newErr(ErrInvalidArgument, t.Name, "", "reserved name: a tensor cannot be named __metadata__")
		}
		if !utf8.ValidString(t.Name) {
			return nil, newErr(ErrInvalidUTF8, t.Name, "", "tensor name is not valid UTF-8")
		}
		if _, dup := seen[t.Name]; dup {
			return nil, newErr(ErrDuplicateKey, t.Name, "", "tensor declared twice")
		}
		seen[t.Name] = struct{}{}
		if _, err := t.ByteLen(); err != nil {
			return nil, err
		}
		p.order[i] = TensorSpec{Name: t.Name, DType: t.DType, Shape: slices.Clone(t.Shape)}
	}
	for k, v := range metadata {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return nil, newErr(ErrInvalidUTF8, MetadataKey, k, "metadata is not valid UTF-8")
		}
	}
	sort.Slice(p.order, func(i, j int) bool {
		ri, rj := layoutRank(p.order[i].DType), layoutRank(p.order[j].DType)
		if ri != rj {
			return ri > rj
		}
		return p.order[i].Name < p.order[j].Name
	})
	var off int64
	for i, t := range p.order {
		n, _ := t.ByteLen()
		if off > math.MaxInt64-n {
			return nil, newErr(ErrOverflow, t.Name, "", "total data size overflows int64")
		}
		p.sizes[i] = n
		off += n
	}
	p.dataLen = off
	if err := p.render(metadata); err != nil {
		return nil, err
	}
	return p, nil
}

// render writes the plan's header for metadata (validated by makePlan,
// or a copy of it with other checksum values of the same length).
func (p *plan) render(metadata map[string]string) error {
	b := make([]byte, 8, 8+64+len(p.order)*96)
	b = append(b, '{')
	if metadata != nil {
		b = appendJSONString(b, MetadataKey)
		b = append(b, ':', '{')
		keys := slices.Sorted(maps.Keys(metadata))
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, k)
			b = append(b, ':')
			b = appendJSONString(b, metadata[k])
		}
		b = append(b, '}')
		if len(p.order) > 0 {
			b = append(b, ',')
		}
	}
	var off int64
	for i, t := range p.order {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, t.Name)
		b = append(b, `:{"dtype":`...)
		b = appendJSONString(b, t.DType.String())
		b = append(b, `,"shape":[`...)
		for j, d := range t.Shape {
			if j > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, d, 10)
		}
		b = append(b, `],"data_offsets":[`...)
		b = strconv.AppendInt(b, off, 10)
		b = append(b, ',')
		off += p.sizes[i]
		b = strconv.AppendInt(b, off, 10)
		b = append(b, ']', '}')
	}
	b = append(b, '}')
	total := len(b)
	if r := total % p.cfg.align; r != 0 {
		total += p.cfg.align - r
	}
	for len(b) < total {
		b = append(b, ' ')
	}
	n := uint64(len(b) - 8)
	if n > MaxHeaderSize {
		return newErr(ErrHeaderTooLarge, "", "", fmt.Sprintf("header would be %d bytes, over the %d-byte limit", n, MaxHeaderSize))
	}
	binary.LittleEndian.PutUint64(b, n)
	p.header = b
	return nil
}

// appendJSONString appends s as a JSON string the way serde_json writes it:
// '"' and '\' escaped, control characters as \b \t \n \f \r or \u00XX
// (lower-case hex), everything else (non-ASCII included) verbatim.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"':
			b = append(b, '\\', '"')
		case '\\':
			b = append(b, '\\', '\\')
		case '\b':
			b = append(b, '\\', 'b')
		case '\t':
			b = append(b, '\\', 't')
		case '\n':
			b = append(b, '\\', 'n')
		case '\f':
			b = append(b, '\\', 'f')
		case '\r':
			b = append(b, '\\', 'r')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// Writer streams a safetensors file: NewWriter writes the header, then the
// tensors' bytes follow in the layout order (Order), through Next or
// WriteTensor. Memory use does not depend on tensor sizes. A Writer is not
// safe for concurrent use.
type Writer struct {
	w       io.Writer
	p       *plan
	cur     int   // index of the tensor being written; -1 before the first
	written int64 // bytes of the current tensor written
	total   int64 // data bytes written
	err     error // sticky failure
	closed  bool

	sums     *checksumPlan // nil: no checksums
	crcs     []uint32      // per tensor in p.order, as written
	patch    io.WriterAt   // where Close rewrites the header with the checksums
	flush    func() error  // flushes w before patching, if buffered
	metadata map[string]string
}

// NewWriter validates the declared tensors and metadata, computes the
// layout (tensors ordered by dtype as the reference writer does, widest
// first, then by name; metadata keys sorted; header padded with spaces so the
// data section starts at a multiple of 8, or of WithAlignment's n) and writes
// the header to w. The same input always gives the same bytes. A nil
// metadata map writes no __metadata__ entry; an empty one writes "{}".
//
// Checksums: the Writer computes the CRC-32C of every tensor as its bytes
// pass (see ChecksumPrefix). When w is also an io.WriterAt (a file), the
// header holds a placeholder for each, and Close rewrites the header in
// place with the values: the file carries a checksum for every tensor.
// Checksum keys in the metadata given are claims about the data: Close
// fails with a *ChecksumError when a tensor's bytes differ from its claim
// (a copy that changed on its way). Where w cannot be patched, the claims
// are written when they name every tensor, and no checksums otherwise.
// WithoutChecksums turns all of this off.
func NewWriter(w io.Writer, tensors []TensorSpec, metadata map[string]string, opts ...WriteOption) (*Writer, error) {
	wa, _ := w.(io.WriterAt)
	wr, err := newWriter(w, wa, nil, tensors, metadata, opts)
	if err != nil {
		return nil, err
	}
	if err := wr.raw(wr.p.header); err != nil {
		return nil, err
	}
	return wr, nil
}

// newWriter plans a Writer to w whose header patch, if any, goes to wa
// after flush.
func newWriter(w io.Writer, wa io.WriterAt, flush func() error, tensors []TensorSpec, metadata map[string]string, opts []WriteOption) (*Writer, error) {
	sums, md, err := planChecksums(tensors, metadata, wa != nil, opts)
	if err != nil {
		return nil, err
	}
	p, err := makePlan(tensors, md, opts)
	if err != nil {
		return nil, err
	}
	if _, ok := md[HeaderChecksumKey]; ok {
		// The layout is known now: the header's own checksum (of the same
		// length as its placeholder) goes in, and the plan is redone.
		md[HeaderChecksumKey] = FormatChecksum(HeaderChecksum(md, p.infos()))
		if err := p.render(md); err != nil {
			return nil, err
		}
	}
	wr := &Writer{w: w, p: p, cur: -1, sums: sums, metadata: md, flush: flush}
	if sums != nil {
		wr.crcs = make([]uint32, len(p.order))
		if sums.patch {
			wr.patch = wa
		}
	}
	return wr, nil
}

// checksumPlan is what a Writer does about checksums.
type checksumPlan struct {
	claims map[string]uint32 // checksums the caller's metadata names
	patch  bool              // placeholders now, the values at Close
}

// placeholder is the value written for a checksum before it is known: of
// the same length, so that the header keeps its size.
const placeholder = "00000000"

// planChecksums decides what a writer does about checksums and returns the
// metadata to write first.
func planChecksums(tensors []TensorSpec, metadata map[string]string, patchable bool, opts []WriteOption) (*checksumPlan, map[string]string, error) {
	var cfg writeConfig
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	claims := map[string]uint32{}
	var md map[string]string
	if metadata != nil {
		md = make(map[string]string, len(metadata)+len(tensors))
	}
	for k, v := range metadata {
		if k == HeaderChecksumKey {
			continue // the header's: written anew
		}
		name, ok := strings.CutPrefix(k, ChecksumPrefix)
		if !ok {
			md[k] = v
			continue
		}
		c, ok := parseChecksum(v)
		if !ok {
			return nil, nil, newErr(ErrChecksum, MetadataKey, k, fmt.Sprintf("checksum %q is not 8 lowercase hex digits", v))
		}
		claims[name] = c
	}
	if cfg.noChecksums || len(tensors) == 0 {
		return nil, md, nil
	}
	for name := range claims {
		if !slices.ContainsFunc(tensors, func(t TensorSpec) bool { return t.Name == name }) {
			return nil, nil, newErr(ErrChecksum, MetadataKey, ChecksumPrefix+name, "a checksum for a tensor that is not written")
		}
	}
	cp := &checksumPlan{claims: claims, patch: patchable}
	if !patchable && len(claims) < len(tensors) {
		// Nothing to write: the claims are still checked.
		return cp, md, nil
	}
	if md == nil {
		md = make(map[string]string, len(tensors))
	}
	for _, t := range tensors {
		v := placeholder
		if c, ok := claims[t.Name]; ok && !patchable {
			v = FormatChecksum(c)
		}
		md[ChecksumPrefix+t.Name] = v
	}
	md[HeaderChecksumKey] = placeholder
	return cp, md, nil
}

// infos returns the planned tensors as a header lists them, in file order.
func (p *plan) infos() []TensorInfo {
	out := make([]TensorInfo, len(p.order))
	var off int64
	for i, t := range p.order {
		out[i] = TensorInfo{Name: t.Name, DType: t.DType, Shape: t.Shape, Begin: off, End: off + p.sizes[i]}
		off += p.sizes[i]
	}
	return out
}

// Order returns the tensors in the order their bytes must be written.
func (w *Writer) Order() []TensorSpec {
	out := make([]TensorSpec, len(w.p.order))
	for i, t := range w.p.order {
		out[i] = TensorSpec{Name: t.Name, DType: t.DType, Shape: slices.Clone(t.Shape)}
	}
	return out
}

// HeaderLen returns the size of the header including the 8-byte length
// field: the offset of the data section.
func (w *Writer) HeaderLen() int64 { return int64(len(w.p.header)) }

// Size returns the total size of the file being written.
func (w *Writer) Size() int64 { return int64(len(w.p.header)) + w.p.dataLen }

func (w *Writer) raw(b []byte) error {
	if _, err := w.w.Write(b); err != nil {
		w.err = writeErr("write", err)
		return w.err
	}
	return nil
}

// writeErr wraps a failure of the underlying writer as ErrIO; when it is the
// context's (see ctxWriter) the message says "canceled" and the error
// matches context.Canceled or context.DeadlineExceeded through Err.
func writeErr(msg string, err error) *Error {
	if isCtxErr(err) {
		msg += ": canceled"
	}
	return &Error{Kind: ErrIO, Msg: msg, Err: err}
}

// isCtxErr reports whether err is a context's: canceled or past its deadline.
func isCtxErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

func (w *Writer) check() error {
	if w.err != nil {
		return w.err
	}
	if w.closed {
		return newErr(ErrClosed, "", "", "writer is closed")
	}
	return nil
}

func (w *Writer) currentIncomplete() error {
	if w.cur >= 0 && w.cur < len(w.p.order) && w.written < w.p.sizes[w.cur] {
		t := w.p.order[w.cur]
		return newErr(ErrInvalidArgument, t.Name, "", fmt.Sprintf("write order: tensor incomplete: %d of %d bytes written", w.written, w.p.sizes[w.cur]))
	}
	return nil
}

// Next moves to the next tensor in Order and returns its spec and a writer
// that accepts exactly its ByteLen bytes. It fails with ErrInvalidArgument
// ("write order") if the previous tensor is incomplete, and returns io.EOF
// after the last tensor.
func (w *Writer) Next() (TensorSpec, io.Writer, error) {
	if err := w.check(); err != nil {
		return TensorSpec{}, nil, err
	}
	if err := w.currentIncomplete(); err != nil {
		return TensorSpec{}, nil, err
	}
	if w.cur+1 >= len(w.p.order) {
		return TensorSpec{}, nil, io.EOF
	}
	w.cur++
	w.written = 0
	t := w.p.order[w.cur]
	return TensorSpec{Name: t.Name, DType: t.DType, Shape: slices.Clone(t.Shape)}, &tensorWriter{w: w, idx: w.cur}, nil
}

type tensorWriter struct {
	w   *Writer
	idx int
}

func (tw *tensorWriter) Write(b []byte) (int, error) {
	w := tw.w
	if err := w.check(); err != nil {
		return 0, err
	}
	name := w.p.order[tw.idx].Name
	if tw.idx != w.cur {
		return 0, newErr(ErrInvalidArgument, name, "", "write order: write to a tensor after moving past it")
	}
	if int64(len(b)) > w.p.sizes[tw.idx]-w.written {
		w.err = newErr(ErrInvalidArgument, name, "", fmt.Sprintf("write order: too many bytes: %d more after %d of %d", len(b), w.written, w.p.sizes[tw.idx]))
		return 0, w.err
	}
	if err := w.raw(b); err != nil {
		return 0, err
	}
	if w.crcs != nil {
		w.crcs[tw.idx] = UpdateChecksum(w.crcs[tw.idx], b)
	}
	w.written += int64(len(b))
	w.total += int64(len(b))
	return len(b), nil
}

// WriteTensor writes the whole data of the tensor named name, which must be
// the next tensor in Order (zero-size tensors in between are skipped) and
// data exactly its ByteLen bytes.
func (w *Writer) WriteTensor(name string, data []byte) error {
	if err := w.check(); err != nil {
		return err
	}
	if err := w.currentIncomplete(); err != nil {
		return err
	}
	j := w.cur + 1
	for j < len(w.p.order) && w.p.order[j].Name != name && w.p.sizes[j] == 0 {
		j++
	}
	if j >= len(w.p.order) || w.p.order[j].Name != name {
		want := "none (all tensors written)"
		if w.cur+1 < len(w.p.order) {
			want = strconv.Quote(w.p.order[w.cur+1].Name)
		}
		return newErr(ErrInvalidArgument, name, "", "write order: out of order: the next tensor is "+want)
	}
	if int64(len(data)) != w.p.sizes[j] {
		return newErr(ErrTensorSizeMismatch, name, "", fmt.Sprintf("data is %d bytes, %s %v needs %d", len(data), w.p.order[j].DType, w.p.order[j].Shape, w.p.sizes[j]))
	}
	w.cur = j
	w.written = 0
	if len(data) == 0 {
		return nil
	}
	if err := w.raw(data); err != nil {
		return err
	}
	if w.crcs != nil {
		w.crcs[j] = Checksum(data)
	}
	w.written = int64(len(data))
	w.total += int64(len(data))
	return nil
}

// Close checks that every tensor was written completely. It does not close
// the underlying io.Writer. Calling it again returns nil.
func (w *Writer) Close() error {
	if w.closed {
		return nil
	}
	if w.err != nil {
		return w.err
	}
	if w.total != w.p.dataLen {
		next := ""
		if err := w.currentIncomplete(); err != nil {
			return err
		}
		if w.cur+1 < len(w.p.order) {
			next = w.p.order[w.cur+1].Name
		}
		return newErr(ErrInvalidArgument, next, "", fmt.Sprintf("write order: incomplete: %d of %d data bytes written", w.total, w.p.dataLen))
	}
	if err := w.finishChecksums(); err != nil {
		w.err = err
		return err
	}
	w.closed = true
	return nil
}

// finishChecksums checks the claims and writes the checksums into the
// header.
func (w *Writer) finishChecksums() error {
	if w.sums == nil {
		return nil
	}
	off := int64(len(w.p.header))
	for i, t := range w.p.order {
		if c, ok := w.sums.claims[t.Name]; ok && c != w.crcs[i] {
			return &ChecksumError{Tensor: t.Name, Begin: off, End: off + w.p.sizes[i], Want: c, Got: w.crcs[i]}
		}
		off += w.p.sizes[i]
	}
	if w.patch == nil {
		return nil
	}
	md := maps.Clone(w.metadata)
	for i, t := range w.p.order {
		md[ChecksumPrefix+t.Name] = FormatChecksum(w.crcs[i])
	}
	placeholders := w.p.header
	if err := w.p.render(md); err != nil {
		return err
	}
	if len(w.p.header) != len(placeholders) {
		return newErr(ErrInvalidArgument, "", "", "write order: internal: the header changed size when its checksums were filled in")
	}
	if w.flush != nil {
		if err := w.flush(); err != nil {
			return writeErr("flush", err)
		}
	}
	if _, err := w.patch.WriteAt(w.p.header, 0); err != nil {
		return writeErr("writing the checksums into the header", err)
	}
	return nil
}

// Checksums returns the CRC-32C of every tensor written, by name, once
// Close succeeded (nil before, and with WithoutChecksums).
func (w *Writer) Checksums() map[string]uint32 {
	if !w.closed || w.crcs == nil {
		return nil
	}
	out := make(map[string]uint32, len(w.crcs))
	for i, t := range w.p.order {
		out[t.Name] = w.crcs[i]
	}
	return out
}

// Header returns the header as written so far (8-byte length, JSON,
// padding): after Close, with its checksums filled in.
func (w *Writer) Header() []byte { return slices.Clone(w.p.header) }

// FileWriter is a Writer to a file that appears atomically: the bytes go to
// a hidden temporary file in the same directory, and only Commit renames it
// over the target. Any failure, Abort, or a canceled context leaves the
// previous file untouched and removes the temporary file.
type FileWriter struct {
	*Writer
	ctx  context.Context
	af   *atomicfile.File
	bw   *bufio.Writer
	path string
	done bool
}

type ctxWriter struct {
	ctx context.Context
	w   io.Writer
}

func (c ctxWriter) Write(b []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.w.Write(b)
}

// Create starts an atomic write of a safetensors file at path (see
// NewWriter for the layout). Write the tensors through the embedded Writer,
// then call Commit; call Abort (or defer it: it is a no-op after Commit) to
// give up. ctx is checked on every write and before the commit. From Create
// to Commit or Abort the write holds the lock file ".NAME.lock" next to
// path: another write of the same path (or a shard.Write of the set whose
// single file it is) waits for it, until its ctx is done; Create removes
// the hidden temporary files that killed writes of path left.
func Create(ctx context.Context, path string, tensors []TensorSpec, metadata map[string]string, opts ...WriteOption) (*FileWriter, error) {
	return create(ctx, path, tensors, metadata, nil, opts)
}

// create is Create with an optional wrapper around the temporary file's
// writer (tests use it to inject write failures such as a full disk).
func create(ctx context.Context, path string, tensors []TensorSpec, metadata map[string]string, wrap func(io.Writer) io.Writer, opts []WriteOption) (*FileWriter, error) {
	if err := ctx.Err(); err != nil {
		return nil, &Error{Kind: ErrIO, File: path, Msg: "canceled", Err: err}
	}
	af, err := atomicfile.Create(ctx, path)
	if err != nil {
		if ctx.Err() != nil { // waiting for another save of path
			return nil, &Error{Kind: ErrIO, File: path, Msg: "canceled waiting for another save of the file", Err: err}
		}
		return nil, &Error{Kind: ErrIO, File: path, Msg: "create temporary file", Err: err}
	}
	var out io.Writer = af
	if wrap != nil {
		out = wrap(af)
	}
	bw := bufio.NewWriterSize(ctxWriter{ctx: ctx, w: out}, 1<<20)
	wr, err := newWriter(bw, af, bw.Flush, tensors, metadata, opts)
	if err != nil {
		_ = af.Abort()
		return nil, withFile(err, path)
	}
	fw := &FileWriter{Writer: wr, ctx: ctx, af: af, bw: bw, path: path}
	if err := wr.raw(wr.p.header); err != nil {
		_ = af.Abort()
		return nil, withFile(err, path)
	}
	return fw, nil
}

// Path returns the target path.
func (fw *FileWriter) Path() string { return fw.path }

// Commit checks that every tensor is complete and the context still live,
// flushes, fsyncs, and renames the file into place. On failure the target is
// untouched and the temporary file removed.
func (fw *FileWriter) Commit() error {
	if fw.done {
		return newErr(ErrClosed, "", "", "already committed or aborted")
	}
	fail := func(err error) error {
		fw.done = true
		_ = fw.af.Abort()
		return withFile(err, fw.path)
	}
	if err := fw.ctx.Err(); err != nil {
		return fail(&Error{Kind: ErrIO, Msg: "canceled", Err: err})
	}
	if err := fw.Writer.Close(); err != nil {
		return fail(err)
	}
	if err := fw.bw.Flush(); err != nil {
		return fail(writeErr("flush", err))
	}
	fw.done = true
	if err := fw.af.Commit(); err != nil {
		return &Error{Kind: ErrIO, File: fw.path, Msg: "commit", Err: err}
	}
	return nil
}

// Abort discards the write, removing the temporary file. It is a no-op
// after Commit or Abort.
func (fw *FileWriter) Abort() error {
	if fw.done {
		return nil
	}
	fw.done = true
	fw.Writer.closed = true
	if err := fw.af.Abort(); err != nil {
		return &Error{Kind: ErrIO, File: fw.path, Msg: "abort", Err: err}
	}
	return nil
}

// Close discards the write unless Commit succeeded (it is Abort), so that
// "defer fw.Close()" cleans up on every error path. It shadows Writer.Close:
// completeness is checked by Commit.
func (fw *FileWriter) Close() error { return fw.Abort() }

// saveChunk bounds each write of Save so cancellation is noticed promptly.
const saveChunk = 16 << 20

func specsOf(tensors []TensorData) ([]TensorSpec, map[string]int, error) {
	specs := make([]TensorSpec, len(tensors))
	idx := make(map[string]int, len(tensors))
	for i, t := range tensors {
		specs[i] = TensorSpec{Name: t.Name, DType: t.DType, Shape: t.Shape}
		n, err := specs[i].ByteLen()
		if err != nil {
			return nil, nil, err
		}
		if int64(len(t.Data)) != n {
			return nil, nil, newErr(ErrTensorSizeMismatch, t.Name, "", fmt.Sprintf("data is %d bytes, %s %v needs %d", len(t.Data), t.DType, t.Shape, n))
		}
		idx[t.Name] = i
	}
	return specs, idx, nil
}

// Save writes tensors and metadata to path atomically (see Create). On any
// error, including a canceled ctx or a full disk, the previous file at path
// is untouched and no temporary file is left.
func Save(ctx context.Context, path string, tensors []TensorData, metadata map[string]string, opts ...WriteOption) error {
	specs, idx, err := specsOf(tensors)
	if err != nil {
		return withFile(err, path)
	}
	fw, err := Create(ctx, path, specs, metadata, opts...)
	if err != nil {
		return err
	}
	defer fw.Close()
	for {
		spec, tw, err := fw.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return withFile(err, path)
		}
		data := tensors[idx[spec.Name]].Data
		for len(data) > 0 {
			m := min(len(data), saveChunk)
			if _, err := tw.Write(data[:m]); err != nil {
				return withFile(err, path)
			}
			data = data[m:]
		}
	}
	return fw.Commit()
}

// Serialize returns the bytes of a safetensors file holding tensors and
// metadata, laid out as NewWriter does, with checksums unless
// WithoutChecksums is given.
func Serialize(tensors []TensorData, metadata map[string]string, opts ...WriteOption) ([]byte, error) {
	specs, idx, err := specsOf(tensors)
	if err != nil {
		return nil, err
	}
	out := &sliceWriter{}
	w, err := newWriter(out, out, nil, specs, metadata, opts)
	if err != nil {
		return nil, err
	}
	out.b = make([]byte, 0, len(w.p.header)+int(w.p.dataLen))
	if err := w.raw(w.p.header); err != nil {
		return nil, err
	}
	for _, t := range w.p.order {
		if err := w.WriteTensor(t.Name, tensors[idx[t.Name]].Data); err != nil {
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return out.b, nil
}

// sliceWriter is a growing byte slice written at its end or, for a
// header's patch, inside it.
type sliceWriter struct{ b []byte }

func (s *sliceWriter) Write(p []byte) (int, error) {
	s.b = append(s.b, p...)
	return len(p), nil
}

func (s *sliceWriter) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > int64(len(s.b)) {
		return 0, io.ErrShortWrite
	}
	return copy(s.b[off:], p), nil
}
