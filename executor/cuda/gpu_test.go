package cuda

import (
	"bytes"
	"fmt"
	"github.com/ckpt-go/ckpt/ckpttest"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/executor"
	"github.com/ckpt-go/ckpt/executor/backend"
	"github.com/ckpt-go/ckpt/executor/cpu"
	"github.com/ckpt-go/ckpt/quant"
)

// The tests below need a GPU. They skip with the reason when the driver or
// a device is missing, and fail instead when CKPT_REQUIRE_GPU=1 (set it on
// the GPU machine, see the package documentation).

// newGPU starts the executor a GPU test runs on: gpu (the machine's
// driver), or the driver emulator (emu_linux_test.go).
type newGPU func(t *testing.T, opts ...executor.Option) *Executor

func gpu(t *testing.T, opts ...executor.Option) *Executor {
	t.Helper()
	e, err := New(opts...)
	if err != nil {
		if os.Getenv("CKPT_REQUIRE_GPU") == "1" {
			t.Fatalf("CKPT_REQUIRE_GPU=1 but the CUDA executor cannot start: %v", err)
		}
		t.Skipf("no GPU (set CKPT_REQUIRE_GPU=1 to fail instead): %v", err)
	}
	t.Cleanup(func() {
		if n, _ := e.Live(); n != 0 {
			t.Errorf("%d buffers leaked", n)
		}
		e.Close()
	})
	t.Logf("device: %+v", e.Info())
	return e
}

func refCPU(t *testing.T) *cpu.Executor {
	c, err := cpu.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func download(t *testing.T, e executor.Executor, b executor.Buffer) []byte {
	t.Helper()
	out := make([]byte, b.Bytes())
	if err := e.Download(ctx, b, out); err != nil {
		t.Fatal(err)
	}
	e.Free(b)
	return out
}

// Every FP8 code and scale layout, to F32, BF16 and F16: bit-exact with
// quant.Weight.Dequantize.
func TestGPUDequantizeBitExact(t *testing.T) { testDequantizeBitExact(t, gpu) }

func testDequantizeBitExact(t *testing.T, gpu newGPU) {
	e := gpu(t)
	rng := rand.New(rand.NewPCG(7, 8))
	for _, c := range dqCases(rng) {
		w := &executor.Weight{Quant: c.w}
		d, err := e.FromHost(ctx, c.data, c.w.Data.DType, c.w.Data.Shape, c.name)
		if err != nil {
			t.Fatal(err)
		}
		w.Data = d
		for i, s := range c.w.Scales {
			sb, err := e.FromHost(ctx, c.scales[i], s.DType, s.Shape, s.Name)
			if err != nil {
				t.Fatal(err)
			}
			w.Scales = append(w.Scales, sb)
		}
		for _, to := range kernelTargets {
			n, _ := backend.Elements(c.w.Shape)
			want := make([]byte, n*int64(to.Bits())/8)
			if _, err := c.w.Dequantize(want, to, c.data, c.scales, dtype.Options{}); err != nil {
				t.Fatal(err)
			}
			b, err := e.Dequantize(ctx, w, to)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if got := download(t, e, b); !bytes.Equal(got, want) {
				t.Errorf("%s to %s: %s", c.name, to, firstDiff(got, want, to, func(i int) string { return fmt.Sprint("element ", i) }))
			}
		}
		executor.FreeWeight(e, w)
	}
}

func TestGPUConvertBitExact(t *testing.T) { testConvertBitExact(t, gpu) }

func testConvertBitExact(t *testing.T, gpu newGPU) {
	e := gpu(t)
	all16 := make([]byte, 2<<16)
	for i := range 1 << 16 {
		all16[2*i], all16[2*i+1] = byte(i), byte(i>>8)
	}
	for _, from := range []dtype.DType{dtype.BF16, dtype.F16} {
		x, err := e.FromHost(ctx, all16, from, []int64{1 << 16}, "all")
		if err != nil {
			t.Fatal(err)
		}
		for _, to := range kernelTargets {
			want := make([]byte, (1<<16)*to.Bits()/8)
			dtype.Convert(want, to, all16, from, dtype.Options{})
			b, err := e.Dequantize(ctx, &executor.Weight{Data: x}, to)
			if err != nil {
				t.Fatal(err)
			}
			if got := download(t, e, b); !bytes.Equal(got, want) {
				t.Errorf("%s to %s: %s", from, to, firstDiff(got, want, to, func(i int) string { return fmt.Sprint("code ", i) }))
			}
		}
		e.Free(x)
	}
}

func randBytes(rng *rand.Rand, dt dtype.DType, n int64, scale float64) []byte {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64() * scale)
	}
	out := make([]byte, n*int64(dt.Bits())/8)
	dtype.EncodeFloat32(out, dt, v, dtype.Options{})
	return out
}

// maxRel returns max|got−want| / max|want| over F32 outputs.
func maxRel(got, want []float32) float64 {
	var d, m float64
	for i := range want {
		d = max(d, math.Abs(float64(got[i]-want[i])))
		m = max(m, math.Abs(float64(want[i])))
	}
	return d / m
}

// Linear on fresh random inputs against the CPU reference's F32 result:
// 1e-5 relative for F32 weights, 1e-2 for BF16 and FP8 weights, with the
// tiled kernel and (sm_80+) the tensor-core one.
func TestGPULinear(t *testing.T) { testLinear(t, gpu) }

func testLinear(t *testing.T, gpu newGPU) {
	e := gpu(t)
	c := refCPU(t)
	rng := rand.New(rand.NewPCG(uint64(os.Getpid()), 9))
	const m, k, n = 67, 300, 130
	type wcase struct {
		name string
		q    *quant.Weight
		data []byte
		dt   dtype.DType
		sc   []byte
		tol  float64
	}
	codes := make([]byte, n*k)
	for i := range codes {
		codes[i] = byte(rng.IntN(256))
		if codes[i]&0x7F == 0x7F {
			codes[i] = 0x30
		}
	}
	block := &quant.Weight{Name: "w", Shape: []int64{n, k}, Elem: dtype.F8_E4M3, Layout: quant.DeepSeekFP8Block,
		Data:   quant.Stored{Name: "w", DType: dtype.F8_E4M3, Shape: []int64{n, k}},
		Scales: []quant.Scale{{Role: quant.RoleScaleInv, Stored: quant.Stored{Name: "s", DType: dtype.F32, Shape: []int64{2, 3}}, Block: [2]int64{128, 128}}}}
	cases := []wcase{
		{"F32", nil, randBytes(rng, dtype.F32, n*k, 0.05), dtype.F32, nil, 1e-5},
		{"BF16", nil, randBytes(rng, dtype.BF16, n*k, 0.05), dtype.BF16, nil, 1e-2},
		{"FP8 block", block, codes, dtype.F8_E4M3, randBytes(rng, dtype.F32, 6, 0.01), 1e-2},
	}
	for _, xdt := range []dtype.DType{dtype.F32, dtype.BF16, dtype.F16} {
		xb := randBytes(rng, xdt, m*k, 1)
		for _, wc := range cases {
			for _, kern := range []string{"tiled", "mma"} {
				if err := e.SetLinearKernel(kern); err != nil {
					continue
				}
				if kern == "mma" && (xdt == dtype.F32 || (wc.dt != xdt && wc.q == nil)) {
					continue
				}
				var ys [2][]float32
				bb := randBytes(rng, dtype.F32, n, 1) // one bias for both executors
				for i, ex := range []executor.Executor{c, e} {
					x, _ := ex.FromHost(ctx, xb, xdt, []int64{m, k}, "x")
					d, _ := ex.FromHost(ctx, wc.data, wc.dt, []int64{n, k}, "w")
					w := &executor.Weight{Data: d, Quant: wc.q}
					if wc.sc != nil {
						s, _ := ex.FromHost(ctx, wc.sc, dtype.F32, []int64{2, 3}, "s")
						w.Scales = []executor.Buffer{s}
					}
					bias, _ := ex.FromHost(ctx, bb, dtype.F32, []int64{n}, "b")
					y, err := ex.Linear(ctx, x, w, bias, dtype.F32)
					if err != nil {
						t.Fatalf("%s %s x %s: %v", kern, wc.name, xdt, err)
					}
					out := download(t, ex, y)
					ys[i] = make([]float32, m*n)
					dtype.DecodeFloat32(ys[i], out, dtype.F32)
					ex.Free(x)
					ex.Free(bias)
					executor.FreeWeight(ex, w)
				}
				if r := maxRel(ys[1], ys[0]); r > wc.tol || math.IsNaN(r) {
					t.Errorf("%s Linear, %s weight, %s x: relative error %g > %g", kern, wc.name, xdt, r, wc.tol)
				}
			}
		}
	}
	e.SetLinearKernel("auto")
}

// Linear with an FP8 weight in every scale layout Linear takes (per
// tensor, per output channel, 128×128 blocks, groups of 32 along K, no
// scale), E4M3 and E5M2, BF16 and F16 activations, and an output in BF16:
// the tiled and (sm_80+) tensor-core kernels against the CPU reference,
// within 1e-2. M = 131 and N = 130 cross a 128-row tile; K = 260 is no
// multiple of 16, so the unaligned tile loads run too (the groups need
// K = 256).
func TestGPULinearLayouts(t *testing.T) { testLinearLayouts(t, gpu) }

func testLinearLayouts(t *testing.T, gpu newGPU) {
	e := gpu(t)
	c := refCPU(t)
	rng := rand.New(rand.NewPCG(uint64(os.Getpid()), 11))
	const m, n = 131, 130
	sc := func(role string, block [2]int64, shape ...int64) quant.Scale {
		return quant.Scale{Role: role, Stored: quant.Stored{Name: "s", DType: dtype.F32, Shape: shape}, Block: block}
	}
	type layout struct {
		name   string
		k      int64
		layout quant.Layout
		scales []quant.Scale
	}
	layouts := []layout{
		{"tensor", 260, quant.FP8Scaled, []quant.Scale{sc(quant.RoleScale, [2]int64{n, 260})}},
		{"channel", 260, quant.FP8Scaled, []quant.Scale{sc(quant.RoleScale, [2]int64{1, 260}, n, 1)}},
		{"block", 260, quant.DeepSeekFP8Block, []quant.Scale{sc(quant.RoleScaleInv, [2]int64{128, 128}, 2, 3)}},
		{"group", 256, quant.CompressedTensorsFP8, []quant.Scale{sc(quant.RoleScale, [2]int64{1, 32}, n, 8)}},
		{"plain", 260, quant.ComfyScaledFP8, nil},
	}
	for _, l := range layouts {
		for _, elem := range []dtype.DType{dtype.F8_E4M3, dtype.F8_E5M2} {
			codes := make([]byte, n*l.k)
			for i := range codes {
				for {
					codes[i] = byte(rng.IntN(256))
					var f [1]float32
					dtype.DecodeFloat32(f[:], codes[i:i+1], elem)
					v := f[0]
					if !math.IsNaN(float64(v)) && !math.IsInf(float64(v), 0) && math.Abs(float64(v)) <= 64 {
						break
					}
				}
			}
			w := &quant.Weight{Name: "w", Shape: []int64{n, l.k}, Elem: elem, Layout: l.layout,
				Data: quant.Stored{Name: "w", DType: elem, Shape: []int64{n, l.k}}, Scales: l.scales}
			var scales [][]byte
			for _, s := range l.scales {
				k := int64(1)
				for _, d := range s.Shape {
					k *= d
				}
				v := make([]float32, k)
				for i := range v {
					v[i] = float32(math.Ldexp(0.5+rng.Float64(), -6))
				}
				scales = append(scales, dtype.Float32Bytes(v))
			}
			for _, xdt := range []dtype.DType{dtype.BF16, dtype.F16} {
				xb := randBytes(rng, xdt, m*l.k, 1)
				bb := randBytes(rng, dtype.BF16, n, 1)
				for _, kern := range []string{"tiled", "mma"} {
					if e.SetLinearKernel(kern) != nil {
						continue
					}
					var ys [2][]float32
					for i, ex := range []executor.Executor{c, e} {
						x, _ := ex.FromHost(ctx, xb, xdt, []int64{m, l.k}, "x")
						d, _ := ex.FromHost(ctx, codes, elem, []int64{n, l.k}, "w")
						wt := &executor.Weight{Data: d, Quant: w}
						for j, s := range l.scales {
							sb, _ := ex.FromHost(ctx, scales[j], dtype.F32, s.Shape, "s")
							wt.Scales = append(wt.Scales, sb)
						}
						bias, _ := ex.FromHost(ctx, bb, dtype.BF16, []int64{n}, "b")
						y, err := ex.Linear(ctx, x, wt, bias, dtype.BF16)
						if err != nil {
							t.Fatalf("%s Linear, %s %s weight, %s x: %v", kern, l.name, elem, xdt, err)
						}
						ys[i] = make([]float32, m*n)
						dtype.DecodeFloat32(ys[i], download(t, ex, y), dtype.BF16)
						ex.Free(x)
						ex.Free(bias)
						executor.FreeWeight(ex, wt)
					}
					if r := maxRel(ys[1], ys[0]); r > 1e-2 || math.IsNaN(r) {
						t.Errorf("%s Linear, %s %s weight, %s x: relative error %g > 1e-2", kern, l.name, elem, xdt, r)
					}
				}
			}
		}
	}
	e.SetLinearKernel("auto")
}

// Linear at shapes that end inside every kind of tile (M, N and K of 1,
// odd, one past and one short of 128-, 64-, 32- and 16-element tiles),
// BF16 and block-FP8 weights, BF16 activations: every output written (the
// emulator's fresh allocations are NaN), within 1e-2 of the CPU reference
// relative to Σ|x||w| (with K = 1 or 8, one output's sum can cancel to
// almost nothing, and an error relative to it says nothing).
func TestGPULinearShapes(t *testing.T) { testLinearShapes(t, gpu) }

func testLinearShapes(t *testing.T, gpu newGPU) {
	e := gpu(t)
	c := refCPU(t)
	rng := rand.New(rand.NewPCG(uint64(os.Getpid()), 12))
	for _, sh := range [][3]int64{{1, 1, 1}, {1, 8, 1}, {3, 7, 5}, {17, 33, 9}, {64, 16, 64}, {129, 31, 127}, {65, 129, 1}, {1, 300, 255}, {200, 17, 130}} {
		m, k, n := sh[0], sh[1], sh[2]
		xb := randBytes(rng, dtype.BF16, m*k, 1)
		wb := randBytes(rng, dtype.BF16, n*k, 0.1)
		codes := make([]byte, n*k)
		for i := range codes {
			codes[i] = byte(rng.IntN(0x70)) | byte(rng.IntN(2))<<7 // finite E4M3 codes
		}
		grid := []int64{(n + 127) / 128, (k + 127) / 128}
		scales := make([]float32, grid[0]*grid[1])
		for i := range scales {
			scales[i] = float32(math.Ldexp(0.5+rng.Float64(), -4))
		}
		block := &quant.Weight{Name: "w", Shape: []int64{n, k}, Elem: dtype.F8_E4M3, Layout: quant.DeepSeekFP8Block,
			Data:   quant.Stored{Name: "w", DType: dtype.F8_E4M3, Shape: []int64{n, k}},
			Scales: []quant.Scale{{Role: quant.RoleScaleInv, Stored: quant.Stored{Name: "s", DType: dtype.F32, Shape: grid}, Block: [2]int64{128, 128}}}}
		// linear runs y = x·Wᵀ on ex; abs takes |x| and |W| (sign bits
		// cleared: the scales are positive), which gives Σ|x||w|.
		linear := func(ex executor.Executor, fp8, abs bool) []float32 {
			xs, ws, cs := xb, wb, codes
			if abs {
				xs, ws, cs = bytes.Clone(xb), bytes.Clone(wb), bytes.Clone(codes)
				for i := 1; i < len(xs); i += 2 {
					xs[i] &^= 0x80
				}
				for i := 1; i < len(ws); i += 2 {
					ws[i] &^= 0x80
				}
				for i := range cs {
					cs[i] &^= 0x80
				}
			}
			x, _ := ex.FromHost(ctx, xs, dtype.BF16, []int64{m, k}, "x")
			w := &executor.Weight{}
			if fp8 {
				w.Data, _ = ex.FromHost(ctx, cs, dtype.F8_E4M3, []int64{n, k}, "w")
				w.Quant = block
				s, _ := ex.FromHost(ctx, dtype.Float32Bytes(scales), dtype.F32, grid, "s")
				w.Scales = []executor.Buffer{s}
			} else {
				w.Data, _ = ex.FromHost(ctx, ws, dtype.BF16, []int64{n, k}, "w")
			}
			y, err := ex.Linear(ctx, x, w, nil, dtype.F32)
			if err != nil {
				t.Fatalf("Linear %v (FP8 %v) on %T: %v", sh, fp8, ex, err)
			}
			out := make([]float32, m*n)
			dtype.DecodeFloat32(out, download(t, ex, y), dtype.F32)
			ex.Free(x)
			executor.FreeWeight(ex, w)
			return out
		}
		for _, fp8 := range []bool{false, true} {
			want, mag := linear(c, fp8, false), linear(c, fp8, true)
			var norm float64
			for _, v := range mag {
				norm = max(norm, float64(v))
			}
			for _, kern := range []string{"tiled", "mma"} {
				if e.SetLinearKernel(kern) != nil {
					continue
				}
				got := linear(e, fp8, false)
				var d float64
				for i := range got {
					d = max(d, math.Abs(float64(got[i])-float64(want[i])))
					if math.IsNaN(float64(got[i])) {
						d = math.NaN()
						break
					}
				}
				r := d // Σ|x||w| = 0 (a zero FP8 code of a 1×1 weight): the exact result is 0
				if norm > 0 {
					r = d / norm
				}
				if r > 1e-2 || math.IsNaN(r) {
					t.Errorf("%s Linear %v (M, K, N), FP8 weight %v: error %g relative to Σ|x||w|", kern, sh, fp8, r)
				}
			}
		}
	}
	e.SetLinearKernel("auto")
}

func TestGPUElementwise(t *testing.T) { testElementwise(t, gpu) }

func testElementwise(t *testing.T, gpu newGPU) {
	e := gpu(t)
	c := refCPU(t)
	rng := rand.New(rand.NewPCG(uint64(os.Getpid()), 10))
	for _, dt := range kernelTargets {
		a, b, w := randBytes(rng, dt, 33*257, 2), randBytes(rng, dt, 33*257, 2), randBytes(rng, dt, 257, 1)
		var outs [2][][]float32
		for i, ex := range []executor.Executor{c, e} {
			xa, _ := ex.FromHost(ctx, a, dt, []int64{33, 257}, "a")
			xb, _ := ex.FromHost(ctx, b, dt, []int64{33, 257}, "b")
			xw, _ := ex.FromHost(ctx, w, dt, []int64{257}, "w")
			for _, f := range []func() (executor.Buffer, error){
				func() (executor.Buffer, error) { return ex.Add(ctx, xa, xb) },
				func() (executor.Buffer, error) { return ex.GELU(ctx, xa) },
				func() (executor.Buffer, error) { return ex.SiLU(ctx, xa) },
				func() (executor.Buffer, error) { return ex.RMSNorm(ctx, xa, xw, 1e-6) },
			} {
				y, err := f()
				if err != nil {
					t.Fatal(err)
				}
				v := make([]float32, 33*257)
				dtype.DecodeFloat32(v, download(t, ex, y), dt)
				outs[i] = append(outs[i], v)
			}
			ex.Free(xa)
			ex.Free(xb)
			ex.Free(xw)
		}
		for j, op := range []string{"Add", "GELU", "SiLU", "RMSNorm"} {
			tol := 1e-6
			if dt != dtype.F32 {
				tol = 1e-2
			}
			if r := maxRel(outs[1][j], outs[0][j]); r > tol || math.IsNaN(r) {
				t.Errorf("%s %s: relative error %g", op, dt, r)
			}
		}
	}
}

func TestGPUCheckFinite(t *testing.T) { testCheckFinite(t, gpu) }

func testCheckFinite(t *testing.T, gpu newGPU) {
	e := gpu(t, executor.WithCheckFinite())
	h := []byte{0x00, 0x7A, 0x00, 0x7A}
	x, err := e.FromHost(ctx, h, dtype.F16, []int64{2}, "blocks.3.fc2")
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.Add(ctx, x, x)
	var nf *executor.NonFiniteError
	if !asNonFinite(err, &nf) || nf.Op != "Add" || nf.Tensor != "blocks.3.fc2" || nf.Inf != 2 {
		t.Errorf("report: %v", err)
	}
	e.Free(x)
}

func asNonFinite(err error, nf **executor.NonFiniteError) bool {
	v, ok := err.(*executor.NonFiniteError)
	*nf = v
	return ok
}

// A whole model: stored tensors byte for byte, BF16 → F32 and the FP8
// weight dequantized on the device bit-exact with the loader.
func TestGPUUploadModel(t *testing.T) { testUploadModel(t, gpu) }

func testUploadModel(t *testing.T, gpu newGPU) {
	e := gpu(t)
	dir := writeModel(t)
	for _, to := range []dtype.DType{dtype.F32, dtype.BF16} {
		uploadMatchesLoader(t, e, dir, ckpt.To(to), executor.WithStaging(4<<20))
	}
}

// A sharded model several times the staging ring (one reader and five
// slots of 1 MiB, four readers and eight), so that every slot is refilled
// while copies and conversions of earlier chunks may still be in flight:
// stored, BF16 → F32 and block-FP8 → BF16 on the device, each bit-exact
// with the loader.
func TestGPUUploadRing(t *testing.T) { testUploadRing(t, gpu) }

func testUploadRing(t *testing.T, gpu newGPU) {
	e := gpu(t)
	dir := writeRingModel(t)
	for _, readers := range []int{1, 4} {
		for _, target := range []ckpt.Target{ckpt.Quantized, ckpt.To(dtype.F32), ckpt.To(dtype.BF16)} {
			uploadMatchesLoader(t, e, dir, target, executor.WithReaders(readers), executor.WithStaging(int64(readers+4)<<20))
		}
	}
}

// uploadMatchesLoader uploads the model in dir, loaded as target, and
// checks every weight on the device byte for byte against the loader's.
func uploadMatchesLoader(t *testing.T, e *Executor, dir string, target ckpt.Target, opts ...executor.UploadOption) {
	t.Helper()
	m, err := ckpt.Open(dir, ckpt.WithDType(target))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	um, err := e.UploadModel(ctx, m, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer um.Close()
	ref, err := m.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	for name, want := range ref.All() {
		w, err := um.Weight(name)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, w.Data.Bytes())
		if err := e.Download(ctx, w.Data, got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want.Bytes()) {
			t.Errorf("%s (%v): the device's bytes differ from the loader's", name, target)
		}
	}
}

// writeRingModel writes a model of 6.7 MB in three shards: a 1536×1536
// BF16 weight, and a 1024×1024 block-FP8 one with its 8×8 scales in the
// next shard.
func writeRingModel(t *testing.T) string {
	rng := rand.New(rand.NewPCG(3, 4))
	codes := make([]byte, 1024*1024)
	for i := range codes {
		codes[i] = byte(rng.IntN(256))
	}
	sc := make([]float32, 8*8)
	for i := range sc {
		sc[i] = float32(math.Ldexp(1+rng.Float64(), -rng.IntN(8)))
	}
	return writeBlockFP8Model(t, "ring", []ckpttest.Tensor{
		{Name: "big.weight", DType: dtype.BF16, Shape: []int64{1536, 1536}, Data: randBytes(rng, dtype.BF16, 1536*1536, 1)},
	}, []int64{1024, 1024}, 128, codes, sc, 3)
}
