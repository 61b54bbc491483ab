package mlp

import (
	"context"
	"math"
	"testing"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/executor/cpu"
)

// The forward pass on the CPU executor, F32 activations, equals the same
// network computed here in float64 from the loaded (dequantized) weights,
// within F32 rounding; the FP8 variant differs from BF16 by a little.
func TestRunAgainstFloat64(t *testing.T) {
	ctx := context.Background()
	s := Shape{Blocks: 2, Hidden: 48, FFN: 96, Out: 5, FP8Block: 32}
	bf, f8, err := Build(ctx, t.TempDir(), s, 3)
	if err != nil {
		t.Fatal(err)
	}
	ex, err := cpu.New()
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	const rows = 3
	x := Input(rows, s.Hidden, 4)
	var outs [2][]float32
	for i, dir := range []string{bf, f8} {
		res, err := Run(ctx, ex, dir, x, rows, dtype.F32)
		if err != nil {
			t.Fatal(err)
		}
		if res.Weights != 4*s.Blocks+2 || len(res.Out) != rows*s.Out {
			t.Fatalf("%s: %d weights, %d outputs", dir, res.Weights, len(res.Out))
		}
		if (i == 1) != (len(res.Quantize) == 1 && res.Quantize[0] == "deepseek-fp8-block") {
			t.Fatalf("%s: quantized layouts %v", dir, res.Quantize)
		}
		want := reference(t, dir, x, rows, s)
		for j, g := range res.Out {
			if math.Abs(float64(g)-want[j]) > 1e-4*(1+math.Abs(want[j])) {
				t.Fatalf("%s: out[%d] = %v, float64 %v", dir, j, g, want[j])
			}
		}
		outs[i] = res.Out
	}
	diff, scale := MaxDiff(outs[1], outs[0])
	if diff == 0 || diff > 0.1*scale {
		t.Errorf("FP8 vs BF16: max diff %g of %g", diff, scale)
	}
	if n, _ := ex.Live(); n != 0 {
		t.Errorf("%d buffers left after Run", n)
	}
}

// reference computes the MLP in float64 with the weights loaded as F32.
func reference(t *testing.T, dir string, x []float32, rows int, s Shape) []float64 {
	m, err := ckpt.Open(dir, ckpt.WithDType(ckpt.To(dtype.F32)))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	get := func(name string) []float64 {
		tt, err := m.LoadTensor(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		f, _ := tt.Float32s()
		v := make([]float64, len(f))
		for i := range f {
			v[i] = float64(f[i])
		}
		return v
	}
	linear := func(h []float64, w, b []float64, n, k int) []float64 {
		y := make([]float64, rows*n)
		for i := range rows {
			for j := range n {
				acc := b[j]
				for p := range k {
					acc += h[i*k+p] * w[j*k+p]
				}
				y[i*n+j] = acc
			}
		}
		return y
	}
	rms := func(h, w []float64, d int) []float64 {
		y := make([]float64, len(h))
		for i := range rows {
			var ss float64
			for _, v := range h[i*d : (i+1)*d] {
				ss += v * v
			}
			r := 1 / math.Sqrt(ss/float64(d)+Eps)
			for j := range d {
				y[i*d+j] = h[i*d+j] * r
				if w != nil {
					y[i*d+j] *= w[j]
				}
			}
		}
		return y
	}
	d, f := s.Hidden, s.FFN
	h := make([]float64, len(x))
	for i := range x {
		h[i] = float64(x[i])
	}
	for b := range s.Blocks {
		p := "blocks." + string(rune('0'+b)) + ".mlp."
		a := linear(rms(h, nil, d), get(p+"fc1.weight"), get(p+"fc1.bias"), f, d)
		for i, v := range a {
			a[i] = 0.5 * v * (1 + math.Erf(v/math.Sqrt2))
		}
		o := linear(a, get(p+"fc2.weight"), get(p+"fc2.bias"), d, f)
		for i := range h {
			h[i] += o[i]
		}
	}
	return linear(rms(h, get("norm_out.weight"), d), get("proj_out.weight"), make([]float64, s.Out), s.Out, d)
}

func TestBlocks(t *testing.T) {
	names := []string{"blocks.0.mlp.fc1.weight", "blocks.3.mlp.fc1.weight", "blocks.7.attn.qkv.weight", "blocks.x.mlp.fc1.weight", "norm_out.weight"}
	if n := Blocks(names); n != 4 {
		t.Errorf("Blocks = %d", n)
	}
}
