package dtype

import "fmt"

// Options control a conversion.
type Options struct {
	// Saturate clamps finite values beyond the target's range, and infinities
	// when the target has none, to ±max (OCP "SAT", NVIDIA "SATFINITE")
	// instead of producing Inf or NaN. NaN stays NaN.
	Saturate bool
	// Workers bounds the goroutines a large conversion is split across:
	// 0 means GOMAXPROCS, 1 means the calling goroutine only.
	Workers int
}

// Stats tell what a conversion did to the values. Counts are element counts
// (for C64 each of the two components counts). They are what tells a user
// that FP16 activations or FP8 weights went out of range.
type Stats struct {
	// Elements is the number of values converted.
	Elements int64
	// NaN counts outputs that are NaN, whether the input was NaN or the
	// target's overflow rule produced it (F8_E4M3 without saturation).
	NaN int64
	// Inf counts outputs that are ±Inf, whether the input was infinite or a
	// finite value overflowed.
	Inf int64
	// Overflow counts finite inputs whose rounded magnitude exceeds the
	// target's largest finite value (whatever the result: Inf, NaN or ±max).
	Overflow int64
	// Saturated counts outputs clamped to ±max: finite overflow and, in
	// saturating mode, infinities of a target without them. For integer
	// targets it counts values clamped to the integer range.
	Saturated int64
	// Underflow counts nonzero finite inputs that became zero.
	Underflow int64
	// MaxAbs is the largest finite magnitude in the input.
	MaxAbs float64
}

// Add merges o into s (for conversions split into parts).
func (s *Stats) Add(o Stats) {
	s.Elements += o.Elements
	s.NaN += o.NaN
	s.Inf += o.Inf
	s.Overflow += o.Overflow
	s.Saturated += o.Saturated
	s.Underflow += o.Underflow
	if o.MaxAbs > s.MaxAbs {
		s.MaxAbs = o.MaxAbs
	}
}

// Lossy reports whether any value overflowed, saturated, underflowed or
// became NaN or Inf.
func (s Stats) Lossy() bool {
	return s.NaN+s.Inf+s.Overflow+s.Saturated+s.Underflow > 0
}

func (s Stats) String() string {
	return fmt.Sprintf("%d elements: %d NaN, %d Inf, %d overflow, %d saturated, %d underflow, max |x| %g",
		s.Elements, s.NaN, s.Inf, s.Overflow, s.Saturated, s.Underflow, s.MaxAbs)
}
