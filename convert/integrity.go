package convert

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/safetensors"
)

// The checksums of what Run reads and writes: see Run and
// MetaSourceCRC32C. Tensors copied as stored carry their source's
// checksums as claims (the writer checks the bytes written against them);
// the others get fresh ones.

// checkSources applies Options.Policy.Verify to c's source before
// anything is written: the loader's Parts of its tensors refuse damaged
// checksums, and with VerifyAlways files without any (an empty read of
// a Part returns that refusal, and checks an empty tensor), and the
// files whose header names checksums get a digest (c.digests). The
// tensors are verified as they are read, by the Parts.
func (r *runner) checkSources(c *component) error {
	mode := r.opts.Policy.Verify
	if mode == ckpt.VerifyNever {
		return nil
	}
	if mode != ckpt.VerifyPresent && mode != ckpt.VerifyAlways {
		return &Error{Kind: ErrOption, Field: "Policy.Verify", Msg: fmt.Sprintf("unknown value %d", mode)}
	}
	ls := c.store
	for i := range ls.c.Tensors {
		p := &ls.c.Tensors[i]
		if _, err := p.ReadAt(nil, 0); err != nil {
			return &Error{Kind: ErrSource, Path: p.File, Component: c.name, Tensor: p.Tensor, Err: err}
		}
	}
	c.digests = ls.c.Digests
	return nil
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
		if t.src != nil && t.kind == kCopy && c.digests != nil {
			if want, ok := t.src.p.Checksum(); ok {
				meta[safetensors.ChecksumPrefix+t.spec.Name] = safetensors.FormatChecksum(want)
			}
		}
	}
	for name, d := range c.digests {
		meta[MetaSourceCRC32C+filepath.Base(filepath.FromSlash(name))] = safetensors.FormatChecksum(d)
	}
	return meta
}

// sourceDigests returns the digests of c's source files, for the report.
func sourceDigests(c *component) map[string]string {
	if len(c.digests) == 0 {
		return nil
	}
	out := map[string]string{}
	for name, d := range c.digests {
		out[filepath.Base(filepath.FromSlash(name))] = safetensors.FormatChecksum(d)
	}
	return out
}
