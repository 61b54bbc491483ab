package convert

import (
	"fmt"
	"slices"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/quant"
	"github.com/ckpt-go/ckpt/safetensors"
)

// verify reads every written set back as the loader opens it and checks,
// tensor by tensor: that it is there with the dtype and shape written,
// that its bytes are those written (a CRC-32C computed while writing), and
// that every quantized weight is read back as one, with its scale, and
// dequantizes to values whose largest error against the source is the one
// reported.
func (r *runner) verify() error {
	r.progMu.Lock()
	r.phase, r.done, r.total = "verify", 0, r.written
	r.progMu.Unlock()
	for i, c := range r.comps {
		cr := r.rep.Components[i]
		entry := joinLocation(cr.Dir, cr.Files[0])
		if cr.Index != "" {
			entry = joinLocation(cr.Dir, cr.Index)
		}
		m, err := ckpt.Open(entry, append(r.ckptSourceOptions(), ckpt.WithBudget(-1), ckpt.WithReadStrategy("pread"))...)
		if err != nil {
			return &Error{Kind: ErrVerify, Path: entry, Component: c.name, Msg: "the output does not open", Err: err}
		}
		err = r.verifySet(c, m, entry)
		m.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

func (r *runner) verifySet(c *component, m *ckpt.Model, entry string) error {
	name := m.Components()[0]
	cs, err := m.Contents(name)
	if err != nil {
		return &Error{Kind: ErrVerify, Path: entry, Component: c.name, Err: err}
	}
	scheme, store := cs.Scheme, newLoaderStore(cs, &r.rawPool)
	fail := func(t *task, msg string, err error) error {
		return &Error{Kind: ErrVerify, Path: entry, Component: c.name, Tensor: t.spec.Name, Msg: msg, Err: err}
	}
	if n := len(cs.Tensors); n != len(c.tasks) {
		return &Error{Kind: ErrVerify, Path: entry, Component: c.name, Msg: fmt.Sprintf("%d tensors read back, %d written", n, len(c.tasks))}
	}
	buf := make([]byte, min(r.chunk, 8<<20))
	for _, t := range c.tasks {
		if err := r.ctx.Err(); err != nil {
			return &Error{Kind: ErrTarget, Path: entry, Component: c.name, Msg: "write: canceled", Err: err}
		}
		p := store.part(t.spec.Name)
		if p == nil {
			return fail(t, "missing from the output", nil)
		}
		if p.DType != t.spec.DType || !slices.Equal(p.Shape, t.spec.Shape) {
			return fail(t, fmt.Sprintf("read back as %s%v, written as %s%v", p.DType, p.Shape, t.spec.DType, t.spec.Shape), nil)
		}
		st, err := store.tensor(t.spec.Name)
		if err != nil {
			return fail(t, "unreadable", err)
		}
		// The bytes, through a bounded buffer, as raw reads of whole
		// multiples of 8 elements.
		n := st.NumElements()
		bits := int64(st.DType().Bits())
		per := max(int64(len(buf))*8/bits/8*8, 8)
		crc := uint32(0)
		for first := int64(0); first < n; first += per {
			cnt := min(per, n-first)
			b := buf[:((first+cnt)*bits+7)/8-first*bits/8]
			if _, err := st.ConvertElementsTo(st.DType(), b, first, dtype.Options{Workers: 1}); err != nil {
				return fail(t, "unreadable", err)
			}
			crc = safetensors.UpdateChecksum(crc, b)
			r.progress(c, t.spec.Name, int64(len(b)))
		}
		if crc != t.rep.crc {
			return fail(t, fmt.Sprintf("its bytes differ from those written (CRC-32C %08x, written %08x)", crc, t.rep.crc), nil)
		}
		if t.rep.Action == ActionRelabel {
			if w := scheme.Weight(t.spec.Name); w == nil || len(w.Scales) != 1 || w.Scales[0].Name != t.rep.ScaleTensor || w.Elem != t.spec.DType {
				return fail(t, fmt.Sprintf("the loader does not read it back as a quantized weight with scale %s (layout %s)", t.rep.ScaleTensor, scheme.Layout), nil)
			}
		}
		if t.kind == kQuant || t.kind == kRequant {
			if err := r.verifyQuant(t, scheme, store); err != nil {
				return &Error{Kind: ErrVerify, Path: entry, Component: c.name, Tensor: t.spec.Name, Err: err}
			}
		}
	}
	return nil
}

// verifyQuant checks that the loader reads a quantized weight back as one,
// with the scale written, and that it dequantizes to values whose largest
// errors against the source are those reported.
func (r *runner) verifyQuant(t *task, scheme *quant.Scheme, store *loaderStore) error {
	w := scheme.Weight(t.spec.Name)
	if w == nil {
		return fmt.Errorf("the loader does not read it back as a quantized weight (layout %s)", scheme.Layout)
	}
	if len(w.Scales) != 1 || w.Scales[0].Name != t.rep.ScaleTensor || w.Elem != t.spec.DType || w.Scales[0].Block != t.q.Block() {
		return fmt.Errorf("the loader reads it back in layout %s with scales %+v, not as written (%s, block %v)", w.Layout, w.Scales, t.rep.ScaleTensor, t.q.Block())
	}
	dt, err := store.tensor(w.Data.Name)
	if err != nil {
		return err
	}
	stt, err := store.tensor(w.Scales[0].Name)
	if err != nil {
		return err
	}
	sdata, err := stt.Bytes()
	if err != nil {
		return err
	}
	var ps pieceStats
	var x []float32
	var x64, y []float64
	var rowBuf, outRows []byte // the stored bytes of a piece's rows, source and output
	for first := int64(0); first < t.rows; first += t.per {
		n := min(t.per, t.rows-first)
		x, y = grow(x, n*t.cols), grow(y, n*t.cols)
		var srcStats pieceStats
		if t.kind == kQuant {
			err = t.readRows(first, n, x, &srcStats)
		} else if err = t.fetchScales(); err == nil {
			err = t.dequantRows(r.ctx, dtype.Float32Bytes(x), dtype.F32, first, n, &rowBuf)
		}
		if err != nil {
			return err
		}
		// The output's rows, read back through the loader as their own
		// bytes (DequantizeRows takes them so).
		if err := dequantStored(r.ctx, w, dt, [][]byte{sdata}, t.cols, dtype.Float64Bytes(y), dtype.F64, first, n, &outRows); err != nil {
			return err
		}
		x64 = grow(x64, n*t.cols)
		for i, v := range x {
			x64[i] = float64(v)
		}
		measure(x64, y, &ps)
	}
	if t.kind == kRequant {
		t.dropViews()
	}
	if ps.maxAbsErr != t.rep.MaxAbsErr || ps.rel != t.rep.MaxRelErr || ps.nan+ps.inf != t.rep.NaN {
		return fmt.Errorf("read back through the loader its largest errors are abs %g, rel %g (%d NaN), reported abs %g, rel %g (%d NaN)",
			ps.maxAbsErr, ps.rel, ps.nan, t.rep.MaxAbsErr, t.rep.MaxRelErr, t.rep.NaN)
	}
	return nil
}
