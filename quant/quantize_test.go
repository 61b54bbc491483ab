package quant

import (
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ckpt-go/ckpt/dtype"
)

// refNearestCode returns the code of elem whose value is nearest to the
// exact quotient x / s (ties to the code with an even last bit), or the
// code of ±max when the quotient is beyond ±max and saturate is set; it
// returns -1 for a quotient beyond the rounding's overflow threshold
// without saturate. Computed with exact rationals over every finite code.
func refNearestCode(x, s float32, elem dtype.DType, saturate bool) int {
	q := new(big.Rat).Quo(new(big.Rat).SetFloat64(float64(x)), new(big.Rat).SetFloat64(float64(s)))
	dec := refE4M3
	if elem == dtype.F8_E5M2 {
		dec = refE5M2
	}
	best, bestD := -1, new(big.Rat)
	for c := 0; c < 256; c++ {
		v := dec(byte(c))
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		if v == 0 && (c&0x80 != 0) != (x < 0 || (x == 0 && math.Signbit(float64(x)))) {
			continue // the zero of x's sign
		}
		d := new(big.Rat).Sub(q, new(big.Rat).SetFloat64(v))
		d.Abs(d)
		switch cmp := d.Cmp(bestD); {
		case best < 0 || cmp < 0:
			best, bestD = c, d
		case cmp == 0 && c&1 == 0:
			best = c
		}
	}
	m := new(big.Rat).SetFloat64(elem.Info().Max)
	aq := new(big.Rat).Abs(q)
	if aq.Cmp(m) > 0 {
		// Beyond max: overflow unless nearer to max than to the next
		// step (the rounding's threshold is max + half a step).
		step := map[dtype.DType]float64{dtype.F8_E4M3: 32, dtype.F8_E5M2: 8192}[elem]
		thr := new(big.Rat).SetFloat64(elem.Info().Max + step/2)
		if aq.Cmp(thr) >= 0 && !saturate {
			return -1
		}
	}
	return best
}

func TestQuantizeMatchesExactRounding(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, elem := range []dtype.DType{dtype.F8_E4M3, dtype.F8_E5M2} {
		max := elem.Info().Max
		var xs []float32
		var ss []float32
		for range 4000 {
			s := randScale(rng, false)
			// Values spread over the whole code range, some of them exact
			// midpoints between two codes times s, some near them.
			y := math.Ldexp(rng.Float64()*2-1, -rng.IntN(20)) * max
			switch rng.IntN(4) {
			case 0: // a midpoint: (c + c') / 2, exactly representable
				c := byte(rng.UintN(256))
				dec := map[dtype.DType]func(byte) float64{dtype.F8_E4M3: refE4M3, dtype.F8_E5M2: refE5M2}[elem]
				a, b := dec(c), dec(c+1)
				if !math.IsNaN(a) && !math.IsNaN(b) && !math.IsInf(a, 0) && !math.IsInf(b, 0) && c&0x7F != 0x7F {
					y = (a + b) / 2
				}
			case 1: // a power-of-two scale makes x / s exact
				s = float32(math.Ldexp(1, rng.IntN(40)-20))
			}
			x := float32(y * float64(s))
			if math.IsInf(float64(x), 0) || math.Abs(float64(x)/float64(s)) > max {
				continue
			}
			xs = append(xs, x)
			ss = append(ss, s)
		}
		for i, x := range xs {
			q, err := NewFP8Quantizer(elem, []int64{1, 1}, PerTensor, 0)
			if err != nil {
				t.Fatal(err)
			}
			q.scales = []float32{ss[i]} // a chosen scale instead of amax/max
			var dst [1]byte
			if _, err := q.Quantize(dst[:], 0, []float32{x}, dtype.Options{}); err != nil {
				t.Fatal(err)
			}
			if want := refNearestCode(x, ss[i], elem, false); int(dst[0]) != want {
				t.Fatalf("%s: %g / %g: code %#x, want %#x", elem, x, ss[i], dst[0], want)
			}
		}
	}
}

func TestQuantizerScales(t *testing.T) {
	// Rows: zeros, a row with NaN, Inf and 3, a tiny row, a normal row.
	x := []float32{
		0, 0, 0, 0,
		float32(math.NaN()), float32(math.Inf(-1)), -3, 1,
		1e-44, 0, 0, 0,
		-448, 100, 7, 0,
	}
	for _, tc := range []struct {
		g     Granularity
		block int64
		shape []int64
		want  []float32
	}{
		{PerTensor, 0, []int64{1}, []float32{1}},
		{PerChannel, 0, []int64{4, 1}, []float32{1, float32(3.0 / 448), math.SmallestNonzeroFloat32, 1}},
		{PerBlock, 2, []int64{2, 2}, []float32{1, float32(3.0 / 448), 1, float32(7.0 / 448)}},
		{PerBlock, 3, []int64{2, 2}, []float32{float32(3.0 / 448), float32(1.0 / 448), 1, 1.0 / 448 * 0}},
	} {
		q, err := NewFP8Quantizer(dtype.F8_E4M3, []int64{4, 4}, tc.g, tc.block)
		if err != nil {
			t.Fatal(err)
		}
		// In two pieces, the second first.
		if err := q.Observe(2, x[8:]); err != nil {
			t.Fatal(err)
		}
		if err := q.Observe(0, x[:8]); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(q.ScaleShape(), tc.shape) {
			t.Errorf("%v/%d: scale shape %v, want %v", tc.g, tc.block, q.ScaleShape(), tc.shape)
		}
		got := q.Scales()
		if tc.g == PerTensor {
			tc.want = []float32{1} // amax 448: 448/448
		}
		if tc.g == PerBlock && tc.block == 3 {
			// blocks: rows 0-2 x cols 0-2 amax 3; rows 0-2 x col 3 amax 1;
			// row 3 x cols 0-2 amax 448; row 3 x col 3 all zero.
			tc.want = []float32{float32(3.0 / 448), float32(1.0 / 448), 1, 1}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%v/%d: scales %v, want %v", tc.g, tc.block, got, tc.want)
		}
		for _, s := range got {
			if !(s > 0) || math.IsInf(float64(s), 0) {
				t.Errorf("%v: scale %v is not a positive finite number", tc.g, s)
			}
		}
	}
}

// TestQuantizeRoundTrip quantizes random weights in pieces at every
// granularity, checks the pieces against one call, and dequantizes the
// result with Dequantize: every value is within half a code step (times
// its scale) of the source, and the reported errors are the real ones.
func TestQuantizeRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const out, in = 70, 45
	x := make([]float32, out*in)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * math.Ldexp(1, rng.IntN(8)-4))
	}
	for i := 0; i < in; i++ {
		x[5*in+i] = 0 // an all-zero row
	}
	for _, elem := range []dtype.DType{dtype.F8_E4M3, dtype.F8_E5M2} {
		for _, tc := range []struct {
			g     Granularity
			block int64
		}{{PerTensor, 0}, {PerChannel, 0}, {PerBlock, 16}, {PerBlock, 128}} {
			q, err := NewFP8Quantizer(elem, []int64{out, in}, tc.g, tc.block)
			if err != nil {
				t.Fatal(err)
			}
			for r := int64(0); r < out; r += 16 {
				if err := q.Observe(r, x[r*in:min(r+16, out)*in]); err != nil {
					t.Fatal(err)
				}
			}
			whole := make([]byte, out*in)
			wst, err := q.Quantize(whole, 0, x, dtype.Options{})
			if err != nil {
				t.Fatal(err)
			}
			pieces := make([]byte, out*in)
			step := 32 * q.RowAlign() / max(q.RowAlign(), 1)
			if tc.g == PerBlock {
				step = q.RowAlign()
			}
			var pst QuantizeStats
			for r := int64(0); r < out; r += step {
				e := min(r+step, out)
				s, err := q.Quantize(pieces[r*in:e*in], r, x[r*in:e*in], dtype.Options{})
				if err != nil {
					t.Fatal(err)
				}
				pst.Add(s)
			}
			sumsClose := math.Abs(pst.SumSqErr-wst.SumSqErr) <= 1e-12*wst.SumSqErr && math.Abs(pst.SumSq-wst.SumSq) <= 1e-12*wst.SumSq
			pst.SumSqErr, pst.SumSq = wst.SumSqErr, wst.SumSq // summed in another order
			if !slices.Equal(whole, pieces) || pst != wst || !sumsClose {
				t.Fatalf("%s %v: pieces differ from one call (%+v vs %+v)", elem, tc.g, pst, wst)
			}
			w := q.Weight("l.weight", "l.weight_scale", RoleScale, CompressedTensorsFP8)
			sc := f32Bytes(q.Scales())
			got := make([]float64, out*in)
			dst := make([]byte, out*in*8)
			if _, err := w.Dequantize(dst, dtype.F64, whole, [][]byte{sc}, dtype.Options{}); err != nil {
				t.Fatal(err)
			}
			if _, err := dtype.DecodeFloat64(got, dst, dtype.F64); err != nil {
				t.Fatal(err)
			}
			mbits, emin := 3, -6
			if elem == dtype.F8_E5M2 {
				mbits, emin = 2, -14
			}
			var maxAbs, maxRel float64
			blk := q.Block()
			scales := q.Scales()
			for i := range x {
				r, c := int64(i)/in, int64(i)%in
				s := float64(scales[r/blk[0]*q.gridC+c/blk[1]])
				y := math.Abs(float64(x[i])) / s
				// Half a unit in the last place of the code nearest y:
				// 2^(max(floor(log2 y), emin) - mbits - 1).
				e := emin
				if y > 0 {
					_, fe := math.Frexp(y)
					e = max(fe-1, emin)
				}
				bound := math.Ldexp(s, e-mbits-1)
				d := math.Abs(float64(x[i]) - got[i])
				if d > bound {
					t.Fatalf("%s %v: element %d: |%g - %g| = %g > %g", elem, tc.g, i, x[i], got[i], d, bound)
				}
				maxAbs = max(maxAbs, d)
				if x[i] != 0 {
					maxRel = max(maxRel, d/math.Abs(float64(x[i])))
				}
			}
			if wst.MaxAbsErr != maxAbs || wst.MaxRelErr != maxRel || wst.NonFinite != 0 || wst.Elements != out*in || !(wst.SumSqErr > 0 && wst.SumSqErr < wst.SumSq*1e-2) {
				t.Errorf("%s %v: stats %+v, measured abs %g rel %g", elem, tc.g, wst, maxAbs, maxRel)
			}
		}
	}
}

func TestQuantizeInfAndErrors(t *testing.T) {
	q, err := NewFP8Quantizer(dtype.F8_E4M3, []int64{1, 4}, PerTensor, 0)
	if err != nil {
		t.Fatal(err)
	}
	x := []float32{float32(math.Inf(1)), float32(math.NaN()), 2, -1}
	q.Observe(0, x)
	dst := make([]byte, 4)
	st, err := q.Quantize(dst, 0, x, dtype.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Scale 2/448: +Inf -> NaN 0x7F, NaN -> NaN, 2 -> 448 (0x7E), -1 -> -224 (0xF6).
	if !slices.Equal(dst, []byte{0x7F, 0x7F, 0x7E, 0xF6}) || st.NaN != 2 || st.NonFinite != 0 || st.MaxAbsErr > 1e-6 {
		t.Errorf("codes % x, stats %+v", dst, st)
	}
	if _, err := q.Quantize(dst, 0, x, dtype.Options{Saturate: true}); err != nil || dst[0] != 0x7E {
		t.Errorf("saturate: % x %v", dst, err)
	}
	for _, tc := range []struct {
		f    func() error
		kind failure
	}{
		{func() error { _, err := NewFP8Quantizer(dtype.BF16, []int64{2, 2}, PerTensor, 0); return err }, target},
		{func() error { _, err := NewFP8Quantizer(dtype.F8_E4M3, []int64{2, 2, 2}, PerTensor, 0); return err }, failure{Kind: ErrInvalidArgument, What: ": data shape: "}},
		{func() error { _, err := NewFP8Quantizer(dtype.F8_E4M3, []int64{2, 2}, PerBlock, 0); return err }, failure{Kind: ErrInvalidArgument, What: ": block size: "}},
		{func() error { return q.Observe(0, make([]float32, 3)) }, length},
		{func() error { return q.Observe(1, make([]float32, 4)) }, length},
		{func() error { _, err := q.Quantize(make([]byte, 3), 0, x, dtype.Options{}); return err }, length},
	} {
		if err := tc.f(); !tc.kind.Matches(err) {
			t.Errorf("got %v, want %v", err, tc.kind)
		}
	}
	qb, _ := NewFP8Quantizer(dtype.F8_E4M3, []int64{4, 4}, PerBlock, 2)
	if _, err := qb.Quantize(make([]byte, 4), 1, make([]float32, 4), dtype.Options{}); !length.Matches(err) {
		t.Errorf("misaligned piece: %v", err)
	}
}

// TestDequantizeRows: rows computed piece by piece are the bytes of one
// Dequantize, for block, per-channel and MXFP4 layouts.
func TestDequantizeRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	cases := []struct {
		tensors []Stored
		cfg     string
		name    string
	}{
		{[]Stored{st("w.weight", dtype.F8_E4M3, 300, 70), st("w.weight_scale_inv", dtype.F32, 3, 1)},
			`{"quantization_config":{"quant_method":"fp8","weight_block_size":[128,128]}}`, "w.weight"},
		{[]Stored{st("w.weight", dtype.F8_E4M3, 33, 70), st("w.weight_scale", dtype.F32, 33, 1)},
			`{"quantization_config":{"quant_method":"fbgemm_fp8"}}`, "w.weight"},
		{[]Stored{st("e_blocks", dtype.U8, 3, 5, 2, 16), st("e_scales", dtype.U8, 3, 5, 2)}, "", "e"},
	}
	for _, tc := range cases {
		s := mustDetect(t, tc.tensors, Sources{ConfigJSON: []byte(tc.cfg)})
		w := weightOf(t, s, tc.name)
		nd, _ := w.Data.DType.ByteLen(w.Data.Shape[0] * elemsAfter(w.Data.Shape))
		data := allCodes(rng, int(nd))
		var scales [][]byte
		for _, sc := range w.Scales {
			n := sc.Shape[0] * elemsAfter(sc.Shape)
			if sc.DType == dtype.U8 {
				b := make([]byte, n)
				for i := range b {
					b[i] = byte(100 + rng.IntN(50))
				}
				scales = append(scales, b)
			} else {
				scales = append(scales, f32Bytes(randF32s(rng, int(n), true)))
			}
		}
		r, c, _ := view(w.Shape)
		ref := make([]byte, r*c*2)
		if _, err := w.Dequantize(ref, dtype.BF16, data, scales, dtype.Options{}); err != nil {
			t.Fatal(err)
		}
		for _, step := range []int64{1, 7, 128, r} {
			got := make([]byte, 0, len(ref))
			for r0 := int64(0); r0 < r; r0 += step {
				n := min(step, r-r0)
				part := make([]byte, n*c*2)
				if _, err := w.DequantizeRows(nil, part, dtype.BF16, data, scales, r0, n, dtype.Options{Workers: 2}); err != nil {
					t.Fatal(err)
				}
				// The same rows from only their own data bytes.
				eb := int64(w.Elem.Bits())
				own := make([]byte, n*c*2)
				if _, err := w.DequantizeRows(nil, own, dtype.BF16, data[r0*c*eb/8:(r0+n)*c*eb/8], scales, r0, n, dtype.Options{}); err != nil {
					t.Fatalf("%s: rows [%d, +%d) from their own bytes: %v", tc.name, r0, n, err)
				}
				if !slices.Equal(own, part) {
					t.Errorf("%s: rows [%d, +%d) from their own bytes differ", tc.name, r0, n)
				}
				got = append(got, part...)
			}
			if !slices.Equal(got, ref) {
				t.Errorf("%s: rows %d at a time differ from Dequantize", tc.name, step)
			}
		}
		// Data of neither length is refused.
		if r > 1 {
			if _, err := w.DequantizeRows(nil, make([]byte, c*2), dtype.BF16, data[:len(data)-1], scales, 0, 1, dtype.Options{}); !length.Matches(err) {
				t.Errorf("%s: data of neither the tensor's nor the rows' length: %v", tc.name, err)
			}
		}
		if _, err := w.DequantizeRows(nil, make([]byte, 2*c*2), dtype.BF16, data, scales, r-1, 2, dtype.Options{}); !length.Matches(err) {
			t.Errorf("%s: rows past the end: %v", tc.name, err)
		}
	}
}

func elemsAfter(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape[1:] {
		n *= d
	}
	return n
}

// BenchmarkQuantizeFP8 measures Quantize (with its error statistics) in
// bytes of F32 input per second, per-channel and in 128×128 blocks.
func BenchmarkQuantizeFP8(b *testing.B) {
	const out, in = 1024, 4096
	rng := rand.New(rand.NewPCG(1, 1))
	x := make([]float32, out*in)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	for _, g := range []Granularity{PerChannel, PerBlock} {
		b.Run(g.String(), func(b *testing.B) {
			q, _ := NewFP8Quantizer(dtype.F8_E4M3, []int64{out, in}, g, 128)
			q.Observe(0, x)
			dst := make([]byte, len(x))
			b.SetBytes(int64(4 * len(x)))
			for range b.N {
				if _, err := q.Quantize(dst, 0, x, dtype.Options{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("observe", func(b *testing.B) {
		q, _ := NewFP8Quantizer(dtype.F8_E4M3, []int64{out, in}, PerBlock, 128)
		b.SetBytes(int64(4 * len(x)))
		for range b.N {
			q.Observe(0, x)
		}
	})
}
