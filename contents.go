package ckpt

import (
	"cmp"
	"slices"
	"strings"

	"github.com/ckpt-go/ckpt/quant"
	"github.com/ckpt-go/ckpt/safetensors"
)

// Contents is what one component's files hold, as the model opened them,
// for tools that re-encode a checkpoint tensor by tensor instead of
// loading it (package convert): every stored tensor under its stored
// name — the weights' scales and the layout's markers included — as the
// Part of its whole stored bytes. The Parts read through the model's own
// file system and are verified as they are read exactly as Items' Parts
// are (the policy's Verify decides); nothing reaches the files otherwise.
// Contents belong to the Model and are valid until it is closed.
type Contents struct {
	// Component is the component's name, as Components lists it.
	Component string
	// Files are the weights files, in order, and Index the index file
	// that lists them ("" for a single file): paths of the model's file
	// system.
	Files []string
	Index string
	// Metadata is the files' __metadata__, merged.
	Metadata map[string]string
	// Scheme is what package quant detected in the tensors and configs:
	// the scaled low-precision weights, the scales and markers they
	// consume, what was left unexplained. It is shared: do not modify it.
	Scheme *quant.Scheme
	// Tensors are the stored tensors, by file (Files' order) and offset.
	Tensors []Part
	// Digests holds, for each weights file whose header names valid
	// checksums, the CRC-32C of the whole file, from its header's bytes
	// and the checksums it names (none is read for it): the file's
	// identity, for provenance.
	Digests map[string]uint32
}

// Contents returns what one component's files hold (see Contents). An
// unknown component is ErrNotFound.
func (m *Model) Contents(component string) (*Contents, error) {
	if err := m.checkOpen(); err != nil {
		return nil, err
	}
	c := m.component(component)
	if c == nil {
		return nil, &Error{Kind: ErrNotFound, Path: m.path, Component: component, Msg: "no such component"}
	}
	out := &Contents{Component: c.name, Files: c.ck.files(), Metadata: c.ck.metadata(), Scheme: c.scheme}
	out.Index = c.ck.index()
	fileIdx := make(map[string]int, len(out.Files))
	for i, f := range out.Files {
		fileIdx[f] = i
	}
	type placed struct {
		p     Part
		file  int
		begin int64
	}
	ps := make([]placed, 0, c.ck.count())
	files := map[*safetensors.File]bool{}
	for i := range c.ck.count() {
		info, _ := c.ck.at(i)
		st, err := c.ck.tensorAt(i)
		if err != nil {
			return nil, inComponent(&Error{Kind: ErrRead, Tensor: info.Name, Err: err}, c.name)
		}
		if st.Name() != info.Name {
			continue // a tied name of a PyTorch checkpoint: its tensor is listed, the tie is in Metadata
		}
		p := m.newPart(st, st.Shape(), strided{n: st.ByteLen(), count: 1}.norm())
		fi, ok := fileIdx[p.File]
		if !ok {
			fi = len(out.Files)
		}
		ps = append(ps, placed{p, fi, st.Offset()})
		if _, f := fileOf(st); f != nil {
			files[f] = true
		}
	}
	slices.SortFunc(ps, func(a, b placed) int {
		return cmp.Or(cmp.Compare(a.file, b.file), cmp.Compare(a.begin, b.begin), strings.Compare(a.p.Tensor, b.p.Tensor))
	})
	out.Tensors = make([]Part, len(ps))
	for i := range ps {
		out.Tensors[i] = ps[i].p
	}
	for f := range files {
		if d, ok := fileDigest(f); ok {
			if out.Digests == nil {
				out.Digests = map[string]uint32{}
			}
			out.Digests[f.Path()] = d
		}
	}
	return out, nil
}

// fileDigest is the CRC-32C of the whole file f, from its header's bytes
// and the checksums it names; false when it names none or they are
// damaged.
func fileDigest(f *safetensors.File) (uint32, bool) {
	h := f.Header()
	sums, err := h.Checksums()
	if err != nil || sums == nil {
		return 0, false
	}
	crc, err := f.HeaderBytesChecksum()
	if err != nil {
		return 0, false
	}
	for _, ti := range h.Tensors {
		crc = safetensors.CombineChecksums(crc, sums[ti.Name], ti.ByteLen())
	}
	return crc, true
}

// Checksum returns the CRC-32C that the part's file names for its bytes:
// ok is false when the part is not a whole stored tensor or its file
// names no valid checksum for it.
func (p *Part) Checksum() (crc uint32, ok bool) {
	if p.st == nil || !p.sel.covers(p.st.ByteLen()) {
		return 0, false
	}
	crc, ok, err := p.st.Checksum()
	return crc, ok && err == nil
}
