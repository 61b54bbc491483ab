package fpkern

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// values returns n float32 values of every kind: normal over the whole
// exponent range, subnormal, zeros of both signs, NaN and infinities.
func values(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		switch rng.IntN(40) {
		case 0:
			x[i] = float32(math.NaN())
		case 1:
			x[i] = float32(math.Inf(1 - 2*rng.IntN(2)))
		case 2:
			x[i] = float32(math.Copysign(0, float64(1-2*rng.IntN(2))))
		case 3:
			x[i] = math.Float32frombits(rng.Uint32() & 0x807fffff) // subnormal
		default:
			x[i] = math.Float32frombits(rng.Uint32())
			if x[i] != x[i] {
				x[i] = 1
			}
		}
	}
	return x
}

// refToOdd rounds x / s to odd with exact rationals.
func refToOdd(x, s float32) float32 {
	if x != x || math.IsInf(float64(x), 0) || x == 0 {
		return float32(float64(x) / float64(s)) // NaN, ±Inf, ±0
	}
	q := new(big.Rat).Quo(new(big.Rat).SetFloat64(float64(x)), new(big.Rat).SetFloat64(float64(s)))
	f, _ := q.Float32() // nearest
	fr := new(big.Rat)
	if math.IsInf(float64(f), 0) {
		return math.Float32frombits(math.Float32bits(f) - 1 | 1)
	}
	fr.SetFloat64(float64(f))
	c := fr.Cmp(q)
	if c == 0 {
		return f
	}
	b := math.Float32bits(f)
	if (c > 0) == (q.Sign() > 0) { // f beyond the quotient, away from zero
		b--
	}
	return math.Float32frombits(b | 1)
}

func TestToOdd(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	x := values(rng, 20003)
	for _, s := range []float32{1, 3, 0.0066964286, 1e-30, 7e20, math.SmallestNonzeroFloat32} {
		got, gen := make([]float32, len(x)), make([]float32, len(x))
		ToOdd(got, x, s)
		toOddGo(gen, x, float64(s))
		for i := range x {
			if math.Float32bits(got[i]) != math.Float32bits(gen[i]) && !(got[i] != got[i] && gen[i] != gen[i]) {
				t.Fatalf("s %g: x %g: vector %g (%#x), portable %g (%#x)", s, x[i], got[i], math.Float32bits(got[i]), gen[i], math.Float32bits(gen[i]))
			}
			if i%7 == 0 {
				if want := refToOdd(x[i], s); math.Float32bits(got[i]) != math.Float32bits(want) && !(want != want && got[i] != got[i]) {
					t.Fatalf("s %g: x %g (%#x): %g (%#x), exact round to odd %g (%#x)", s, x[i], math.Float32bits(x[i]), got[i], math.Float32bits(got[i]), want, math.Float32bits(want))
				}
			}
		}
	}
}

// TestMeasureExact checks Measure against values worked out by hand, so
// that the portable loop (the reference of TestMeasure) is checked too.
func TestMeasureExact(t *testing.T) {
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	// Element by element: exact; error 0.5 (relative 0.25); infinite
	// output; NaN source (not compared); NaN output. Repeated to length 10
	// so that the vector code runs over whole blocks too.
	x := []float32{1, -2, 4, nan, 3, 1, -2, 4, nan, 3}
	y := []float32{1, -2.5, inf, 1, nan, 1, -2.5, inf, 1, nan}
	want := Acc{NaN: 2, Inf: 2, MaxAbs: 0.5, MaxRel: 0.25, SumSqErr: 0.5, SumSq: 10}
	var got Acc
	Measure(x, y, 1, &got)
	if got != want {
		t.Errorf("Measure: %+v, want %+v", got, want)
	}
	x64, y64 := make([]float64, len(x)), make([]float64, len(y))
	for i := range x {
		x64[i], y64[i] = float64(x[i]), float64(y[i])
	}
	var got64 Acc
	Measure64(x64, y64, 1, &got64)
	if got64 != want {
		t.Errorf("Measure64: %+v, want %+v", got64, want)
	}
}

func TestMeasure(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 3, 4, 17, 10001} {
		x := make([]float32, n)
		y := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
			y[i] = x[i] * float32(1+rng.NormFloat64()*1e-3)
			switch rng.IntN(500) {
			case 0:
				y[i] = float32(math.NaN())
			case 1:
				y[i] = float32(math.Inf(1))
			case 2:
				x[i] = float32(math.NaN())
			case 3:
				x[i] = 0
				y[i] = 0
			}
		}
		for _, s := range []float64{1, 0.5, 3.25} {
			var got, want Acc
			Measure(x, y, s, &got)
			measureGo(x, y, s, &want)
			close := func(a, b float64) bool { return math.Abs(a-b) <= 1e-12*math.Abs(b) }
			if got.NaN != want.NaN || got.Inf != want.Inf || got.MaxAbs != want.MaxAbs || got.MaxRel != want.MaxRel ||
				!close(got.SumSqErr, want.SumSqErr) || !close(got.SumSq, want.SumSq) {
				t.Errorf("n %d s %g: %+v, want %+v", n, s, got, want)
			}
			x64, y64 := make([]float64, n), make([]float64, n)
			for i := range x {
				x64[i], y64[i] = float64(x[i]), float64(y[i])
			}
			var got64 Acc
			Measure64(x64, y64, s, &got64)
			if got64.NaN != want.NaN || got64.MaxAbs != want.MaxAbs || got64.MaxRel != want.MaxRel {
				t.Errorf("n %d s %g: Measure64 %+v, want %+v", n, s, got64, want)
			}
		}
	}
}

// BenchmarkToOdd rounds 64K quotients. Baseline in the same run: the
// portable loop (what the purego tag and other architectures run).
func BenchmarkToOdd(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, 1<<16)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	dst := make([]float32, len(x))
	const s = 0.0066964286
	b.Run("baseline=portable", func(b *testing.B) {
		b.SetBytes(int64(4 * len(x)))
		for range b.N {
			toOddGo(dst, x, s)
		}
	})
	b.Run("ToOdd", func(b *testing.B) {
		b.SetBytes(int64(4 * len(x)))
		for range b.N {
			ToOdd(dst, x, s)
		}
	})
}

// BenchmarkMeasure compares 64K values with their outputs. Baseline in the
// same run: the portable loop.
func BenchmarkMeasure(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, 1<<16)
	y := make([]float32, len(x))
	for i := range x {
		x[i] = float32(rng.NormFloat64())
		y[i] = x[i] * float32(1+rng.NormFloat64()*1e-3)
	}
	b.Run("baseline=portable", func(b *testing.B) {
		b.SetBytes(int64(4 * len(x)))
		for range b.N {
			var a Acc
			measureGo(x, y, 1, &a)
		}
	})
	b.Run("Measure", func(b *testing.B) {
		b.SetBytes(int64(4 * len(x)))
		for range b.N {
			var a Acc
			Measure(x, y, 1, &a)
		}
	})
}

func TestAbsMax(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{0, 5, 8, 9, 1000} {
		x := values(rng, n)
		var want float32
		for _, v := range x {
			a := float32(math.Abs(float64(v)))
			if a > want && a <= math.MaxFloat32 {
				want = a
			}
		}
		if got := AbsMax(x); got != want {
			t.Errorf("n %d: %g, want %g", n, got, want)
		}
	}
}
