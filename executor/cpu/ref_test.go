package cpu

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/executor"
	"github.com/ckpt-go/ckpt/executor/backend"
	"github.com/ckpt-go/ckpt/quant"
)

var ctx = context.Background()

func newEx(t testing.TB, opts ...executor.Option) *Executor {
	t.Helper()
	e, err := New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// randVals returns n normal values scaled by s, never zero, exactly
// representable in dt (rounded to it).
func randVals(t testing.TB, r *rand.Rand, dt dtype.DType, n int, s float64) ([]float64, []byte) {
	t.Helper()
	v := make([]float64, n)
	for i := range v {
		for v[i] == 0 {
			v[i] = r.NormFloat64() * s
		}
	}
	b := make([]byte, n*dt.Bits()/8)
	if _, err := dtype.EncodeFloat64(b, dt, v, dtype.Options{Saturate: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := dtype.DecodeFloat64(v, b, dt); err != nil {
		t.Fatal(err)
	}
	for i := range v {
		if v[i] == 0 { // underflowed in a narrow type: any nonzero code will do
			b2 := make([]byte, dt.Bits()/8)
			_, _ = dtype.EncodeFloat64(b2, dt, []float64{0.5}, dtype.Options{})
			copy(b[i*len(b2):], b2)
			v[i] = 0.5
		}
	}
	return v, b
}

func upload(t testing.TB, e *Executor, data []byte, dt dtype.DType, name string, shape ...int64) executor.Buffer {
	t.Helper()
	b, err := e.FromHost(ctx, data, dt, shape, name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func download(t testing.TB, e *Executor, b executor.Buffer) []float64 {
	t.Helper()
	raw := make([]byte, b.Bytes())
	if err := e.Download(ctx, b, raw); err != nil {
		t.Fatal(err)
	}
	n, _ := backend.Elements(b.Shape())
	v := make([]float64, n)
	if _, err := dtype.DecodeFloat64(v, raw, b.DType()); err != nil {
		t.Fatal(err)
	}
	return v
}

// unitRoundoff is half an ulp at 1 (relative rounding error) of dt.
func unitRoundoff(dt dtype.DType) float64 {
	switch dt {
	case dtype.BF16:
		return 0x1p-8
	case dtype.F16:
		return 0x1p-11
	}
	return 0x1p-24
}

// halfSubnormal is half the spacing of dt's subnormals: the absolute
// rounding error near zero.
func halfSubnormal(dt dtype.DType) float64 {
	switch dt {
	case dtype.BF16:
		return 0x1p-134
	case dtype.F16:
		return 0x1p-25
	}
	return 0x1p-150
}

// scaleLayout is one way to scale an FP8 weight of shape [n, k].
type scaleLayout struct {
	name   string
	layout quant.Layout
	role   string
	shape  func(n, k int64) []int64
	block  func(n, k int64) [2]int64
	// index returns the scale element of logical element (r, c).
	index func(r, c, n, k int64) int64
}

var scaleLayouts = []scaleLayout{
	{"per-tensor", quant.FP8Scaled, quant.RoleScale,
		func(n, k int64) []int64 { return []int64{} }, func(n, k int64) [2]int64 { return [2]int64{n, k} },
		func(r, c, n, k int64) int64 { return 0 }},
	{"per-channel", quant.FP8Scaled, quant.RoleScale,
		func(n, k int64) []int64 { return []int64{n, 1} }, func(n, k int64) [2]int64 { return [2]int64{1, k} },
		func(r, c, n, k int64) int64 { return r }},
	{"block-16x32", quant.DeepSeekFP8Block, quant.RoleScaleInv,
		func(n, k int64) []int64 { return []int64{(n + 15) / 16, (k + 31) / 32} }, func(n, k int64) [2]int64 { return [2]int64{16, 32} },
		func(r, c, n, k int64) int64 { return (r/16)*((k+31)/32) + c/32 }},
	{"block-128x128", quant.DeepSeekFP8Block, quant.RoleScaleInv,
		func(n, k int64) []int64 { return []int64{(n + 127) / 128, (k + 127) / 128} }, func(n, k int64) [2]int64 { return [2]int64{128, 128} },
		func(r, c, n, k int64) int64 { return (r/128)*((k+127)/128) + c/128 }},
}

// quantWeight builds an FP8 weight [n, k] with the given codes and scales
// (positive, varied, exact in F32) and returns it uploaded, with its exact
// values computed here in float64 (independently of package quant).
func quantWeight(t testing.TB, e *Executor, r *rand.Rand, l scaleLayout, elem dtype.DType, n, k int64, codes []byte) (*executor.Weight, []float64) {
	t.Helper()
	sshape := l.shape(n, k)
	ns := int64(1)
	for _, d := range sshape {
		ns *= d
	}
	scales := make([]float32, ns)
	for i := range scales {
		scales[i] = float32(math.Ldexp(1+float64(r.IntN(1<<20))/(1<<20), r.IntN(9)-6))
	}
	q := &quant.Weight{Name: "fc.weight", Shape: []int64{n, k}, Elem: elem, Layout: l.layout,
		Data: quant.Stored{Name: "fc.weight", DType: elem, Shape: []int64{n, k}},
		Scales: []quant.Scale{{Role: l.role, Stored: quant.Stored{Name: "fc.weight_scale", DType: dtype.F32, Shape: sshape},
			Block: l.block(n, k)}}}
	w := &executor.Weight{
		Data:   upload(t, e, codes, elem, "fc.weight", n, k),
		Scales: []executor.Buffer{upload(t, e, dtype.Float32Bytes(scales), dtype.F32, "fc.weight_scale", sshape...)},
		Quant:  q,
	}
	vals := make([]float64, n*k)
	if _, err := dtype.DecodeFloat64(vals, codes, elem); err != nil {
		t.Fatal(err)
	}
	for i := range vals {
		rr, c := int64(i)/k, int64(i)%k
		vals[i] *= float64(scales[l.index(rr, c, n, k)])
	}
	return w, vals
}

// finiteCodes returns n random FP8 codes that are neither NaN nor Inf nor
// zero.
func finiteCodes(r *rand.Rand, elem dtype.DType, n int64) []byte {
	c := make([]byte, n)
	one := make([]float64, 1)
	for i := range c {
		for {
			c[i] = byte(r.IntN(256))
			_, _ = dtype.DecodeFloat64(one, c[i:i+1], elem)
			if one[0] != 0 && !math.IsNaN(one[0]) && !math.IsInf(one[0], 0) && math.Abs(one[0]) <= 64 {
				break
			}
		}
	}
	return c
}

// linearRef computes y = x·Wᵀ + b in float64 and, per output, the bound of
// the error Linear may make: F32 summation of K products (each product and
// each weight value rounded to F32), the bias addition, and the final
// rounding to out.
func linearRef(x, w, b []float64, m, n, k int64, out dtype.DType) (y, tol []float64) {
	const u = 0x1p-24
	y, tol = make([]float64, m*n), make([]float64, m*n)
	for i := range m {
		for j := range n {
			var s, abs float64
			for p := range k {
				v := x[i*k+p] * w[j*k+p]
				s += v
				abs += math.Abs(v)
			}
			bias := 0.0
			if b != nil {
				bias = b[j]
			}
			s += bias
			// γ_(K+3) bounds the summation, the weight's and the product's
			// roundings (Higham), then one rounding to out.
			g := float64(k+3) * u / (1 - float64(k+3)*u)
			tol[i*n+j] = g*(abs+math.Abs(bias)) + unitRoundoff(out)*(math.Abs(s)+g*(abs+math.Abs(bias))) + halfSubnormal(out)
			y[i*n+j] = s
		}
	}
	return y, tol
}

// linearSeq is the documented F32 semantics written out: weight values and
// x in F32, products rounded to F32, summed in increasing k, bias added in
// F32, one rounding to out.
func linearSeq(t testing.TB, x, w, b []float64, m, n, k int64, out dtype.DType) []byte {
	y := make([]float32, m*n)
	for i := range m {
		for j := range n {
			var acc float32
			for p := range k {
				acc += float32(float32(x[i*k+p]) * float32(w[j*k+p]))
			}
			if b != nil {
				acc += float32(b[j])
			}
			y[i*n+j] = acc
		}
	}
	nb, _ := out.ByteLen(m * n)
	dst := make([]byte, nb)
	if _, err := dtype.EncodeFloat32(dst, out, y, dtype.Options{}); err != nil {
		t.Fatal(err)
	}
	return dst
}
