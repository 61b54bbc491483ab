package torch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"

	"github.com/ckpt-go/ckpt/safetensors"
)

// AliasesKey is the safetensors metadata key under which WriteSafetensors
// records the tied names that it writes once: a JSON object mapping each
// dropped name to the name kept in the file, e.g.
// {"lm_head.weight":"embed.weight"}. Loading a model restores a tie by
// pointing the alias at the kept tensor.
const AliasesKey = "ckpt.aliases"

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
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(c.aliases); err != nil { // a map of strings: cannot fail
			return &Error{Kind: ErrWrite, File: path, Msg: "encode the aliases", Err: err}
		}
		meta[AliasesKey] = string(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
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
