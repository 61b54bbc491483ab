package cpu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/executor"
	"github.com/ckpt-go/ckpt/quant"
)

var activations = []dtype.DType{dtype.F32, dtype.BF16, dtype.F16}

// checkLinear runs Linear and checks it against float64 within the F32
// error bound and bit for bit against the documented F32 semantics.
func checkLinear(t *testing.T, e *Executor, r *rand.Rand, label string, w *executor.Weight, wv []float64, m, n, k int64) {
	t.Helper()
	for _, xdt := range activations {
		xv, xb := randVals(t, r, xdt, int(m*k), 1)
		x := upload(t, e, xb, xdt, "x", 2, m/2, k)
		for _, withBias := range []bool{false, true} {
			var bias executor.Buffer
			var bv []float64
			if withBias {
				bdt := activations[r.IntN(3)]
				var bb []byte
				bv, bb = randVals(t, r, bdt, int(n), 2)
				bias = upload(t, e, bb, bdt, "fc.bias", n)
			}
			for _, out := range activations {
				y, err := e.Linear(ctx, x, w, bias, out)
				if err != nil {
					t.Fatalf("%s x %s out %s: %v", label, xdt, out, err)
				}
				if y.DType() != out || fmt.Sprint(y.Shape()) != fmt.Sprint([]int64{2, m / 2, n}) || y.Name() != "fc.weight" {
					t.Fatalf("%s: output %s %v %q", label, y.DType(), y.Shape(), y.Name())
				}
				got := download(t, e, y)
				ref, tol := linearRef(xv, wv, bv, m, n, k, out)
				for i := range got {
					if math.Abs(got[i]-ref[i]) > tol[i] {
						t.Fatalf("%s x %s out %s bias %v: y[%d] = %v, float64 %v, error %g > bound %g",
							label, xdt, out, withBias, i, got[i], ref[i], math.Abs(got[i]-ref[i]), tol[i])
					}
				}
				raw := make([]byte, y.Bytes())
				_ = e.Download(ctx, y, raw)
				if !bytes.Equal(raw, linearSeq(t, xv, wv, bv, m, n, k, out)) {
					t.Fatalf("%s x %s out %s: not the documented F32 summation bit for bit", label, xdt, out)
				}
				mustFree(t, e, y)
			}
			if bias != nil {
				mustFree(t, e, bias)
			}
		}
		mustFree(t, e, x)
	}
}

func mustFree(t testing.TB, e *Executor, b executor.Buffer) {
	t.Helper()
	if err := e.Free(b); err != nil {
		t.Fatal(err)
	}
}

// Linear with plain weights of every weight dtype, every activation and
// output dtype, with and without bias, on fresh random inputs, against
// float64; sizes cross the tile edges.
func TestLinearPlainWeights(t *testing.T) {
	e := newEx(t)
	r := rand.New(rand.NewPCG(11, 12))
	const m, n, k = 6, 70, 300
	for _, wdt := range []dtype.DType{dtype.F32, dtype.BF16, dtype.F16, dtype.F8_E4M3, dtype.F8_E5M2} {
		var wv []float64
		var wb []byte
		if wdt == dtype.F8_E4M3 || wdt == dtype.F8_E5M2 {
			wb = finiteCodes(r, wdt, n*k)
			wv = make([]float64, n*k)
			_, _ = dtype.DecodeFloat64(wv, wb, wdt)
		} else {
			wv, wb = randVals(t, r, wdt, n*k, 0.1)
		}
		w := &executor.Weight{Data: upload(t, e, wb, wdt, "fc.weight", n, k)}
		checkLinear(t, e, r, wdt.String(), w, wv, m, n, k)
		if err := executor.FreeWeight(e, w); err != nil {
			t.Fatal(err)
		}
	}
	if nb, _ := e.Live(); nb != 0 {
		t.Errorf("%d buffers left", nb)
	}
}

// Linear with FP8 weights (E4M3 and E5M2) scaled per tensor, per channel
// and per block (partial edge blocks included).
func TestLinearQuantizedWeights(t *testing.T) {
	e := newEx(t)
	r := rand.New(rand.NewPCG(13, 14))
	const m, n, k = 4, 150, 200
	for _, elem := range []dtype.DType{dtype.F8_E4M3, dtype.F8_E5M2} {
		for _, l := range scaleLayouts {
			w, wv := quantWeight(t, e, r, l, elem, n, k, finiteCodes(r, elem, n*k))
			checkLinear(t, e, r, elem.String()+" "+l.name, w, wv, m, n, k)
			_ = executor.FreeWeight(e, w)
		}
	}
}

// Dequantize is bit-exact with quant.Weight.Dequantize for every FP8 code
// (NaN codes included) and every scale layout, and with the exact product
// computed here; a plain weight converts as dtype.Convert does.
func TestDequantizeBitExact(t *testing.T) {
	e := newEx(t, executor.WithWorkers(3))
	r := rand.New(rand.NewPCG(15, 16))
	const n, k = 40, 200 // 8000 elements: every code many times
	codes := make([]byte, n*k)
	for i := range codes {
		codes[i] = byte(i*7 + i/256)
	}
	for _, elem := range []dtype.DType{dtype.F8_E4M3, dtype.F8_E5M2} {
		for _, l := range scaleLayouts {
			w, exact := quantWeight(t, e, r, l, elem, n, k, codes)
			sd := make([]byte, w.Scales[0].Bytes())
			_ = e.Download(ctx, w.Scales[0], sd)
			for _, to := range []dtype.DType{dtype.F32, dtype.BF16, dtype.F16, dtype.F64} {
				got, err := e.Dequantize(ctx, w, to)
				if err != nil {
					t.Fatal(err)
				}
				raw := make([]byte, got.Bytes())
				_ = e.Download(ctx, got, raw)
				want := make([]byte, len(raw))
				if _, err := w.Quant.Dequantize(want, to, codes, [][]byte{sd}, dtype.Options{}); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(raw, want) {
					t.Fatalf("%s %s → %s: differs from quant.Weight.Dequantize", elem, l.name, to)
				}
				once := make([]byte, len(raw))
				_, _ = dtype.EncodeFloat64(once, to, exact, dtype.Options{})
				if !bytes.Equal(raw, once) {
					t.Fatalf("%s %s → %s: differs from the exact product rounded once", elem, l.name, to)
				}
				mustFree(t, e, got)
			}
			_ = executor.FreeWeight(e, w)
		}
	}
	_, src := randVals(t, r, dtype.BF16, 64, 3)
	w := &executor.Weight{Data: upload(t, e, src, dtype.BF16, "p", 8, 8)}
	for _, to := range []dtype.DType{dtype.F32, dtype.F16, dtype.F8_E4M3} {
		got, err := e.Dequantize(ctx, w, to)
		if err != nil {
			t.Fatal(err)
		}
		raw := make([]byte, got.Bytes())
		_ = e.Download(ctx, got, raw)
		want := make([]byte, len(raw))
		_, _ = dtype.Convert(want, to, src, dtype.BF16, dtype.Options{})
		if !bytes.Equal(raw, want) {
			t.Errorf("plain BF16 → %s differs from dtype.Convert", to)
		}
	}
	if _, err := e.Dequantize(ctx, w, dtype.I32); !errors.Is(err, executor.ErrArgument) || !strings.Contains(err.Error(), "target I32 is not a float dtype") {
		t.Errorf("Dequantize to I32: %v", err)
	}
}

func TestElementwiseAgainstFloat64(t *testing.T) {
	e := newEx(t)
	r := rand.New(rand.NewPCG(17, 18))
	const n = 40000 // several chunks
	fns := map[string]func(float64) float64{
		executor.OpGELU: func(x float64) float64 { return x * (1 + math.Erf(x/math.Sqrt2)) / 2 },
		executor.OpSiLU: func(x float64) float64 { return x / (1 + math.Exp(-x)) },
	}
	for _, dt := range activations {
		xv, xb := randVals(t, r, dt, n, 3)
		x := upload(t, e, xb, dt, "h", 4, n/4)
		for op, f := range fns {
			var y executor.Buffer
			var err error
			if op == executor.OpGELU {
				y, err = e.GELU(ctx, x)
			} else {
				y, err = e.SiLU(ctx, x)
			}
			if err != nil {
				t.Fatal(err)
			}
			if y.DType() != dt || y.Name() != "h" {
				t.Fatalf("%s: %s %q", op, y.DType(), y.Name())
			}
			got := download(t, e, y)
			for i, g := range got {
				want := f(xv[i])
				if math.Abs(g-want) > unitRoundoff(dt)*math.Abs(want)*(1+1e-12)+halfSubnormal(dt) {
					t.Fatalf("%s %s(%v) = %v, float64 %v", dt, op, xv[i], g, want)
				}
			}
			mustFree(t, e, y)
		}
		// Add: the F32 sum rounded once to a's dtype.
		bdt := activations[r.IntN(3)]
		bv, bb := randVals(t, r, bdt, n, 3)
		b := upload(t, e, bb, bdt, "res", 4, n/4)
		y, err := e.Add(ctx, x, b)
		if err != nil {
			t.Fatal(err)
		}
		if y.Name() != "res" || y.DType() != dt {
			t.Errorf("Add(h, res): named %q, %s", y.Name(), y.DType())
		}
		if anon, err := e.Add(ctx, x, upload(t, e, bb, bdt, "", 4, n/4)); err != nil || anon.Name() != "h" {
			t.Errorf("Add(h, unnamed): %v", err)
		}
		got := download(t, e, y)
		for i, g := range got {
			want := xv[i] + bv[i]
			tol := (0x1p-24+unitRoundoff(dt)*(1+0x1p-24))*math.Abs(want) + halfSubnormal(dt)
			if math.Abs(g-want) > tol {
				t.Fatalf("%s+%s: %v + %v = %v", dt, bdt, xv[i], bv[i], g)
			}
		}
		for _, b := range []executor.Buffer{x, b, y} {
			mustFree(t, e, b)
		}
	}
}

func TestRMSNormAgainstFloat64(t *testing.T) {
	e := newEx(t)
	r := rand.New(rand.NewPCG(19, 20))
	const rows, d = 12, 1000
	const eps = 1e-5
	for _, dt := range activations {
		xv, xb := randVals(t, r, dt, rows*d, 2)
		x := upload(t, e, xb, dt, "h", 3, 4, d)
		for _, withW := range []bool{false, true} {
			var w executor.Buffer
			wv := make([]float64, d)
			for i := range wv {
				wv[i] = 1
			}
			if withW {
				wdt := activations[r.IntN(3)]
				var wb []byte
				wv, wb = randVals(t, r, wdt, d, 1)
				w = upload(t, e, wb, wdt, "norm.weight", d)
			}
			y, err := e.RMSNorm(ctx, x, w, eps)
			if err != nil {
				t.Fatal(err)
			}
			got := download(t, e, y)
			for i := range rows {
				var ss float64
				for _, v := range xv[i*d : (i+1)*d] {
					ss += v * v
				}
				rr := 1 / math.Sqrt(ss/d+float64(float32(eps)))
				for j := range d {
					want := xv[i*d+j] * rr * wv[j]
					// F32 sum of D squares, sqrt, reciprocal, two products,
					// then the output rounding.
					tol := float64(d+6)*0x1p-24*math.Abs(want) + unitRoundoff(dt)*math.Abs(want)*(1+float64(d+6)*0x1p-24) + halfSubnormal(dt)
					if g := got[i*d+j]; math.Abs(g-want) > tol {
						t.Fatalf("%s w=%v: y[%d,%d] = %v, float64 %v", dt, withW, i, j, g, want)
					}
				}
			}
			mustFree(t, e, y)
			if w != nil {
				mustFree(t, e, w)
			}
		}
		mustFree(t, e, x)
	}
}

// An F16 activation that overflows: the check-finite report names the op,
// the layer and the counts; the failing op's output is freed.
func TestCheckFiniteF16Overflow(t *testing.T) {
	e := newEx(t, executor.WithCheckFinite())
	// x·Wᵀ = 4·300·300 = 360000 > 65504: Inf in F16, finite in F32.
	xb := make([]byte, 2*4*2)
	_, _ = dtype.EncodeFloat64(xb, dtype.F16, []float64{300, 300, 300, 300, 1, 1, 1, 1}, dtype.Options{})
	x := upload(t, e, xb, dtype.F16, "x", 2, 4)
	w := &executor.Weight{Data: upload(t, e, dtype.Float32Bytes([]float32{300, 300, 300, 300, 1, 1, 1, 1, -300, -300, -300, -300}), dtype.F32, "blocks.3.mlp.fc1.weight", 3, 4)}
	before, _ := e.Live()
	y, err := e.Linear(ctx, x, w, nil, dtype.F32)
	if err != nil {
		t.Fatalf("F32 output overflows nothing: %v", err)
	}
	mustFree(t, e, y)
	_, err = e.Linear(ctx, x, w, nil, dtype.F16)
	var nf *executor.NonFiniteError
	if !errors.As(err, &nf) || !errors.Is(err, executor.ErrNonFinite) {
		t.Fatalf("F16 output: %v", err)
	}
	if nf.Op != executor.OpLinear || nf.Tensor != "blocks.3.mlp.fc1.weight" || nf.Inf != 2 || nf.NaN != 0 || nf.Elements != 6 || nf.DType != "F16" || nf.Executor != "cpu" {
		t.Errorf("report %+v", nf)
	}
	if !strings.Contains(err.Error(), "Linear") || !strings.Contains(err.Error(), "blocks.3.mlp.fc1.weight") {
		t.Errorf("message %q", err)
	}
	if after, _ := e.Live(); after != before {
		t.Errorf("%d buffers before, %d after: the failed output leaked", before, after)
	}
	// Add of two F16 activations that overflow.
	big := make([]byte, 2*2)
	_, _ = dtype.EncodeFloat64(big, dtype.F16, []float64{60000, 1}, dtype.Options{})
	a := upload(t, e, big, dtype.F16, "blocks.3.residual", 2)
	if _, err := e.Add(ctx, a, a); !errors.As(err, &nf) || nf.Op != executor.OpAdd || nf.Tensor != "blocks.3.residual" || nf.Inf != 1 {
		t.Errorf("Add: %v", err)
	}
}

// With a report callback the ops go on, and the reports come in order: the
// first names the first op that produced a non-finite value.
func TestFiniteReportOrder(t *testing.T) {
	var reports []*executor.NonFiniteError
	e := newEx(t, executor.WithFiniteReport(func(r *executor.NonFiniteError) { reports = append(reports, r) }))
	xb := make([]byte, 2*3)
	_, _ = dtype.EncodeFloat64(xb, dtype.F16, []float64{1, 40000, -2}, dtype.Options{})
	x := upload(t, e, xb, dtype.F16, "h", 3)
	g, err := e.GELU(ctx, x) // finite: nothing reported
	if err != nil {
		t.Fatal(err)
	}
	s, err := e.Add(ctx, g, x) // 40000+40000: Inf
	if err != nil || s == nil {
		t.Fatalf("report mode must not fail: %v", err)
	}
	n, err := e.RMSNorm(ctx, s, nil, 0) // r = 1/sqrt(Inf) = 0: Inf·0 is NaN, the finite ones 0
	if err != nil {
		t.Fatal(err)
	}
	_ = n
	if len(reports) != 2 || reports[0].Op != executor.OpAdd || reports[0].Inf != 1 || reports[0].Tensor != "h" ||
		reports[1].Op != executor.OpRMSNorm || reports[1].NaN != 1 || reports[0].Seq >= reports[1].Seq {
		for _, r := range reports {
			t.Logf("%v", r)
		}
		t.Fatalf("%d reports", len(reports))
	}
}

func TestBufferErrors(t *testing.T) {
	e, other := newEx(t), newEx(t)
	x := upload(t, e, make([]byte, 16), dtype.F32, "x", 4)
	ox := upload(t, other, make([]byte, 16), dtype.F32, "ox", 4)
	if _, err := e.GELU(ctx, ox); !errors.Is(err, executor.ErrArgument) || !strings.Contains(err.Error(), "buffer of another executor") {
		t.Errorf("foreign: %v", err)
	}
	if err := e.Download(ctx, x, make([]byte, 15)); !errors.Is(err, executor.ErrArgument) {
		t.Errorf("short dst: %v", err)
	}
	if _, err := e.GELU(ctx, nil); !errors.Is(err, executor.ErrArgument) {
		t.Errorf("nil: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := e.GELU(cctx, x); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "canceled") {
		t.Errorf("canceled: %v", err)
	}
	if _, err := e.FromHost(ctx, make([]byte, 3), dtype.F32, []int64{1}, "y"); !errors.Is(err, executor.ErrArgument) || !strings.Contains(err.Error(), "3 bytes for 1 F32 elements") {
		t.Errorf("FromHost length: %v", err)
	}
	mustFree(t, e, x)
	if _, err := e.GELU(ctx, x); !errors.Is(err, executor.ErrClosed) || !strings.Contains(err.Error(), "buffer used after Free") {
		t.Errorf("after Free: %v", err)
	}
	if err := e.Free(x); !errors.Is(err, executor.ErrClosed) || !strings.Contains(err.Error(), `Free: tensor "x": buffer used after Free`) {
		t.Errorf("double Free: %v", err)
	}
	y := upload(t, e, make([]byte, 16), dtype.F32, "y", 4)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if n, _ := e.Live(); n != 0 {
		t.Errorf("Close left %d buffers", n)
	}
	if _, err := e.GELU(ctx, y); !errors.Is(err, executor.ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
	if _, err := e.FromHost(ctx, nil, dtype.F32, []int64{0}, "z"); !errors.Is(err, executor.ErrClosed) {
		t.Errorf("FromHost after Close: %v", err)
	}
	if err := e.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := New(executor.WithWorkers(-1)); !errors.Is(err, executor.ErrArgument) {
		t.Errorf("negative workers: %v", err)
	}
	var xe *executor.Error
	_, err := other.Linear(ctx, ox, &executor.Weight{Data: ox}, nil, dtype.F32)
	if !errors.As(err, &xe) || xe.Executor != "cpu" || xe.Kind != executor.ErrArgument || !strings.Contains(xe.Msg, "is not [N, K]") {
		t.Errorf("Linear with a 1-D weight: %v", err)
	}
}

// Weights are cached for Linear per (layout, scales); concurrent Linear
// calls on one weight agree; a freed weight is refused.
func TestLinearConcurrentAndCache(t *testing.T) {
	e := newEx(t)
	r := rand.New(rand.NewPCG(21, 22))
	w, wv := quantWeight(t, e, r, scaleLayouts[2], dtype.F8_E4M3, 64, 96, finiteCodes(r, dtype.F8_E4M3, 64*96))
	xv, xb := randVals(t, r, dtype.F32, 8*96, 1)
	x := upload(t, e, xb, dtype.F32, "x", 8, 96)
	want := linearSeq(t, xv, wv, nil, 8, 64, 96, dtype.F32)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			y, err := e.Linear(ctx, x, w, nil, dtype.F32)
			if err != nil {
				errs <- err
				return
			}
			raw := make([]byte, y.Bytes())
			_ = e.Download(ctx, y, raw)
			if !bytes.Equal(raw, want) {
				errs <- errors.New("concurrent Linear differs")
			}
			_ = e.Free(y)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// The same data with other scales is not served from the cache.
	w2 := &executor.Weight{Data: w.Data, Quant: w.Quant, Scales: []executor.Buffer{
		upload(t, e, bytes.Repeat(dtype.Float32Bytes([]float32{2}), 4*3), dtype.F32, "s2", 4, 3)}}
	y2, err := e.Linear(ctx, x, w2, nil, dtype.F32)
	if err != nil {
		t.Fatal(err)
	}
	codes := make([]byte, 64*96)
	_ = e.Download(ctx, w.Data, codes)
	w2v := make([]float64, len(codes))
	_, _ = dtype.DecodeFloat64(w2v, codes, dtype.F8_E4M3)
	for i := range w2v {
		w2v[i] *= 2
	}
	raw := make([]byte, y2.Bytes())
	_ = e.Download(ctx, y2, raw)
	if !bytes.Equal(raw, linearSeq(t, xv, w2v, nil, 8, 64, 96, dtype.F32)) {
		t.Error("Linear with new scales used the cached values")
	}
	_ = executor.FreeWeight(e, w)
	if _, err := e.Linear(ctx, x, w, nil, dtype.F32); !errors.Is(err, executor.ErrClosed) || !strings.Contains(err.Error(), "buffer used after Free") {
		t.Errorf("freed weight: %v", err)
	}
	// A weight whose scales do not match its layout.
	bad := &executor.Weight{Data: upload(t, e, codes, dtype.F8_E4M3, "q", 64, 96), Quant: w.Quant}
	if _, err := e.Dequantize(ctx, bad, dtype.F32); !errors.Is(err, executor.ErrArgument) {
		t.Errorf("missing scale: %v", err)
	}
	_ = quant.RoleScale
}

func TestInfo(t *testing.T) {
	e := newEx(t)
	in := e.Info()
	if in.Kind != "cpu" || !strings.Contains(in.Name, "cores") {
		t.Errorf("%+v", in)
	}
	if runtime.GOOS == "linux" && (in.TotalBytes <= 0 || in.FreeBytes <= 0 || in.FreeBytes > in.TotalBytes) {
		t.Errorf("memory: total %d, free %d", in.TotalBytes, in.FreeBytes)
	}
}

// Empty dimensions: K = 0 gives the bias, M = 0 an empty output.
func TestLinearEmpty(t *testing.T) {
	e := newEx(t)
	b := upload(t, e, dtype.Float32Bytes([]float32{1.5, -2, 3}), dtype.F32, "b", 3)
	w := &executor.Weight{Data: upload(t, e, nil, dtype.F32, "w", 3, 0)}
	y, err := e.Linear(ctx, upload(t, e, nil, dtype.BF16, "x", 2, 0), w, b, dtype.F32)
	if err != nil {
		t.Fatal(err)
	}
	if got := download(t, e, y); fmt.Sprint(got) != "[1.5 -2 3 1.5 -2 3]" {
		t.Errorf("K=0: %v", got)
	}
	w2 := &executor.Weight{Data: upload(t, e, make([]byte, 4*3*2), dtype.F32, "w2", 3, 2)}
	y, err = e.Linear(ctx, upload(t, e, nil, dtype.F32, "x", 0, 2), w2, nil, dtype.F16)
	if err != nil || y.Bytes() != 0 || fmt.Sprint(y.Shape()) != "[0 3]" {
		t.Errorf("M=0: %v %v", y, err)
	}
}
