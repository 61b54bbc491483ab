package dtype

import "fmt"

// Options control a conversion.
type Options struct {
	// Saturate makes every float output finite or NaN (OCP "SAT", NVIDIA
	// "SATFINITE"): finite values beyond the target's range and infinities
	// become ±max of the target, for every float target (F8_E8M0: +max, its
	// values are positive). NaN stays NaN. Without it, overflow follows the
	// target's rule (see the package documentation).
	Saturate bool
	// Workers bounds the goroutines a large conversion is split across:
	// 0 means GOMAXPROCS, 1 means the calling goroutine only.
	Workers int
	// Streaming tells that dst is one piece of a large output written
	// piece by piece (a loader filling an arena much larger than the
	// caches) and will not be read again soon: the vector kernels then
	// write it with non-temporal stores whatever the size of this call,
	// which saves the read of dst into the caches before each write and
	// keeps the output from evicting everything else. Outputs of 4 MiB and
	// more are written so without it. It changes no value and no Stats;
	// where the build has no such stores (arm64, purego, other
	// architectures) it does nothing. Leave it unset when the caller reads
	// dst right after the call: the output would then come from memory
	// instead of the caches.
	Streaming bool
}

// Stats tell what a conversion did to the values. Counts are numbers of
// values: for C64 sources each of the two components counts. They are what
// tells a user that FP16 activations or FP8 weights went out of range.
type Stats struct {
	// Elements is the number of values converted.
	Elements int64
	// NaN counts outputs that are NaN, whether the input was NaN or the
	// target's rule produced it (F8_E4M3 and FNUZ overflow, F8_E8M0 zero and
	// negatives), plus NaN inputs of targets without NaN (F4, F6: a zero;
	// integers: 0; BOOL: 1).
	NaN int64
	// Inf counts outputs that are ±Inf, whether the input was infinite or a
	// finite value overflowed.
	Inf int64
	// Overflow counts finite inputs whose magnitude, rounded to the target's
	// precision with an unbounded exponent, exceeds the target's largest
	// finite value, whatever the result (Inf, NaN or ±max); for integer
	// targets, values outside the range after truncation.
	Overflow int64
	// Saturated counts outputs clamped to ±max (float targets) or to the
	// integer range: finite overflow under Saturate or on a target without
	// Inf and NaN (F4, F6), and infinite inputs turned into ±max.
	Saturated int64
	// Underflow counts nonzero finite inputs that became zero (for integer
	// targets: truncated to 0).
	Underflow int64
	// MaxAbs is the largest magnitude among the finite inputs (0 when there
	// are none).
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

// String summarizes the counters on one line.
func (s Stats) String() string {
	return fmt.Sprintf("%d elements: %d NaN, %d Inf, %d overflow, %d saturated, %d underflow, max |x| %g",
		s.Elements, s.NaN, s.Inf, s.Overflow, s.Saturated, s.Underflow, s.MaxAbs)
}
