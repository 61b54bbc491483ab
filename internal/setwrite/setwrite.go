// Package setwrite is what ckpt's writers of shard sets share, whatever
// they commit to: packing tensors into shards, the order their data is
// written in, streaming one shard, and the index document. Package shard
// commits a set to a local folder with renames (shard.WriteFrom); package
// convert commits one through a sink.Sink with whole-file creates (an
// object store's uploads). Both plan and stream their files here, so that
// the same tensors make the same files either way; each wraps the errors
// in its own error type.
package setwrite

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"

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
		w, err := safetensors.NewWriter(io.Discard, g, metadata, opts...)
		if err != nil {
			return nil, err
		}
		order = append(order, w.Order()...)
	}
	return order, nil
}

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

// Stream writes one safetensors file of specs into w, through a 1 MiB
// buffer, calling write for each tensor's data in the file's order, and
// flushes it. It returns ctx.Err() itself when ctx is done before a
// tensor, a *TensorError for a failure of write, a *LengthError for a
// tensor write gave too few or too many bytes, and otherwise the error of
// the safetensors writer or of w.
func Stream(ctx context.Context, w io.Writer, specs []safetensors.TensorSpec, write func(safetensors.TensorSpec, io.Writer) error, metadata map[string]string, opts ...safetensors.WriteOption) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	sw, err := safetensors.NewWriter(bw, specs, metadata, opts...)
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
	return bw.Flush()
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
