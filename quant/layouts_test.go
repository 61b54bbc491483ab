package quant

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ckpt-go/ckpt/dtype"
)

func st(name string, d dtype.DType, shape ...int64) Stored {
	return Stored{Name: name, DType: d, Shape: shape}
}

func mustDetect(t *testing.T, tensors []Stored, src Sources) *Scheme {
	t.Helper()
	s, err := Detect(tensors, src)
	if err != nil {
		t.Fatalf("Detect: %v", err)
	}
	return s
}

func weightOf(t *testing.T, s *Scheme, name string) *Weight {
	t.Helper()
	w := s.Weight(name)
	if w == nil {
		var names []string
		for _, w := range s.Weights {
			names = append(names, w.Name)
		}
		t.Fatalf("no weight %q; have %q", name, names)
	}
	return w
}

func randF32s(rng *rand.Rand, n int, neg bool) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = randScale(rng, neg)
	}
	return v
}

// pack4 packs 4-bit codes two per byte, element 2i in the low nibble.
func pack4(codes []byte) []byte {
	out := make([]byte, (len(codes)+1)/2)
	for i, c := range codes {
		out[i/2] |= (c & 15) << (4 * (i % 2))
	}
	return out
}

// allNibbles returns n 4-bit codes, the first 16 being every code.
func allNibbles(rng *rand.Rand, n int) []byte {
	c := make([]byte, n)
	for i := range c {
		if i < 16 {
			c[i] = byte(i)
		} else {
			c[i] = byte(rng.UintN(16))
		}
	}
	return c
}

func TestDeepSeekFP8Block(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		cfg      string
		block    [2]int64
		out, in  int64
		scaleDim [2]int64
	}{
		{`{"quantization_config":{"quant_method":"fp8","fmt":"e4m3","activation_scheme":"dynamic","weight_block_size":[128,128]}}`, [2]int64{128, 128}, 300, 200, [2]int64{3, 2}},
		{`{"quantization_config":{"quant_method":"fp8","activation_scheme":"dynamic"}}`, [2]int64{128, 128}, 256, 384, [2]int64{2, 3}},
		{`{"quantization_config":{"quant_method":"fp8","weight_block_size":[64,32]}}`, [2]int64{64, 32}, 65, 33, [2]int64{2, 2}},
	} {
		tensors := []Stored{
			st("model.layers.0.mlp.down_proj.weight", dtype.F8_E4M3, tc.out, tc.in),
			st("model.layers.0.mlp.down_proj.weight_scale_inv", dtype.F32, tc.scaleDim[0], tc.scaleDim[1]),
			st("model.layers.0.input_layernorm.weight", dtype.BF16, tc.in),
			st("lm_head.weight", dtype.BF16, 10, tc.in),
		}
		s := mustDetect(t, tensors, Sources{ConfigJSON: []byte(tc.cfg)})
		if s.Layout != DeepSeekFP8Block || s.Source != "config.json quantization_config" || s.BlockSize != tc.block || s.QuantMethod != "fp8" {
			t.Fatalf("scheme %v %q %v %q", s.Layout, s.Source, s.BlockSize, s.QuantMethod)
		}
		w := weightOf(t, s, "model.layers.0.mlp.down_proj.weight")
		if w.Scales[0].Role != RoleScaleInv || w.Scales[0].Block != tc.block || !slices.Equal(w.Shape, []int64{tc.out, tc.in}) {
			t.Fatalf("weight %+v", w)
		}
		if !s.Consumed("model.layers.0.mlp.down_proj.weight_scale_inv") || s.Consumed("lm_head.weight") || len(s.Unconsumed) != 0 {
			t.Errorf("consumed/unconsumed wrong: %v", s.Unconsumed)
		}
		data := allCodes(rng, int(tc.out*tc.in))
		sc := randF32s(rng, int(tc.scaleDim[0]*tc.scaleDim[1]), true)
		checkDequant(t, w, data, [][]byte{f32Bytes(sc)}, func(i int) float64 {
			r, c := i/int(tc.in), i%int(tc.in)
			// value = fp8 × scale_inv: a multiplication, despite the name.
			return refE4M3(data[i]) * float64(sc[r/int(tc.block[0])*int(tc.scaleDim[1])+c/int(tc.block[1])])
		})
	}
}

func TestCompressedTensorsFP8(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	cfg := `{"quantization_config":{"quant_method":"compressed-tensors","format":"float-quantized",
	  "quantization_status":"compressed","ignore":["lm_head","re:.*mlp\\.gate$"],"kv_cache_scheme":null,
	  "config_groups":{
	    "group_0":{"targets":["Linear"],"weights":{"num_bits":8,"type":"float","strategy":"tensor","symmetric":true,"dynamic":false},
	               "input_activations":{"num_bits":8,"type":"float","strategy":"tensor"}},
	    "group_1":{"targets":["re:.*mlp\\.(up|down)_proj$"],"weights":{"num_bits":8,"type":"float","strategy":"channel"}},
	    "group_2":{"targets":["model.layers.0.self_attn.o_proj"],"weights":{"num_bits":8,"type":"float","strategy":"block","block_structure":[16,32]}},
	    "group_3":{"targets":["model.layers.0.self_attn.k_proj"],"weights":{"num_bits":8,"type":"float","strategy":"group","group_size":8}}}}}`
	const out, in = 40, 48
	tensors := []Stored{
		st("model.layers.0.self_attn.q_proj.weight", dtype.F8_E4M3, out, in),
		st("model.layers.0.self_attn.q_proj.weight_scale", dtype.F32, 1),
		st("model.layers.0.self_attn.q_proj.input_scale", dtype.F32, 1),
		st("model.layers.0.self_attn.k_proj.weight", dtype.F8_E4M3, out, in),
		st("model.layers.0.self_attn.k_proj.weight_scale", dtype.F16, out, in/8),
		st("model.layers.0.self_attn.o_proj.weight", dtype.F8_E4M3, out, in),
		st("model.layers.0.self_attn.o_proj.weight_scale", dtype.F32, 3, 2),
		st("model.layers.0.mlp.up_proj.weight", dtype.F8_E5M2, out, in),
		st("model.layers.0.mlp.up_proj.weight_scale", dtype.BF16, out, 1),
		st("model.layers.0.mlp.gate.weight", dtype.BF16, 4, in),
		st("lm_head.weight", dtype.BF16, 7, in),
	}
	s := mustDetect(t, tensors, Sources{ConfigJSON: []byte(cfg)})
	if s.Layout != CompressedTensorsFP8 || len(s.Weights) != 4 || len(s.Unconsumed) != 0 ||
		!slices.Equal(s.Kept, []string{"model.layers.0.self_attn.q_proj.input_scale"}) ||
		!slices.Equal(s.Ignore, []string{"lm_head", "re:.*mlp\\.gate$"}) {
		t.Fatalf("scheme %+v", s)
	}
	f16 := func(b []byte, i int) float64 { return f16(binary.LittleEndian.Uint16(b[2*i:])) }
	bf16 := func(b []byte, i int) float64 {
		return float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16))
	}
	rand16 := func(n int) []byte { // random positive normal F16/BF16 bit patterns
		b := make([]byte, 2*n)
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint16(b[2*i:], uint16(0x2000+rng.UintN(0x3000)))
		}
		return b
	}

	// per tensor, F32 scale [1]
	w := weightOf(t, s, "model.layers.0.self_attn.q_proj.weight")
	data := allCodes(rng, out*in)
	sc := []float32{randScale(rng, false)}
	checkDequant(t, w, data, [][]byte{f32Bytes(sc)}, func(i int) float64 { return refE4M3(data[i]) * float64(sc[0]) })

	// group of 8 along a row (exact target beats the class name), F16 scales
	w = weightOf(t, s, "model.layers.0.self_attn.k_proj.weight")
	if w.Scales[0].Block != [2]int64{1, 8} {
		t.Fatalf("k_proj block %v", w.Scales[0].Block)
	}
	hs := rand16(out * in / 8)
	checkDequant(t, w, data, [][]byte{hs}, func(i int) float64 { return refE4M3(data[i]) * f16(hs, i/8) })

	// block [16,32] with partial edge blocks
	w = weightOf(t, s, "model.layers.0.self_attn.o_proj.weight")
	sc = randF32s(rng, 6, true)
	checkDequant(t, w, data, [][]byte{f32Bytes(sc)}, func(i int) float64 {
		r, c := i/in, i%in
		return refE4M3(data[i]) * float64(sc[r/16*2+c/32])
	})

	// per channel (the regular expression beats the class name), E5M2 data,
	// BF16 scales
	w = weightOf(t, s, "model.layers.0.mlp.up_proj.weight")
	if w.Elem != dtype.F8_E5M2 || w.Scales[0].Block != [2]int64{1, in} {
		t.Fatalf("up_proj %+v", w)
	}
	bs := rand16(out)
	checkDequant(t, w, data, [][]byte{bs}, func(i int) float64 { return refE5M2(data[i]) * bf16(bs, i/in) })
}

func TestCompressedTensorsNVFP4(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	cfg := `{"quantization_config":{"quant_method":"compressed-tensors","format":"nvfp4-pack-quantized","ignore":["lm_head"],
	  "config_groups":{"group_0":{"targets":["Linear"],
	    "weights":{"num_bits":4,"type":"float","strategy":"tensor_group","group_size":16,"symmetric":true,"dynamic":false},
	    "input_activations":{"num_bits":4,"type":"float","strategy":"tensor_group","group_size":16,"dynamic":"local"}}}}}`
	const out, in = 80, 64
	tensors := []Stored{
		st("m.proj.weight_packed", dtype.U8, out, in/2),
		st("m.proj.weight_scale", dtype.F8_E4M3, out, in/16),
		st("m.proj.weight_global_scale", dtype.F32, 1),
		st("m.proj.input_global_scale", dtype.F32, 1),
		st("lm_head.weight", dtype.BF16, 3, in),
	}
	s := mustDetect(t, tensors, Sources{ConfigJSON: []byte(cfg)})
	if s.Layout != CompressedTensorsNVFP4 || s.GroupSize != 16 || !slices.Equal(s.Kept, []string{"m.proj.input_global_scale"}) {
		t.Fatalf("scheme %+v", s)
	}
	w := weightOf(t, s, "m.proj.weight") // logical name, not weight_packed
	if !slices.Equal(w.Shape, []int64{out, in}) || w.Elem != dtype.F4 || w.Scales[1].Role != RoleGlobalScale {
		t.Fatalf("weight %+v", w)
	}
	codes := allNibbles(rng, out*in)
	sc := allCodes(rng, out*in/16) // every FP8 scale code, NaN and negatives included
	for _, g := range []float32{448 * 6 / 2.5, 3, -0.75, 1e-30} {
		checkDequant(t, w, pack4(codes), [][]byte{sc, f32Bytes([]float32{g})}, func(i int) float64 {
			// value = e2m1 × f32(weight_scale) ÷ weight_global_scale: one
			// float64 quotient, rounded once.
			return refE2M1(codes[i]) * refE4M3(sc[i/16]) / float64(g)
		})
	}
}

func TestModelOpt(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	hf := `{"producer":{"name":"modelopt","version":"0.29.0"},
	  "quantization":{"quant_algo":"NVFP4","kv_cache_quant_algo":"FP8","group_size":16,"exclude_modules":["lm_head","model.layers.*.mlp.gate"]}}`
	const out, in = 48, 96
	tensors := []Stored{
		st("model.layers.0.mlp.up_proj.weight", dtype.U8, out, in/2),
		st("model.layers.0.mlp.up_proj.weight_scale", dtype.F8_E4M3, out, in/16),
		st("model.layers.0.mlp.up_proj.weight_scale_2", dtype.F32),
		st("model.layers.0.mlp.up_proj.input_scale", dtype.F32),
		st("model.layers.0.self_attn.k_proj.k_scale", dtype.F32),
		st("model.layers.0.mlp.gate.weight", dtype.BF16, 8, in),
		st("lm_head.weight", dtype.BF16, 5, in),
	}
	s := mustDetect(t, tensors, Sources{HFQuantConfig: []byte(hf)})
	if s.Layout != ModelOptNVFP4 || s.Source != "hf_quant_config.json" || s.QuantMethod != "NVFP4" ||
		len(s.Kept) != 2 || len(s.Unconsumed) != 0 {
		t.Fatalf("scheme %+v", s)
	}
	w := weightOf(t, s, "model.layers.0.mlp.up_proj.weight")
	if !slices.Equal(w.Shape, []int64{out, in}) || w.Scales[1].Role != RoleScale2 {
		t.Fatalf("weight %+v", w)
	}
	codes := allNibbles(rng, out*in)
	sc := allCodes(rng, out*in/16)
	s2 := randScale(rng, false)
	checkDequant(t, w, pack4(codes), [][]byte{sc, f32Bytes([]float32{s2})}, func(i int) float64 {
		return refE2M1(codes[i]) * refE4M3(sc[i/16]) * float64(s2)
	})

	// FP8 with scalar scales, from config.json (transformers' modelopt form)
	cfg := `{"quantization_config":{"quant_method":"modelopt","quant_algo":"FP8","exclude_modules":["lm_head"]}}`
	tensors = []Stored{
		st("a.weight", dtype.F8_E4M3, 16, 32),
		st("a.weight_scale", dtype.F32),
		st("a.input_scale", dtype.F32),
		st("lm_head.weight", dtype.F16, 3, 32),
	}
	s = mustDetect(t, tensors, Sources{ConfigJSON: []byte(cfg)})
	if s.Layout != ModelOptFP8 || s.QuantMethod != "FP8" {
		t.Fatalf("scheme %+v", s)
	}
	w = weightOf(t, s, "a.weight")
	data := allCodes(rng, 16*32)
	checkDequant(t, w, data, [][]byte{f32Bytes([]float32{s2})}, func(i int) float64 { return refE4M3(data[i]) * float64(s2) })
}

func TestMXFP4(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	const e, r, g = 2, 3, 5
	tensors := []Stored{
		st("model.layers.0.mlp.experts.gate_up_proj_blocks", dtype.U8, e, r, g, 16),
		st("model.layers.0.mlp.experts.gate_up_proj_scales", dtype.U8, e, r, g),
		st("model.layers.0.mlp.experts.gate_up_proj_bias", dtype.BF16, e, r),
		st("model.layers.0.self_attn.q_proj.weight", dtype.BF16, 8, 8),
	}
	for _, src := range []Sources{
		{ConfigJSON: []byte(`{"quantization_config":{"quant_method":"mxfp4","modules_to_not_convert":["model.layers.*.self_attn","model.layers.*.mlp.router","model.embed_tokens","lm_head"]}}`)},
		{}, // no config: the tensors alone are unambiguous
	} {
		s := mustDetect(t, tensors, src)
		if s.Layout != MXFP4 || len(s.Weights) != 1 {
			t.Fatalf("scheme %+v", s)
		}
		if src.ConfigJSON == nil && s.Source != "tensor names" {
			t.Errorf("source %q", s.Source)
		}
		w := weightOf(t, s, "model.layers.0.mlp.experts.gate_up_proj")
		if !slices.Equal(w.Shape, []int64{e, r, g * 32}) || w.Elem != dtype.F4 {
			t.Fatalf("weight %+v", w)
		}
		codes := allNibbles(rng, e*r*g*32)
		sc := make([]byte, e*r*g)
		for i := range sc {
			sc[i] = byte(rng.IntN(40) + 107)
		}
		sc[0], sc[1], sc[2], sc[3] = 255, 0, 254, 127 // NaN, 2^-127, 2^127, 1
		checkDequant(t, w, pack4(codes), [][]byte{sc}, func(i int) float64 {
			row, k := i/(g*32), i%(g*32)
			return refE2M1(codes[i]) * refE8M0(sc[row*g+k/32])
		})
	}
}

func TestFBGEMM(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	cfg := `{"quantization_config":{"quant_method":"fbgemm_fp8","activation_scale_ub":1200.0,"modules_to_not_convert":["lm_head"]}}`
	tensors := []Stored{
		st("x.weight", dtype.F8_E4M3, 24, 20),
		st("x.weight_scale", dtype.F32, 24, 1),
		st("lm_head.weight", dtype.BF16, 4, 20),
	}
	s := mustDetect(t, tensors, Sources{ConfigJSON: []byte(cfg)})
	if s.Layout != FBGEMMFP8 || s.ActivationScaleUB != 1200 {
		t.Fatalf("scheme %+v", s)
	}
	w := weightOf(t, s, "x.weight")
	data := allCodes(rng, 24*20)
	sc := randF32s(rng, 24, false)
	checkDequant(t, w, data, [][]byte{f32Bytes(sc)}, func(i int) float64 { return refE4M3(data[i]) * float64(sc[i/20]) })
}

func TestComfyLegacy(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	tensors := []Stored{
		st("scaled_fp8", dtype.F8_E4M3, 0),
		st("blocks.0.conv.weight", dtype.F8_E4M3, 4, 3, 3, 3),
		st("blocks.0.conv.scale_weight", dtype.F32),
		st("blocks.0.conv.scale_input", dtype.F32),
		st("blocks.0.conv.bias", dtype.F8_E4M3, 4),   // FP8 bias without a scale: plain
		st("blocks.0.norm.weight", dtype.F8_E4M3, 4), // FP8 norm: plain
		st("blocks.0.out.weight", dtype.BF16, 4, 4),  // a wide weight with a dummy scale
		st("blocks.0.out.scale_weight", dtype.F32),
	}
	s := mustDetect(t, tensors, Sources{})
	if s.Layout != ComfyScaledFP8 || s.Source != "scaled_fp8 marker" || len(s.Weights) != 1 ||
		!slices.Equal(s.Markers, []string{"scaled_fp8"}) || !s.Consumed("scaled_fp8") ||
		!slices.Equal(s.Kept, []string{"blocks.0.conv.scale_input"}) ||
		!slices.Equal(s.Unconsumed, []string{"blocks.0.out.scale_weight"}) ||
		s.Consumed("blocks.0.conv.bias") || s.Consumed("blocks.0.norm.weight") {
		t.Fatalf("scheme %+v", s)
	}
	w := weightOf(t, s, "blocks.0.conv.weight")
	data := allCodes(rng, 4*27)
	sc := []float32{randScale(rng, false)}
	checkDequant(t, w, data, [][]byte{f32Bytes(sc)}, func(i int) float64 { return refE4M3(data[i]) * float64(sc[0]) })
}

func TestComfyQuantizationMetadata(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	meta := map[string]string{"_quantization_metadata": `{"format_version":"1.0","layers":{
	  "model.diffusion_model.a":{"format":"float8_e4m3fn"},
	  "b":"float8_e5m2",
	  "model.diffusion_model.c":{"format":"nvfp4"}}}`}
	cq := []byte(`{"format": "float8_e4m3fn", "full_precision_matrix_mult": true}`)
	tensors := []Stored{
		st("model.diffusion_model.a.weight", dtype.F8_E4M3, 8, 16),
		st("model.diffusion_model.a.weight_scale", dtype.F32),
		st("model.diffusion_model.a.input_scale", dtype.F32),
		st("model.diffusion_model.b.weight", dtype.U8, 8, 16), // U8 container; the format says E5M2
		st("model.diffusion_model.b.weight_scale", dtype.F32),
		st("model.diffusion_model.c.weight", dtype.U8, 8, 8),
		st("model.diffusion_model.c.weight_scale", dtype.F8_E4M3, 8, 1),
		st("model.diffusion_model.c.weight_scale_2", dtype.F32),
		st("model.diffusion_model.d.weight", dtype.F8_E4M3, 8, 16),
		st("model.diffusion_model.d.weight_scale", dtype.F32),
		st("model.diffusion_model.d.comfy_quant", dtype.U8, int64(len(cq))),
		st("model.diffusion_model.norm.weight", dtype.F8_E4M3, 16),
	}
	read := func(name string) ([]byte, error) {
		if name != "model.diffusion_model.d.comfy_quant" {
			t.Errorf("ReadTensor(%q)", name)
		}
		return cq, nil
	}
	s := mustDetect(t, tensors, Sources{Metadata: meta, ReadTensor: read})
	if s.Layout != ComfyScaledFP8 || s.Source != "__metadata__ _quantization_metadata" || len(s.Weights) != 3 ||
		!slices.Equal(s.Unconsumed, []string{"model.diffusion_model.c.weight_scale", "model.diffusion_model.c.weight_scale_2"}) ||
		!slices.Equal(s.Unsupported, []string{`layer "model.diffusion_model.c": comfy format "nvfp4"`}) ||
		!slices.Equal(s.Markers, []string{"model.diffusion_model.d.comfy_quant"}) {
		t.Fatalf("scheme %+v", s)
	}
	data := allCodes(rng, 128)
	sc := []float32{randScale(rng, true)}
	w := weightOf(t, s, "model.diffusion_model.b.weight")
	if w.Elem != dtype.F8_E5M2 {
		t.Fatalf("b: %+v", w)
	}
	checkDequant(t, w, data, [][]byte{f32Bytes(sc)}, func(i int) float64 { return refE5M2(data[i]) * float64(sc[0]) })
	w = weightOf(t, s, "model.diffusion_model.d.weight")
	checkDequant(t, w, data, [][]byte{f32Bytes(sc)}, func(i int) float64 { return refE4M3(data[i]) * float64(sc[0]) })

	// Per-layer comfy_quant tensors alone, without a reader: recognized from
	// the dtypes.
	s = mustDetect(t, tensors[8:], Sources{})
	if s.Source != "comfy_quant tensors" || len(s.Weights) != 1 || s.Weights[0].Elem != dtype.F8_E4M3 {
		t.Fatalf("scheme %+v", s)
	}
}

func TestSignedZeroNaNAndOverflow(t *testing.T) {
	w := &Weight{Name: "w", Shape: []int64{1, 6}, Elem: dtype.F8_E4M3, Data: st("w", dtype.F8_E4M3, 1, 6),
		Scales: []Scale{{Role: RoleScale, Stored: st("s", dtype.F32), Block: [2]int64{1, 6}}}}
	data := []byte{0x80, 0x00, 0x7F, 0xFE, 0x7E, 0x01} // -0, +0, NaN, -448, 448, 2^-9
	scale := f32Bytes([]float32{1e5})
	want := map[dtype.DType][]float64{
		dtype.F16:  {math.Copysign(0, -1), 0, math.NaN(), math.Inf(-1), math.Inf(1), 0x1p-9 * 1e5},
		dtype.BF16: {math.Copysign(0, -1), 0, math.NaN(), refRound(-448e5, dtype.BF16), refRound(448e5, dtype.BF16), refRound(0x1p-9*1e5, dtype.BF16)},
	}
	for to, wv := range want {
		dst := make([]byte, 12)
		stt, err := w.Dequantize(dst, to, data, [][]byte{scale}, dtype.Options{})
		if err != nil {
			t.Fatal(err)
		}
		got := make([]float64, 6)
		dtype.DecodeFloat64(got, dst, to)
		for i := range got {
			if !sameValue(got[i], refRound(wv[i], to)) {
				t.Errorf("%s element %d: %g, want %g", to, i, got[i], wv[i])
			}
		}
		if stt.NaN != 1 || (to == dtype.F16 && (stt.Overflow != 2 || stt.Inf != 2)) {
			t.Errorf("%s stats %v", to, stt)
		}
	}
	// Saturate: F16 overflow clamps to ±65504.
	dst := make([]byte, 12)
	stt, _ := w.Dequantize(dst, dtype.F16, data, [][]byte{scale}, dtype.Options{Saturate: true})
	got := make([]float64, 6)
	dtype.DecodeFloat64(got, dst, dtype.F16)
	if got[3] != -65504 || got[4] != 65504 || stt.Saturated != 2 {
		t.Errorf("saturated %v %v", got, stt)
	}
	// E2M1 code 8 is -0; E8M0 255 is NaN.
	m := &Weight{Name: "m", Shape: []int64{1, 64}, Elem: dtype.F4, Data: st("m_blocks", dtype.U8, 1, 2, 16),
		Scales: []Scale{{Role: RoleE8M0, Stored: st("m_scales", dtype.U8, 1, 2), Block: [2]int64{1, 32}}}}
	packed := make([]byte, 32)
	packed[0] = 0x08
	out := make([]byte, 64*4)
	stt, err := m.Dequantize(out, dtype.F32, packed, [][]byte{{127, 255}}, dtype.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := make([]float64, 64)
	dtype.DecodeFloat64(f, out, dtype.F32)
	if math.Float64bits(f[0]) != 1<<63 || f[1] != 0 || math.Signbit(f[1]) || !math.IsNaN(f[32]) || stt.NaN != 32 {
		t.Errorf("got %v, stats %v", f[:2], stt)
	}
}

func TestNarrowTarget(t *testing.T) {
	// A narrower target follows its own rounding and overflow rule:
	// E5M2 overflows to Inf, E4M3 to NaN.
	w := &Weight{Name: "w", Shape: []int64{4}, Elem: dtype.F8_E4M3, Data: st("w", dtype.F8_E4M3, 4),
		Scales: []Scale{{Role: RoleScale, Stored: st("s", dtype.F32), Block: [2]int64{1, 4}}}}
	data := []byte{0x7E, 0x38, 0x39, 0x3A} // 448, 1, 1.125, 1.25
	dst := make([]byte, 4)
	s, err := w.Dequantize(dst, dtype.F8_E5M2, data, [][]byte{f32Bytes([]float32{256})}, dtype.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// 448·256 = 114688 > 57344: Inf; 256, 288 -> 256 (tie to even), 320.
	if !slices.Equal(dst, []byte{0x7C, 0x5C, 0x5C, 0x5D}) || s.Inf != 1 {
		t.Errorf("E5M2: % x %v", dst, s)
	}
}

func TestParallelMatchesSerial(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	const out, in = 300, 1000 // 300,000 elements: several parts of uneven size
	tensors := []Stored{st("w.weight", dtype.F8_E4M3, out, in), st("w.weight_scale_inv", dtype.F32, 3, 8)}
	s := mustDetect(t, tensors, Sources{ConfigJSON: []byte(`{"quantization_config":{"quant_method":"fp8"}}`)})
	w := weightOf(t, s, "w.weight")
	data := allCodes(rng, out*in)
	sc := f32Bytes(randF32s(rng, 24, true))
	ref := make([]byte, out*in*2)
	want, err := w.Dequantize(ref, dtype.BF16, data, [][]byte{sc}, dtype.Options{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, workers := range []int{2, 3, 7} {
		dst := make([]byte, len(ref))
		got, err := w.Dequantize(dst, dtype.BF16, data, [][]byte{sc}, dtype.Options{Workers: workers})
		if err != nil || !slices.Equal(dst, ref) || got != want {
			t.Errorf("workers %d: err %v, same bytes %v, stats %v vs %v", workers, err, slices.Equal(dst, ref), got, want)
		}
	}
}
