package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/shard"
)

// The per-tensor API a Go user writes first, and the steady-state loops of
// the Go implementations (`peers run IMPL steady PATH ITERS`): each loads
// the same checkpoint ITERS times in one process and reports the median of
// the iterations after the first.

// timed is what one Go implementation reports: the time of each iteration
// and, from the last one, the tensors and the sampled checksum.
type timed struct {
	secs    []float64
	tensors int
	check   uint64
}

// steadySeconds is the time a run reports: the one iteration of a fresh
// run, or the median of the iterations after the first.
func steadySeconds(secs []float64) float64 {
	if len(secs) == 1 {
		return secs[0]
	}
	return median(secs[1:])
}

// eachTensor opens the checkpoint at path the way a user of the per-tensor
// API does (safetensors.Open for a file, shard.Open for an index) and calls
// fn for every tensor in name order, then closes it.
func eachTensor(path string, fn func(t *safetensors.Tensor) error) error {
	if !strings.HasSuffix(path, ".json") {
		f, err := safetensors.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		for _, t := range f.Tensors() {
			if err := fn(t); err != nil {
				return err
			}
		}
		return nil
	}
	c, err := shard.Open(path)
	if err != nil {
		return err
	}
	defer c.Close()
	for t, err := range c.All() {
		if err != nil {
			return err
		}
		if err := fn(t); err != nil {
			return err
		}
	}
	return nil
}

// perTensorFloat32s is the per-tensor API: open, then Tensor.Float32s for
// every tensor, in a plain loop (one tensor at a time; Float32s splits a
// tensor of more than one 4 MiB chunk across cores). The outputs of an
// iteration are kept until the next one starts, as a load's are.
func perTensorFloat32s(path string, iters int) (timed, error) {
	var r timed
	var outs [][]float32
	for range iters {
		outs = nil
		start := time.Now()
		err := eachTensor(path, func(t *safetensors.Tensor) error {
			v, err := t.Float32s()
			outs = append(outs, v)
			return err
		})
		r.secs = append(r.secs, time.Since(start).Seconds())
		if err != nil {
			return r, err
		}
	}
	r.tensors = len(outs)
	for _, v := range outs {
		r.check += checksum(v)
	}
	return r, nil
}

// perTensorInto is the per-tensor API with one destination buffer for all
// tensors and all iterations (grown to the largest tensor): open, then
// Tensor.ConvertTo into it for every tensor, as a program that uses each
// tensor before reading the next (an upload, a quantizer) writes it. The
// checksum comes from one more, untimed pass.
func perTensorInto(path string, iters int) (timed, error) {
	var r timed
	var buf []float32
	into := func(t *safetensors.Tensor) ([]float32, error) {
		n := int(t.NumElements())
		if cap(buf) < n {
			buf = make([]float32, n)
		}
		v := buf[:n]
		_, err := t.ConvertTo(dtype.F32, f32Bytes(v), dtype.Options{})
		return v, err
	}
	for range iters {
		start := time.Now()
		err := eachTensor(path, func(t *safetensors.Tensor) error {
			_, err := into(t)
			return err
		})
		r.secs = append(r.secs, time.Since(start).Seconds())
		if err != nil {
			return r, err
		}
	}
	err := eachTensor(path, func(t *safetensors.Tensor) error {
		v, err := into(t)
		r.check += checksum(v)
		r.tensors++
		return err
	})
	return r, err
}

// ckptSteady is the loader in steady state: one Model (opened before the
// timer), loaded iters times with IntoArena into one reused Arena.
func ckptSteady(path string, iters int) (timed, error) {
	var r timed
	m, err := ckpt.Open(path, ckpt.WithDType(ckpt.To(dtype.F32)), ckpt.WithBudget(-1))
	if err != nil {
		return r, err
	}
	defer m.Close()
	a := ckpt.NewArena()
	defer a.Free()
	for i := range iters {
		start := time.Now()
		w, err := m.Load(context.Background(), ckpt.IntoArena(a))
		r.secs = append(r.secs, time.Since(start).Seconds())
		if err != nil {
			return r, err
		}
		if i == iters-1 {
			r.tensors = w.Len()
			for _, t := range w.All() {
				b := t.Bytes()
				r.check += checksum(f32s(b))
			}
		}
		w.Close()
	}
	return r, nil
}

// copySteady is the baseline in steady state: the parallel copy of
// copyAll into the same buffers every iteration (opened and allocated
// before the timer).
func copySteady(path string, iters int) (timed, error) {
	var r timed
	c, err := shard.Open(path)
	if err != nil {
		return r, err
	}
	defer c.Close()
	items, outs, err := copyItems(c)
	if err != nil {
		return r, err
	}
	for range iters {
		start := time.Now()
		runCopy(items)
		r.secs = append(r.secs, time.Since(start).Seconds())
	}
	r.tensors = len(outs)
	for _, b := range outs {
		r.check += bytesChecksum(b)
	}
	return r, nil
}

// runGo runs the Go implementation im (copy, ckpt, pertensor,
// pertensor-into) iters times (1: a fresh run of the convert op).
func runGo(im, path string, iters int) (timed, error) {
	switch im {
	case "copy":
		if iters == 1 {
			start := time.Now()
			outs, err := copyAll(path)
			r := timed{secs: []float64{time.Since(start).Seconds()}, tensors: len(outs)}
			for _, b := range outs {
				r.check += bytesChecksum(b)
			}
			return r, err
		}
		return copySteady(path, iters)
	case "ckpt":
		if iters == 1 {
			start := time.Now()
			out, err := loadAllAsF32(path)
			r := timed{secs: []float64{time.Since(start).Seconds()}, tensors: len(out)}
			for _, v := range out {
				r.check += checksum(v)
			}
			return r, err
		}
		return ckptSteady(path, iters)
	case "pertensor":
		return perTensorFloat32s(path, iters)
	case "pertensor-into":
		return perTensorInto(path, iters)
	}
	return timed{}, fmt.Errorf("unknown implementation %q", im)
}

// goImpls are the Go implementations of the conversion cases, in table
// order.
var goImpls = []string{"copy", "ckpt", "pertensor", "pertensor-into"}

func isGoImpl(name string) bool { return slices.Contains(goImpls, name) }
