package safetensors

import (
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/shapes"
)

// MaxHeaderSize is the largest header length accepted, in bytes (the
// reference implementation's limit).
const MaxHeaderSize = 100_000_000

// maxDepth bounds JSON nesting in the header: at most 127 containers deep,
// counting the header object itself. That is serde_json's default recursion
// limit as the reference meets it: its counter starts at 128 and fails when
// a container brings it to 0.
const maxDepth = 127

// minEntryLen is the length of the shortest valid tensor entry in a header:
// "":{"dtype":"U8","shape":[],"data_offsets":[0,0]}
const minEntryLen = 49

// MetadataKey is the reserved header key holding the string-to-string
// metadata map. No tensor may have this name.
const MetadataKey = "__metadata__"

// Header is a parsed and validated safetensors header.
type Header struct {
	// Metadata is the __metadata__ map: nil when absent or null.
	Metadata map[string]string
	// Tensors lists the tensors in file (offset) order.
	Tensors []TensorInfo
	// HeaderLen is the value of the 8-byte length field: the size of the JSON
	// header including any padding.
	HeaderLen uint64
	// DataOffset is where the data section starts in the file: 8 + HeaderLen.
	DataOffset int64
	// DataLen is the size of the data section in bytes (-1 when unknown,
	// see ParseHeader).
	DataLen int64

	raw   string    // the JSON header parsed (WithHeader compares a file's with it)
	index nameIndex // name -> position in Tensors
}

// Lookup returns the tensor named name.
func (h *Header) Lookup(name string) (TensorInfo, bool) {
	if i, ok := h.indexOf(name); ok {
		return h.Tensors[i], true
	}
	return TensorInfo{}, false
}

// Index returns the position in Tensors of the tensor named name, without
// copying its TensorInfo.
func (h *Header) Index(name string) (int, bool) { return h.indexOf(name) }

func (h *Header) indexOf(name string) (int, bool) {
	if h.index.slots != nil {
		return h.index.find(h.Tensors, name)
	}
	for i := range h.Tensors {
		if h.Tensors[i].Name == name {
			return i, true
		}
	}
	return 0, false
}

// nameIndex maps tensor names to their positions in Header.Tensors: an
// open-addressing hash table with linear probing whose slots hold
// position+1 (0 is empty), at most 2/3 full. At 4 bytes a slot it costs
// 6–12 bytes a tensor, against ~40 for a map[string]int, and it needs no
// copy of the names: they are read from Tensors. The seed is random per
// header, so crafted names cannot choose collisions.
type nameIndex struct {
	seed  maphash.Seed
	slots []uint32
}

// add inserts ts[i].Name, or returns false if an earlier tensor of ts has
// the same name.
func (x *nameIndex) add(ts []TensorInfo, i int) bool {
	name := ts[i].Name
	mask := uint64(len(x.slots) - 1)
	for k := maphash.String(x.seed, name) & mask; ; k = (k + 1) & mask {
		v := x.slots[k]
		if v == 0 {
			x.slots[k] = uint32(i) + 1
			return true
		}
		if ts[v-1].Name == name {
			return false
		}
	}
}

func (x *nameIndex) find(ts []TensorInfo, name string) (int, bool) {
	mask := uint64(len(x.slots) - 1)
	for k := maphash.String(x.seed, name) & mask; ; k = (k + 1) & mask {
		v := x.slots[k]
		if v == 0 {
			return 0, false
		}
		if ts[v-1].Name == name {
			return int(v - 1), true
		}
	}
}

// TensorInfo describes one tensor of a header.
type TensorInfo struct {
	Name  string
	DType dtype.DType
	Shape []int64
	// Begin and End are the data_offsets: the tensor's bytes are
	// [Begin, End) relative to the start of the data section.
	Begin, End int64
}

// NumElements returns the product of the shape (1 for a scalar), or -1 if
// it overflows int64 or a dimension is negative (never for a validated
// header).
func (t TensorInfo) NumElements() int64 {
	n, err := shapes.Elements(t.Shape)
	if err != nil {
		return -1
	}
	return n
}

// ByteLen returns End - Begin, the size of the tensor's data in bytes.
func (t TensorInfo) ByteLen() int64 { return t.End - t.Begin }

// ReadHeader reads, parses and validates the header of the safetensors file
// of the given size available through r. It reads the 8-byte length field and
// the JSON header, and no tensor data. The length field is checked against
// MaxHeaderSize and size before anything is allocated.
func ReadHeader(r io.ReaderAt, size int64) (*Header, error) {
	if size < 8 {
		return nil, newErr(ErrHeaderTooSmall, "", "", fmt.Sprintf("file is %d bytes, shorter than the 8-byte header length", size))
	}
	var lenBuf [8]byte
	if _, err := r.ReadAt(lenBuf[:], 0); err != nil {
		return nil, &Error{Kind: ErrIO, Msg: "reading header length", Err: err}
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if err := checkHeaderLen(n, size); err != nil {
		return nil, err
	}
	buf := make([]byte, n)
	if n > 0 {
		if _, err := r.ReadAt(buf, 8); err != nil {
			return nil, &Error{Kind: ErrIO, Msg: "reading header", Err: err}
		}
	}
	// buf is ours and never written again: share it with the parsed names.
	return parseHeader(unsafe.String(unsafe.SliceData(buf), len(buf)), size-8-int64(n))
}

// ReadHeaderFile is ReadHeader on the file at path. It does not map the
// file. Like Open, it follows path's links and refuses what is not a regular
// file (ErrNotRegular) without blocking. Errors name the file.
func ReadHeaderFile(path string) (*Header, error) {
	f, size, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h, err := ReadHeader(f, size)
	if err != nil {
		return nil, withFile(err, path)
	}
	return h, nil
}

func checkHeaderLen(n uint64, size int64) error {
	if n > MaxHeaderSize {
		return newErr(ErrHeaderTooLarge, "", "", fmt.Sprintf("header length %d exceeds the %d-byte limit", n, MaxHeaderSize))
	}
	if int64(n)+8 > size {
		return newErr(ErrInvalidHeaderLength, "", "", fmt.Sprintf("header length %d runs past the end of the %d-byte file", n, size))
	}
	return nil
}

// ParseHeader parses and validates JSON header bytes (without the 8-byte
// length field) against a data section of dataLen bytes: the tensors must
// cover it exactly. A negative dataLen skips that last check (for tools that
// only have the header). The returned Header does not reference b.
func ParseHeader(b []byte, dataLen int64) (*Header, error) {
	if len(b) > MaxHeaderSize {
		return nil, newErr(ErrHeaderTooLarge, "", "", fmt.Sprintf("header length %d exceeds the %d-byte limit", len(b), MaxHeaderSize))
	}
	return parseHeader(string(b), dataLen)
}

// parseHeader parses s, which the returned Header may reference.
func parseHeader(s string, dataLen int64) (*Header, error) {
	if !utf8.ValidString(s) {
		i := 0
		for i < len(s) {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size <= 1 {
				break
			}
			i += size
		}
		return nil, newErr(ErrInvalidUTF8, "", "", fmt.Sprintf("header is not valid UTF-8 (byte %d)", i))
	}
	p := parser{s: s}
	// Size the tables once: every tensor entry is an object, so the number
	// of '{' bounds the tensor count. So does the header length: the
	// shortest valid entry, """:{"dtype":"U8","shape":[],"data_offsets":[0,0]}",
	// is minEntryLen bytes. Taking the smaller keeps a hostile header of
	// nothing but '{' from reserving ~100 bytes of tables per header byte.
	if n := min(strings.Count(s, "{")-1, len(s)/minEntryLen+1); n > 0 {
		p.shapes = make([]int64, 0, 3*n)
		p.shapesCap = 3 * n
		p.tensors = make([]TensorInfo, 0, n)
	}
	h := &Header{HeaderLen: uint64(len(s)), DataOffset: 8 + int64(len(s)), DataLen: dataLen, raw: s}
	if dataLen < 0 {
		h.DataLen = -1
	}
	p.parse(h)
	if p.synErr != nil {
		return nil, p.synErr
	}
	if p.semErr != nil {
		return nil, p.semErr
	}
	if err := h.finish(); err != nil {
		return nil, err
	}
	return h, nil
}

// finish sorts the tensors by offset, indexes them, and validates the
// offsets, sizes and data coverage in the reference's order.
func (h *Header) finish() error {
	ts := h.Tensors
	sorted := true
	for i := 1; i < len(ts); i++ {
		if cmpOffsets(ts[i-1], ts[i]) > 0 {
			sorted = false
			break
		}
	}
	if !sorted {
		slices.SortStableFunc(ts, cmpOffsets)
	}
	// A table of a power of two slots, at least 1.5 per tensor (fewer than
	// 2^31 tensors fit in a MaxHeaderSize header).
	nslots := 1
	for nslots < len(ts)+len(ts)/2+1 {
		nslots <<= 1
	}
	h.index = nameIndex{seed: maphash.MakeSeed(), slots: make([]uint32, nslots)}
	for i := range ts {
		if !h.index.add(ts, i) {
			return newErr(ErrDuplicateKey, ts[i].Name, "", "tensor name appears twice in the header")
		}
	}
	var start int64
	for i := range ts {
		t := &ts[i]
		if t.Begin != start || t.End < t.Begin {
			return newErr(ErrInvalidOffset, t.Name, "data_offsets",
				fmt.Sprintf("data_offsets [%d, %d] do not start where the previous tensor ends (%d)", t.Begin, t.End, start))
		}
		start = t.End
		size, err := shapeByteLen(t.Name, t.DType, t.Shape)
		if err != nil {
			return err
		}
		if t.End-t.Begin != size {
			return newErr(ErrTensorSizeMismatch, t.Name, "data_offsets",
				fmt.Sprintf("data_offsets span %d bytes, but %s %v needs %d", t.End-t.Begin, t.DType, t.Shape, size))
		}
	}
	if h.DataLen >= 0 && start != h.DataLen {
		msg := fmt.Sprintf("tensors cover %d bytes but the data section has %d", start, h.DataLen)
		if start < h.DataLen {
			msg += " (trailing bytes)"
		} else {
			msg += " (file truncated?)"
		}
		return newErr(ErrIncompleteBuffer, "", "", msg)
	}
	return nil
}

// shapeByteLen returns the size in bytes of a tensor of dtype d (known,
// non-zero width) and shape (no negative dimension), failing with ErrOverflow
// when the element or bit count overflows int64 and with ErrMisalignedSlice
// when sub-byte elements do not fill whole bytes. Header validation and
// TensorSpec.ByteLen share it.
func shapeByteLen(name string, d dtype.DType, shape []int64) (int64, error) {
	n, err := shapes.Elements(shape)
	if err != nil {
		return 0, newErr(ErrOverflow, name, "shape", fmt.Sprintf("element count of shape %v overflows", shape))
	}
	bits := int64(d.Bits())
	if n > math.MaxInt64/bits {
		return 0, newErr(ErrOverflow, name, "shape", fmt.Sprintf("byte size of shape %v in %s overflows", shape, d))
	}
	if n*bits%8 != 0 {
		return 0, newErr(ErrMisalignedSlice, name, "shape",
			fmt.Sprintf("%d elements of %s (%d bits each) do not fill whole bytes", n, d, bits))
	}
	return n * bits / 8, nil
}

func cmpOffsets(a, b TensorInfo) int {
	if a.Begin != b.Begin {
		if a.Begin < b.Begin {
			return -1
		}
		return 1
	}
	if a.End != b.End {
		if a.End < b.End {
			return -1
		}
		return 1
	}
	return 0
}

// lookupDType maps an exact safetensors dtype name to a DType. Unlike
// dtype.Parse it accepts no aliases and no other letter case, as the format
// (and the reference) require.
func lookupDType(name string) (dtype.DType, bool) {
	switch name {
	case "F32":
		return dtype.F32, true
	case "BF16":
		return dtype.BF16, true
	case "F16":
		return dtype.F16, true
	case "I64":
		return dtype.I64, true
	case "F64":
		return dtype.F64, true
	case "I32":
		return dtype.I32, true
	case "U8":
		return dtype.U8, true
	case "I8":
		return dtype.I8, true
	case "BOOL":
		return dtype.BOOL, true
	case "F8_E4M3":
		return dtype.F8_E4M3, true
	case "F8_E5M2":
		return dtype.F8_E5M2, true
	case "U16":
		return dtype.U16, true
	case "I16":
		return dtype.I16, true
	case "U32":
		return dtype.U32, true
	case "U64":
		return dtype.U64, true
	case "C64":
		return dtype.C64, true
	case "F8_E8M0":
		return dtype.F8_E8M0, true
	case "F4":
		return dtype.F4, true
	case "F6_E2M3":
		return dtype.F6_E2M3, true
	case "F6_E3M2":
		return dtype.F6_E3M2, true
	case "F8_E4M3FNUZ":
		return dtype.F8_E4M3FNUZ, true
	case "F8_E5M2FNUZ":
		return dtype.F8_E5M2FNUZ, true
	}
	if name == "" || strings.TrimSpace(name) != name {
		return dtype.Invalid, false
	}
	d, err := dtype.Parse(name)
	if err != nil || d.String() != name || d.Bits() == 0 {
		return dtype.Invalid, false
	}
	return d, true
}

// parser is a strict, allocation-light JSON scanner for safetensors
// headers. It follows RFC 8259 as serde_json does: whitespace is space, tab,
// LF and CR; strings reject raw control characters and lone surrogates;
// numbers follow the JSON grammar. Syntax errors stop the parse; shape errors
// (wrong types, unknown dtypes, duplicate keys) are recorded and reported
// only if the whole header is syntactically valid, as the reference does.
type parser struct {
	s      string
	i      int
	depth  int
	synErr *Error
	semErr *Error
	// shapes is the arena of every tensor's shape: each TensorInfo.Shape
	// is a capped slice of it, set as soon as the shape is parsed (a
	// region is never written again, even when a later append moves the
	// arena: compactShapes gathers them then). data_offsets are parsed into
	// its tail as scratch.
	shapes    []int64
	shapesCap int // cap(shapes) as first allocated
	tensors   []TensorInfo
	keyBuf    []byte
}

func (p *parser) syntax(msg string) bool {
	if p.synErr == nil {
		p.synErr = newErr(ErrInvalidJSON, "", "", fmt.Sprintf("%s at byte %d", msg, p.i))
	}
	return false
}

func (p *parser) semantic(kind ErrorKind, tensor, field, msg string) {
	if p.semErr == nil {
		p.semErr = newErr(kind, tensor, field, msg)
	}
}

func (p *parser) ws() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *parser) peek() byte {
	if p.i < len(p.s) {
		return p.s[p.i]
	}
	return 0
}

func (p *parser) expect(c byte) bool {
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	if p.i >= len(p.s) {
		return p.syntax(fmt.Sprintf("unexpected end of header, expected %q", c))
	}
	return p.syntax(fmt.Sprintf("expected %q, found %q", c, p.s[p.i]))
}

func (p *parser) parse(h *Header) {
	p.ws()
	if p.peek() != '{' {
		if p.i >= len(p.s) {
			p.syntax("empty header")
			return
		}
		if p.skipValue() {
			p.ws()
			if p.i != len(p.s) {
				p.syntax("trailing characters after JSON value")
				return
			}
			p.semantic(ErrInvalidHeader, "", "", "header is not a JSON object")
		}
		return
	}
	p.i++
	if !p.push() {
		return
	}
	p.ws()
	h.Tensors = p.tensors
	sawMeta := false
	if p.peek() == '}' {
		p.i++
	} else {
		for {
			if p.peek() != '"' {
				p.syntax("expected a string key")
				return
			}
			key, ok := p.str()
			if !ok {
				return
			}
			p.ws()
			if !p.expect(':') {
				return
			}
			p.ws()
			if key == MetadataKey {
				if sawMeta {
					p.semantic(ErrDuplicateKey, MetadataKey, "", "__metadata__ appears twice in the header")
				}
				sawMeta = true
				m, ok := p.metadata()
				if !ok {
					return
				}
				if h.Metadata == nil {
					h.Metadata = m
				}
			} else {
				info, ok := p.tensor(key)
				if !ok {
					return
				}
				h.Tensors = append(h.Tensors, info)
			}
			p.ws()
			c := p.peek()
			if c == ',' {
				p.i++
				p.ws()
				continue
			}
			if c == '}' {
				p.i++
				break
			}
			p.syntax("expected ',' or '}' after header entry")
			return
		}
	}
	p.ws()
	if p.i != len(p.s) {
		p.syntax("trailing characters after the header object")
		return
	}
	p.compactShapes(h.Tensors)
}

// compactShapes gives every tensor without a shape an empty one, and, if
// the shape arena had to grow while parsing (the shapes then live in several
// arrays), copies all shapes into one array of the exact size.
func (p *parser) compactShapes(ts []TensorInfo) {
	if cap(p.shapes) == p.shapesCap {
		for i := range ts {
			if ts[i].Shape == nil {
				ts[i].Shape = []int64{}
			}
		}
		return
	}
	total := 0
	for i := range ts {
		total += len(ts[i].Shape)
	}
	arena := make([]int64, 0, total)
	for i := range ts {
		start := len(arena)
		arena = append(arena, ts[i].Shape...)
		ts[i].Shape = arena[start:len(arena):len(arena)]
	}
}

// metadata parses null or an object of strings.
func (p *parser) metadata() (map[string]string, bool) {
	switch p.peek() {
	case 'n':
		return nil, p.literal("null")
	case '{':
	default:
		if !p.skipValue() {
			return nil, false
		}
		p.semantic(ErrInvalidHeader, MetadataKey, "", "__metadata__ must be an object of strings or null")
		return nil, true
	}
	p.i++
	if !p.push() {
		return nil, false
	}
	m := map[string]string{}
	p.ws()
	if p.peek() == '}' {
		p.i++
		p.depth--
		return m, true
	}
	for {
		if p.peek() != '"' {
			return nil, p.syntax("expected a string key")
		}
		k, ok := p.str()
		if !ok {
			return nil, false
		}
		k = strings.Clone(k)
		p.ws()
		if !p.expect(':') {
			return nil, false
		}
		p.ws()
		if p.peek() == '"' {
			v, ok := p.str()
			if !ok {
				return nil, false
			}
			if _, dup := m[k]; dup {
				p.semantic(ErrDuplicateKey, MetadataKey, k, "metadata key appears twice")
			} else {
				m[k] = strings.Clone(v)
			}
		} else {
			if !p.skipValue() {
				return nil, false
			}
			p.semantic(ErrInvalidHeader, MetadataKey, k, "metadata values must be strings")
		}
		p.ws()
		switch p.peek() {
		case ',':
			p.i++
			p.ws()
			continue
		case '}':
			p.i++
			p.depth--
			return m, true
		}
		return nil, p.syntax("expected ',' or '}' in __metadata__")
	}
}

const (
	hasDType = 1 << iota
	hasShape
	hasOffsets
)

// tensor parses one tensor entry.
func (p *parser) tensor(name string) (TensorInfo, bool) {
	info := TensorInfo{Name: name}
	if p.peek() != '{' {
		if !p.skipValue() {
			return info, false
		}
		p.semantic(ErrInvalidHeader, name, "", "tensor entry must be an object with dtype, shape and data_offsets")
		return info, true
	}
	p.i++
	if !p.push() {
		return info, false
	}
	seen := 0
	p.ws()
	if p.peek() == '}' {
		p.i++
		p.depth--
		p.semantic(ErrInvalidHeader, name, "dtype", "missing field dtype")
		return info, true
	}
	for {
		if p.peek() != '"' {
			return info, p.syntax("expected a string key")
		}
		key, ok := p.str()
		if !ok {
			return info, false
		}
		p.ws()
		if !p.expect(':') {
			return info, false
		}
		p.ws()
		switch key {
		case "dtype":
			if seen&hasDType != 0 {
				p.semantic(ErrDuplicateKey, name, "dtype", "duplicate field dtype")
			}
			seen |= hasDType
			if p.peek() != '"' {
				if !p.skipValue() {
					return info, false
				}
				p.semantic(ErrInvalidHeader, name, "dtype", "dtype must be a string")
				break
			}
			v, ok := p.str()
			if !ok {
				return info, false
			}
			d, known := lookupDType(v)
			if !known {
				p.semantic(ErrUnknownDType, name, "dtype", fmt.Sprintf("unknown dtype %q (valid: %s)", v, strings.Join(dtype.Names(), ", ")))
			}
			info.DType = d
		case "shape":
			if seen&hasShape != 0 {
				p.semantic(ErrDuplicateKey, name, "shape", "duplicate field shape")
				// Keep the first shape; parse the second into scratch.
				save := len(p.shapes)
				if !p.uintArray(name, "shape", -1) {
					return info, false
				}
				p.shapes = p.shapes[:save]
				break
			}
			seen |= hasShape
			start := len(p.shapes)
			if !p.uintArray(name, "shape", -1) {
				return info, false
			}
			info.Shape = p.shapes[start:len(p.shapes):len(p.shapes)]
		case "data_offsets":
			if seen&hasOffsets != 0 {
				p.semantic(ErrDuplicateKey, name, "data_offsets", "duplicate field data_offsets")
			}
			seen |= hasOffsets
			save := len(p.shapes)
			if !p.uintArray(name, "data_offsets", 2) {
				return info, false
			}
			if len(p.shapes) == save+2 {
				info.Begin, info.End = p.shapes[save], p.shapes[save+1]
			}
			p.shapes = p.shapes[:save]
		default:
			// Unknown fields are ignored, as by the reference.
			if !p.skipValue() {
				return info, false
			}
		}
		p.ws()
		c := p.peek()
		if c == ',' {
			p.i++
			p.ws()
			continue
		}
		if c == '}' {
			p.i++
			p.depth--
			break
		}
		return info, p.syntax("expected ',' or '}' in tensor entry")
	}
	switch {
	case seen&hasDType == 0:
		p.semantic(ErrInvalidHeader, name, "dtype", "missing field dtype")
	case seen&hasShape == 0:
		p.semantic(ErrInvalidHeader, name, "shape", "missing field shape")
	case seen&hasOffsets == 0:
		p.semantic(ErrInvalidHeader, name, "data_offsets", "missing field data_offsets")
	}
	return info, true
}

// uintArray parses an array of non-negative integers, appending them to
// p.shapes. want >= 0 requires exactly that many elements.
func (p *parser) uintArray(name, field string, want int) bool {
	if p.peek() != '[' {
		if !p.skipValue() {
			return false
		}
		p.semantic(ErrInvalidHeader, name, field, field+" must be an array of non-negative integers")
		return true
	}
	p.i++
	if !p.push() {
		return false
	}
	start := len(p.shapes)
	p.ws()
	if p.peek() == ']' {
		p.i++
	} else {
		for {
			c := p.peek()
			if c >= '0' && c <= '9' {
				v, kind, ok := p.uint()
				if !ok {
					return false
				}
				switch kind {
				case 0:
					p.shapes = append(p.shapes, v)
				case 1:
					p.shapes = append(p.shapes, 0)
					if field == "shape" {
						p.semantic(ErrOverflow, name, field, "dimension does not fit in int64")
					} else {
						p.semantic(ErrInvalidOffset, name, field, "offset does not fit in int64")
					}
				default:
					p.shapes = append(p.shapes, 0)
					p.semantic(ErrInvalidHeader, name, field, field+" must hold non-negative integers")
				}
			} else {
				if !p.skipValue() {
					return false
				}
				p.shapes = append(p.shapes, 0)
				p.semantic(ErrInvalidHeader, name, field, field+" must hold non-negative integers")
			}
			p.ws()
			c = p.peek()
			if c == ',' {
				p.i++
				p.ws()
				continue
			}
			if c == ']' {
				p.i++
				break
			}
			return p.syntax("expected ',' or ']' in array")
		}
	}
	p.depth--
	if want >= 0 && len(p.shapes)-start != want {
		p.semantic(ErrInvalidHeader, name, field, fmt.Sprintf("%s must have exactly %d elements, has %d", field, want, len(p.shapes)-start))
	}
	return true
}

// uint parses a JSON number that starts with a digit. kind is 0 for an
// integer that fits int64, 1 for a larger integer, 2 for a non-integer
// number (fraction or exponent).
func (p *parser) uint() (v int64, kind int, ok bool) {
	start := p.i
	s := p.s
	i := p.i
	var u uint64
	over := false
	if s[i] == '0' {
		i++
	} else {
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			d := uint64(s[i] - '0')
			if u > (math.MaxInt64-d)/10 {
				over = true
			} else {
				u = u*10 + d
			}
			i++
		}
	}
	if i < len(s) && (s[i] == '.' || s[i] == 'e' || s[i] == 'E') {
		p.i = start
		if !p.number() {
			return 0, 0, false
		}
		return 0, 2, true
	}
	if i < len(s) && s[i] >= '0' && s[i] <= '9' {
		p.i = i
		return 0, 0, p.syntax("leading zero in number")
	}
	p.i = i
	if over {
		return 0, 1, true
	}
	return int64(u), 0, true
}

func (p *parser) push() bool {
	p.depth++
	if p.depth > maxDepth {
		return p.syntax("nesting too deep")
	}
	return true
}

func (p *parser) literal(lit string) bool {
	if strings.HasPrefix(p.s[p.i:], lit) {
		p.i += len(lit)
		return true
	}
	return p.syntax("invalid literal")
}

// number validates a JSON number and skips it.
func (p *parser) number() bool {
	s := p.s
	i := p.i
	start := i
	if i < len(s) && s[i] == '-' {
		i++
	}
	if i >= len(s) {
		p.i = i
		return p.syntax("invalid number")
	}
	if s[i] == '0' {
		i++
		if i < len(s) && s[i] >= '0' && s[i] <= '9' {
			p.i = i
			return p.syntax("leading zero in number")
		}
	} else if s[i] >= '1' && s[i] <= '9' {
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
	} else {
		p.i = i
		return p.syntax("invalid number")
	}
	float := false
	if i < len(s) && s[i] == '.' {
		float = true
		i++
		j := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == j {
			p.i = i
			return p.syntax("invalid number: no digits after '.'")
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		float = true
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		j := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == j {
			p.i = i
			return p.syntax("invalid number: no digits in exponent")
		}
	}
	p.i = i
	if float {
		// serde_json rejects numbers out of the float64 range.
		if f, err := strconv.ParseFloat(s[start:i], 64); err != nil && math.IsInf(f, 0) {
			p.i = start
			return p.syntax("number out of range")
		}
	}
	return true
}

// skipValue validates and skips any JSON value.
func (p *parser) skipValue() bool {
	switch c := p.peek(); {
	case c == '"':
		_, ok := p.str()
		return ok
	case c == '{':
		p.i++
		if !p.push() {
			return false
		}
		p.ws()
		if p.peek() == '}' {
			p.i++
			p.depth--
			return true
		}
		for {
			if p.peek() != '"' {
				return p.syntax("expected a string key")
			}
			if _, ok := p.str(); !ok {
				return false
			}
			p.ws()
			if !p.expect(':') {
				return false
			}
			p.ws()
			if !p.skipValue() {
				return false
			}
			p.ws()
			switch p.peek() {
			case ',':
				p.i++
				p.ws()
				continue
			case '}':
				p.i++
				p.depth--
				return true
			}
			return p.syntax("expected ',' or '}' in object")
		}
	case c == '[':
		p.i++
		if !p.push() {
			return false
		}
		p.ws()
		if p.peek() == ']' {
			p.i++
			p.depth--
			return true
		}
		for {
			if !p.skipValue() {
				return false
			}
			p.ws()
			switch p.peek() {
			case ',':
				p.i++
				p.ws()
				continue
			case ']':
				p.i++
				p.depth--
				return true
			}
			return p.syntax("expected ',' or ']' in array")
		}
	case c == 't':
		return p.literal("true")
	case c == 'f':
		return p.literal("false")
	case c == 'n':
		return p.literal("null")
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	case p.i >= len(p.s):
		return p.syntax("unexpected end of header")
	default:
		return p.syntax(fmt.Sprintf("unexpected character %q", c))
	}
}

// str parses a JSON string at p.i (which is '"') and returns its decoded
// value. Without escapes the value is a substring of the header (no
// allocation).
func (p *parser) str() (string, bool) {
	s := p.s
	i := p.i + 1
	start := i
	for i < len(s) && plainStringByte[s[i]] {
		i++
	}
	if i < len(s) {
		switch c := s[i]; {
		case c == '"':
			p.i = i + 1
			return s[start:i], true
		case c < 0x20:
			p.i = i
			return "", p.syntax("control character in string")
		}
	}
	if i >= len(s) {
		p.i = i
		return "", p.syntax("unterminated string")
	}
	// Slow path: escapes.
	buf := append(p.keyBuf[:0], s[start:i]...)
	for {
		if i >= len(s) {
			p.i = i
			return "", p.syntax("unterminated string")
		}
		c := s[i]
		switch {
		case c == '"':
			p.i = i + 1
			p.keyBuf = buf
			return string(buf), true
		case c < 0x20:
			p.i = i
			return "", p.syntax("control character in string")
		case c != '\\':
			buf = append(buf, c)
			i++
			continue
		}
		i++
		if i >= len(s) {
			p.i = i
			return "", p.syntax("unterminated escape")
		}
		e := s[i]
		i++
		switch e {
		case '"', '\\', '/':
			buf = append(buf, e)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, ok := hex4(s, i)
			if !ok {
				p.i = i
				return "", p.syntax("invalid \\u escape")
			}
			i += 4
			if r >= 0xDC00 && r <= 0xDFFF {
				p.i = i
				return "", p.syntax("lone trailing surrogate in \\u escape")
			}
			if r >= 0xD800 && r <= 0xDBFF {
				if i+1 >= len(s) || s[i] != '\\' || s[i+1] != 'u' {
					p.i = i
					return "", p.syntax("lone leading surrogate in \\u escape")
				}
				r2, ok := hex4(s, i+2)
				if !ok {
					p.i = i + 2
					return "", p.syntax("invalid \\u escape")
				}
				if r2 < 0xDC00 || r2 > 0xDFFF {
					p.i = i
					return "", p.syntax("lone leading surrogate in \\u escape")
				}
				i += 6
				r = 0x10000 + (r-0xD800)<<10 + (r2 - 0xDC00)
			}
			buf = utf8.AppendRune(buf, r)
		default:
			p.i = i - 1
			return "", p.syntax("invalid escape")
		}
	}
}

// plainStringByte marks the bytes a JSON string may hold unescaped, other
// than '"' and '\\' (UTF-8 validity is checked for the whole header first).
var plainStringByte = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func hex4(s string, i int) (rune, bool) {
	if i+4 > len(s) {
		return 0, false
	}
	var r rune
	for k := 0; k < 4; k++ {
		c := s[i+k]
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(d)
	}
	return r, true
}
