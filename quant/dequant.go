package quant

import (
	"context"
	"encoding/binary"
	"math"
	"runtime"
	"strconv"
	"sync"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/shapes"
)

// Decode tables (float64, exact), built once from package dtype.
var (
	tab8  = map[dtype.DType]*[256]float64{}
	tabF4 [16]float64
)

func init() {
	codes := make([]byte, 256)
	for i := range codes {
		codes[i] = byte(i)
	}
	for _, d := range []dtype.DType{dtype.F8_E4M3, dtype.F8_E5M2, dtype.F8_E4M3FNUZ, dtype.F8_E5M2FNUZ, dtype.F8_E8M0} {
		t := new([256]float64)
		if _, err := dtype.DecodeFloat64(t[:], codes, d); err != nil {
			panic(err) // cannot happen: fixed, valid arguments
		}
		tab8[d] = t
	}
	var pairs [8]byte
	for j := range pairs {
		pairs[j] = byte(2*j) | byte(2*j+1)<<4
	}
	if _, err := dtype.DecodeFloat64(tabF4[:], pairs[:], dtype.F4); err != nil {
		panic(err)
	}
}

// Dequantize writes the logical tensor of w into dst in dtype to. data and
// scales are the raw little-endian bytes of w.Data and of each of w.Scales,
// in the same order.
//
// Each element is computed as the exact value of the narrow code times its
// scale(s), in float64, where the product is exact (a narrow value has at
// most 4 significant bits, a scale at most 24, and at most two scales
// apply: at most 52 bits); a dividing scale (RoleGlobalScale) gives one
// correctly rounded float64 quotient (q × scale) ÷ global_scale. The result
// is then rounded once to the target with dtype.EncodeFloat64: to nearest,
// ties to even, then the target's overflow rule (F16 and BF16 overflow to
// ±Inf, F8_E4M3 to NaN, ...; opts.Saturate clamps to ±max instead). F32,
// BF16, F16 and FP8 results are therefore correctly rounded values of the
// exact product (of the float64 quotient for a dividing layout), and F64
// results of a multiplying layout are exact. Registered dtypes encode from
// float32 (see package dtype) and are rounded twice.
//
// Any float target is accepted (F32, BF16, F16, F64, the FP8 types, ...);
// dst must hold exactly the logical tensor's elements. The work is split
// across opts.Workers goroutines (GOMAXPROCS when 0) over element ranges,
// each with a fixed scratch buffer of 2048 float64 values, so memory beyond
// dst does not grow with the tensor. The Stats are those of the final
// rounding (NaN counts NaN outputs, e.g. from E8M0 code 255 or an FP8 NaN
// code; Overflow the products beyond the target's range).
//
// Errors are *Error values: ErrTarget for a target that is not a float
// type, ErrInvalidArgument for a slice of the wrong length or a Weight whose
// fields do not describe a computable layout, ErrInvalidLayout for a
// scale of the wrong shape or dtype.
func (w *Weight) Dequantize(dst []byte, to dtype.DType, data []byte, scales [][]byte, opts dtype.Options) (dtype.Stats, error) {
	return w.dequantize(nil, dst, to, data, scales, opts, nil)
}

// DequantizeContext is Dequantize that stops early when ctx is done: it
// checks ctx about every 128K elements per goroutine and then returns the
// Stats so far and an error naming the tensor and wrapping ctx.Err(); dst is then
// only partly written.
func (w *Weight) DequantizeContext(ctx context.Context, dst []byte, to dtype.DType, data []byte, scales [][]byte, opts dtype.Options) (dtype.Stats, error) {
	if err := ctx.Err(); err != nil {
		return dtype.Stats{}, canceledErr(w.Name, err)
	}
	return w.dequantize(ctx, dst, to, data, scales, opts, nil)
}

// DequantizeRows is DequantizeContext for the rows [first, first+n) of the
// logical tensor viewed as a matrix [R, C] (C its last dimension, R the
// product of the others): dst receives n·C elements of dtype to, computed
// exactly as Dequantize computes them. scales are the whole stored
// tensors' bytes, as for Dequantize, and data either the whole stored
// data or only the bytes of these rows (n·C elements from row first, which
// must start on a whole byte); only the parts those rows use are read. It lets a caller dequantize a large weight in bounded pieces
// (a converter streaming it into a file). The rows must lie inside the
// tensor and n·C elements of to must fill whole bytes; ctx may be nil.
func (w *Weight) DequantizeRows(ctx context.Context, dst []byte, to dtype.DType, data []byte, scales [][]byte, first, n int64, opts dtype.Options) (dtype.Stats, error) {
	if ctx != nil {
		if err := ctx.Err(); err != nil {
			return dtype.Stats{}, canceledErr(w.Name, err)
		}
	}
	return w.dequantize(ctx, dst, to, data, scales, opts, &[2]int64{first, n})
}

// kernel is a validated Dequantize call.
type kernel struct {
	n, c  int64 // elements; columns (last dimension)
	base  int64 // the first element computed: dst[0] holds it
	hi    int64 // the element after the last one computed
	fp4   bool
	tab   *[256]float64 // FP8 codes (fp4: tabF4)
	data  []byte
	doff  int64 // the element data[0] holds (DequantizeRows given its rows' bytes only)
	to    dtype.DType
	dst   []byte
	bits  int64 // of to
	enc   dtype.Options
	blk   bool  // a scale that varies over the tensor
	br    int64 // its block
	bc    int64
	gridC int64 // scale elements per grid row
	sdata []byte
	sdt   dtype.DType
	e8m0  bool
	s1    float64 // the multiplying scale when it does not vary
	g     float64 // the per-tensor factor (1 when none)
	div   bool    // g divides
	// t4 holds, for F4 data with an 8-bit varying scale, every scale code's
	// 16 values: t4[s][q] = value(q, scale s). 32 KiB, built for tensors of
	// at least t4Min elements.
	t4 *[256][16]float64
}

// t4Min is the element count from which plan builds kernel.t4.
const t4Min = 1 << 14

// chunk is the number of elements computed into the scratch buffer before
// each rounding call; a multiple of 8, so that chunk boundaries fall on
// whole bytes of every target.
const chunk = 2048

// parallelMin is the element count from which Dequantize splits the work.
const parallelMin = 1 << 16

func (w *Weight) dequantize(ctx context.Context, dst []byte, to dtype.DType, data []byte, scales [][]byte, opts dtype.Options, rows *[2]int64) (dtype.Stats, error) {
	var total dtype.Stats
	k, err := w.plan(dst, to, data, scales, opts, rows)
	if err != nil || k.hi == k.base {
		return total, err
	}
	count := k.hi - k.base
	workers := opts.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	parts := int64(1)
	if workers > 1 && count >= parallelMin {
		parts = min(int64(workers), count/(parallelMin/2))
	}
	per := (ceilDiv(count, parts) + chunk - 1) / chunk * chunk
	stats := make([]dtype.Stats, parts)
	errs := make([]error, parts)
	var wg sync.WaitGroup
	for p := int64(0); p*per < count; p++ {
		lo, hi := k.base+p*per, min(k.hi, k.base+(p+1)*per)
		if p == parts-1 || hi == k.hi {
			errs[p] = k.span(ctx, lo, hi, &stats[p]) // the last part on this goroutine
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[p] = k.span(ctx, lo, hi, &stats[p])
		}()
	}
	wg.Wait()
	for _, s := range stats {
		total.Add(s)
	}
	for _, e := range errs {
		if e != nil {
			return total, canceledErr(w.Name, e)
		}
	}
	return total, nil
}

// span computes and rounds elements [lo, hi).
func (k *kernel) span(ctx context.Context, lo, hi int64, st *dtype.Stats) error {
	buf := make([]float64, chunk)
	for i := lo; i < hi; i += chunk {
		if ctx != nil && (i-lo)%(64*chunk) == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		e := min(hi, i+chunk)
		b := buf[:e-i]
		k.fill(b, i)
		s, err := dtype.EncodeFloat64(k.dst[(i-k.base)*k.bits/8:(e-k.base)*k.bits/8], k.to, b, k.enc)
		if err != nil {
			panic("quant: rounding a validated chunk failed: " + err.Error()) // plan checked every length
		}
		st.Add(s)
	}
	return nil
}

// fill computes the float64 values of elements [i, i+len(out)).
func (k *kernel) fill(out []float64, i int64) {
	if !k.blk {
		k.fillRun(out, i, k.s1, nil)
		return
	}
	// Walk the runs of elements that share a scale element: within a row,
	// up to the end of the column block or of the row.
	row, col := i/k.c, i%k.c
	rb, cb, co := row/k.br, col/k.bc, col%k.bc
	for len(out) > 0 {
		run := min(int64(len(out)), k.bc-co, k.c-col)
		si := rb*k.gridC + cb
		if k.t4 != nil {
			k.fillRun(out[:run], i, 0, &k.t4[k.sdata[si]])
		} else {
			k.fillRun(out[:run], i, k.scaleAt(si), nil)
		}
		out, i = out[run:], i+run
		col, co = col+run, co+run
		if co == k.bc {
			co, cb = 0, cb+1
		}
		if col == k.c {
			col, co, cb, row = 0, 0, 0, row+1
			rb = row / k.br
		}
	}
}

// fillRun computes elements [i, i+len(o)), which share the scale s1 (or,
// for F4 data with an 8-bit scale, the precomputed products t).
func (k *kernel) fillRun(o []float64, i int64, s1 float64, t *[16]float64) {
	if k.fp4 {
		if t == nil {
			var tt [16]float64
			for c := range tt {
				tt[c] = k.value(tabF4[c], s1)
			}
			t = &tt
		}
		fill4(o, k.data, i-k.doff, t)
		return
	}
	tab := k.tab
	if k.div {
		g := k.g
		for j, b := range k.data[i-k.doff : i-k.doff+int64(len(o))] {
			o[j] = tab[b] * s1 / g
		}
		return
	}
	m := s1 * k.g // exact: see Dequantize
	for j, b := range k.data[i-k.doff : i-k.doff+int64(len(o))] {
		o[j] = tab[b] * m
	}
}

// value combines a decoded narrow value q with its scale s1 and the
// per-tensor factor.
func (k *kernel) value(q, s1 float64) float64 {
	if k.div {
		return q * s1 / k.g
	}
	return q * (s1 * k.g)
}

// fill4 writes len(o) E2M1 values from element i of packed (two per byte,
// element 2j in the low nibble of byte j), mapped through t.
func fill4(o []float64, packed []byte, i int64, t *[16]float64) {
	j := 0
	if i&1 == 1 && len(o) > 0 {
		o[0] = t[packed[i>>1]>>4]
		j, i = 1, i+1
	}
	b := packed[i>>1:]
	for ; j+1 < len(o); j += 2 {
		x := b[0]
		o[j], o[j+1] = t[x&15], t[x>>4]
		b = b[1:]
	}
	if j < len(o) {
		o[j] = t[b[0]&15]
	}
}

// scaleAt returns scale element i of the varying scale.
func (k *kernel) scaleAt(i int64) float64 {
	return decodeScale(k.sdata, k.sdt, k.e8m0, i)
}

func decodeScale(b []byte, d dtype.DType, e8m0 bool, i int64) float64 {
	if e8m0 {
		return tab8[dtype.F8_E8M0][b[i]]
	}
	switch d {
	case dtype.F32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
	case dtype.BF16:
		return float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16))
	case dtype.F16:
		return f16(binary.LittleEndian.Uint16(b[2*i:]))
	}
	return tab8[d][b[i]]
}

// f16 returns the value of an IEEE binary16 code.
func f16(h uint16) float64 {
	e, m := int(h>>10&0x1F), float64(h&0x3FF)
	var v float64
	switch e {
	case 0:
		v = math.Ldexp(m, -24)
	case 0x1F:
		v = math.Inf(1)
		if m != 0 {
			v = math.NaN()
		}
	default:
		v = math.Ldexp(m+1024, e-25)
	}
	if h&0x8000 != 0 {
		v = -v
	}
	return v
}

// plan validates a Dequantize call.
// rows, when not nil, limits the call to rows [rows[0], rows[0]+rows[1]) of
// the [R, C] view, which dst then holds.
func (w *Weight) plan(dst []byte, to dtype.DType, data []byte, scales [][]byte, opts dtype.Options, rows *[2]int64) (*kernel, error) {
	invalid := func(msg string) (*kernel, error) { return nil, argErr("invalid weight", w.Name, msg) }
	if !to.IsFloat() {
		return nil, &Error{Kind: ErrTarget, Tensor: w.Name, Msg: "target " + to.String() + " is not a float type"}
	}
	k := &kernel{to: to, dst: dst, data: data, bits: int64(to.Bits()), g: 1, s1: 1,
		enc: dtype.Options{Saturate: opts.Saturate, Workers: 1}}
	switch {
	case w.Elem == dtype.F4:
		k.fp4 = true
	case isFP8(w.Elem):
		k.tab = tab8[w.Elem]
	default:
		return invalid("element type " + w.Elem.String() + " is not an FP8 type or F4")
	}
	n, err := shapes.Elements(w.Shape)
	if err != nil {
		return invalid(err.Error())
	}
	r, c, _ := view(w.Shape)
	k.n, k.c, k.hi = n, c, n
	if rows != nil {
		if rows[0] < 0 || rows[1] < 0 || rows[0] > r || rows[1] > r-rows[0] {
			return nil, argErr("length", w.Name, "rows ["+strconv.FormatInt(rows[0], 10)+", +"+strconv.FormatInt(rows[1], 10)+") outside the "+strconv.FormatInt(r, 10)+" rows of "+shapeString(w.Shape))
		}
		k.base, k.hi = rows[0]*c, (rows[0]+rows[1])*c
	}
	if nb, err := w.Elem.ByteLen(n); err != nil {
		return invalid(err.Error())
	} else if nb != int64(len(data)) {
		// DequantizeRows may be given only its rows' bytes.
		rb, rerr := w.Elem.ByteLen(k.hi - k.base)
		if rows == nil || rerr != nil || rb != int64(len(data)) || k.base*int64(w.Elem.Bits())%8 != 0 {
			return nil, lengthErr(w.Data.Name, "data", len(data), nb)
		}
		k.doff = k.base
	}
	if nb, err := to.ByteLen(k.hi - k.base); err != nil {
		return nil, &Error{Kind: ErrTarget, Tensor: w.Name, Msg: err.Error()}
	} else if nb != int64(len(dst)) {
		return nil, lengthErr(w.Name, "dst", len(dst), nb)
	}
	if len(w.Scales) > 2 {
		return invalid(strconv.Itoa(len(w.Scales)) + " scales; at most 2 (one varying, one per-tensor)")
	}
	if len(scales) != len(w.Scales) {
		return nil, argErr("length", w.Name, strconv.Itoa(len(scales))+" scale slices for "+strconv.Itoa(len(w.Scales))+" scales")
	}
	prim, glob := -1, -1
	for pass := 0; pass < 2; pass++ {
		for i, s := range w.Scales {
			e8m0 := s.Role == RoleE8M0
			switch s.Role {
			case RoleScale, RoleScaleInv, RoleScale2, RoleGlobalScale, RoleE8M0:
			default:
				return invalid("scale " + quote(s.Name) + ": unknown role " + quote(s.Role))
			}
			if pass == 0 {
				if err := checkScaleDType(s.Stored, e8m0); err != nil {
					return nil, err
				}
				sn, err := shapes.Elements(s.Shape)
				if err != nil {
					return invalid("scale " + quote(s.Name) + ": " + err.Error())
				}
				if nb, _ := s.DType.ByteLen(sn); nb != int64(len(scales[i])) {
					return nil, lengthErr(s.Name, "scale", len(scales[i]), nb)
				}
				if s.Block[0] < 1 || s.Block[1] < 1 {
					return invalid("scale " + quote(s.Name) + ": block " + shapeString(s.Block[:]) + " is not positive")
				}
				if n > 0 && ceilDiv(r, s.Block[0])*ceilDiv(c, s.Block[1]) != sn {
					return invalid("scale " + quote(s.Name) + ": " + strconv.FormatInt(sn, 10) + " elements do not tile " +
						shapeString(w.Shape) + " in blocks of " + shapeString(s.Block[:]))
				}
			}
			varies := s.Block[0] < r || s.Block[1] < c
			divides := s.Role == RoleGlobalScale
			switch {
			case pass == 0 && varies:
				if divides {
					return invalid("scale " + quote(s.Name) + ": a dividing scale must be per-tensor")
				}
				if prim >= 0 {
					return invalid("two scales vary over the tensor")
				}
				prim = i
			case pass == 1 && !varies:
				switch {
				case !divides && prim < 0:
					prim = i
				case glob < 0:
					glob = i
				default:
					return invalid("two per-tensor factors besides the varying scale")
				}
			}
		}
	}
	if n == 0 {
		return k, nil
	}
	if prim >= 0 {
		s := w.Scales[prim]
		if s.Block[0] < r || s.Block[1] < c {
			k.blk = true
			k.br, k.bc, k.gridC = s.Block[0], s.Block[1], ceilDiv(c, s.Block[1])
			k.sdata, k.sdt, k.e8m0 = scales[prim], s.DType, s.Role == RoleE8M0
		} else {
			k.s1 = decodeScale(scales[prim], s.DType, s.Role == RoleE8M0, 0)
		}
	}
	if glob >= 0 {
		s := w.Scales[glob]
		k.g = decodeScale(scales[glob], s.DType, s.Role == RoleE8M0, 0)
		k.div = s.Role == RoleGlobalScale
	}
	if k.fp4 && k.blk && n >= t4Min && (k.e8m0 || k.sdt.Bits() == 8) {
		k.t4 = new([256][16]float64)
		var one [1]byte
		for c := range k.t4 {
			one[0] = byte(c)
			sv := decodeScale(one[:], k.sdt, k.e8m0, 0)
			for q := range k.t4[c] {
				k.t4[c][q] = k.value(tabF4[q], sv)
			}
		}
	}
	return k, nil
}

func lengthErr(tensor, what string, got int, want int64) *Error {
	return argErr("length", tensor, what+" is "+strconv.Itoa(got)+" bytes, want "+strconv.FormatInt(want, 10))
}
