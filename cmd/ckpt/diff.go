package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/pagecache"
)

func diffCommand() *command {
	c := &command{
		remote:  true,
		name:    "diff",
		args:    "A B",
		summary: "compare two checkpoints tensor by tensor (names, shapes, dtypes, values)",
		help: `Compares A and B — each a file, an index, a component folder or a pipeline
(anything the loader opens; pipelines are compared component by component,
names being COMPONENT/NAME) — tensor by tensor, as stored (scaled
low-precision weights as their narrow data, their scales as tensors of
their own). It reports the names present on one side only, shapes and
dtypes that differ, and for tensors of the same shape the largest absolute
error max|a−b| and relative error max|a−b|/|b|, the values of both sides
widened to F64 (exactly, for every dtype but 64-bit integers compared with
another dtype; two I64 or two U64 tensors are compared exactly).

A tensor's values differ when any element has |a − b| > atol + rtol·|b|, the
rule of NumPy's allclose (b is B's value); the defaults 0 and 0 ask for equal
values. Equal infinities are equal, -0 equals +0. NaN equals nothing, as
with allclose's default equal_nan=False, so a checkpoint holding NaNs
differs from itself; --equal-nan makes a NaN equal to a NaN (and nothing
else). A dtype difference alone (F32 values that BF16 holds exactly) counts
only with --strict-dtype. Complex (C64) tensors are compared component by
component; a complex tensor and a real one differ.

--dtype D loads both sides under that target instead (the loader's policy:
float tensors cast to D, integers and bool left alone), so that a model
quantized to FP8 with scales compares with its F32 source: with a float D
its scaled weights are dequantized and their scale tensors consumed.

Memory stays small whatever the size of the checkpoints: one tensor of
each side at a time, compared in chunks straight from the file mappings,
whose pages are dropped from the resident set as the comparison passes
them (on a network file system, where the loader reads with pread, and for
tensors that --dtype converts, one tensor of each side is in memory at a
time).

The report lists the tensors that differ, the worst first (missing names
and shapes, then values by largest absolute error, then dtypes), up to
--top of them; --json prints every tensor's comparison. For a tensor whose
values differ it shows the worst element: of those that break the rule,
the one that breaks it by the most, that is with the largest ratio
|a − b| / (atol + rtol·|b|) of its error to its tolerance (ties, as when
both tolerances are 0, go to the larger excess |a − b| − (atol + rtol·|b|),
then to the first element; a NaN or infinity mismatch breaks the rule by an
unbounded amount). Beside it, when another element has it, the largest
absolute error, which may be within its tolerance.

Exit status: 0 when nothing differs, 1 when something does, 2 for usage
errors and when a checkpoint cannot be opened or read.

Examples:
  ckpt diff model.safetensors converted.safetensors
  ckpt diff ./pipeline-f32 ./pipeline-bf16 --rtol 1e-2 --atol 1e-3
  ckpt diff ./run/checkpoint-100 ./run/checkpoint-200 --json
  ckpt diff ./model-f32 ./model-fp8 --dtype F32 --rtol 0.07 --atol 1e-4

In the last, --rtol 0.07 covers FP8 E4M3's 3-bit mantissa and --atol 1e-4
the fixed step it has below 2^-6 of a weight's scale (max|w|/448 of its
block or channel), where tiny weights lose more than 7% (up to
scale·2^-10, 2.2e-6·max|w|; an FP8 cast without scales needs --atol 1e-3).`,
	}
	c.run = func(e *env, args []string) error {
		fs := newFlags(e, c)
		var o diffOptions
		fs.Float64Var(&o.atol, "atol", 0, "absolute tolerance `X`")
		fs.Float64Var(&o.rtol, "rtol", 0, "relative tolerance `Y` (of B's value)")
		fs.BoolVar(&o.strictDType, "strict-dtype", false, "count a dtype difference alone as a difference")
		fs.BoolVar(&o.equalNaN, "equal-nan", false, "a NaN equals a NaN (default: NaN equals nothing, as NumPy's allclose)")
		jsonOut := fs.Bool("json", false, "print the comparison as JSON")
		top := fs.Int("top", 20, "list at most `N` differing tensors (0: all)")
		variantName := fs.String("variant", "", "precision variant `V` of folders and pipelines, on both sides")
		var target targetFlag
		fs.Var(&target, "dtype", "load both sides with target `D` (F32: scaled FP8/FP4 weights dequantized, their scales consumed) instead of as stored")
		follow := followFlag(fs)
		pos, err := parseFlags(e, c, fs, args)
		if err != nil {
			return err
		}
		if len(pos) != 2 {
			return usageError{msg: "diff takes two checkpoints, A and B"}
		}
		for _, f := range []struct {
			name string
			v    float64
		}{{"--atol", o.atol}, {"--rtol", o.rtol}} {
			if !(f.v >= 0) || math.IsInf(f.v, 0) {
				return usageError{msg: fmt.Sprintf("%s %v: want a finite number ≥ 0", f.name, f.v)}
			}
		}
		if *top < 0 {
			return usageError{msg: fmt.Sprintf("--top %d: want 0 (all) or more", *top)}
		}
		opts := []ckpt.Option{ckpt.WithVariant(*variantName), ckpt.WithDType(ckpt.AsStored), ckpt.WithScaleTensors()}
		if target.set && target.t != ckpt.AsStored {
			opts = []ckpt.Option{ckpt.WithVariant(*variantName), ckpt.WithDType(target.t)}
		}
		if *follow {
			opts = append(opts, ckpt.WithFollowSymlinks())
		}
		trouble := func(err error) error {
			fmt.Fprintf(e.stderr, "ckpt diff: %v\n", withHint(err))
			return exitError{2}
		}
		ma, err := ckpt.Open(pos[0], opts...)
		if err != nil {
			return trouble(err)
		}
		defer ma.Close()
		mb, err := ckpt.Open(pos[1], opts...)
		if err != nil {
			return trouble(err)
		}
		defer mb.Close()
		rep, err := diffModels(context.Background(), ma, mb, o)
		if err != nil {
			return trouble(err)
		}
		rep.A, rep.B = pos[0], pos[1]
		if *jsonOut {
			if err := e.printJSON(rep); err != nil {
				return err
			}
		} else {
			rep.print(e.stdout, *top)
		}
		if rep.Differ {
			return exitError{1}
		}
		return nil
	}
	return c
}

// diffOptions are the comparison rule.
type diffOptions struct {
	atol, rtol            float64
	strictDType, equalNaN bool
}

// diffReport is the comparison of two checkpoints (the --json output).
type diffReport struct {
	A           string  `json:"a"`
	B           string  `json:"b"`
	ATol        float64 `json:"atol"`
	RTol        float64 `json:"rtol"`
	EqualNaN    bool    `json:"equal_nan"`
	StrictDType bool    `json:"strict_dtype"`
	// Differ is whether anything differs (the exit status is 1).
	Differ bool `json:"differ"`
	// Counts of tensors by outcome.
	Compared     int `json:"compared"`
	Equal        int `json:"equal"`
	OnlyInA      int `json:"only_in_a"`
	OnlyInB      int `json:"only_in_b"`
	ShapeDiffers int `json:"shape_differs"`
	ValuesDiffer int `json:"values_differ"`
	DTypeDiffers int `json:"dtype_differs"` // counted as differences only with strict_dtype
	// Worst names the differing tensors, the worst first.
	Worst   []string      `json:"worst"`
	Tensors []*tensorDiff `json:"tensors"`
}

// tensorDiff is the comparison of one tensor.
type tensorDiff struct {
	Name string `json:"name"`
	// Status is "equal", "differs", "only_in_a" or "only_in_b".
	Status string `json:"status"`
	// Reasons say what differs: "shape", "dtype", "values",
	// "incomparable" (a complex tensor and a real one).
	Reasons []string `json:"reasons,omitempty"`
	DTypeA  string   `json:"dtype_a,omitempty"`
	DTypeB  string   `json:"dtype_b,omitempty"`
	ShapeA  []int64  `json:"shape_a,omitempty"`
	ShapeB  []int64  `json:"shape_b,omitempty"`
	// Elements compared, and how many break the rule.
	Elements  int64 `json:"elements"`
	Differing int64 `json:"differing"`
	// NaNMismatch counts elements where one side is NaN and the other is
	// not (or both are, without --equal-nan); InfMismatch those where an
	// infinity meets another value.
	NaNMismatch int64 `json:"nan_mismatch,omitempty"`
	InfMismatch int64 `json:"inf_mismatch,omitempty"`
	// MaxAbs is max|a−b| and MaxRel max|a−b|/|b| over the elements where
	// both are finite ("inf" when b is 0 and a is not).
	MaxAbs jsonFloat `json:"max_abs"`
	MaxRel jsonFloat `json:"max_rel"`
	// Worst is the element that breaks the rule by the most, both values
	// and their |a−b| (exact for two I64 or U64 tensors); absent when no
	// element breaks the rule. "The most" is the largest WorstRatio,
	// |a−b| / (atol + rtol·|b|) ("inf" when that tolerance is 0, and for
	// a NaN or infinity mismatch); ties go to the larger excess
	// |a−b| − (atol + rtol·|b|) (a mismatch's being unbounded), then to
	// the first element.
	Worst      []int64    `json:"worst_index,omitempty"`
	WorstA     *jsonFloat `json:"worst_a,omitempty"`
	WorstB     *jsonFloat `json:"worst_b,omitempty"`
	WorstAbs   *jsonFloat `json:"worst_abs,omitempty"`
	WorstRatio *jsonFloat `json:"worst_ratio,omitempty"`
	// MaxAbsIndex is the (first) element whose |a−b| is MaxAbs, and both
	// values; it may be within its tolerance. Absent when no two finite
	// elements differ.
	MaxAbsIndex []int64    `json:"max_abs_index,omitempty"`
	MaxAbsA     *jsonFloat `json:"max_abs_a,omitempty"`
	MaxAbsB     *jsonFloat `json:"max_abs_b,omitempty"`

	differs bool
}

// jsonFloat is a float64 that JSON holds even when infinite or NaN (as
// the strings "inf", "-inf", "nan").
type jsonFloat float64

func (f jsonFloat) MarshalJSON() ([]byte, error) {
	v := float64(f)
	switch {
	case math.IsNaN(v):
		return []byte(`"nan"`), nil
	case math.IsInf(v, 1):
		return []byte(`"inf"`), nil
	case math.IsInf(v, -1):
		return []byte(`"-inf"`), nil
	}
	return strconv.AppendFloat(nil, v, 'g', -1, 64), nil
}

// UnmarshalJSON reads what MarshalJSON writes.
func (f *jsonFloat) UnmarshalJSON(b []byte) error {
	switch string(b) {
	case `"nan"`:
		*f = jsonFloat(math.NaN())
	case `"inf"`:
		*f = jsonFloat(math.Inf(1))
	case `"-inf"`:
		*f = jsonFloat(math.Inf(-1))
	default:
		v, err := strconv.ParseFloat(string(b), 64)
		if err != nil {
			return fmt.Errorf("not a number: %s", b)
		}
		*f = jsonFloat(v)
	}
	return nil
}

// diffModels compares every tensor of a and b: names in A's order, then
// those only B has.
func diffModels(ctx context.Context, a, b *ckpt.Model, o diffOptions) (*diffReport, error) {
	rep := &diffReport{ATol: o.atol, RTol: o.rtol, EqualNaN: o.equalNaN, StrictDType: o.strictDType, Tensors: []*tensorDiff{}}
	namesA, namesB := a.Names(), b.Names()
	inA := make(map[string]bool, len(namesA))
	for _, n := range namesA {
		inA[n] = true
	}
	inB := make(map[string]bool, len(namesB))
	for _, n := range namesB {
		inB[n] = true
	}
	// A tensor only one side has is described from that side's items:
	// its dtype and shape, no data read.
	var planA, planB map[string]*ckpt.Item
	var err error
	for _, n := range namesA {
		if !inB[n] {
			if planA == nil {
				if planA, err = planned(a); err != nil {
					return nil, err
				}
			}
			t := planA[n]
			rep.add(&tensorDiff{Name: n, Status: "only_in_a", DTypeA: t.DType.String(), ShapeA: t.Shape, differs: true})
			continue
		}
		d, err := diffTensor(ctx, a, b, n, o)
		if err != nil {
			return nil, err
		}
		rep.add(d)
	}
	for _, n := range namesB {
		if !inA[n] {
			if planB == nil {
				if planB, err = planned(b); err != nil {
					return nil, err
				}
			}
			t := planB[n]
			rep.add(&tensorDiff{Name: n, Status: "only_in_b", DTypeB: t.DType.String(), ShapeB: t.Shape, differs: true})
		}
	}
	var worst []*tensorDiff
	for _, d := range rep.Tensors {
		if d.differs {
			worst = append(worst, d)
		}
	}
	slices.SortStableFunc(worst, func(x, y *tensorDiff) int {
		if c := cmp.Compare(severity(x), severity(y)); c != 0 {
			return c
		}
		return -cmp.Compare(badness(x), badness(y))
	})
	rep.Worst = []string{}
	for _, d := range worst {
		rep.Worst = append(rep.Worst, d.Name)
	}
	rep.Differ = len(worst) > 0
	return rep, nil
}

// planned returns the loader's decision for every tensor of m (dtype as
// loaded, shape) by the name Names gives it.
func planned(m *ckpt.Model) (map[string]*ckpt.Item, error) {
	items, err := m.Items()
	if err != nil {
		return nil, err
	}
	out := make(map[string]*ckpt.Item, len(items))
	for _, it := range items {
		out[it.Key] = it
	}
	return out, nil
}

// severity ranks what differs: missing names and shapes first, then
// values, then dtypes alone.
func severity(d *tensorDiff) int {
	switch {
	case d.Status != "equal" && d.Status != "differs":
		return 0
	case slices.Contains(d.Reasons, "shape"), slices.Contains(d.Reasons, "incomparable"):
		return 0
	case slices.Contains(d.Reasons, "values"):
		return 1
	}
	return 2
}

// badness orders tensors of one severity: NaN and infinity mismatches
// first, then by largest absolute error.
func badness(d *tensorDiff) float64 {
	if d.NaNMismatch+d.InfMismatch > 0 {
		return math.Inf(1)
	}
	return float64(d.MaxAbs)
}

func (r *diffReport) add(d *tensorDiff) {
	r.Tensors = append(r.Tensors, d)
	switch d.Status {
	case "only_in_a":
		r.OnlyInA++
		return
	case "only_in_b":
		r.OnlyInB++
		return
	}
	r.Compared++
	if slices.Contains(d.Reasons, "shape") || slices.Contains(d.Reasons, "incomparable") {
		r.ShapeDiffers++
	}
	if slices.Contains(d.Reasons, "values") {
		r.ValuesDiffer++
	}
	if slices.Contains(d.Reasons, "dtype") {
		r.DTypeDiffers++
	}
	if !d.differs {
		r.Equal++
	}
}

// diffTensor compares tensor name of both sides.
func diffTensor(ctx context.Context, a, b *ckpt.Model, name string, o diffOptions) (*tensorDiff, error) {
	ta, err := a.LoadTensor(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("A: %w", err)
	}
	tb, err := b.LoadTensor(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("B: %w", err)
	}
	d := &tensorDiff{Name: name, Status: "equal", DTypeA: ta.DType.String(), DTypeB: tb.DType.String(), ShapeA: ta.Shape, ShapeB: tb.Shape}
	if ta.DType != tb.DType {
		d.Reasons = append(d.Reasons, "dtype")
		if o.strictDType {
			d.differs = true
		}
	}
	if !slices.Equal(ta.Shape, tb.Shape) {
		d.Reasons = append(d.Reasons, "shape")
		d.differs = true
	} else if (ta.DType == dtype.C64) != (tb.DType == dtype.C64) {
		d.Reasons = append(d.Reasons, "incomparable")
		d.differs = true
	} else {
		if err := compareValues(ctx, d, ta, tb, o); err != nil {
			return nil, err
		}
		if d.Differing > 0 {
			d.Reasons = append(d.Reasons, "values")
			d.differs = true
		}
	}
	if d.differs {
		d.Status = "differs"
	}
	return d, nil
}

// diffChunk is the number of elements compared at a time (a multiple of
// 4, so that every chunk of F4 and F6 data starts on a byte).
const diffChunk = 1 << 16

// compareValues compares the elements of two tensors of the same shape,
// chunk by chunk.
func compareValues(ctx context.Context, d *tensorDiff, ta, tb *ckpt.Tensor, o diffOptions) error {
	ba, bb := ta.Bytes(), tb.Bytes()
	da, db := ta.DType, tb.DType
	n := ta.NumElements()
	if da == dtype.C64 { // both complex: compare the float32 components
		da, db, n = dtype.F32, dtype.F32, 2*n
	}
	d.Elements = n
	if n == 0 {
		return nil
	}
	exactInts := da == db && (da == dtype.I64 || da == dtype.U64)
	c := &comparer{d: d, o: o, worst: -1, maxAbs: -1}
	var fa, fb []float64
	if !exactInts {
		fa, fb = make([]float64, min(n, diffChunk)), make([]float64, min(n, diffChunk))
	}
	for first := int64(0); first < n; first += diffChunk {
		if err := ctx.Err(); err != nil {
			return err
		}
		k := min(int64(diffChunk), n-first)
		sa := ba[first*int64(da.Bits())/8 : (first+k)*int64(da.Bits())/8]
		sb := bb[first*int64(db.Bits())/8 : (first+k)*int64(db.Bits())/8]
		same := da == db && bytes.Equal(sa, sb)
		switch {
		case same && (o.equalNaN || !da.Info().HasNaN):
			// Equal bytes are equal values, unless NaN must differ from NaN.
		case same && c.equalNaNs(first, sa, da):
			// Equal bytes whose NaNs were counted without widening.
		case exactInts:
			c.ints(first, sa, sb, da == dtype.I64)
		default:
			if err := widen(fa[:k], sa, da); err != nil {
				return fmt.Errorf("%s (A): %w", d.Name, err)
			}
			if err := widen(fb[:k], sb, db); err != nil {
				return fmt.Errorf("%s (B): %w", d.Name, err)
			}
			c.floats(first, fa[:k], fb[:k])
		}
		if !ta.Location.Owned {
			pagecache.Drop(sa)
		}
		if !tb.Location.Owned {
			pagecache.Drop(sb)
		}
	}
	isComplex := ta.DType == dtype.C64
	if c.worst >= 0 {
		d.Worst = unravel(c.worst, ta.Shape, isComplex)
		wa, wb, wd, wr := jsonFloat(c.worstA), jsonFloat(c.worstB), jsonFloat(c.worstDist), jsonFloat(c.worstRatio)
		d.WorstA, d.WorstB, d.WorstAbs, d.WorstRatio = &wa, &wb, &wd, &wr
	}
	if c.maxAbs >= 0 {
		d.MaxAbsIndex = unravel(c.maxAbs, ta.Shape, isComplex)
		ma, mb := jsonFloat(c.maxAbsA), jsonFloat(c.maxAbsB)
		d.MaxAbsA, d.MaxAbsB = &ma, &mb
	}
	return nil
}

// widen converts src (dtype dt) to float64s exactly (64-bit integers
// round to the nearest float64).
func widen(dst []float64, src []byte, dt dtype.DType) error {
	_, err := dtype.Convert(dtype.Float64Bytes(dst), dtype.F64, src, dt, dtype.Options{Workers: 1})
	return err
}

// comparer accumulates one tensor's comparison.
type comparer struct {
	d *tensorDiff
	o diffOptions
	// The element that breaks the rule by the most (flat index, -1 when
	// none), by its ratio of error to tolerance, then its excess; its
	// values and their distance.
	worst                   int64
	worstRatio, worstExcess float64
	worstA, worstB          float64
	worstDist               float64
	// The element of the largest |a−b| (flat index, -1 when none).
	maxAbs           int64
	maxAbsA, maxAbsB float64
}

// differ records that finite elements i of A and B, a and b, are dist
// apart: the largest absolute and relative differences, and whether the
// allclose rule holds for them.
func (c *comparer) differ(i int64, dist, a, b float64) {
	d, o := c.d, c.o
	if dist > float64(d.MaxAbs) || c.maxAbs < 0 {
		d.MaxAbs = jsonFloat(dist)
		c.maxAbs, c.maxAbsA, c.maxAbsB = i, a, b
	}
	rel := math.Inf(1)
	if b != 0 {
		rel = dist / math.Abs(b)
	}
	if rel > float64(d.MaxRel) {
		d.MaxRel = jsonFloat(rel)
	}
	if tol := o.atol + o.rtol*math.Abs(b); dist > tol {
		d.Differing++
		c.violation(i, dist, dist/tol, dist-tol, a, b) // dist/0 is +Inf: dist > 0
	}
}

// mismatch records that elements i of A and B, a and b, are a NaN or
// infinity mismatch: they break the rule by an unbounded amount.
func (c *comparer) mismatch(i int64, a, b float64) {
	c.d.Differing++
	c.violation(i, math.Abs(a-b), math.Inf(1), math.Inf(1), a, b)
}

// violation records that element i, a and b dist apart, breaks the rule
// by ratio times its tolerance, by excess: it becomes the worst if it
// breaks it by more than the worst so far.
func (c *comparer) violation(i int64, dist, ratio, excess, a, b float64) {
	if c.worst < 0 || ratio > c.worstRatio || ratio == c.worstRatio && excess > c.worstExcess {
		c.worst, c.worstDist, c.worstRatio, c.worstExcess, c.worstA, c.worstB = i, dist, ratio, excess, a, b
	}
}

// equalNaNs counts the NaNs of a chunk whose bytes are the same on both
// sides (each differs, NaN equalling nothing), for the dtypes whose NaNs
// it can tell from their bits; false for the others, to be widened.
func (c *comparer) equalNaNs(first int64, b []byte, dt dtype.DType) bool {
	var width int
	var isNaN func(b []byte) bool
	switch dt {
	case dtype.F32:
		width, isNaN = 4, func(b []byte) bool { return binary.LittleEndian.Uint32(b)&0x7fffffff > 0x7f800000 }
	case dtype.F64:
		width, isNaN = 8, func(b []byte) bool { return binary.LittleEndian.Uint64(b)&(1<<63-1) > 0x7ff0000000000000 }
	case dtype.BF16:
		width, isNaN = 2, func(b []byte) bool { return binary.LittleEndian.Uint16(b)&0x7fff > 0x7f80 }
	case dtype.F16:
		width, isNaN = 2, func(b []byte) bool { return binary.LittleEndian.Uint16(b)&0x7fff > 0x7c00 }
	default:
		return false
	}
	for i := 0; i+width <= len(b); i += width {
		if isNaN(b[i:]) {
			c.d.NaNMismatch++
			c.mismatch(first+int64(i/width), math.NaN(), math.NaN())
		}
	}
	return true
}

// floats applies the allclose rule to a chunk that starts at element first.
func (c *comparer) floats(first int64, fa, fb []float64) {
	d, o := c.d, c.o
	for i, a := range fa {
		b := fb[i]
		if a == b {
			continue
		}
		switch {
		case math.IsNaN(a) || math.IsNaN(b):
			if o.equalNaN && math.IsNaN(a) && math.IsNaN(b) {
				continue
			}
			d.NaNMismatch++
			c.mismatch(first+int64(i), a, b)
			continue
		case math.IsInf(a, 0) || math.IsInf(b, 0):
			d.InfMismatch++
			c.mismatch(first+int64(i), a, b)
			continue
		}
		c.differ(first+int64(i), math.Abs(a-b), a, b)
	}
}

// ints compares a chunk of two I64 (signed) or two U64 tensors exactly:
// |a−b| is computed in integers and only then rounded to float64, so no
// difference is lost, however large the values.
func (c *comparer) ints(first int64, sa, sb []byte, signed bool) {
	for i := 0; i+8 <= len(sa); i += 8 {
		ua, ub := binary.LittleEndian.Uint64(sa[i:]), binary.LittleEndian.Uint64(sb[i:])
		if ua == ub {
			continue
		}
		var dist, a, b float64
		if signed {
			x, y := int64(ua), int64(ub)
			if x > y {
				dist = float64(uint64(x) - uint64(y)) // exact modulo 2^64, and x−y < 2^64
			} else {
				dist = float64(uint64(y) - uint64(x))
			}
			a, b = float64(x), float64(y)
		} else {
			dist = float64(max(ua, ub) - min(ua, ub))
			a, b = float64(ua), float64(ub)
		}
		c.differ(first+int64(i/8), dist, a, b)
	}
}

// unravel turns a flat element index into a multi-index of shape (for a
// complex tensor, whose components were compared, the element's index
// followed by 0 for the real part, 1 for the imaginary).
func unravel(i int64, shape []int64, complexParts bool) []int64 {
	part := int64(-1)
	if complexParts {
		i, part = i/2, i%2
	}
	idx := make([]int64, len(shape))
	for k := len(shape) - 1; k >= 0; k-- {
		if shape[k] > 0 {
			idx[k] = i % shape[k]
			i /= shape[k]
		}
	}
	if part >= 0 {
		idx = append(idx, part)
	}
	return idx
}

// print writes the report for people.
func (r *diffReport) print(w io.Writer, top int) {
	fmt.Fprintf(w, "A: %s\nB: %s\n", r.A, r.B)
	nan := "NaN equals nothing (--equal-nan: NaN equals NaN)"
	if r.EqualNaN {
		nan = "NaN equals NaN"
	}
	fmt.Fprintf(w, "rule: |a-b| <= %g + %g*|b|; %s\n", r.ATol, r.RTol, nan)
	fmt.Fprintf(w, "%d tensors compared: %d equal, %d with different values, %d with different shapes",
		r.Compared, r.Equal, r.ValuesDiffer, r.ShapeDiffers)
	if r.StrictDType {
		fmt.Fprintf(w, ", %d with different dtypes", r.DTypeDiffers)
	}
	fmt.Fprintf(w, "; %d only in A, %d only in B\n", r.OnlyInA, r.OnlyInB)
	if !r.StrictDType && r.DTypeDiffers > 0 {
		fmt.Fprintf(w, "%d tensors have different dtypes, not counted as differences (--strict-dtype counts them)\n", r.DTypeDiffers)
	}
	if !r.Differ {
		fmt.Fprintln(w, "no differences")
		return
	}
	byName := make(map[string]*tensorDiff, len(r.Tensors))
	for _, d := range r.Tensors {
		byName[d.Name] = d
	}
	list := r.Worst
	if top > 0 && len(list) > top {
		list = list[:top]
	}
	fmt.Fprintf(w, "\n%d tensors differ, the worst first:\n", len(r.Worst))
	for _, name := range list {
		fmt.Fprintf(w, "  %s: %s\n", name, byName[name].describe(r.ATol, r.RTol))
	}
	if len(list) < len(r.Worst) {
		fmt.Fprintf(w, "  ... and %d more (--top 0 lists them all)\n", len(r.Worst)-len(list))
	}
}

// index formats a multi-index as "i,j,k".
func index(idx []int64) string {
	parts := make([]string, len(idx))
	for i, v := range idx {
		parts[i] = strconv.FormatInt(v, 10)
	}
	return strings.Join(parts, ",")
}

// describe says in one line how a tensor differs under the rule
// |a−b| <= atol + rtol·|b|.
func (d *tensorDiff) describe(atol, rtol float64) string {
	shape := func(dt string, s []int64) string {
		parts := make([]string, len(s))
		for i, v := range s {
			parts[i] = strconv.FormatInt(v, 10)
		}
		return dt + "[" + strings.Join(parts, ",") + "]"
	}
	switch d.Status {
	case "only_in_a":
		return "only in A, " + shape(d.DTypeA, d.ShapeA)
	case "only_in_b":
		return "only in B, " + shape(d.DTypeB, d.ShapeB)
	}
	var parts []string
	sa, sb := shape(d.DTypeA, d.ShapeA), shape(d.DTypeB, d.ShapeB)
	if sa == sb {
		parts = append(parts, sa)
	} else {
		parts = append(parts, sa+" vs "+sb)
	}
	switch {
	case slices.Contains(d.Reasons, "shape"):
		parts = append(parts, "shapes differ")
	case slices.Contains(d.Reasons, "incomparable"):
		parts = append(parts, "a complex and a real tensor")
	case slices.Contains(d.Reasons, "values"):
		parts = append(parts, fmt.Sprintf("%d of %d elements differ", d.Differing, d.Elements))
		if d.NaNMismatch > 0 {
			parts = append(parts, fmt.Sprintf("%d NaN mismatches", d.NaNMismatch))
		}
		if d.InfMismatch > 0 {
			parts = append(parts, fmt.Sprintf("%d Inf mismatches", d.InfMismatch))
		}
		parts = append(parts, fmt.Sprintf("max abs %.4g, max rel %.4g", float64(d.MaxAbs), float64(d.MaxRel)))
		if d.WorstA != nil {
			a, b := float64(*d.WorstA), float64(*d.WorstB)
			worst := fmt.Sprintf("worst at [%s]: %.9g vs %.9g", index(d.Worst), a, b)
			if dist := float64(*d.WorstAbs); !math.IsNaN(dist) && !math.IsInf(dist, 0) {
				tol := atol + rtol*math.Abs(b)
				worst += fmt.Sprintf(" (|a-b| %.4g > %.4g allowed", dist, tol)
				if tol > 0 {
					worst += fmt.Sprintf(", %.3gx", float64(*d.WorstRatio))
				}
				worst += ")"
			}
			parts = append(parts, worst)
		}
		if d.MaxAbsA != nil && !slices.Equal(d.MaxAbsIndex, d.Worst) {
			a, b := float64(*d.MaxAbsA), float64(*d.MaxAbsB)
			within := "within its tolerance"
			if float64(d.MaxAbs) > atol+rtol*math.Abs(b) {
				within = "beyond its tolerance too"
			}
			parts = append(parts, fmt.Sprintf("largest |a-b| at [%s]: %.9g vs %.9g (%s)", index(d.MaxAbsIndex), a, b, within))
		}
	default:
		parts = append(parts, "dtypes differ, values equal")
	}
	return strings.Join(parts, ", ")
}
