// Package fpkern holds the numeric inner loops of quantization and of the
// conversion report: quotients rounded to odd (for rounding x / scale once
// to a narrow type) and the comparison of source values with their
// rounded outputs. Each has a portable implementation and, on amd64 with
// AVX, a vector one that gives the same results (the sums up to the order
// of their additions); the purego build tag keeps the portable code.
package fpkern

import "math"

// ToOdd writes into dst (at least len(x) long) the quotients x[i] / s
// rounded to F32 to odd: of the two F32 values around the exact quotient,
// the one whose last bit is 1, or the quotient itself when it is an F32.
// Rounding to odd with at least two extra bits makes a second rounding to
// a narrower type (an FP8 code) the single rounding of the exact quotient.
// s must be a positive finite F32; NaN and infinite x give NaN and
// infinite quotients.
func ToOdd(dst, x []float32, s float32) {
	dst = dst[:len(x)]
	n := toOddVec(dst, x, float64(s))
	toOddGo(dst[n:], x[n:], float64(s))
}

func toOddGo(dst, x []float32, s64 float64) {
	r64 := 1 / s64
	dst = dst[:len(x)]
	for j, v := range x {
		// f is the F32 nearest to x × (1/s), which lies within 2^-52 of
		// x / s: one of the two F32 values around the exact quotient (or
		// the quotient itself when it is an F32). d = f×s − x is exact (a
		// 48-bit product and a 24-bit value within a factor of two of each
		// other), so its sign says on which side of x / s f lies. Round to
		// odd: truncate toward zero, then set the last bit when f is not the
		// exact quotient; without branches, the conditions being
		// unpredictable.
		xv := float64(v)
		f := float32(xv * r64)
		d := float64(f)*s64 - xv
		b := math.Float32bits(f)
		var dec, odd uint32
		if d*float64(f) > 0 { // f beyond the quotient, away from zero
			dec = 1
		}
		if d*d > 0 { // inexact (not for NaN, nor for an infinite x)
			odd = 1
		}
		dst[j] = math.Float32frombits((b - dec) | odd)
	}
}

// Acc accumulates the comparison of source values x with outputs y×s.
type Acc struct {
	// NaN and Inf count the outputs that are NaN or infinite where x is
	// finite; elements whose x is NaN or infinite are not compared.
	NaN, Inf int64
	// MaxAbs is the largest |x − y×s|, MaxRel the largest |x − y×s| / |x|
	// (x ≠ 0), SumSqErr and SumSq add up (x − y×s)² and x², over the
	// elements whose x and y×s are finite.
	MaxAbs, MaxRel  float64
	SumSqErr, SumSq float64
}

// Measure compares x with y×s (s = 1 for a cast, the scale for a
// quantized run: y holds the decoded codes, so y×s is computed exactly in
// float64) and adds the result to a.
func Measure(x, y []float32, s float64, a *Acc) {
	y = y[:len(x)]
	for len(x) > 0 {
		n := measureVec(x, y, s, a)
		x, y = x[n:], y[n:]
		if len(x) == 0 {
			break
		}
		// A block the vector code left: a non-finite value, or a new
		// largest relative error.
		k := min(len(x), 4)
		measureGo(x[:k], y[:k], s, a)
		x, y = x[k:], y[k:]
	}
}

// Measure64 is Measure for float64 values.
func Measure64(x, y []float64, s float64, a *Acc) { measureGo(x, y, s, a) }

// measureGo is the portable comparison, for float32 and float64 values
// alike (a float32 converts to float64 exactly).
func measureGo[T float32 | float64](x, y []T, s float64, a *Acc) {
	y = y[:len(x)]
	maxAbs, maxRel := a.MaxAbs, a.MaxRel
	var sse, ss float64
	for i, v := range x {
		xv := float64(v)
		av := math.Abs(xv)
		if !(av <= math.MaxFloat64) {
			continue
		}
		d := float64(y[i]) * s
		if !(math.Abs(d) <= math.MaxFloat64) {
			if d != d {
				a.NaN++
			} else {
				a.Inf++
			}
			continue
		}
		e := math.Abs(xv - d)
		sse += e * e
		ss += xv * xv
		maxAbs = max(maxAbs, e)
		if e > maxRel*av && av != 0 {
			maxRel = e / av
		}
	}
	a.MaxAbs, a.MaxRel = maxAbs, maxRel
	a.SumSqErr += sse
	a.SumSq += ss
}

// AbsMax returns the largest finite magnitude in x (0 when there is
// none): NaN and infinite values are left out.
func AbsMax(x []float32) float32 {
	m, n := absMaxVec(x)
	for _, v := range x[n:] {
		a := math.Float32frombits(math.Float32bits(v) &^ (1 << 31))
		if a > m && a <= math.MaxFloat32 { // NaN fails both comparisons
			m = a
		}
	}
	return m
}
