package ckpt

import (
	"context"
	"fmt"
	"iter"
	"sync/atomic"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/crc32c"
)

// Verifying zero-copy views as they are read.
//
// A load does not read the bytes of the views it hands out (tensors
// loaded as stored from a mapping), so that verifying them is a read of
// their own. By default (ViewCheckPass) Load does it before it returns:
// a pass over the mapping that costs one more read of the bytes from
// memory (verify.go). A caller that reads every byte anyway — hashing,
// copying to a device, quantizing, serving them — can instead have each
// view verified by that read (ViewCheckOnRead): Load hands the views out
// unverified, Tensor.Chunks yields a view's bytes in steps of
// crc32c.Step and sums each step after the caller's loop body has used
// it, from the CPU's cache, and once the last step is summed compares the
// CRC with the file's. A mismatch is the iteration's last pair, so that
// the caller learns of the damage before its loop ends, as a gzip reader
// reports its checksum at the end of the stream. Float32s decodes a
// view with dtype.ConvertSum, which sums the bytes as it converts them. A
// view nobody read whole is verified by Tensor.Check or Weights.Check,
// which run the pass.
//
// The cost: a load that then reads every byte of 1 GiB of views through
// Chunks with all cores takes 1.06× as long as an unverified load read
// through Bytes (0.97× from the disk), against 1.2–1.3× with the pass
// (medians of BenchmarkVerifiedLoad, view-touch, "on-read/unverified").
// The price is the contract: until a Chunks loop has ended, or Check or
// Float32s has returned without an error, a view's bytes are not known to
// be the bytes that were written (Pending).

// ViewCheck says when a load verifies the zero-copy views it hands out
// (WithViewCheck): the bytes of tensors loaded as stored from a mapping,
// which the load itself does not read. It applies to views of whole
// tensors whose file names checksums, under VerifyPresent or
// VerifyAlways; a rank's part of a tensor keeps the pass (verifying it
// reads the rest of the tensor anyway).
type ViewCheck uint8

const (
	// ViewCheckPass verifies every view by a pass over the mapping before
	// Load returns it (the default): the Weights hold only verified
	// bytes, and the pass costs one read of the views' bytes.
	ViewCheckPass ViewCheck = iota
	// ViewCheckOnRead hands the views out unverified and verifies each as
	// Tensor.Chunks reads it, or when Tensor.Check or Weights.Check is
	// called. Bytes returns a view's bytes whether or not they were
	// verified yet (Pending).
	ViewCheckOnRead
)

// String returns "pass" or "on read".
func (v ViewCheck) String() string {
	switch v {
	case ViewCheckPass:
		return "pass"
	case ViewCheckOnRead:
		return "on read"
	}
	return fmt.Sprintf("ViewCheck(%d)", uint8(v))
}

// WithViewCheck chooses when a load verifies its zero-copy views
// (ViewCheckPass by default). Another value is an error of kind ErrOption
// from Open.
func WithViewCheck(v ViewCheck) Option {
	return func(c *config) error {
		if v != ViewCheckPass && v != ViewCheckOnRead {
			return &Error{Kind: ErrOption, Msg: fmt.Sprintf("view check %d is not ViewCheckPass or ViewCheckOnRead", v)}
		}
		c.viewCheck = v
		return nil
	}
}

// onRead reports whether a load hands out a view whose check is check
// unverified, for its reader to verify (ViewCheckOnRead): a view of a
// whole tensor. The plan counts such views (VerifyPlan.OnReadBytes).
func (m *Model) onRead(check checkMode) bool {
	return m.cfg.viewCheck == ViewCheckOnRead && check == checkRead
}

// onReadCheck is what verifying a view handed out unverified needs: its
// stored tensor, and whether a read or a check verified it already.
type onReadCheck struct {
	m    *Model
	c    *modelComponent
	e    *entry
	st   storedTensor
	done atomic.Bool
}

// pendingCheck returns t's check while it is pending, else nil.
func (t *Tensor) pendingCheck() *onReadCheck {
	if pc := t.pending; pc != nil && !pc.done.Load() {
		return pc
	}
	return nil
}

// Chunks iterates over the tensor's bytes in order, in slices of Bytes of
// at most 192 KiB, each with a nil error.
//
// A view that a load under ViewCheckOnRead handed out unverified is
// verified as it goes: each slice is summed after the loop's body has
// used it, from the CPU's cache, and after the last one the CRC is
// compared with the file's. A mismatch is yielded as a last pair (nil,
// err), err a *safetensors.ChecksumError (ErrChecksum) naming the file,
// the tensor and its bytes: the body has seen every byte, and must
// discard what it made of them. A loop that stops early verifies
// nothing. Once a loop has ended without an error (or Check returned
// nil), later ones only yield. After the Model is closed, a view yields
// only (nil, an ErrClosed error).
func (t *Tensor) Chunks() iter.Seq2[[]byte, error] {
	return func(yield func([]byte, error) bool) {
		var ck *tensorCheck
		pc := t.pendingCheck()
		if pc != nil {
			if err := pc.m.checkOpen(); err != nil {
				yield(nil, err)
				return
			}
			ck = newTensorCheck(pc.st, checkRead)
		}
		var crc uint32
		for b := t.data; len(b) > 0; {
			n := min(len(b), crc32c.Step)
			if !yield(b[:n:n], nil) {
				return
			}
			if ck != nil {
				crc = ck.update(crc, b[:n]) // from the cache the body read
			}
			b = b[n:]
		}
		if ck == nil {
			return
		}
		if err := ck.of.VerifyChecksum(crc); err != nil {
			yield(nil, readErr(err, t.Component, t.Name))
			return
		}
		pc.done.Store(true)
	}
}

// decodeFloat32 decodes t's bytes into out (Float32s). A pending view is
// verified by the decoding's read: dtype.ConvertSum sums the bytes it
// converts, as CRC-32C, the checksum of safetensors files (views are of
// safetensors files only: PyTorch files are never mapped).
func (t *Tensor) decodeFloat32(out []float32) error {
	pc := t.pendingCheck()
	if pc == nil {
		if _, err := dtype.DecodeFloat32(out, t.data, t.DType); err != nil {
			return &Error{Kind: ErrRead, Component: t.Component, Tensor: t.Name, Err: err}
		}
		return nil
	}
	if err := pc.m.checkOpen(); err != nil {
		return err
	}
	_, crc, err := dtype.ConvertSum(dtype.Float32Bytes(out), dtype.F32, t.data, t.DType, dtype.Options{}, 0)
	if err != nil {
		return &Error{Kind: ErrRead, Component: t.Component, Tensor: t.Name, Err: err}
	}
	if err := newTensorCheck(pc.st, checkRead).of.VerifyChecksum(crc); err != nil {
		return readErr(err, t.Component, t.Name)
	}
	pc.done.Store(true)
	return nil
}

// Pending reports whether the tensor is a view that a load under
// ViewCheckOnRead handed out unverified and that is not verified yet: no
// Chunks loop over it ended without an error, and no Check returned nil.
// Other tensors are never pending (whether they are verified at all, the
// plan says).
func (t *Tensor) Pending() bool { return t.pendingCheck() != nil }

// Check verifies the tensor's bytes and its scales' now, if a load under
// ViewCheckOnRead handed them out unverified and no read verified them
// since: by a pass over the mapping with the model's workers. It returns
// nil when all are verified, else as Chunks does.
func (t *Tensor) Check(ctx context.Context) error {
	return checkViews(ctx, append([]*Tensor{t}, t.Scales...))
}

// Check verifies every view of the Weights that a load under
// ViewCheckOnRead handed out unverified and no read verified since, by a
// pass over the mapping with the model's workers (what Load does under
// ViewCheckPass). A mismatch is a *safetensors.ChecksumError
// (ErrChecksum) naming the file, the tensor and its bytes.
func (w *Weights) Check(ctx context.Context) error {
	var ts []*Tensor
	for _, t := range w.tensors {
		ts = append(ts, t)
		ts = append(ts, t.Scales...)
	}
	return checkViews(ctx, ts)
}

// checkViews verifies the views of ts still unverified with the load's
// pass (verify.go): pieces of chunkBytes read by all workers, with the
// read-ahead.
func checkViews(ctx context.Context, ts []*Tensor) error {
	var m *Model
	var pp prep
	var checked []*onReadCheck
	for _, t := range ts {
		pc := t.pendingCheck()
		if pc == nil {
			continue
		}
		m = pc.m
		checked = append(checked, pc)
		// The pieces name the tensor through a Tensor of their own: the
		// load's records statistics in it, which the caller may read.
		name := &Tensor{Component: t.Component, Name: t.Name}
		ck := newTensorCheck(pc.st, checkRead)
		pp.checkRun(pc.c, pc.e, name, pc.st, ck, 0, ck.size, true, false)
	}
	if m == nil {
		return nil // nothing pending
	}
	if err := m.checkOpen(); err != nil {
		return err
	}
	for i := range pp.work {
		pp.work[i].bytes = pp.work[i].n // the progress counts the bytes read
	}
	if err := m.run(ctx, pp.work, "verify"); err != nil {
		return err
	}
	for _, pc := range checked {
		pc.done.Store(true)
	}
	return nil
}
