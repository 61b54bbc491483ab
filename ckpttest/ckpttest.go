// Package ckpttest builds real safetensors checkpoints for tests, the way
// net/http/httptest builds servers: single files, sharded sets with an index,
// precision variants, diffusers' legacy variant layouts and whole pipelines
// with a model_index.json, all from compact specs and with deterministic
// tensor contents in any dtype (FP8, FP6 and FP4 included). EncodeTorch
// builds PyTorch checkpoints as torch.save writes them (views, ties,
// either byte order), for the readers of those.
//
// Two flavours of every builder exist. The testing.TB helpers (File, Dir,
// NewPipeline, OpenFixture) create their files under t.TempDir() and call
// t.Fatal on error. The plain builders (WriteFile, WriteWeights,
// WritePipeline, Decompress) return errors and can be used outside tests, for
// example to generate sample checkpoints.
//
// The encoder here is deliberately independent of package safetensors, so
// fixtures do not share bugs with the code they test. Files are laid out as
// the format requires: an 8-byte little-endian header length, a JSON header
// padded with spaces to a multiple of 8, then the tensor data in the order the
// tensors were given.
//
// Fixture files kept in a testdata folder may be stored zstd-compressed
// (name.safetensors.zst); OpenFixture decompresses them into a temporary
// folder transparently (a single file, named with or without ".zst", or a
// whole folder of shards or a pipeline), so repositories stay small.
package ckpttest

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/shapes"
	"github.com/x448/float16"
)

// Tensor describes one tensor of a fixture.
type Tensor struct {
	Name  string
	DType dtype.DType
	Shape []int64
	// Data is the raw little-endian contents. When nil, Fill's
	// deterministic contents for Name, DType and Shape are used.
	Data []byte
}

// T returns a Tensor with deterministic contents.
func T(name string, dt dtype.DType, shape ...int64) Tensor {
	return Tensor{Name: name, DType: dt, Shape: shape}
}

// Error is returned by the builders of this package. It names the file or
// spec concerned and wraps the underlying error, if any.
type Error struct {
	Op   string // what was being done: "parse", "encode", "write", "decompress", ...
	Path string // the file or folder, or the spec text for "parse"
	Msg  string
	Err  error
}

// Error formats the operation, the path and the cause.
func (e *Error) Error() string {
	s := "ckpttest: " + e.Op
	if e.Path != "" {
		s += " " + e.Path
	}
	if e.Msg != "" {
		s += ": " + e.Msg
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// ParseTensors parses a compact tensor list such as
//
//	"embed:BF16[8,4] layers.0.w:F8_E4M3[4,4] scale:F32[] ids:I64[3]"
//
// Entries are separated by spaces, semicolons or newlines; each is
// NAME:DTYPE[SHAPE] where DTYPE is anything dtype.Parse accepts and SHAPE is a
// comma-separated list of dimensions ("[]" or no brackets: a scalar). The
// name is everything before the last colon.
func ParseTensors(spec string) ([]Tensor, error) {
	var out []Tensor
	fields := strings.FieldsFunc(spec, func(r rune) bool { return r == ' ' || r == ';' || r == '\n' || r == '\t' || r == '\r' })
	for _, f := range fields {
		i := strings.LastIndexByte(f, ':')
		if i <= 0 {
			return nil, &Error{Op: "parse", Path: f, Msg: "want NAME:DTYPE[SHAPE]"}
		}
		name, rest := f[:i], f[i+1:]
		var shape []int64
		if j := strings.IndexByte(rest, '['); j >= 0 {
			if !strings.HasSuffix(rest, "]") {
				return nil, &Error{Op: "parse", Path: f, Msg: "shape must end with ]"}
			}
			dims := rest[j+1 : len(rest)-1]
			rest = rest[:j]
			shape = []int64{}
			if dims != "" {
				for _, d := range strings.Split(dims, ",") {
					n, err := strconv.ParseInt(strings.TrimSpace(d), 10, 64)
					if err != nil || n < 0 {
						return nil, &Error{Op: "parse", Path: f, Msg: fmt.Sprintf("bad dimension %q", d)}
					}
					shape = append(shape, n)
				}
			}
		}
		dt, err := dtype.Parse(rest)
		if err != nil {
			return nil, &Error{Op: "parse", Path: f, Err: err}
		}
		if shape == nil {
			shape = []int64{}
		}
		out = append(out, Tensor{Name: name, DType: dt, Shape: shape})
	}
	return out, nil
}

// MustParseTensors is like ParseTensors but panics on a malformed spec. It
// is meant for literal specs in tests.
func MustParseTensors(spec string) []Tensor {
	ts, err := ParseTensors(spec)
	if err != nil {
		panic(err)
	}
	return ts
}

// maxFill bounds the size of generated contents, so a typo in a spec does not
// try to allocate terabytes.
const maxFill = 1 << 30

// Fill returns the deterministic contents of a tensor: the same name, dtype
// and shape always give the same bytes, on every platform. Float dtypes hold
// finite values (F16, BF16, F32, F64 and C64 in [-1, 1); FP8, FP6, FP4 and
// E8M0 any finite encoding), BOOL holds 0 or 1, integers any bits. Sub-byte
// dtypes need an element count that fills whole bytes. Registered dtypes get
// pseudo-random bits.
func Fill(name string, dt dtype.DType, shape []int64) ([]byte, error) {
	n, err := shapes.Elements(shape)
	if err != nil {
		return nil, &Error{Op: "fill", Path: name, Err: err}
	}
	size, err := dt.ByteLen(n)
	if err != nil {
		return nil, &Error{Op: "fill", Path: name, Err: err}
	}
	if size > maxFill {
		return nil, &Error{Op: "fill", Path: name, Msg: fmt.Sprintf("%d bytes is more than the %d a fixture may have", size, maxFill)}
	}
	h := fnv.New64a()
	h.Write([]byte(name))
	h.Write([]byte{0})
	h.Write([]byte(dt.String()))
	r := rng(h.Sum64())
	b := make([]byte, size)
	unit := func() float64 { return float64(int32(r.next()>>32)) / (1 << 31) } // [-1, 1)
	switch dt {
	case dtype.F32, dtype.C64:
		for i := 0; i < len(b); i += 4 {
			binary.LittleEndian.PutUint32(b[i:], math.Float32bits(float32(unit())))
		}
	case dtype.F64:
		for i := 0; i < len(b); i += 8 {
			binary.LittleEndian.PutUint64(b[i:], math.Float64bits(unit()))
		}
	case dtype.F16:
		for i := 0; i < len(b); i += 2 {
			binary.LittleEndian.PutUint16(b[i:], float16.Fromfloat32(float32(unit())).Bits())
		}
	case dtype.BF16:
		for i := 0; i < len(b); i += 2 {
			u := math.Float32bits(float32(unit()))
			u += 0x7FFF + (u>>16)&1 // round to nearest even; |v| < 1 cannot overflow
			binary.LittleEndian.PutUint16(b[i:], uint16(u>>16))
		}
	case dtype.BOOL:
		for i := range b {
			b[i] = byte(r.next() & 1)
		}
	default:
		bad := nonFinite(dt)
		for i := range b {
			for {
				v := byte(r.next() >> 56)
				if bad == nil || !bad(v) {
					b[i] = v
					break
				}
			}
		}
	}
	return b, nil
}

// nonFinite returns a test for the NaN and infinity encodings of an 8-bit
// float dtype, or nil when every byte is a valid value.
func nonFinite(dt dtype.DType) func(byte) bool {
	switch dt {
	case dtype.F8_E4M3:
		return func(v byte) bool { return v&0x7F == 0x7F }
	case dtype.F8_E5M2:
		return func(v byte) bool { return v&0x7C == 0x7C }
	case dtype.F8_E4M3FNUZ, dtype.F8_E5M2FNUZ:
		return func(v byte) bool { return v == 0x80 }
	case dtype.F8_E8M0:
		return func(v byte) bool { return v == 0xFF }
	}
	return nil
}

// rng is splitmix64: tiny, fast and the same everywhere.
type rng uint64

func (r *rng) next() uint64 {
	*r += 0x9E3779B97F4A7C15
	z := uint64(*r)
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// Contents returns t.Data, or Fill's contents when t.Data is nil.
func (t Tensor) Contents() ([]byte, error) {
	if t.Data != nil {
		return t.Data, nil
	}
	return Fill(t.Name, t.DType, t.Shape)
}

// Encode returns a complete safetensors file holding tensors, in the given
// order, and metadata (omitted when empty). It checks that names are unique
// and non-empty and that explicit Data has the size the dtype and shape need.
func Encode(tensors []Tensor, metadata map[string]string) ([]byte, error) {
	var hdr strings.Builder
	hdr.WriteByte('{')
	first := true
	sep := func() {
		if !first {
			hdr.WriteByte(',')
		}
		first = false
	}
	if len(metadata) > 0 {
		sep()
		hdr.WriteString(`"__metadata__":{`)
		keys := slices.Sorted(maps.Keys(metadata))
		for i, k := range keys {
			if i > 0 {
				hdr.WriteByte(',')
			}
			hdr.WriteString(strconv.Quote(k))
			hdr.WriteByte(':')
			hdr.WriteString(strconv.Quote(metadata[k]))
		}
		hdr.WriteByte('}')
	}
	seen := make(map[string]bool, len(tensors))
	datas := make([][]byte, len(tensors))
	var off int64
	for i, t := range tensors {
		if t.Name == "" || t.Name == "__metadata__" {
			return nil, &Error{Op: "encode", Path: t.Name, Msg: "invalid tensor name"}
		}
		if seen[t.Name] {
			return nil, &Error{Op: "encode", Path: t.Name, Msg: "duplicate tensor name"}
		}
		seen[t.Name] = true
		n, err := shapes.Elements(t.Shape)
		if err != nil {
			return nil, &Error{Op: "encode", Path: t.Name, Err: err}
		}
		size, err := t.DType.ByteLen(n)
		if err != nil {
			return nil, &Error{Op: "encode", Path: t.Name, Err: err}
		}
		d, err := t.Contents()
		if err != nil {
			return nil, err
		}
		if int64(len(d)) != size {
			return nil, &Error{Op: "encode", Path: t.Name, Msg: fmt.Sprintf("data has %d bytes, %s%v needs %d", len(d), t.DType, t.Shape, size)}
		}
		datas[i] = d
		sep()
		hdr.WriteString(strconv.Quote(t.Name))
		hdr.WriteString(`:{"dtype":"`)
		hdr.WriteString(t.DType.String())
		hdr.WriteString(`","shape":[`)
		for j, s := range t.Shape {
			if j > 0 {
				hdr.WriteByte(',')
			}
			hdr.WriteString(strconv.FormatInt(s, 10))
		}
		fmt.Fprintf(&hdr, `],"data_offsets":[%d,%d]}`, off, off+size)
		off += size
	}
	hdr.WriteByte('}')
	for hdr.Len()%8 != 0 {
		hdr.WriteByte(' ')
	}
	out := make([]byte, 8, 8+int64(hdr.Len())+off)
	binary.LittleEndian.PutUint64(out, uint64(hdr.Len()))
	out = append(out, hdr.String()...)
	for _, d := range datas {
		out = append(out, d...)
	}
	return out, nil
}

// WriteFile writes a safetensors file holding tensors and metadata to path,
// creating its folder if needed.
func WriteFile(path string, tensors []Tensor, metadata map[string]string) error {
	b, err := Encode(tensors, metadata)
	if err != nil {
		return &Error{Op: "write", Path: path, Err: err}
	}
	return writeBytes(path, b)
}

func writeBytes(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return &Error{Op: "write", Path: path, Err: err}
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return &Error{Op: "write", Path: path, Err: err}
	}
	return nil
}
