// Package setwrite is the one writer of ckpt's shard sets: packing
// tensors into shards, the order their data is written in, streaming one
// shard, the index document, and the commit protocol that replaces a set
// so that no reader ever sees part of one (Commit), through a sink.Sink:
// package shard writes a local folder through sink.Dir (whose files are
// renamed into place, under the set's lock), package convert an object
// store through its sink (whole-object uploads, conditional on the
// versions seen). Each wraps the errors in its own error type.
package setwrite

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/ckpt-go/ckpt/safetensors"
)

// Pack packs tensor sizes greedily, in order, into groups of at most max
// bytes of data (headers are not counted, as in huggingface_hub); a
// tensor larger than max gets a group of its own. It returns the indexes
// of each group's tensors, at least one group.
func Pack(sizes []int64, max int64) [][]int {
	var groups [][]int
	var cur []int
	var curSize int64
	for i, n := range sizes {
		if len(cur) > 0 && curSize+n > max {
			groups = append(groups, cur)
			cur, curSize = nil, 0
		}
		cur = append(cur, i)
		curSize += n
	}
	return append(groups, cur)
}

// Assign groups tensors by the shard each is placed in: shardOf[i] is
// tensor i's shard number. The groups come in increasing order of number,
// each with its tensors in order; a number no tensor has makes no group,
// so the set has as many shards as distinct numbers. It returns at least
// one group.
func Assign(shardOf []int) [][]int {
	byShard := map[int][]int{}
	var nums []int
	for i, s := range shardOf {
		if _, ok := byShard[s]; !ok {
			nums = append(nums, s)
		}
		byShard[s] = append(byShard[s], i)
	}
	slices.Sort(nums)
	groups := make([][]int, 0, max(len(nums), 1))
	for _, s := range nums {
		groups = append(groups, byShard[s])
	}
	if len(groups) == 0 {
		groups = append(groups, nil)
	}
	return groups
}

// Split returns the specs of each group of Pack or Assign.
func Split(specs []safetensors.TensorSpec, groups [][]int) [][]safetensors.TensorSpec {
	out := make([][]safetensors.TensorSpec, len(groups))
	for gi, g := range groups {
		out[gi] = make([]safetensors.TensorSpec, len(g))
		for j, i := range g {
			out[gi][j] = specs[i]
		}
	}
	return out
}

// Order returns the order in which the files of groups, written in turn,
// ask for their tensors' data (safetensors.Writer.Order of each file's
// header, computed and discarded).
func Order(groups [][]safetensors.TensorSpec, metadata map[string]string, opts ...safetensors.WriteOption) ([]safetensors.TensorSpec, error) {
	var order []safetensors.TensorSpec
	for _, g := range groups {
		w, err := safetensors.NewWriter(Discard, g, FileMetadata(metadata, g), opts...)
		if err != nil {
			return nil, err
		}
		order = append(order, w.Order()...)
	}
	return order, nil
}

// HeaderLen returns the size of the header (length field included) of
// the file of specs and metadata as Stream and NewWriter write it to a
// file they can patch: with the checksums of its tensors.
func HeaderLen(specs []safetensors.TensorSpec, metadata map[string]string, opts ...safetensors.WriteOption) (int64, error) {
	w, err := safetensors.NewWriter(Discard, specs, FileMetadata(metadata, specs), opts...)
	if err != nil {
		return 0, err
	}
	return w.HeaderLen(), nil
}

// FileMetadata returns the metadata of one file of a set: the set's
// metadata, whose checksum keys (safetensors.ChecksumPrefix), claims about
// the data of tensors, go only into the file that holds their tensor.
// metadata itself is returned when it has none to drop.
func FileMetadata(metadata map[string]string, specs []safetensors.TensorSpec) map[string]string {
	var drop []string
	var names map[string]bool
	for k := range metadata {
		name, ok := strings.CutPrefix(k, safetensors.ChecksumPrefix)
		if !ok {
			continue
		}
		if names == nil {
			names = make(map[string]bool, len(specs))
			for _, s := range specs {
				names[s.Name] = true
			}
		}
		if !names[name] {
			drop = append(drop, k)
		}
	}
	if len(drop) == 0 {
		return metadata
	}
	md := maps.Clone(metadata)
	for _, k := range drop {
		delete(md, k)
	}
	return md
}

// CheckClaims returns the first checksum key of metadata that names no
// tensor of specs ("" when every one does): a claim no file of the set
// would check.
func CheckClaims(metadata map[string]string, specs []safetensors.TensorSpec) string {
	md := FileMetadata(metadata, specs)
	for _, k := range slices.Sorted(maps.Keys(metadata)) {
		if _, ok := md[k]; !ok {
			return k
		}
	}
	return ""
}

// Discard is an io.Writer and io.WriterAt that discards everything: a
// safetensors.Writer to it lays a file out as it does a file it can patch
// (with checksums).
var Discard discard

type discard struct{}

func (discard) Write(b []byte) (int, error)            { return len(b), nil }
func (discard) WriteAt(b []byte, _ int64) (int, error) { return len(b), nil }

// IndexJSON renders an index document: {"metadata": {"total_size":
// total}, "weight_map": {tensor: file}}, indented, with a final newline.
func IndexJSON(total int64, weightMap map[string]string) ([]byte, error) {
	doc := struct {
		Metadata  map[string]int64  `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}{map[string]int64{"total_size": total}, weightMap}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// TensorError is the failure of the function that writes a tensor's data.
type TensorError struct {
	Tensor string
	Err    error
}

func (e *TensorError) Error() string { return fmt.Sprintf("tensor %q: %v", e.Tensor, e.Err) }
func (e *TensorError) Unwrap() error { return e.Err }

// LengthError is a tensor whose data function wrote N bytes where its
// dtype and shape need another count.
type LengthError struct {
	Spec safetensors.TensorSpec
	N    int64
}

// Want returns the bytes the tensor needs.
func (e *LengthError) Want() int64 { n, _ := e.Spec.ByteLen(); return n }

func (e *LengthError) Error() string {
	return fmt.Sprintf("%d bytes written, %s%v needs %d", e.N, e.Spec.DType, e.Spec.Shape, e.Want())
}

// Stream writes one safetensors file of specs into w (see NewWriter),
// calling write for each tensor's data in the file's order, and flushes
// it. It returns ctx.Err() itself when ctx is done before a tensor, a
// *TensorError for a failure of write, a *LengthError for a tensor write
// gave too few or too many bytes, and otherwise the error of the
// safetensors writer or of w.
func Stream(ctx context.Context, w io.Writer, specs []safetensors.TensorSpec, write func(safetensors.TensorSpec, io.Writer) error, metadata map[string]string, opts ...safetensors.WriteOption) error {
	sw, flush, err := NewWriter(w, specs, metadata, opts...)
	if err != nil {
		return err
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		sp, tw, err := sw.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		cw := &countWriter{w: tw}
		if err := write(sp, cw); err != nil {
			return &TensorError{Tensor: sp.Name, Err: err}
		}
		if want, _ := sp.ByteLen(); cw.n != want {
			return &LengthError{Spec: sp, N: cw.n}
		}
	}
	if err := sw.Close(); err != nil {
		return err
	}
	return flush()
}

// NewWriter starts a safetensors file of specs in w, through a 1 MiB
// buffer; flush empties the buffer into w once the Writer is closed.
// metadata is the set's (FileMetadata keeps the checksum claims of this
// file's tensors). When w is also an io.WriterAt (a file, a sink.File),
// the file carries the checksum of every tensor: the Writer rewrites the
// header with them at Close (see safetensors.NewWriter); a w with a
// Reserve(n int64) error method (sink.Patchable) is first told to keep
// the header's bytes rewritable.
func NewWriter(w io.Writer, specs []safetensors.TensorSpec, metadata map[string]string, opts ...safetensors.WriteOption) (sw *safetensors.Writer, flush func() error, err error) {
	md := FileMetadata(metadata, specs)
	bw := bufio.NewWriterSize(w, 1<<20)
	var out io.Writer = bw
	if wa, ok := w.(io.WriterAt); ok {
		if r, ok := w.(interface{ Reserve(n int64) error }); ok {
			n, err := HeaderLen(specs, md, opts...)
			if err != nil {
				return nil, nil, err
			}
			if err := r.Reserve(n); err != nil {
				return nil, nil, err
			}
		}
		out = patcher{bw, wa}
	}
	sw, err = safetensors.NewWriter(out, specs, md, opts...)
	if err != nil {
		return nil, nil, err
	}
	return sw, bw.Flush, nil
}

// FileChecksum returns the CRC-32C of the whole file that w, closed,
// wrote: its header (as written, checksums included) followed by its
// tensors, combined from their checksums (safetensors.CombineChecksums)
// without reading the bytes again. ok is false when w computed none (not
// closed, or safetensors.WithoutChecksums).
func FileChecksum(w *safetensors.Writer) (crc uint32, ok bool) {
	sums := w.Checksums()
	order := w.Order()
	if sums == nil && len(order) > 0 {
		return 0, false
	}
	crc = safetensors.Checksum(w.Header())
	for _, s := range order {
		n, _ := s.ByteLen()
		crc = safetensors.CombineChecksums(crc, sums[s.Name], n)
	}
	return crc, true
}

// patcher is a buffered writer whose WriteAt flushes the buffer, then
// rewrites bytes of the destination.
type patcher struct {
	*bufio.Writer
	at io.WriterAt
}

func (p patcher) WriteAt(b []byte, off int64) (int, error) {
	if err := p.Flush(); err != nil {
		return 0, err
	}
	return p.at.WriteAt(b, off)
}

// countWriter counts the bytes a tensor's writer accepted.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}
