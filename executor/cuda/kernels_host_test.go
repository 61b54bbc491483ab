package cuda

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/s3test"
	"github.com/ckpt-go/ckpt/quant"
)

// The kernels' element arithmetic (kernels/numerics.h) is plain C++ over
// integers and IEEE float64: these tests compile it for the host with the
// C++ compiler, run it the way base.cu's kernels do, and compare the bits
// with packages dtype and quant. They skip when no C++ compiler is found
// ($CXX, c++, g++, clang++).

var (
	harnessOnce sync.Once
	harnessPath string
	harnessErr  error
)

// The S3 test server, started by the first test that reads from S3.
var (
	s3Once   sync.Once
	s3Srv    *s3test.Server
	s3Reason string
	s3Err    error
)

// TestMain removes the harness binary and stops the S3 test server when
// the tests are done.
func TestMain(m *testing.M) {
	code := m.Run()
	s3Srv.Stop()
	if harnessPath != "" {
		os.RemoveAll(filepath.Dir(harnessPath))
	}
	os.Exit(code)
}

func harness(t *testing.T) string {
	t.Helper()
	harnessOnce.Do(func() {
		cxx, err := cxxCompiler()
		if err != nil {
			harnessErr = err
			return
		}
		dir, err := os.MkdirTemp("", "ckpt-cuda-harness")
		if err != nil {
			harnessErr = err
			return
		}
		harnessPath = filepath.Join(dir, "harness")
		cmd := exec.Command(cxx, "-O2", "-ffp-contract=off", "-fno-fast-math", "-o", harnessPath, filepath.Join("testdata", "harness.cpp"))
		if out, err := cmd.CombinedOutput(); err != nil {
			harnessErr = fmt.Errorf("%s: %v\n%s", cxx, err, out)
		}
	})
	if harnessErr != nil {
		if harnessPath == "" || os.IsNotExist(harnessErr) {
			t.Skipf("host harness not built: %v", harnessErr)
		}
		t.Fatalf("host harness: %v", harnessErr)
	}
	return harnessPath
}

// cxxCompiler returns the host C++ compiler: $CXX, else c++, g++ or
// clang++ on PATH.
func cxxCompiler() (string, error) {
	if cxx := os.Getenv("CXX"); cxx != "" {
		return cxx, nil
	}
	for _, c := range []string{"c++", "g++", "clang++"} {
		if p, err := exec.LookPath(c); err == nil {
			return p, nil
		}
	}
	return "", errors.New("no C++ compiler ($CXX, c++, g++, clang++)")
}

type blob struct{ bytes.Buffer }

func (b *blob) i64(vs ...int64) {
	for _, v := range vs {
		binary.Write(&b.Buffer, binary.LittleEndian, v)
	}
}

func (b *blob) arr(p []byte) {
	b.i64(int64(len(p)))
	b.Write(p)
}

func f64bytes(v []float64) []byte { return append([]byte(nil), dtype.Float64Bytes(v)...) }

func runHarness(t *testing.T, in *blob) []byte {
	t.Helper()
	cmd := exec.Command(harness(t))
	cmd.Stdin = &in.Buffer
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("harness: %v: %s", err, errb.String())
	}
	return out.Bytes()
}

var kernelTargets = []dtype.DType{dtype.F32, dtype.BF16, dtype.F16}

// firstDiff describes the first differing element of two outputs.
func firstDiff(got, want []byte, to dtype.DType, in func(i int) string) string {
	w := to.Bits() / 8
	for i := 0; i+w <= len(want) && i+w <= len(got); i += w {
		if !bytes.Equal(got[i:i+w], want[i:i+w]) {
			return fmt.Sprintf("element %d (%s): got %x, want %x", i/w, in(i/w), got[i:i+w], want[i:i+w])
		}
	}
	return fmt.Sprintf("lengths %d and %d", len(got), len(want))
}

// specialF64 returns float64 values at and around the rounding boundaries
// of F32, BF16 and F16, plus specials and random bits.
func specialF64(rng *rand.Rand) []float64 {
	v := []float64{0, math.Copysign(0, -1), 1, -1, math.Inf(1), math.Inf(-1), math.NaN(),
		math.Float64frombits(0x7FF0000000000001), math.Float64frombits(0xFFF4000000000123),
		math.Float64frombits(0x7FF8000000000000 | 1<<42), math.Float64frombits(0x7FF0000000000000 | 1<<41),
		math.MaxFloat64, math.SmallestNonzeroFloat64, 65504, 65520, 65519.99, 3.3895313892515355e38,
		math.MaxFloat32, 3.4028235677973366e38, 3.402823669209385e38}
	for _, f := range []struct{ e, m int }{{8, 23}, {8, 7}, {5, 10}} {
		bias := 1<<(f.e-1) - 1
		// Around every power of two of the format's range and its
		// subnormals: the code, the midpoints and their neighbours.
		for e := -bias - f.m - 2; e <= bias+1; e++ {
			for _, m := range []float64{1, 1.5, 1 + math.Ldexp(1, -f.m), 1 + math.Ldexp(1, -f.m-1), 1 + 3*math.Ldexp(1, -f.m-1), 2 - math.Ldexp(1, -f.m-1)} {
				x := math.Ldexp(m, e)
				v = append(v, x, -x, math.Nextafter(x, 0), math.Nextafter(x, math.Inf(1)))
			}
		}
	}
	for range 20000 {
		v = append(v, math.Float64frombits(rng.Uint64()))
		v = append(v, math.Ldexp(rng.Float64()*2-1, rng.IntN(80)-60))
	}
	return v
}

func TestHostEncodeMatchesDType(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	src := specialF64(rng)
	for _, to := range kernelTargets {
		code, _ := kernelDType(to)
		for _, sat := range []bool{false, true} {
			var in blob
			in.i64(3, int64(code), b2i(sat))
			in.arr(f64bytes(src))
			got := runHarness(t, &in)
			want := make([]byte, len(src)*to.Bits()/8)
			if _, err := dtype.EncodeFloat64(want, to, src, dtype.Options{Saturate: sat}); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("encode to %s (saturate %v): %s", to, sat, firstDiff(got, want, to, func(i int) string {
					return fmt.Sprintf("%v = %#016x", src[i], math.Float64bits(src[i]))
				}))
			}
		}
	}
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func TestHostConvertMatchesDType(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	all16 := make([]byte, 2<<16)
	for i := range 1 << 16 {
		binary.LittleEndian.PutUint16(all16[2*i:], uint16(i))
	}
	all8 := make([]byte, 256)
	for i := range all8 {
		all8[i] = byte(i)
	}
	var f32 []byte
	for _, v := range specialF64(rng) {
		f32 = binary.LittleEndian.AppendUint32(f32, math.Float32bits(float32(v)))
	}
	for range 50000 {
		f32 = binary.LittleEndian.AppendUint32(f32, rng.Uint32())
	}
	sources := []struct {
		dt  dtype.DType
		src []byte
	}{{dtype.F32, f32}, {dtype.BF16, all16}, {dtype.F16, all16}, {dtype.F8_E4M3, all8}, {dtype.F8_E5M2, all8}}
	for _, s := range sources {
		for _, to := range kernelTargets {
			for _, sat := range []bool{false, true} {
				sdt, tab := int64(ckTab), decodeTables[s.dt]
				if c, ok := kernelDType(s.dt); ok {
					sdt, tab = int64(c), nil
				}
				code, _ := kernelDType(to)
				n := int64(len(s.src) * 8 / s.dt.Bits())
				var in blob
				in.i64(2, sdt, int64(code), b2i(sat), n)
				in.arr(s.src)
				in.arr(f64bytes(tab))
				got := runHarness(t, &in)
				want := make([]byte, n*int64(to.Bits())/8)
				if _, err := dtype.Convert(want, to, s.src, s.dt, dtype.Options{Saturate: sat}); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					w := s.dt.Bits() / 8
					t.Errorf("convert %s to %s (saturate %v): %s", s.dt, to, sat, firstDiff(got, want, to, func(i int) string {
						return fmt.Sprintf("source %x", s.src[i*w:(i+1)*w])
					}))
				}
			}
		}
	}
}

// dqCase is a quantized weight with its bytes.
type dqCase struct {
	name   string
	w      *quant.Weight
	data   []byte
	scales [][]byte
}

// randScale returns the bytes of n random scales of dtype d: mostly
// positive values of a few magnitudes, some chosen so that products land
// on rounding midpoints, and (on amd64, whose float64 NaN rules the kernels
// follow) a few zeros, infinities and NaNs.
func randScales(rng *rand.Rand, d dtype.DType, n int64, specials bool) []byte {
	vals := make([]float32, n)
	for i := range vals {
		switch r := rng.IntN(20); {
		case specials && r == 0:
			vals[i] = [...]float32{0, float32(math.Inf(1)), float32(math.NaN()), float32(math.Inf(-1)), -0.0}[rng.IntN(5)]
		case r < 4:
			// 1 + an odd multiple of 2^-9 (a BF16 midpoint times a power of two)
			vals[i] = float32(math.Ldexp(1+float64(2*rng.IntN(128)+1)/512, rng.IntN(20)-10))
		default:
			vals[i] = float32(math.Ldexp(rng.Float64()+0.5, rng.IntN(40)-20))
			if rng.IntN(8) == 0 {
				vals[i] = -vals[i]
			}
		}
	}
	out := make([]byte, n*int64(d.Bits())/8)
	if _, err := dtype.EncodeFloat32(out, d, vals, dtype.Options{}); err != nil {
		panic(err)
	}
	if specials && d == dtype.F16 && n > 1 {
		binary.LittleEndian.PutUint16(out[2:], 0xFE01) // a NaN with a payload
	}
	return out
}

func codesFor(rng *rand.Rand, n int64, fp4 bool) []byte {
	if fp4 {
		b := make([]byte, n/2)
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		return b
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i) // every code, in every position of the blocks
		if i >= 256 {
			b[i] = byte(rng.IntN(256))
		}
	}
	return b
}

func dqCases(rng *rand.Rand) []dqCase {
	specials := runtime.GOARCH == "amd64"
	var cs []dqCase
	st := func(name string, d dtype.DType, shape ...int64) quant.Stored {
		return quant.Stored{Name: name, DType: d, Shape: shape}
	}
	add := func(name string, elem dtype.DType, shape []int64, layout quant.Layout, scales ...quant.Scale) {
		n := int64(1)
		for _, d := range shape {
			n *= d
		}
		fp4 := elem == dtype.F4
		w := &quant.Weight{Name: name, Shape: shape, Elem: elem, Layout: layout, Scales: scales}
		dd, ds := elem, shape
		if fp4 {
			// Stored packed, as the loader finds it: U8 [..., in/2], or
			// MXFP4's blocks U8 [..., G, 16].
			dd, ds = dtype.U8, append(slices.Clone(shape[:len(shape)-1]), shape[len(shape)-1]/2)
			if layout == quant.MXFP4 {
				ds = append(slices.Clone(shape[:len(shape)-1]), shape[len(shape)-1]/32, 16)
			}
		}
		w.Data = st(name, dd, ds...)
		c := dqCase{name: name, w: w, data: codesFor(rng, n, fp4)}
		for _, s := range scales {
			sn := int64(1)
			for _, d := range s.Shape {
				sn *= d
			}
			if s.Role == quant.RoleE8M0 {
				b := make([]byte, sn)
				for i := range b {
					b[i] = byte(100 + rng.IntN(60))
				}
				if specials {
					b[0] = 255
				}
				c.scales = append(c.scales, b)
				continue
			}
			c.scales = append(c.scales, randScales(rng, s.DType, sn, specials))
		}
		cs = append(cs, c)
	}
	sc := func(role string, d dtype.DType, block [2]int64, shape ...int64) quant.Scale {
		return quant.Scale{Role: role, Stored: st("s", d, shape...), Block: block}
	}
	for _, e := range []dtype.DType{dtype.F8_E4M3, dtype.F8_E5M2, dtype.F8_E4M3FNUZ, dtype.F8_E5M2FNUZ} {
		for _, sd := range []dtype.DType{dtype.F32, dtype.BF16, dtype.F16} {
			add("tensor-"+e.String()+"-"+sd.String(), e, []int64{16, 64}, quant.FP8Scaled, sc(quant.RoleScale, sd, [2]int64{16, 64}))
			add("channel-"+e.String()+"-"+sd.String(), e, []int64{16, 64}, quant.FP8Scaled, sc(quant.RoleScale, sd, [2]int64{1, 64}, 16, 1))
		}
		add("block-"+e.String(), e, []int64{300, 260}, quant.DeepSeekFP8Block, sc(quant.RoleScaleInv, dtype.F32, [2]int64{128, 128}, 3, 3))
		add("group-"+e.String(), e, []int64{8, 96}, quant.CompressedTensorsFP8, sc(quant.RoleScale, dtype.BF16, [2]int64{1, 32}, 8, 3))
		add("plain-"+e.String(), e, []int64{4, 64}, quant.ComfyScaledFP8)
	}
	add("nvfp4-ct", dtype.F4, []int64{8, 64}, quant.CompressedTensorsNVFP4,
		sc(quant.RoleScale, dtype.F8_E4M3, [2]int64{1, 16}, 8, 4), sc(quant.RoleGlobalScale, dtype.F32, [2]int64{8, 64}, 1))
	add("nvfp4-modelopt", dtype.F4, []int64{8, 64}, quant.ModelOptNVFP4,
		sc(quant.RoleScale, dtype.F8_E4M3, [2]int64{1, 16}, 8, 4), sc(quant.RoleScale2, dtype.F32, [2]int64{8, 64}))
	add("mxfp4", dtype.F4, []int64{2, 3, 64}, quant.MXFP4, sc(quant.RoleE8M0, dtype.U8, [2]int64{1, 32}, 2, 3, 2))
	return cs
}

func TestHostDequantMatchesQuant(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, c := range dqCases(rng) {
		p, err := planDequant(c.w)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		n := p.n
		for _, to := range kernelTargets {
			want := make([]byte, n*int64(to.Bits())/8)
			if _, err := c.w.Dequantize(want, to, c.data, c.scales, dtype.Options{}); err != nil {
				t.Fatalf("%s: reference: %v", c.name, err)
			}
			// The whole tensor, and its second half as a staging chunk.
			for _, e0 := range []int64{0, n / 2 &^ 1} {
				code, _ := kernelDType(to)
				var in blob
				in.i64(1, n-e0, p.c, b2i(p.fp4), int64(p.prim.kind), b2i(p.varies), p.br, p.bc, p.gridC, int64(p.glob.kind), int64(p.gmode), int64(code), 0, e0)
				data := c.data[e0:]
				if p.fp4 {
					data = c.data[e0/2:]
				}
				in.arr(data)
				in.arr(f64bytes(decodeTables[p.elem]))
				for _, s := range []dqScale{p.prim, p.glob} {
					if s.index < 0 {
						in.arr(nil)
						in.arr(nil)
						continue
					}
					in.arr(c.scales[s.index])
					if s.kind == ckSTab {
						in.arr(f64bytes(decodeTables[s.tab]))
					} else {
						in.arr(nil)
					}
				}
				got := runHarness(t, &in)
				w := want[e0*int64(to.Bits())/8:]
				if !bytes.Equal(got, w) {
					t.Errorf("%s to %s from element %d: %s", c.name, to, e0, firstDiff(got, w, to, func(i int) string {
						return fmt.Sprintf("element %d", int64(i)+e0)
					}))
				}
			}
		}
	}
}
