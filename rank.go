package ckpt

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/quant"
	"github.com/ckpt-go/ckpt/safetensors"
)

// Split makes the tensors whose names match Pattern (in the component
// named Component; "" for every component) split along dimension Dim
// across the ranks of WithRank: dimension 0 for column-parallel weights
// (q/k/v, gate and up projections, whose output features are rows),
// dimension 1 for row-parallel ones (o_proj, down_proj, whose input
// features are columns). Dim counts from 0 over the tensor's shape as the
// loader shows it (a quantized weight's logical shape).
type Split struct {
	Component string
	Pattern   Pattern
	Dim       int
}

// String returns the split as the CLI's --split flag spells it:
// "PATTERN=DIM" or "COMPONENT/PATTERN=DIM".
func (s Split) String() string {
	return scoped(s.Component, s.Pattern.String()+"="+strconv.Itoa(s.Dim))
}

// ParseSplit parses "PATTERN=DIM" or "COMPONENT/PATTERN=DIM", as the CLI's
// --split flag takes it.
func ParseSplit(s string) (Split, error) {
	comp, p, rhs, err := parseScoped(s, "split", "PATTERN=DIM")
	if err != nil {
		return Split{}, err
	}
	d, err := strconv.Atoi(strings.TrimSpace(rhs))
	if err != nil || d < 0 {
		return Split{}, &Error{Kind: ErrOption, Pattern: p.String(), Msg: fmt.Sprintf("split dimension %q is not a number ≥ 0", rhs)}
	}
	return Split{Component: comp, Pattern: p, Dim: d}, nil
}

// rankConfig is what WithRank set.
type rankConfig struct {
	set         bool
	rank, world int
	splits      []Split
}

// WithRank makes this process rank (0 ≤ rank < world) of world processes
// that load one model together with tensor parallelism: every tensor
// matched by a Split (the first that matches decides) is loaded as this
// rank's part of it along the split's dimension, and only that part's
// bytes are read; a tensor no Split matches is replicated (loaded whole).
//
// A dimension of size n is split as numpy.array_split and
// torch.tensor_split do: the first n mod world ranks get ⌈n/world⌉
// indices, the others ⌊n/world⌋ (safetensors.SplitBounds), so sizes that world does not
// divide are fine and the ranks' parts differ by at most one index. (That
// is not torch.chunk, which gives every rank ⌈n/world⌉ and leaves the last
// ranks short or empty — 5 rows over 4 ranks are 2, 2, 1, 0 — so that the
// bytes per rank are less balanced; frameworks that require divisible
// sizes get the same parts either way.)
//
// The tensor's Shape becomes its part's shape, the policy applies to the
// part (conversions and dequantization produce only the part), and the
// Plan counts the part's bytes: resident and peak bytes, ReadBytes, and
// the byte ranges read (TensorPlan.Ranges). A part is read as the byte
// ranges that hold it, computed from the shape and row-major strides and
// coalesced: a split of dimension 0 is one contiguous range (a zero-copy
// view when the tensor loads as stored from a mapping); a split of
// dimension k > 0 is one range per index of the dimensions before k.
//
// Scaled low-precision weights (package quant) split along any dimension
// but the last are read as the rows of their [rows, columns] view that the
// part needs, plus the rows of their scales that those rows use; along the
// last dimension, as those columns and the scale columns that cover them.
// A dequantized weight can be split anywhere along dimension 0 (a
// dimension-0 part that starts inside a scale block reads that block's
// scale row); every other split of a quantized weight — and any split of
// a weight kept quantized, whose scales are returned sliced with its data
// — must fall on the scale's block boundaries, or Open fails with ErrOption
// naming the tensor ("split: ..."). A split of sub-byte elements (F4, F6) must start and
// end on whole bytes. A Dim beyond a matched tensor's dimensions is
// ErrOption naming the tensor.
func WithRank(rank, world int, splits ...Split) Option {
	return func(c *config) error {
		if world < 1 {
			return &Error{Kind: ErrOption, Msg: fmt.Sprintf("world %d < 1", world)}
		}
		if rank < 0 || rank >= world {
			return &Error{Kind: ErrOption, Msg: fmt.Sprintf("rank %d is not in [0, %d)", rank, world)}
		}
		for _, s := range splits {
			if len(s.Pattern.parts) == 0 {
				return &Error{Kind: ErrOption, Msg: "split with an empty pattern"}
			}
			if s.Dim < 0 {
				return &Error{Kind: ErrOption, Pattern: s.Pattern.String(), Msg: fmt.Sprintf("split dimension %d < 0", s.Dim)}
			}
		}
		c.rank = rankConfig{set: true, rank: rank, world: world, splits: slices.Clone(splits)}
		return nil
	}
}

// SliceInfo says which part of a split tensor a rank loads: indices
// [Start, Stop) of dimension Dim of the tensor's full Shape, by the split
// Rule.
type SliceInfo struct {
	Dim   int     `json:"dim"`
	Start int64   `json:"start"`
	Stop  int64   `json:"stop"`
	Shape []int64 `json:"full_shape"`
	// Rule is the split that matched: `split 1 **.q_proj.weight=0`.
	Rule string `json:"rule"`
}

// String writes the part as "dim 0 [4:8) of [16 32]".
func (s *SliceInfo) String() string {
	return fmt.Sprintf("dim %d [%d:%d) of %v", s.Dim, s.Start, s.Stop, s.Shape)
}

// TensorRead is the part of one stored tensor a rank reads: byte ranges
// in absolute offsets of File. A quantized weight has one for its data and
// one per scale.
type TensorRead struct {
	Tensor string `json:"tensor"` // the stored name
	File   string `json:"file"`
	safetensors.ByteRange
}

// strided is a regular selection of a flat array of units (elements,
// rows or bytes): count runs of n units, the first at first, each stride
// units after the previous. Normalized (norm), a contiguous selection has
// count 1 and an empty one is the zero value.
type strided struct{ first, n, count, stride int64 }

func (s strided) total() int64 { return s.n * s.count }

func (s strided) norm() strided {
	if s.n <= 0 || s.count <= 0 {
		return strided{}
	}
	if s.count == 1 || s.n == s.stride {
		return strided{first: s.first, n: s.n * s.count, count: 1}
	}
	return s
}

func (s strided) scale(k int64) strided {
	return strided{first: s.first * k, n: s.n * k, count: s.count, stride: s.stride * k}
}

func (s strided) byteRange(base int64) safetensors.ByteRange {
	r := safetensors.ByteRange{Offset: base + s.first, Length: s.n, Count: s.count}
	if s.count > 1 {
		r.Stride = s.stride
	}
	return r
}

// segments calls f for the runs of source units that hold the compact
// units [from, to) of the selection: src is the source position, pos the
// compact one, n the length.
func (s strided) segments(from, to int64, f func(src, pos, n int64) error) error {
	if s.n <= 0 {
		return nil
	}
	l, within := from/s.n, from%s.n
	for pos := from; pos < to; {
		cnt := min(s.n-within, to-pos)
		if err := f(s.first+l*s.stride+within, pos, cnt); err != nil {
			return err
		}
		pos += cnt
		l++
		within = 0
	}
	return nil
}

// slice is the part of one logical tensor a load reads: this rank's part
// of a tensor a split matched, or the whole tensor — the part [0, n) of
// its first dimension — which loads through the same stages.
type slice struct {
	info   *SliceInfo // the split's part; nil when no split matched the tensor
	whole  bool       // the part is the whole tensor (no split matched, or world 1)
	stored int64      // stored bytes of the whole tensor (data plus scales)
	elems  strided    // a plain tensor's elements
	data   strided    // bytes of the stored (data) tensor
	q      *qslice    // a quantized weight's part
}

// qslice is the part of a quantized weight in the [R, C] view of its
// logical shape: rows × columns [c0, c1).
type qslice struct {
	rows   strided // rows of the view (all of them for a column split)
	c0, c1 int64
	colB   int64 // data bytes of one row of the part
	// pad is the number of rows before the first selected one that a
	// dequantized part's first scale block covers (a dimension-0 split
	// inside a block): they are neither read nor returned. Non-zero pad
	// forbids keeping the weight quantized (padWhy says why).
	pad    int64
	padWhy string
	br     int64 // pieces start on multiples of br rows of the part (the varying scale's block rows; 1)
	scales []qscale
	keep   *quant.Weight // the part's layout when kept quantized (shapes of the part)
}

// qscale is the part of one scale of a quantized weight.
type qscale struct {
	sel    strided // bytes of the stored scale
	shape  []int64 // shape of the part
	perRow bool    // varies by row: each piece reads the grid rows its rows use
	br     int64   // block rows
	gC     int64   // grid columns of the part
	sb     int64   // bytes per element
}

// split computes the rank's slices of c's tensors, once, before decide.
func (m *Model) split(c *modelComponent) error {
	rc := &m.cfg.rank
	for _, s := range rc.splits {
		if s.Component != "" && m.component(s.Component) == nil {
			return &Error{Kind: ErrOption, Component: s.Component, Pattern: s.Pattern.String(), Msg: "split names no component of the model"}
		}
	}
	for _, e := range c.entries {
		if !rc.set {
			if err := e.wholePart(); err != nil {
				return inComponent(err, c.name)
			}
			continue
		}
		for i, s := range rc.splits {
			if s.Component != "" && s.Component != c.name || !s.Pattern.Match(e.name) {
				continue
			}
			if err := e.split(s, fmt.Sprintf("split %d %s", i+1, s), rc.rank, rc.world); err != nil {
				return inComponent(err, c.name)
			}
			break
		}
		if e.sl == nil {
			if err := e.wholePart(); err != nil {
				return inComponent(err, c.name)
			}
		}
	}
	return nil
}

// inComponent names the component in a loader error.
func inComponent(err error, component string) error {
	if le, ok := err.(*Error); ok {
		le.Component = component
	}
	return err
}

// split makes e the rank's part of itself.
func (e *entry) split(s Split, rule string, rank, world int) error {
	if s.Dim >= len(e.shape) {
		return &Error{Kind: ErrOption, Tensor: e.name, Pattern: s.Pattern.String(),
			Msg: fmt.Sprintf("split dimension %d is beyond the tensor's shape %v", s.Dim, e.shape)}
	}
	n := e.shape[s.Dim]
	start, stop := safetensors.SplitBounds(n, rank, world)
	info := SliceInfo{Dim: s.Dim, Start: start, Stop: stop, Shape: slices.Clone(e.shape), Rule: rule}
	if start == 0 && stop == n {
		if err := e.wholePart(); err != nil {
			return err
		}
		e.sl.info = &info
		return nil
	}
	sl := &slice{info: &info, stored: e.inBytes}
	e.sl = sl
	if e.q == nil {
		r, err := safetensors.SliceRanges(e.stored, e.shape, s.Dim, start, stop)
		if err != nil {
			return &Error{Kind: ErrOption, Tensor: e.name, Pattern: s.Pattern.String(),
				Msg: fmt.Sprintf("split: rank %d's part, %s, of %s elements does not start and end on whole bytes", rank, sl.info.String(), e.stored)}
		}
		sl.data = strided{first: r.Offset, n: r.Length, count: r.Count, stride: r.Stride}.norm()
		bits := int64(e.stored.Bits())
		sl.elems = strided{first: r.Offset * 8 / bits, n: r.Length * 8 / bits, count: r.Count, stride: r.Stride * 8 / bits}.norm()
		e.inBytes = sl.data.total()
	} else {
		q, err := sliceQuant(e.q, s.Dim, start, stop)
		if err != nil {
			if le, ok := err.(*Error); ok {
				le.Pattern = s.Pattern.String()
			}
			return err
		}
		sl.q, sl.data = q, q.rowsData(e.q)
		e.inBytes = sl.data.total()
		for _, qs := range q.scales {
			e.inBytes += qs.sel.total()
		}
	}
	e.shape = slices.Clone(e.shape)
	e.shape[s.Dim] = stop - start
	return nil
}

// wholePart makes e's part the whole tensor: all its stored bytes, and for
// a quantized weight all its rows and columns with every scale (its layout
// is the weight's own).
func (e *entry) wholePart() error {
	e.whole = slice{whole: true, stored: e.inBytes}
	sl := &e.whole
	e.sl = sl
	if e.q == nil {
		sl.elems = strided{n: numElements(e.shape), count: 1}.norm()
		sl.data = strided{n: e.inBytes, count: 1}.norm()
		return nil
	}
	w := e.q
	db, _ := w.Data.DType.ByteLen(numElements(w.Data.Shape))
	sl.data = strided{n: db, count: 1}.norm()
	if nd := len(w.Shape); nd > 0 && numElements(w.Shape) > 0 {
		q, err := sliceQuant(w, 0, 0, w.Shape[0])
		if err != nil {
			return err
		}
		q.keep = w
		sl.q = q
		return nil
	}
	// A scalar or empty weight: one row (or none), every scale whole.
	r, c := viewRC(w.Shape)
	if numElements(w.Shape) == 0 {
		r = 0
	}
	q := &qslice{rows: strided{n: r, count: 1}.norm(), c1: c, colB: db / max(r, 1), br: 1, keep: w}
	for _, s := range w.Scales {
		b, _ := s.DType.ByteLen(numElements(s.Shape))
		q.scales = append(q.scales, qscale{sel: strided{n: b, count: 1}.norm(), shape: slices.Clone(s.Shape), sb: max(int64(s.DType.Bits())/8, 1)})
	}
	sl.q = q
	return nil
}

// rowsData is the part's data bytes.
func (q *qslice) rowsData(w *quant.Weight) strided {
	_, c := viewRC(w.Shape)
	eb := int64(w.Elem.Bits())
	if q.c1-q.c0 == c {
		return q.rows.scale(c * eb / 8)
	}
	r := q.rows.total()
	return strided{first: q.c0 * eb / 8, n: q.colB, count: r, stride: c * eb / 8}.norm()
}

// viewRC is the [R, C] view of a shape: C its last dimension, R the
// product of the others.
func viewRC(shape []int64) (r, c int64) {
	if len(shape) == 0 {
		return 1, 1
	}
	return numElements(shape[:len(shape)-1]), shape[len(shape)-1]
}

func ceilDiv(n, b int64) int64 { return (n + b - 1) / b }

// sliceQuant computes the part [start, stop) along dim of a quantized
// weight: the rows and columns of its [R, C] view, and the scale elements
// they use.
func sliceQuant(w *quant.Weight, dim int, start, stop int64) (*qslice, error) {
	fail := func(format string, a ...any) error {
		return &Error{Kind: ErrOption, Tensor: w.Name, Msg: "split: " + fmt.Sprintf(format, a...)}
	}
	L := w.Shape
	nd := len(L)
	R, C := viewRC(L)
	eb := int64(w.Elem.Bits())
	if eb <= 0 || C*eb%8 != 0 {
		return nil, fail("rows of %d %s elements are not whole bytes", C, w.Elem)
	}
	q := &qslice{c0: 0, c1: C, br: 1}
	rowSplit := dim < nd-1
	if rowSplit {
		rpi := numElements(L[dim+1 : nd-1])
		q.rows = strided{first: start * rpi, n: (stop - start) * rpi, count: numElements(L[:dim]), stride: L[dim] * rpi}.norm()
	} else {
		q.rows = strided{first: 0, n: R, count: 1}.norm()
		q.c0, q.c1 = start, stop
		if start*eb%8 != 0 || stop*eb%8 != 0 {
			return nil, fail("columns [%d:%d) of %s elements do not start and end on whole bytes", start, stop, w.Elem)
		}
	}
	cols := q.c1 - q.c0
	q.colB = cols * eb / 8
	f, n, cnt, st := q.rows.first, q.rows.n, max(q.rows.count, 1), q.rows.stride
	for _, s := range w.Scales {
		sbits := int64(s.DType.Bits())
		br, bc := s.Block[0], s.Block[1]
		if sbits <= 0 || sbits%8 != 0 || br < 1 || bc < 1 {
			return nil, fail("scale %q (%s, block %v) cannot be sliced", s.Name, s.DType, s.Block)
		}
		sb := sbits / 8
		gR, gC := ceilDiv(R, br), ceilDiv(C, bc)
		qs := qscale{br: br, gC: gC, sb: sb, sel: strided{n: gR * gC * sb, count: 1}.norm()}
		nR, nC := gR, gC
		varies := br < R || bc < C
		switch {
		case !varies, rowSplit && gR == 1, !rowSplit && gC == 1:
			// The whole scale applies to the part.
		case rowSplit:
			qs.perRow, q.br = true, br
			aligned := n == 0 || f%br == 0 && (n%br == 0 || cnt == 1 && f+n == R) && (cnt == 1 || st%br == 0)
			switch {
			case aligned:
				qs.sel = strided{first: f / br, n: ceilDiv(n, br), count: cnt, stride: st / br}.norm().scale(gC * sb)
				nR = cnt * ceilDiv(n, br)
				if n == 0 {
					nR = 0
				}
			case cnt == 1:
				a := f / br * br
				q.pad = f - a
				g1 := ceilDiv(f+n, br)
				qs.sel = strided{first: a / br, n: g1 - a/br, count: 1}.scale(gC * sb)
				nR = g1 - a/br
				q.padWhy = fmt.Sprintf("its rows [%d:%d) (of a [%d, %d] view) start inside a %d-row block of scale %q", f, f+n, R, C, br, s.Name)
			default:
				return nil, fail("rows [%d:%d) of every %d (of a [%d, %d] view) are not on the %d-row blocks of scale %q: a quantized weight splits along a middle dimension only on scale block boundaries",
					f, f+n, st, R, C, br, s.Name)
			}
		default: // a column split
			if cols > 0 && (q.c0%bc != 0 || q.c1%bc != 0 && q.c1 != C) {
				return nil, fail("columns [%d:%d) are not on the %d-column blocks of scale %q: a quantized weight splits along its last dimension only on scale block boundaries",
					q.c0, q.c1, bc, s.Name)
			}
			g0, g1 := q.c0/bc, ceilDiv(q.c1, bc)
			qs.sel = strided{first: g0 * sb, n: (g1 - g0) * sb, count: gR, stride: gC * sb}.norm()
			nC = g1 - g0
			if gR > 1 {
				qs.perRow, q.br = true, br
			}
		}
		qs.gC = nC
		qs.shape = sliceScaleShape(s.Shape, nd, dim, rowSplit, gR, gC, nR, nC)
		q.scales = append(q.scales, qs)
	}
	if q.pad == 0 {
		kw := *w
		kw.Shape = slices.Clone(L)
		kw.Shape[dim] = stop - start
		dataBytes := q.rows.total() * q.colB
		ds, ok := sliceDataShape(w.Data, L, dim, stop-start, cols, dataBytes)
		if !ok {
			return nil, fail("the part's %d data bytes do not fit a shape of %s", dataBytes, w.Data.DType)
		}
		kw.Data.Shape = ds
		kw.Scales = slices.Clone(w.Scales)
		for i := range kw.Scales {
			kw.Scales[i].Shape = q.scales[i].shape
		}
		q.keep = &kw
	}
	return q, nil
}

// sliceScaleShape gives a scale's part a shape: the stored shape with the
// split dimension (or the last, for a column split) scaled to the part's
// grid when the scale has the logical tensor's rank, else its grid [nR,
// nC] (or [nR·nC] for a one-dimensional scale).
func sliceScaleShape(s []int64, nd, dim int, rowSplit bool, gR, gC, nR, nC int64) []int64 {
	if nR == gR && nC == gC {
		return slices.Clone(s)
	}
	if len(s) == nd {
		idx, old, now := dim, gR, nR
		if !rowSplit {
			idx, old, now = nd-1, gC, nC
		}
		if old > 0 && s[idx]*now%old == 0 {
			out := slices.Clone(s)
			out[idx] = s[idx] * now / old
			if numElements(out) == nR*nC {
				return out
			}
		}
	}
	if len(s) == 1 {
		return []int64{nR * nC}
	}
	return []int64{nR, nC}
}

// sliceDataShape gives a quantized weight's stored data tensor the shape
// of the part: the split dimension (or the last, scaled by the columns
// kept) of its stored shape when its leading dimensions are the logical
// ones, else one dimension.
func sliceDataShape(d quant.Stored, logical []int64, dim int, now, cols, bytes int64) ([]int64, bool) {
	bits := int64(d.DType.Bits())
	if bits <= 0 {
		return nil, false
	}
	nd := len(logical)
	if len(d.Shape) >= nd {
		out := slices.Clone(d.Shape)
		ok := true
		switch {
		case dim < nd-1 && out[dim] == logical[dim]:
			out[dim] = now
		case dim == nd-1 && logical[dim] > 0 && out[dim]*cols%logical[dim] == 0:
			out[dim] = out[dim] * cols / logical[dim]
		default:
			ok = false
		}
		if ok && numElements(out)*bits == bytes*8 {
			return out, true
		}
	}
	if bytes*8%bits != 0 {
		return nil, false
	}
	return []int64{bytes * 8 / bits}, true
}

// resolveSlice adjusts what resolve decided for a tensor split by the rank
// option: a part that is not contiguous cannot be a view; a kept
// quantized weight's bytes are its part's; and it checks what only the
// decision can tell (a quantized part starting inside a scale block kept
// quantized, sub-byte targets).
func (e *entry) resolveSlice(strategy readStrategy) error {
	sl := e.sl
	if sl == nil || sl.whole {
		return nil
	}
	fail := func(format string, a ...any) error {
		return &Error{Kind: ErrOption, Tensor: e.name, Msg: "split: " + fmt.Sprintf(format, a...)}
	}
	switch e.act {
	case ActionView:
		if !sl.data.isContiguous() {
			e.act = ActionRead
			e.mapped, e.owned = 0, e.inBytes
		}
	case ActionConvert:
		if ob := int64(e.out.Bits()); sl.elems.count > 1 && sl.elems.n*ob%8 != 0 {
			return fail("rank's part %s does not start and end on whole bytes of %s (%s)", sl.info.String(), e.out, e.dec.Rule)
		}
	case ActionDequantize:
		if cols := sl.q.c1 - sl.q.c0; cols*int64(e.out.Bits())%8 != 0 {
			return fail("rows of %d %s elements are not whole bytes (%s)", cols, e.out, e.dec.Rule)
		}
	case ActionQuantized:
		q := sl.q
		if q.keep == nil {
			return fail("kept quantized (%s), a part must start on its scale's blocks, but %s; load it dequantized, or split where blocks begin", e.dec.Rule, q.padWhy)
		}
		e.outBytes = sl.data.total()
		e.mapped, e.owned = 0, 0
		part := func(s strided) {
			switch {
			case strategy == readPread || !s.isContiguous():
				e.owned += alignUp(s.total())
			default:
				e.mapped += s.total()
			}
		}
		part(sl.data)
		for _, qs := range q.scales {
			part(qs.sel)
		}
	}
	return nil
}

func (s strided) isContiguous() bool { return s.count <= 1 }

// weightRuns reports whether a quantized part is a weight of its own (its
// layout is known) whose data and scales are each one run of bytes: it can
// be dequantized from views of a mapping.
func (sl *slice) weightRuns() bool {
	if sl.q == nil || sl.q.keep == nil || !sl.data.isContiguous() {
		return false
	}
	for _, qs := range sl.q.scales {
		if !qs.sel.isContiguous() {
			return false
		}
	}
	return true
}

// storedBytes is the size of the whole stored tensor (data plus scales),
// whatever part of it a rank reads.
func (e *entry) storedBytes() int64 {
	if e.sl != nil {
		return e.sl.stored
	}
	return e.inBytes
}

// partStaging is the transient memory one worker holds for a dequantized
// part beyond the shared staging allowance: the data rows and scale rows
// of its largest piece, and the scales read once per tensor. A part
// dequantized from views of the mapping (mmap, stored contiguously, a
// weight of its own) needs none.
func (m *Model) partStaging() int64 {
	var most int64
	for _, c := range m.comps {
		for _, e := range c.entries {
			if e.act != ActionDequantize {
				continue
			}
			q := e.sl.q
			if c.strategy != readPread && e.sl.weightRuns() && m.src.IsOS() {
				continue
			}
			per := q.pieceRows(e.out)
			b := per * q.colB
			for _, qs := range q.scales {
				if qs.perRow {
					b += (ceilDiv(per, qs.br) + 1) * qs.gC * qs.sb
				} else {
					b += qs.sel.total()
				}
			}
			most = max(most, b)
		}
	}
	return most
}

// pieceRows is the number of rows of one piece of a dequantized part: a
// multiple of the scale's block rows, about chunkBytes of output.
func (q *qslice) pieceRows(out dtype.DType) int64 {
	outRow := (q.c1 - q.c0) * int64(out.Bits()) / 8
	per := max(chunkBytes/max(outRow, 1), 1)
	return ceilDiv(per, q.br) * q.br
}
