package interop_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/quant"
)

// qcase is one scaled tensor for quant_oracle.py (see its docstring).
type qcase struct {
	ID        string         `json:"id"`
	Layout    string         `json:"layout"`
	Shape     []int64        `json:"shape"`
	Elem      string         `json:"elem"`
	Data      string         `json:"data"`
	DataShape []int64        `json:"data_shape"`
	Scales    []qscale       `json:"scales"`
	Params    map[string]any `json:"params"`
	Targets   []string       `json:"targets"`

	w      *quant.Weight
	data   []byte
	scales [][]byte
}

type qscale struct {
	File  string  `json:"file"`
	DType string  `json:"dtype"`
	Shape []int64 `json:"shape"`
}

var quantTargets = []dtype.DType{dtype.F32, dtype.BF16, dtype.F16, dtype.F64}

// specialScales are F32 scale values placed at the start of the random
// scale arrays: NaN, infinities, signed zeros, subnormals, values whose
// products overflow F16 or BF16, and exact powers of two.
var specialScales = []float32{
	float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 0, float32(math.Copysign(0, -1)),
	math.SmallestNonzeroFloat32, 1e-40, 3e38, -3e38, 1e30, 65504.0 / 448, 146.285714, 1, 0.5, -2, 1e-20,
}

func qst(name string, d dtype.DType, shape ...int64) quant.Stored {
	return quant.Stored{Name: name, DType: d, Shape: shape}
}

func qf32(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// qrandF32 returns n F32 scales: the specials first (when withSpecial), then
// random magnitudes 2^-40..2^40 with random 24-bit significands and signs.
func qrandF32(rng *rand.Rand, n int, withSpecial bool) []float32 {
	v := make([]float32, n)
	for i := range v {
		if withSpecial && i < len(specialScales) {
			v[i] = specialScales[i]
			continue
		}
		v[i] = float32(math.Ldexp(float64(1<<23|rng.UintN(1<<23)), rng.IntN(81)-40-23))
		if rng.IntN(4) == 0 {
			v[i] = -v[i]
		}
	}
	return v
}

// qcodes returns n bytes: every value first, then random ones.
func qcodes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		if i < 256 {
			b[i] = byte(i)
		} else {
			b[i] = byte(rng.UintN(256))
		}
	}
	return b
}

// qrand16 returns n random BF16/F16 bit patterns of moderate positive and
// negative values.
func qrand16(rng *rand.Rand, n int) []byte {
	b := make([]byte, 2*n)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint16(b[2*i:], uint16(0x2000+rng.UintN(0x3000))|uint16(rng.IntN(2))<<15)
	}
	return b
}

// TestQuantLayoutsAgree dequantizes every scaled layout with ckpt and with
// quant_oracle.py (NumPy + ml_dtypes computing the same formula from the
// layout's definition) and requires the same bytes in F32, BF16, F16 and
// F64 (NaN: any NaN).
func TestQuantLayoutsAgree(t *testing.T) {
	python(t)
	rng := rand.New(rand.NewPCG(2025, 8))
	var cases []*qcase
	detect := func(tensors []quant.Stored, src quant.Sources, name string) *quant.Weight {
		t.Helper()
		s, err := quant.Detect(tensors, src)
		if err != nil {
			t.Fatal(err)
		}
		w := s.Weight(name)
		if w == nil {
			t.Fatalf("no weight %q in %+v", name, s)
		}
		return w
	}
	add := func(layout string, w *quant.Weight, data []byte, scales [][]byte, params map[string]any) {
		c := &qcase{ID: fmt.Sprintf("c%d", len(cases)), Layout: layout, Shape: w.Shape, Elem: w.Elem.String(),
			DataShape: w.Data.Shape, Params: params, w: w, data: data, scales: scales}
		if w.Elem == dtype.F4 {
			c.Elem = "F4"
		}
		for i, s := range w.Scales {
			c.Scales = append(c.Scales, qscale{File: fmt.Sprintf("%s.s%d", c.ID, i), DType: s.DType.String(), Shape: s.Shape})
		}
		for _, to := range quantTargets {
			c.Targets = append(c.Targets, to.String())
		}
		cases = append(cases, c)
	}
	ds := func(b0, b1 int64) quant.Sources {
		return quant.Sources{ConfigJSON: []byte(fmt.Sprintf(`{"quantization_config":{"quant_method":"fp8","weight_block_size":[%d,%d]}}`, b0, b1))}
	}

	// DeepSeek block FP8: partial edge blocks, and one large enough to be
	// split across goroutines.
	for _, c := range []struct{ out, in, b0, b1 int64 }{{300, 200, 128, 128}, {1000, 520, 128, 128}, {7, 9, 4, 2}} {
		so, si := (c.out+c.b0-1)/c.b0, (c.in+c.b1-1)/c.b1
		w := detect([]quant.Stored{qst("l.weight", dtype.F8_E4M3, c.out, c.in), qst("l.weight_scale_inv", dtype.F32, so, si)}, ds(c.b0, c.b1), "l.weight")
		add("deepseek-fp8-block", w, qcodes(rng, int(c.out*c.in)), [][]byte{qf32(qrandF32(rng, int(so*si), true))},
			map[string]any{"strategy": "block", "block": []int64{c.b0, c.b1}})
	}

	// compressed-tensors FP8, every strategy, F32/BF16/F16 scales, E5M2 data.
	ct := func(strategy string, extra string) quant.Sources {
		return quant.Sources{ConfigJSON: []byte(`{"quantization_config":{"quant_method":"compressed-tensors","format":"float-quantized",
		  "config_groups":{"g":{"targets":["Linear"],"weights":{"num_bits":8,"type":"float","strategy":"` + strategy + `"` + extra + `}}}}}`)}
	}
	const out, in = 64, 96
	w := detect([]quant.Stored{qst("a.weight", dtype.F8_E4M3, out, in), qst("a.weight_scale", dtype.F16, 1)}, ct("tensor", ""), "a.weight")
	for _, h := range []uint16{0x3C00, 0x5BFF, 0x0001, 0xFC00, 0x8000} { // 1, 255.9, smallest subnormal, -Inf, -0
		add("compressed-tensors-fp8", w, qcodes(rng, out*in), [][]byte{{byte(h), byte(h >> 8)}}, map[string]any{"strategy": "tensor"})
	}
	w = detect([]quant.Stored{qst("a.weight", dtype.F8_E5M2, out, in), qst("a.weight_scale", dtype.BF16, out, 1)}, ct("channel", ""), "a.weight")
	add("compressed-tensors-fp8", w, qcodes(rng, out*in), [][]byte{qrand16(rng, out)}, map[string]any{"strategy": "channel"})
	w = detect([]quant.Stored{qst("a.weight", dtype.F8_E4M3, out, in), qst("a.weight_scale", dtype.F32, 3, 4)},
		ct("block", `,"block_structure":[30,25]`), "a.weight")
	add("compressed-tensors-fp8", w, qcodes(rng, out*in), [][]byte{qf32(qrandF32(rng, 12, true))},
		map[string]any{"strategy": "block", "block": []int64{30, 25}})
	w = detect([]quant.Stored{qst("a.weight", dtype.F8_E4M3, out, in), qst("a.weight_scale", dtype.F32, out, in/32)},
		ct("group", `,"group_size":32`), "a.weight")
	add("compressed-tensors-fp8", w, qcodes(rng, out*in), [][]byte{qf32(qrandF32(rng, out*in/32, true))},
		map[string]any{"strategy": "group", "group": 32})

	// compressed-tensors NVFP4 (the dividing layout): every FP8 block-scale
	// code, and global scales including ones built so that the quotient's
	// float32 rounding lands on a BF16 midpoint.
	ctFP4 := quant.Sources{ConfigJSON: []byte(`{"quantization_config":{"quant_method":"compressed-tensors","format":"nvfp4-pack-quantized",
	  "config_groups":{"g":{"targets":["Linear"],"weights":{"num_bits":4,"type":"float","strategy":"tensor_group","group_size":16}}}}}`)}
	nv := []quant.Stored{qst("m.weight_packed", dtype.U8, 80, 32), qst("m.weight_scale", dtype.F8_E4M3, 80, 4), qst("m.weight_global_scale", dtype.F32, 1)}
	w = detect(nv, ctFP4, "m.weight")
	globals := append([]float32{448 * 6 / 2.5, -3, 1e-30, 7e37}, qrandF32(rng, 4, false)...)
	for i := 0; i < 8; i++ {
		mid := math.Ldexp(float64(1<<8|2*rng.IntN(1<<7)|1), -8)
		globals = append(globals, float32(1.5*1.125/mid))
	}
	for _, g := range globals {
		add("compressed-tensors-nvfp4", w, qcodes(rng, 80*32), [][]byte{qcodes(rng, 320), qf32([]float32{g})}, map[string]any{"group": 16})
	}

	// ModelOpt NVFP4 and FP8.
	mo := quant.Sources{HFQuantConfig: []byte(`{"quantization":{"quant_algo":"NVFP4","group_size":16,"exclude_modules":["lm_head"]}}`)}
	w = detect([]quant.Stored{qst("m.weight", dtype.U8, 48, 48), qst("m.weight_scale", dtype.F8_E4M3, 48, 6), qst("m.weight_scale_2", dtype.F32)}, mo, "m.weight")
	for _, s2 := range append([]float32{1, 1e-35, 3e36}, qrandF32(rng, 3, false)...) {
		add("modelopt-nvfp4", w, qcodes(rng, 48*48), [][]byte{qcodes(rng, 48*6), qf32([]float32{s2})}, map[string]any{"group": 16})
	}
	moFP8 := quant.Sources{HFQuantConfig: []byte(`{"quantization":{"quant_algo":"FP8"}}`)}
	w = detect([]quant.Stored{qst("m.weight", dtype.F8_E4M3, 16, 40), qst("m.weight_scale", dtype.F32)}, moFP8, "m.weight")
	for _, s := range specialScales {
		add("modelopt-fp8", w, qcodes(rng, 16*40), [][]byte{qf32([]float32{s})}, map[string]any{"strategy": "tensor"})
	}

	// MXFP4: a small one with every scale code, and a gpt-oss-shaped one.
	for _, sh := range [][]int64{{2, 8, 16}, {4, 64, 90}} {
		e, r, g := sh[0], sh[1], sh[2]
		w = detect([]quant.Stored{qst("x.experts.down_proj_blocks", dtype.U8, e, r, g, 16), qst("x.experts.down_proj_scales", dtype.U8, e, r, g)},
			quant.Sources{}, "x.experts.down_proj")
		add("mxfp4", w, qcodes(rng, int(e*r*g*16)), [][]byte{qcodes(rng, int(e*r*g))}, map[string]any{})
	}

	// FBGEMM row-wise.
	w = detect([]quant.Stored{qst("f.weight", dtype.F8_E4M3, 40, 24), qst("f.weight_scale", dtype.F32, 40, 1)},
		quant.Sources{ConfigJSON: []byte(`{"quantization_config":{"quant_method":"fbgemm_fp8","activation_scale_ub":1200}}`)}, "f.weight")
	add("fbgemm-fp8", w, qcodes(rng, 40*24), [][]byte{qf32(qrandF32(rng, 40, true))}, map[string]any{"strategy": "channel"})

	// Row-wise scales built so that the float32 product of each row's one
	// value lands on a BF16 (even rows) or F16 (odd rows) midpoint: where a
	// second rounding from float32 would break the tie the wrong way.
	const rows = 4096
	w = detect([]quant.Stored{qst("f.weight", dtype.F8_E4M3, rows, 1), qst("f.weight_scale", dtype.F32, rows, 1)},
		quant.Sources{ConfigJSON: []byte(`{"quantization_config":{"quant_method":"fbgemm_fp8"}}`)}, "f.weight")
	codes, built := make([]byte, rows), make([]float32, rows)
	for i := range codes {
		codes[i] = byte(0x31 + 2*rng.IntN(7)) // 0.5625 .. 0.9375, odd mantissas
		var q [1]float64
		dtype.DecodeFloat64(q[:], codes[i:i+1], dtype.F8_E4M3)
		mbits := 7 + 3*(i%2)
		mid := math.Ldexp(float64(1<<(mbits+1)|2*rng.IntN(1<<mbits)|1), -mbits-1+rng.IntN(8))
		built[i] = float32(mid / q[0])
	}
	add("fbgemm-fp8", w, codes, [][]byte{qf32(built)}, map[string]any{"strategy": "channel"})

	// ComfyUI: legacy conv weight; newer metadata layout with E5M2.
	w = detect([]quant.Stored{qst("scaled_fp8", dtype.F8_E4M3, 0), qst("c.weight", dtype.F8_E4M3, 8, 4, 3, 3), qst("c.scale_weight", dtype.F32)},
		quant.Sources{}, "c.weight")
	add("comfy-scaled-fp8", w, qcodes(rng, 8*36), [][]byte{qf32(qrandF32(rng, 1, false))}, map[string]any{"strategy": "tensor"})
	w = detect([]quant.Stored{qst("d.weight", dtype.F8_E5M2, 32, 16), qst("d.weight_scale", dtype.F32)},
		quant.Sources{Metadata: map[string]string{"_quantization_metadata": `{"layers":{"d":{"format":"float8_e5m2"}}}`}}, "d.weight")
	add("comfy-scaled-fp8", w, qcodes(rng, 32*16), [][]byte{qf32(qrandF32(rng, 1, false))}, map[string]any{"strategy": "tensor"})

	// Write the cases, run the oracle, compare.
	dir := t.TempDir()
	for _, c := range cases {
		c.Data = c.ID + ".data"
		writeFile(t, filepath.Join(dir, c.Data), c.data)
		for i, s := range c.Scales {
			writeFile(t, filepath.Join(dir, s.File), c.scales[i])
		}
	}
	js, err := json.Marshal(cases)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "cases.json"), js)
	t.Logf("oracle: %s", bytes.TrimSpace(runPy(t, "quant_oracle.py", dir)))

	perLayout := map[string]int{}
	total, nan := 0, 0
	for _, c := range cases {
		for _, to := range quantTargets {
			want, err := os.ReadFile(filepath.Join(dir, c.ID+"."+to.String()+".bin"))
			if err != nil {
				t.Fatal(err)
			}
			got := make([]byte, len(want))
			if _, err := c.w.Dequantize(got, to, c.data, c.scales, dtype.Options{Workers: 2}); err != nil {
				t.Fatalf("%s %s -> %s: %v", c.ID, c.Layout, to, err)
			}
			var m mismatches
			size := to.Bits() / 8
			n := len(got) / size
			a, b := make([]float64, n), make([]float64, n)
			dtype.DecodeFloat64(a, got, to)
			dtype.DecodeFloat64(b, want, to)
			for i := 0; i < n; i++ {
				g, w := got[i*size:(i+1)*size], want[i*size:(i+1)*size]
				if math.IsNaN(a[i]) && math.IsNaN(b[i]) {
					nan++
					continue
				}
				if !bytes.Equal(g, w) {
					m.add("%s %s element %d: ckpt % x (%g), oracle % x (%g)", c.Layout, c.ID, i, g, a[i], w, b[i])
				}
			}
			m.report(t, c.Layout+" "+c.ID+" -> "+to.String(), n)
			perLayout[c.Layout] += n
			total += n
		}
	}
	t.Logf("%d elements compared over %d cases × %d targets (%d NaN in both): %v", total, len(cases), len(quantTargets), nan, perLayout)
	if nan > total/10 {
		t.Errorf("%d of %d elements are NaN: the comparison says too little", nan, total)
	}
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
