package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/executor"
)

// BenchmarkLinear reports GFLOP/s of Executor.Linear (2·M·N·K per op) with
// BF16 activations and output, for F32, BF16 and block-FP8 weights whose
// F32 values are cached after the first call (steady state), so that the
// figure adds the activation conversions to the product's.
func BenchmarkLinear(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	e := newEx(b)
	const m, n, k = 64, 1024, 1024
	_, xb := randVals(b, r, dtype.BF16, m*k, 1)
	x := upload(b, e, xb, dtype.BF16, "x", m, k)
	weights := map[string]*executor.Weight{}
	for _, wdt := range []dtype.DType{dtype.F32, dtype.BF16} {
		_, wb := randVals(b, r, wdt, n*k, 0.03)
		weights[wdt.String()] = &executor.Weight{Data: upload(b, e, wb, wdt, "w", n, k)}
	}
	weights["F8_E4M3-block128"], _ = quantWeight(b, e, r, scaleLayouts[3], dtype.F8_E4M3, n, k, finiteCodes(r, dtype.F8_E4M3, n*k))
	for _, name := range []string{"F32", "BF16", "F8_E4M3-block128"} {
		w := weights[name]
		b.Run(fmt.Sprintf("%dx%dx%d/%s", m, n, k, name), func(b *testing.B) {
			y, err := e.Linear(ctx, x, w, nil, dtype.BF16) // fills the weight cache
			if err != nil {
				b.Fatal(err)
			}
			_ = e.Free(y)
			b.ResetTimer()
			for range b.N {
				y, err := e.Linear(ctx, x, w, nil, dtype.BF16)
				if err != nil {
					b.Fatal(err)
				}
				_ = e.Free(y)
			}
			b.ReportMetric(2*m*n*k*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
