package shard

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/ckpt-go/ckpt/internal/safeopen"
	"github.com/ckpt-go/ckpt/internal/srcfs"
)

// MaxIndexSize is the largest index file ReadIndex accepts (64 MiB). Real
// indexes of the largest models are a few MiB.
const MaxIndexSize = 64 << 20

// Index is a parsed and validated *.safetensors.index.json file.
type Index struct {
	// Path is the file the index was read from ("" for ParseIndex).
	Path string `json:"path,omitempty"`
	// Metadata is the informational "metadata" object, numbers as
	// json.Number; nil when absent.
	Metadata map[string]any `json:"metadata,omitempty"`
	// WeightMap maps each tensor name to the bare file name of its shard.
	WeightMap map[string]string `json:"weight_map"`
	// TotalSize is metadata.total_size in bytes, 0 when absent or unusable
	// (a warning says which).
	TotalSize int64 `json:"total_size,omitempty"`
	// Warnings are the oddities that did not make the index invalid.
	Warnings []string `json:"warnings,omitempty"`

	order   []string // tensor names in file order
	shardOf []int32  // the shard of order[i], a position in shards
	shards  []string // the distinct shard names, sorted
}

// Names returns the tensor names in the order the index lists them.
func (ix *Index) Names() []string { return slices.Clone(ix.order) }

// Shards returns the distinct shard file names, sorted.
func (ix *Index) Shards() []string {
	if ix.shards != nil { // a parsed index: as parsed, like Names
		return slices.Clone(ix.shards)
	}
	var out []string
	seen := make(map[string]bool)
	for _, s := range ix.WeightMap {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// ReadIndex reads and validates the index file at path: it must be a JSON
// object with a non-empty "weight_map" of tensor names to bare shard file
// names (see CheckShardName), listing no tensor twice; "metadata", when
// present, must be an object. It checks the JSON only: no shard is opened
// (Open does that). Errors are *Error values naming the file.
//
// path is followed through its symbolic links; it must lead to a regular
// file (ErrNotRegular: a FIFO or a device is refused without blocking and
// before any byte is read) of at most MaxIndexSize bytes (ErrInvalidIndex,
// checked before reading).
func ReadIndex(path string) (*Index, error) {
	return readIndex(srcfs.FS{}, path)
}

// ReadIndexFS is ReadIndex for the file name of fsys.
func ReadIndexFS(fsys fs.FS, name string) (*Index, error) {
	return readIndex(srcfs.Of(fsys), name)
}

func readIndex(src srcfs.FS, path string) (*Index, error) {
	data, err := src.ReadFile(path, MaxIndexSize)
	if err != nil {
		var nr *safeopen.NotRegularError
		var tl *safeopen.TooLargeError
		switch {
		case errors.As(err, &nr):
			return nil, &Error{Kind: ErrNotRegular, Path: path, Msg: safeopen.Describe(nr.Mode) + ", not a regular file"}
		case errors.As(err, &tl):
			return nil, &Error{Kind: ErrInvalidIndex, Path: path,
				Msg: fmt.Sprintf("index too large: %d bytes, more than the %d an index may have", tl.Size, MaxIndexSize)}
		}
		return nil, &Error{Kind: ErrIndexRead, Path: path, Err: err}
	}
	ix, err := ParseIndex(data)
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			e.Path = path
		}
		return nil, err
	}
	ix.Path = path
	return ix, nil
}

// ParseIndex parses and validates index JSON held in memory; see ReadIndex.
func ParseIndex(data []byte) (*Index, error) {
	if len(data) > MaxIndexSize {
		return nil, &Error{Kind: ErrInvalidIndex, Msg: fmt.Sprintf("index too large: %d bytes, more than the %d an index may have", len(data), MaxIndexSize)}
	}
	if ix, ok := parseIndexFast(data); ok {
		return ix, nil
	}
	return parseIndexSlow(data)
}

// parseIndexFast handles the common, valid index with a hand-written
// scanner (encoding/json's reflection dominates otherwise). It gives up (ok
// false) on anything unusual: unknown or repeated keys, escapes it does not
// need to handle, invalid UTF-8, any syntax or validation error. The exact
// diagnosis is then left to parseIndexSlow; both give the same result on
// what the fast path accepts, which FuzzParseIndex checks.
func parseIndexFast(data []byte) (ix *Index, ok bool) {
	sc := scanner{b: data}
	ix = &Index{}
	sc.ws()
	if !sc.eat('{') {
		return nil, false
	}
	seenMap, seenMeta := false, false
	for first := true; ; first = false {
		sc.ws()
		if sc.eat('}') {
			break
		}
		if !first && !(sc.eat(',') && sc.wsThen()) {
			return nil, false
		}
		key, ok := sc.str()
		if !ok {
			return nil, false
		}
		sc.ws()
		if !sc.eat(':') {
			return nil, false
		}
		sc.ws()
		switch {
		case key == "weight_map" && !seenMap:
			seenMap = true
			if !sc.weightMap(ix) {
				return nil, false
			}
		case key == "metadata" && !seenMeta:
			seenMeta = true
			d := json.NewDecoder(bytes.NewReader(data[sc.i:]))
			d.UseNumber()
			var v any
			if d.Decode(&v) != nil {
				return nil, false
			}
			sc.i += int(d.InputOffset())
			if ix.setMetadata(v) != nil {
				return nil, false
			}
		default:
			return nil, false
		}
	}
	sc.ws()
	if sc.i != len(data) || !seenMap {
		return nil, false
	}
	return ix, true
}

type scanner struct {
	b []byte
	i int
}

func (s *scanner) ws() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\t' || s.b[s.i] == '\n' || s.b[s.i] == '\r') {
		s.i++
	}
}

// wsThen skips white space and reports true, for use in conditions.
func (s *scanner) wsThen() bool { s.ws(); return true }

func (s *scanner) eat(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// str reads a JSON string. Strings with escapes are decoded by
// encoding/json; control characters and invalid UTF-8 give up.
func (s *scanner) str() (string, bool) {
	raw, escaped, ok := s.rawStr()
	if !ok {
		return "", false
	}
	return s.decode(raw, escaped)
}

// rawStr reads a JSON string and returns its undecoded contents.
func (s *scanner) rawStr() (raw []byte, escaped, ok bool) {
	if !s.eat('"') {
		return nil, false, false
	}
	start := s.i
	for s.i < len(s.b) && s.b[s.i] != '"' {
		c := s.b[s.i]
		if c < 0x20 {
			return nil, false, false
		}
		if c == '\\' {
			escaped = true
			s.i++
		}
		s.i++
	}
	if s.i >= len(s.b) {
		return nil, false, false
	}
	raw = s.b[start:s.i]
	s.i++
	return raw, escaped, true
}

// decode turns the raw contents of a string (just read) into a Go string.
func (s *scanner) decode(raw []byte, escaped bool) (string, bool) {
	if !utf8.Valid(raw) {
		return "", false
	}
	if !escaped {
		return string(raw), true
	}
	var out string
	if json.Unmarshal(s.b[s.i-len(raw)-2:s.i], &out) != nil {
		return "", false
	}
	return out, true
}

// weightMap reads a non-empty object of valid tensor and shard names.
//
// A large index is mostly tensor names: they are gathered first (as spans
// of the input) and then copied into one string, and the map is built at
// its final size, one assignment per name (a name listed twice shows in
// the map's length). Most entries repeat a few shard names: each distinct
// one is validated and allocated once.
func (s *scanner) weightMap(ix *Index) bool {
	if !s.eat('{') {
		return false
	}
	type span struct{ start, end int32 } // of s.b; start < 0: escaped[-start-1]
	var (
		spans   []span
		escaped []string // names with escapes, decoded
		size    int      // bytes of the names without escapes
		set     shardSet
	)
	for first := true; ; first = false {
		s.ws()
		if s.eat('}') {
			break
		}
		if !first && !(s.eat(',') && s.wsThen()) {
			return false
		}
		raw, esc, ok := s.rawStr()
		if !ok || len(raw) == 0 {
			return false
		}
		if esc {
			name, ok := s.decode(raw, esc)
			if !ok {
				return false
			}
			escaped = append(escaped, name)
			spans = append(spans, span{start: -int32(len(escaped))})
		} else {
			if !utf8.Valid(raw) {
				return false
			}
			end := s.i - 1 // the closing quote; MaxIndexSize < 2^31
			spans = append(spans, span{int32(end - len(raw)), int32(end)})
			size += len(raw)
		}
		s.ws()
		if !s.eat(':') {
			return false
		}
		s.ws()
		raw, esc, ok = s.rawStr()
		if !ok {
			return false
		}
		id, known := set.ids[string(raw)]
		if !known || esc {
			shard, ok := s.decode(raw, esc)
			if !ok || CheckShardName(shard) != nil {
				return false
			}
			id = set.id(shard)
		}
		ix.shardOf = append(ix.shardOf, id)
	}
	if len(spans) == 0 {
		return false
	}
	var b strings.Builder
	b.Grow(size)
	for _, sp := range spans {
		if sp.start >= 0 {
			b.Write(s.b[sp.start:sp.end])
		}
	}
	all := b.String()
	ix.order = make([]string, len(spans))
	ix.WeightMap = make(map[string]string, len(spans))
	off := 0
	for i, sp := range spans {
		var name string
		if sp.start < 0 {
			name = escaped[-sp.start-1]
		} else {
			n := int(sp.end - sp.start)
			name, off = all[off:off+n], off+n
		}
		ix.order[i] = name
		ix.WeightMap[name] = set.names[ix.shardOf[i]]
		if len(ix.WeightMap) != i+1 { // listed twice
			return false
		}
	}
	set.finish(ix)
	return true
}

// shardSet numbers the distinct shard names of a weight map in the order
// they come.
type shardSet struct {
	ids   map[string]int32
	names []string
}

func (s *shardSet) id(name string) int32 {
	if id, ok := s.ids[name]; ok {
		return id
	}
	if s.ids == nil {
		s.ids = make(map[string]int32)
	}
	id := int32(len(s.names))
	s.ids[name] = id
	s.names = append(s.names, name)
	return id
}

// finish records the shard names in ix sorted, and renumbers ix.shardOf
// to match.
func (s *shardSet) finish(ix *Index) {
	sorted := slices.Clone(s.names)
	slices.Sort(sorted)
	to := make([]int32, len(s.names)) // first-seen number -> sorted one
	for i, n := range s.names {
		j, _ := slices.BinarySearch(sorted, n)
		to[i] = int32(j)
	}
	for i, id := range ix.shardOf {
		ix.shardOf[i] = to[id]
	}
	ix.shards = sorted
}

// parseIndexSlow decodes token by token, so that it can report exactly what
// is wrong and where.
func parseIndexSlow(data []byte) (*Index, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	ix := &Index{}
	syntax := func(err error) error {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return &Error{Kind: ErrInvalidIndex, Msg: fmt.Sprintf("invalid JSON: at byte %d", se.Offset), Err: err}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return &Error{Kind: ErrInvalidIndex, Msg: "invalid JSON: unexpected end of input"}
		}
		return &Error{Kind: ErrInvalidIndex, Msg: "invalid JSON", Err: err}
	}
	tok, err := d.Token()
	if err != nil {
		return nil, syntax(err)
	}
	if tok != json.Delim('{') {
		return nil, &Error{Kind: ErrInvalidIndex, Msg: "invalid JSON: top level is " + describe(tok) + ", not an object"}
	}
	seen := make(map[string]bool)
	for d.More() {
		tok, err := d.Token()
		if err != nil {
			return nil, syntax(err)
		}
		key, _ := tok.(string) // object keys are always strings
		if seen[key] {
			return nil, &Error{Kind: ErrInvalidIndex, Msg: fmt.Sprintf("invalid JSON: key %q appears twice", key)}
		}
		seen[key] = true
		switch key {
		case "weight_map":
			if err := ix.parseWeightMap(d, syntax); err != nil {
				return nil, err
			}
		case "metadata":
			var v any
			if err := d.Decode(&v); err != nil {
				return nil, syntax(err)
			}
			if err := ix.setMetadata(v); err != nil {
				return nil, err
			}
		default:
			var skip json.RawMessage
			if err := d.Decode(&skip); err != nil {
				return nil, syntax(err)
			}
			ix.Warnings = append(ix.Warnings, fmt.Sprintf("unknown top-level key %q ignored", key))
		}
	}
	if _, err := d.Token(); err != nil { // the closing brace
		return nil, syntax(err)
	}
	if _, err := d.Token(); err != io.EOF {
		if err == nil {
			return nil, &Error{Kind: ErrInvalidIndex, Msg: fmt.Sprintf("invalid JSON: data after the top-level object at byte %d", d.InputOffset())}
		}
		return nil, syntax(err)
	}
	if !seen["weight_map"] {
		return nil, &Error{Kind: ErrInvalidIndex, Msg: `missing weight_map: no "weight_map" object`}
	}
	return ix, nil
}

func (ix *Index) parseWeightMap(d *json.Decoder, syntax func(error) error) error {
	tok, err := d.Token()
	if err != nil {
		return syntax(err)
	}
	if tok != json.Delim('{') {
		if delim, ok := tok.(json.Delim); ok && delim == '[' {
			return &Error{Kind: ErrInvalidIndex, Msg: `invalid weight_map: "weight_map" is an array, not an object`}
		}
		return &Error{Kind: ErrInvalidIndex, Msg: `invalid weight_map: "weight_map" is ` + describe(tok) + ", not an object"}
	}
	ix.WeightMap = make(map[string]string)
	var set shardSet
	for d.More() {
		tok, err := d.Token()
		if err != nil {
			return syntax(err)
		}
		name, _ := tok.(string)
		tok, err = d.Token()
		if err != nil {
			return syntax(err)
		}
		shard, ok := tok.(string)
		if !ok {
			return &Error{Kind: ErrInvalidIndex, Tensor: name, Msg: "invalid weight_map: shard is " + describe(tok) + ", not a string"}
		}
		if name == "" {
			return &Error{Kind: ErrInvalidIndex, Shard: shard, Msg: "invalid weight_map: empty tensor name"}
		}
		if prev, dup := ix.WeightMap[name]; dup {
			return &Error{Kind: ErrInvalidIndex, Tensor: name,
				Msg: fmt.Sprintf("duplicate tensor: listed twice (shards %q and %q)", prev, shard)}
		}
		if err := CheckShardName(shard); err != nil {
			e := err.(*Error)
			e.Tensor = name
			return e
		}
		ix.WeightMap[name] = shard
		ix.order = append(ix.order, name)
		ix.shardOf = append(ix.shardOf, set.id(shard))
	}
	set.finish(ix)
	if _, err := d.Token(); err != nil {
		return syntax(err)
	}
	if len(ix.WeightMap) == 0 {
		return &Error{Kind: ErrInvalidIndex, Msg: `invalid weight_map: "weight_map" is empty`}
	}
	return nil
}

// setMetadata records the decoded "metadata" value: an object, or null
// (with a warning); anything else is an ErrInvalidIndex error.
func (ix *Index) setMetadata(v any) error {
	switch m := v.(type) {
	case nil:
		ix.Warnings = append(ix.Warnings, `"metadata" is null`)
	case map[string]any:
		ix.Metadata = m
		ix.TotalSize = ix.totalSize(m)
	default:
		return &Error{Kind: ErrInvalidIndex, Msg: fmt.Sprintf(`invalid metadata: "metadata" is %s, not an object`, describeValue(v))}
	}
	return nil
}

// totalSize reads metadata.total_size, adding a warning when it is present
// but not a non-negative whole number.
func (ix *Index) totalSize(m map[string]any) int64 {
	v, ok := m["total_size"]
	if !ok {
		return 0
	}
	if n, ok := v.(json.Number); ok {
		if i, err := n.Int64(); err == nil && i >= 0 {
			return i
		}
		if f, err := n.Float64(); err == nil && f >= 0 && f == math.Trunc(f) && f < math.MaxInt64 {
			return int64(f)
		}
	}
	ix.Warnings = append(ix.Warnings, fmt.Sprintf("metadata.total_size %s is not a byte count; ignored", describeValue(v)))
	return 0
}

// CheckShardName reports whether name is acceptable as a shard file name in
// an index: a bare file name ending in ".safetensors". Paths are refused with
// ErrInsecurePath (separators "/" or "\", "..", absolute paths, drive letters
// and any ":"), other bad names with ErrInvalidIndex (empty, control
// characters, another extension). The returned error is an *Error with Shard
// set.
func CheckShardName(name string) error {
	bad := func(k ErrorKind, msg string) error { return &Error{Kind: k, Shard: name, Msg: msg} }
	if name == "" {
		return bad(ErrInvalidIndex, "invalid shard name: empty shard name")
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return bad(ErrInvalidIndex, "invalid shard name: control character in shard name")
		}
	}
	switch {
	case strings.ContainsAny(name, `/\`):
		return bad(ErrInsecurePath, "shard name is a path, not a bare file name")
	case strings.Contains(name, ".."):
		return bad(ErrInsecurePath, `shard name contains ".."`)
	case strings.Contains(name, ":"):
		return bad(ErrInsecurePath, "shard name contains a drive letter or stream separator")
	case !strings.HasSuffix(name, ".safetensors") || name == ".safetensors":
		return bad(ErrInvalidIndex, `invalid shard name: shard name does not end in ".safetensors"`)
	}
	return nil
}

func describe(tok json.Token) string {
	switch v := tok.(type) {
	case json.Delim:
		switch v {
		case '[':
			return "an array"
		case '{':
			return "an object"
		}
		return "a " + v.String()
	case nil:
		return "null"
	}
	return describeValue(tok)
}

func describeValue(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case string:
		return fmt.Sprintf("the string %q", v)
	case json.Number:
		return "the number " + v.String()
	case bool:
		return fmt.Sprintf("%v", v)
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}
