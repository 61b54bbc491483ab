package quant

import (
	"math"
	"slices"
	"strconv"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/fpkern"
)

// Granularity says which elements of a weight share one FP8 scale.
type Granularity int

// The granularities of FP8Quantizer.
const (
	// PerTensor: one scale for the whole weight, shape [1].
	PerTensor Granularity = iota + 1
	// PerChannel: one scale per output channel (row), shape [out, 1].
	PerChannel
	// PerBlock: one scale per block of N×N elements, shape [ceil(out/N),
	// ceil(in/N)]; blocks at the far edges may be partial.
	PerBlock
)

// String returns "tensor", "channel" or "block", the names
// compressed-tensors gives the strategies.
func (g Granularity) String() string {
	switch g {
	case PerTensor:
		return "tensor"
	case PerChannel:
		return "channel"
	case PerBlock:
		return "block"
	}
	return "Granularity(" + strconv.Itoa(int(g)) + ")"
}

// FP8Quantizer quantizes one weight matrix [out, in] to F8_E4M3 or F8_E5M2
// with F32 scales: the inverse of Weight.Dequantize for the FP8 layouts
// (value = q × scale). It works on pieces of whole rows so that a large
// weight never has to be in memory at once, in two passes: Observe sees
// every row to find each scale element's largest magnitude, then Quantize
// encodes rows with the Scales.
//
// A scale is amax / max, rounded to F32, where amax is the largest finite
// magnitude of the elements it covers and max is the element type's largest
// finite value (448 for E4M3, 57344 for E5M2); a scale whose elements are
// all zero (or not finite) is 1, never 0 or NaN, and one that would round to
// zero is the smallest positive F32. Each element x becomes the code
// nearest to x / scale, ties to even, computed from the exact quotient
// (see Quantize), so the dequantized value q × scale is within half a unit
// in the last place of q, times the scale, of x.
type FP8Quantizer struct {
	elem       dtype.DType
	g          Granularity
	rows, cols int64
	block      int64
	gridR      int64 // scale rows
	gridC      int64 // scale columns
	amax       []float32
	scales     []float32
	max        float64
}

// NewFP8Quantizer returns a quantizer for a weight of the given shape
// ([out, in]) to elem (F8_E4M3 or F8_E5M2) with granularity g; block is
// the block size N of PerBlock (ignored otherwise). The scale grid it
// allocates is at most out elements, which the weight's own out × in
// values bound. Errors are *Error of kind ErrTarget (another element
// type) or ErrInvalidArgument (not two dimensions, no elements, or a block
// size below 1).
func NewFP8Quantizer(elem dtype.DType, shape []int64, g Granularity, block int64) (*FP8Quantizer, error) {
	if elem != dtype.F8_E4M3 && elem != dtype.F8_E5M2 {
		return nil, &Error{Kind: ErrTarget, Msg: "FP8 quantization writes F8_E4M3 or F8_E5M2, not " + elem.String()}
	}
	if len(shape) != 2 || shape[0] < 1 || shape[1] < 1 {
		return nil, argErr("data shape", "", "FP8 quantization takes a weight [out, in] with elements, not "+shapeString(shape))
	}
	q := &FP8Quantizer{elem: elem, g: g, rows: shape[0], cols: shape[1], max: elem.Info().Max}
	switch g {
	case PerTensor:
		q.gridR, q.gridC = 1, 1
	case PerChannel:
		q.gridR, q.gridC = q.rows, 1
	case PerBlock:
		if block < 1 {
			return nil, argErr("block size", "", "block size "+strconv.FormatInt(block, 10)+" is not positive")
		}
		q.block = block
		q.gridR, q.gridC = ceilDiv(q.rows, block), ceilDiv(q.cols, block)
	default:
		return nil, argErr("invalid weight", "", "unknown granularity "+g.String())
	}
	q.amax = make([]float32, q.gridR*q.gridC)
	return q, nil
}

// ScaleShape returns the shape of the scale tensor: [1], [out, 1] or
// [ceil(out/N), ceil(in/N)].
func (q *FP8Quantizer) ScaleShape() []int64 {
	if q.g == PerTensor {
		return []int64{1}
	}
	return []int64{q.gridR, q.gridC}
}

// Block returns the rows and columns one scale element covers, as
// Scale.Block describes it for Dequantize.
func (q *FP8Quantizer) Block() [2]int64 {
	switch q.g {
	case PerTensor:
		return [2]int64{q.rows, q.cols}
	case PerChannel:
		return [2]int64{1, q.cols}
	}
	return [2]int64{q.block, q.block}
}

// RowAlign returns the number of rows a piece given to Quantize must be a
// multiple of (except the last piece): the block size for PerBlock, 1
// otherwise. Observe takes pieces of any whole rows.
func (q *FP8Quantizer) RowAlign() int64 {
	if q.g == PerBlock {
		return q.block
	}
	return 1
}

// checkRows validates a piece of rows [first, first+len(x)/cols).
func (q *FP8Quantizer) checkRows(first int64, n int) (int64, error) {
	if int64(n)%q.cols != 0 {
		return 0, argErr("length", "", strconv.Itoa(n)+" values are not whole rows of "+strconv.FormatInt(q.cols, 10))
	}
	r := int64(n) / q.cols
	if first < 0 || first > q.rows || r > q.rows-first {
		return 0, argErr("length", "", "rows ["+strconv.FormatInt(first, 10)+", +"+strconv.FormatInt(r, 10)+") outside the weight's "+strconv.FormatInt(q.rows, 10))
	}
	return r, nil
}

// Observe records the magnitudes of rows [first, first+len(x)/in) of the
// weight, x in row-major order. NaN and infinite values are not counted in
// any amax. Pieces may come in any order; calls must not be concurrent.
func (q *FP8Quantizer) Observe(first int64, x []float32) error {
	r, err := q.checkRows(first, len(x))
	if err != nil {
		return err
	}
	for i := int64(0); i < r; i++ {
		row := x[i*q.cols : (i+1)*q.cols]
		var gr int64
		switch q.g {
		case PerChannel:
			gr = first + i
		case PerBlock:
			gr = (first + i) / q.block
		}
		a := q.amax[gr*q.gridC : (gr+1)*q.gridC]
		if q.g != PerBlock {
			a[0] = max(a[0], fpkern.AbsMax(row))
			continue
		}
		for c := int64(0); c < q.gridC; c++ {
			a[c] = max(a[c], fpkern.AbsMax(row[c*q.block:min((c+1)*q.block, q.cols)]))
		}
	}
	q.scales = nil
	return nil
}

// Scales returns the scales in row-major order of ScaleShape, computed
// from what Observe recorded (see FP8Quantizer). The slice is the
// quantizer's: do not modify it.
func (q *FP8Quantizer) Scales() []float32 {
	if q.scales != nil {
		return q.scales
	}
	q.scales = make([]float32, len(q.amax))
	for i, a := range q.amax {
		q.scales[i] = ScaleFor(a, q.max)
	}
	return q.scales
}

// AbsMax returns the largest finite magnitude Observe has seen.
func (q *FP8Quantizer) AbsMax() float32 {
	var m float32
	for _, a := range q.amax {
		m = max(m, a)
	}
	return m
}

// ScaleFor returns the F32 scale amax / max: 1 when amax is 0 or not
// finite, and the smallest positive F32 when the quotient rounds to zero.
func ScaleFor(amax float32, max float64) float32 {
	if !(amax > 0) || amax > math.MaxFloat32 {
		return 1
	}
	s := float32(float64(amax) / max)
	if s == 0 {
		s = math.SmallestNonzeroFloat32
	}
	return s
}

// QuantizeStats says what Quantize did to the values.
type QuantizeStats struct {
	// Stats are those of the rounding of x / scale to the element type:
	// Overflow and Saturated can only come from infinite inputs, Underflow
	// counts the nonzero values that became zero, NaN the NaN codes.
	dtype.Stats
	// NonFinite counts the finite inputs whose code is NaN or infinite.
	NonFinite int64
	// MaxAbsErr is the largest |x − q×scale| over the finite inputs whose
	// code is finite; MaxRelErr the largest |x − q×scale| / |x| among them
	// (x ≠ 0).
	MaxAbsErr, MaxRelErr float64
	// SumSqErr and SumSq add up (x − q×scale)² and x² over the same
	// elements: sqrt(SumSqErr/SumSq) is the relative RMS error.
	SumSqErr, SumSq float64
}

// Add merges o into s.
func (s *QuantizeStats) Add(o QuantizeStats) {
	s.Stats.Add(o.Stats)
	s.NonFinite += o.NonFinite
	s.MaxAbsErr = max(s.MaxAbsErr, o.MaxAbsErr)
	s.MaxRelErr = max(s.MaxRelErr, o.MaxRelErr)
	s.SumSqErr += o.SumSqErr
	s.SumSq += o.SumSq
}

// qchunk is the number of elements Quantize rounds at a time.
const qchunk = 2048

// Quantize writes the codes of rows [first, first+len(x)/in) into dst, one
// byte per element, with the Scales (Observe must have seen every row
// first). first must be a multiple of RowAlign. opts.Saturate clamps
// infinite inputs to ±max instead of NaN (E4M3) or Inf (E5M2); finite
// inputs never overflow, their scale covers them.
//
// Each element is rounded once: the exact quotient x / scale is rounded to
// an F32 by rounding to odd (decided with an exact residual, see
// internal/fpkern.ToOdd), and that F32 to the element type to nearest,
// ties to even.
// Rounding to odd with at least two extra bits makes the two roundings one,
// so the code is the one nearest to the exact quotient. Calls for different rows may run
// concurrently once Scales has been called.
func (q *FP8Quantizer) Quantize(dst []byte, first int64, x []float32, opts dtype.Options) (QuantizeStats, error) {
	var st QuantizeStats
	r, err := q.checkRows(first, len(x))
	if err != nil {
		return st, err
	}
	if len(dst) != len(x) {
		return st, argErr("length", "", "dst is "+strconv.Itoa(len(dst))+" bytes for "+strconv.Itoa(len(x))+" values")
	}
	if q.g == PerBlock && first%q.block != 0 {
		return st, argErr("length", "", "a piece starts at row "+strconv.FormatInt(first, 10)+", not a multiple of the block size "+strconv.FormatInt(q.block, 10))
	}
	scales := q.Scales()
	enc := dtype.Options{Saturate: opts.Saturate, Workers: 1}
	var buf, dec [qchunk]float32
	var acc fpkern.Acc
	for i := int64(0); i < r; i++ {
		row := first + i
		xr := x[i*q.cols : (i+1)*q.cols]
		dr := dst[i*q.cols : (i+1)*q.cols]
		var gs []float32
		switch q.g {
		case PerTensor:
			gs = scales[:1]
		case PerChannel:
			gs = scales[row : row+1]
		default:
			gr := row / q.block
			gs = scales[gr*q.gridC : (gr+1)*q.gridC]
		}
		runLen := q.cols
		if q.g == PerBlock {
			runLen = q.block
		}
		// Spans of up to qchunk elements, each rounded in one call: the
		// quotients run by run of a common scale, then the codes, then the
		// errors.
		for c0 := int64(0); c0 < q.cols; c0 += qchunk {
			c1 := min(c0+qchunk, q.cols)
			span := buf[:c1-c0]
			for c := c0; c < c1; {
				e := min(c1, (c/runLen+1)*runLen)
				fpkern.ToOdd(span[c-c0:e-c0], xr[c:e], gs[c/runLen])
				c = e
			}
			es, err := dtype.EncodeFloat32(dr[c0:c1], q.elem, span, enc)
			if err != nil {
				panic("quant: encoding a checked span failed: " + err.Error()) // lengths are equal by construction
			}
			st.Stats.Add(es)
			// The codes' exact values, times their scales, against x.
			dspan := dec[:c1-c0]
			if _, err := dtype.DecodeFloat32(dspan, dr[c0:c1], q.elem); err != nil {
				panic("quant: decoding a checked span failed: " + err.Error())
			}
			for c := c0; c < c1; {
				e := min(c1, (c/runLen+1)*runLen)
				fpkern.Measure(xr[c:e], dspan[c-c0:e-c0], float64(gs[c/runLen]), &acc)
				c = e
			}
		}
	}
	st.NonFinite = acc.NaN + acc.Inf
	st.MaxAbsErr, st.MaxRelErr = acc.MaxAbs, acc.MaxRel
	st.SumSqErr, st.SumSq = acc.SumSqErr, acc.SumSq
	return st, nil
}

// Weight returns the Weight that describes the quantized tensor for
// Dequantize: data named name (dtype elem, the quantizer's shape) with one
// scale named scaleName of role RoleScale or RoleScaleInv (which multiply
// alike) and F32 dtype.
func (q *FP8Quantizer) Weight(name, scaleName, role string, layout Layout) *Weight {
	shape := []int64{q.rows, q.cols}
	return &Weight{
		Name: name, Shape: shape, Elem: q.elem, Layout: layout,
		Data: Stored{Name: name, DType: q.elem, Shape: slices.Clone(shape)},
		Scales: []Scale{{Role: role, Block: q.Block(),
			Stored: Stored{Name: scaleName, DType: dtype.F32, Shape: q.ScaleShape()}}},
	}
}
