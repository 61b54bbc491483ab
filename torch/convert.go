package torch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/ckpt-go/ckpt/safetensors"
)

// AliasesKey is the safetensors metadata key under which WriteSafetensors
// (and package convert) records the tied names that it writes once: a
// JSON object mapping each dropped name to the name kept in the file, e.g.
// {"lm_head.weight":"embed.weight"}. ckpt.Open restores a tie by loading
// the tied name as a tensor of its own that reads the kept tensor's
// bytes (its dtype, shape and checksum are the kept tensor's: a tie
// records no shape). ParseAliases reads the value and says what it must
// be; in a shard set each shard may record ties, naming tensors of any
// shard, and the set's ties are the union of them.
const AliasesKey = "ckpt.aliases"

// ParseAliases reads a value recorded under AliasesKey: a JSON object of
// strings, each member a tied name and the name of the tensor it ties
// to. A tied name may appear only once, and a tie names a stored tensor
// directly: no name ties to itself or to another tied name (no chains,
// no cycles). Nothing may follow the object. Whether the names are
// tensors is the reader's to check against its files (ckpt.Open: the
// kept name must be one, the tied name must not). The value is bounded
// by the header that holds it (safetensors.MaxHeaderSize), and the map
// holds no more than its strings. A malformed value is an *Error of kind
// ErrInvalidFormat ("invalid aliases") naming the tensor concerned.
func ParseAliases(s string) (map[string]string, error) {
	fail := func(name, msg string, err error) error {
		return &Error{Kind: ErrInvalidFormat, Tensor: name, Msg: "invalid aliases (" + AliasesKey + "): " + msg, Err: err}
	}
	dec := json.NewDecoder(strings.NewReader(s))
	tok, err := dec.Token()
	if err != nil {
		return nil, fail("", "not JSON", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fail("", "not a JSON object", nil)
	}
	out := map[string]string{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fail("", "not JSON", err)
		}
		tied, _ := tok.(string) // a key is always a string
		tok, err = dec.Token()
		if err != nil {
			return nil, fail(tied, "not JSON", err)
		}
		kept, ok := tok.(string)
		if !ok {
			return nil, fail(tied, "the value is not a string", nil)
		}
		if _, dup := out[tied]; dup {
			return nil, fail(tied, "the tied name appears twice", nil)
		}
		out[tied] = kept
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, fail("", "not JSON", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fail("", "data after the object", err)
	}
	for _, tied := range slices.Sorted(maps.Keys(out)) {
		kept := out[tied]
		if kept == tied {
			return nil, fail(tied, "the name ties to itself", nil)
		}
		if _, ok := out[kept]; ok {
			return nil, fail(tied, fmt.Sprintf("it ties to %q, itself a tied name (a tie names a stored tensor directly)", kept), nil)
		}
	}
	return out, nil
}

// FormatAliases returns the ties (tied name → kept name) as AliasesKey
// records them: a JSON object, keys sorted, without HTML escapes.
func FormatAliases(ties map[string]string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(ties) // a map of strings: cannot fail
	return strings.TrimSuffix(b.String(), "\n")
}

// FormatKey is the metadata key that Hugging Face transformers requires of
// a safetensors file; WriteSafetensors sets it to "pt".
const FormatKey = "format"

// WriteSafetensors converts c into a safetensors file at path, atomically:
// the bytes go to a temporary file that is renamed over path only when
// every tensor is written, so on any error, or when ctx is canceled, the
// previous file at path is untouched and nothing is left behind.
//
// The tensors are streamed one by one in the layout of safetensors.NewWriter
// (opts are its options), each as contiguous little-endian bytes: a
// non-contiguous view is gathered, a big-endian archive byte-swapped. Tied
// names (Aliases) are written once and recorded under AliasesKey. The
// metadata holds c.Metadata() (the non-tensor values under their dotted
// names), AliasesKey and "format": "pt"; a non-tensor value named like one
// of these two keys fails with ErrUnsupported ("duplicate name") before
// anything is written.
func WriteSafetensors(ctx context.Context, c *Checkpoint, path string, opts ...safetensors.WriteOption) error {
	if c == nil {
		return &Error{Kind: ErrInvalidArgument, File: path, Msg: "nil checkpoint"}
	}
	if c.closed.Load() {
		return &Error{Kind: ErrClosed, File: c.path, Msg: "the checkpoint is closed"}
	}
	meta := c.Metadata()
	if meta == nil {
		meta = make(map[string]string)
	}
	for _, k := range []string{FormatKey, AliasesKey} {
		if _, dup := meta[k]; dup {
			return &Error{Kind: ErrUnsupported, File: c.path, Msg: "duplicate name: a non-tensor value is named " + k + ", a metadata key the conversion writes"}
		}
	}
	meta[FormatKey] = "pt"
	if len(c.aliases) > 0 {
		meta[AliasesKey] = FormatAliases(c.aliases)
	}
	specs := make([]safetensors.TensorSpec, len(c.tensors))
	for i, t := range c.tensors {
		specs[i] = safetensors.TensorSpec{Name: t.name, DType: t.dt, Shape: t.shape}
	}
	fw, err := safetensors.Create(ctx, path, specs, meta, opts...)
	if err != nil {
		return &Error{Kind: ErrWrite, File: path, Err: err}
	}
	defer fw.Close()
	for {
		spec, w, err := fw.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return &Error{Kind: ErrWrite, File: path, Tensor: spec.Name, Err: err}
		}
		t := c.byName[spec.Name]
		if _, err := t.WriteTo(w); err != nil {
			var e *Error
			if errors.As(err, &e) { // reading the checkpoint failed
				return err
			}
			return &Error{Kind: ErrWrite, File: path, Tensor: spec.Name, Err: err}
		}
	}
	if err := fw.Commit(); err != nil {
		return &Error{Kind: ErrWrite, File: path, Err: err}
	}
	return nil
}
