package quant

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/testutil"
)

func TestKinds(t *testing.T) {
	testutil.CheckKinds(t, testutil.Kinds[ErrorKind](kindNames[:]), func(k ErrorKind) error { return &Error{Kind: k} })
}

// failure is what a test expects of an error: its kind and, for a general
// kind, the check its message names.
type failure = testutil.Failure[ErrorKind]

var (
	missingScale     = failure{Kind: ErrInvalidLayout, What: ": missing scale: "}
	orphanScale      = failure{Kind: ErrInvalidLayout, What: ": orphan scale: "}
	scaleShape       = failure{Kind: ErrInvalidLayout, What: ": scale shape: "}
	scaleDType       = failure{Kind: ErrInvalidLayout, What: ": scale dtype: "}
	dataShape        = failure{Kind: ErrInvalidLayout, What: ": data shape: "}
	blockSize        = failure{Kind: ErrInvalidLayout, What: ": block size: "}
	blockSizeUnknown = failure{Kind: ErrInvalidLayout, What: ": block size unknown: "}
	conflict         = failure{Kind: ErrInvalidLayout, What: ": conflict: "}
	mismatch         = failure{Kind: ErrInvalidLayout, What: ": mismatch: "}
	length           = failure{Kind: ErrInvalidArgument, What: ": length: "}
	invalidWeight    = failure{Kind: ErrInvalidArgument, What: ": invalid weight: "}
	target           = failure{Kind: ErrTarget, What: ""}
)

const (
	dsCfg   = `{"quantization_config":{"quant_method":"fp8","weight_block_size":[128,128]}}`
	ctFP8   = `{"quantization_config":{"quant_method":"compressed-tensors","format":"float-quantized","config_groups":{"g":{"targets":["Linear"],"weights":{"num_bits":8,"type":"float","strategy":"channel"}}}}}`
	ctNVFP4 = `{"quantization_config":{"quant_method":"compressed-tensors","format":"nvfp4-pack-quantized","config_groups":{"g":{"targets":["Linear"],"weights":{"num_bits":4,"type":"float","strategy":"tensor_group","group_size":16}}}}}`
	moNVFP4 = `{"quantization":{"quant_algo":"NVFP4","group_size":16}}`
)

func TestMalformedScales(t *testing.T) {
	for _, tc := range []struct {
		name    string
		tensors []Stored
		src     Sources
		kind    failure
		tensor  string
	}{
		{"deepseek wrong scale shape",
			[]Stored{st("a.weight", dtype.F8_E4M3, 300, 200), st("a.weight_scale_inv", dtype.F32, 2, 2)},
			Sources{ConfigJSON: []byte(dsCfg)}, scaleShape, "a.weight_scale_inv"},
		{"deepseek missing scale",
			[]Stored{st("a.weight", dtype.F8_E4M3, 300, 200)},
			Sources{ConfigJSON: []byte(dsCfg)}, missingScale, "a.weight"},
		{"deepseek scale not float",
			[]Stored{st("a.weight", dtype.F8_E4M3, 300, 200), st("a.weight_scale_inv", dtype.I32, 3, 2)},
			Sources{ConfigJSON: []byte(dsCfg)}, scaleDType, "a.weight_scale_inv"},
		{"deepseek F64 scale refused",
			[]Stored{st("a.weight", dtype.F8_E4M3, 300, 200), st("a.weight_scale_inv", dtype.F64, 3, 2)},
			Sources{ConfigJSON: []byte(dsCfg)}, scaleDType, "a.weight_scale_inv"},
		{"deepseek orphan scale",
			[]Stored{st("a.weight_scale_inv", dtype.F32, 3, 2)},
			Sources{ConfigJSON: []byte(dsCfg)}, orphanScale, "a.weight_scale_inv"},
		{"deepseek 3-d weight",
			[]Stored{st("a.weight", dtype.F8_E4M3, 2, 300, 200), st("a.weight_scale_inv", dtype.F32, 3, 2)},
			Sources{ConfigJSON: []byte(dsCfg)}, dataShape, "a.weight"},
		{"no config, block size undetermined",
			[]Stored{st("a.weight", dtype.F8_E4M3, 7168, 2048), st("a.weight_scale_inv", dtype.F32, 56, 16)},
			Sources{}, blockSizeUnknown, "a.weight_scale_inv"},
		{"no config, impossible scale shape",
			[]Stored{st("a.weight", dtype.F8_E4M3, 10, 10), st("a.weight_scale_inv", dtype.F32, 11, 1)},
			Sources{}, scaleShape, "a.weight_scale_inv"},
		{"ct channel scale of the wrong shape",
			[]Stored{st("a.weight", dtype.F8_E4M3, 8, 16), st("a.weight_scale", dtype.F32, 1)},
			Sources{ConfigJSON: []byte(ctFP8)}, scaleShape, "a.weight_scale"},
		{"ct scale not float",
			[]Stored{st("a.weight", dtype.F8_E4M3, 8, 16), st("a.weight_scale", dtype.U8, 8, 1)},
			Sources{ConfigJSON: []byte(ctFP8)}, scaleDType, "a.weight_scale"},
		{"ct nvfp4 group does not divide",
			[]Stored{st("a.weight_packed", dtype.U8, 8, 20), st("a.weight_scale", dtype.F8_E4M3, 8, 3), st("a.weight_global_scale", dtype.F32, 1)},
			Sources{ConfigJSON: []byte(ctNVFP4)}, blockSize, "a.weight_packed"},
		{"ct nvfp4 missing global scale",
			[]Stored{st("a.weight_packed", dtype.U8, 8, 16), st("a.weight_scale", dtype.F8_E4M3, 8, 2)},
			Sources{ConfigJSON: []byte(ctNVFP4)}, missingScale, "a.weight_packed"},
		{"ct nvfp4 global scale not a scalar",
			[]Stored{st("a.weight_packed", dtype.U8, 8, 16), st("a.weight_scale", dtype.F8_E4M3, 8, 2), st("a.weight_global_scale", dtype.F32, 2)},
			Sources{ConfigJSON: []byte(ctNVFP4)}, scaleShape, "a.weight_global_scale"},
		{"ct nvfp4 packed and plain weight",
			[]Stored{st("a.weight_packed", dtype.U8, 8, 16), st("a.weight", dtype.BF16, 8, 32), st("a.weight_scale", dtype.F8_E4M3, 8, 2), st("a.weight_global_scale", dtype.F32, 1)},
			Sources{ConfigJSON: []byte(ctNVFP4)}, conflict, "a.weight_packed"},
		{"ct fp8 weight, config declares 4 bits",
			[]Stored{st("a.weight", dtype.F8_E4M3, 8, 16), st("a.weight_scale", dtype.F32, 8, 1)},
			Sources{ConfigJSON: []byte(ctNVFP4)}, mismatch, "a.weight"},
		{"ct most specific group declares another width",
			[]Stored{st("m.mlp.weight", dtype.F8_E4M3, 8, 16), st("m.mlp.weight_scale", dtype.F32, 8, 1)},
			Sources{ConfigJSON: []byte(`{"quantization_config":{"quant_method":"compressed-tensors","format":"float-quantized","config_groups":{
			  "a":{"targets":["Linear"],"weights":{"num_bits":8,"type":"float","strategy":"channel"}},
			  "b":{"targets":["re:.*mlp$"],"weights":{"num_bits":4,"type":"float","strategy":"tensor_group","group_size":16}}}}}`)},
			mismatch, "m.mlp.weight"},
		{"modelopt nvfp4 scale of the wrong shape",
			[]Stored{st("a.weight", dtype.U8, 8, 16), st("a.weight_scale", dtype.F8_E4M3, 8, 4), st("a.weight_scale_2", dtype.F32)},
			Sources{HFQuantConfig: []byte(moNVFP4)}, scaleShape, "a.weight_scale"},
		{"modelopt nvfp4 missing scale_2",
			[]Stored{st("a.weight", dtype.U8, 8, 16), st("a.weight_scale", dtype.F8_E4M3, 8, 2)},
			Sources{HFQuantConfig: []byte(moNVFP4)}, missingScale, "a.weight"},
		{"modelopt excluded but quantized",
			[]Stored{st("lm_head.weight", dtype.U8, 8, 16), st("lm_head.weight_scale", dtype.F8_E4M3, 8, 2), st("lm_head.weight_scale_2", dtype.F32)},
			Sources{HFQuantConfig: []byte(`{"quantization":{"quant_algo":"NVFP4","exclude_modules":["lm_head"]}}`)}, mismatch, "lm_head.weight"},
		{"mxfp4 scales of the wrong shape",
			[]Stored{st("e.w_blocks", dtype.U8, 4, 3, 16), st("e.w_scales", dtype.U8, 4, 2)},
			Sources{}, scaleShape, "e.w_scales"},
		{"mxfp4 F32 scales",
			[]Stored{st("e.w_blocks", dtype.U8, 4, 3, 16), st("e.w_scales", dtype.F32, 4, 3)},
			Sources{}, scaleDType, "e.w_scales"},
		{"mxfp4 declared, missing scales",
			[]Stored{st("e.w_blocks", dtype.U8, 4, 3, 16)},
			Sources{ConfigJSON: []byte(`{"quantization_config":{"quant_method":"mxfp4"}}`)}, missingScale, "e.w_blocks"},
		{"mxfp4 declared, blocks of 8 bytes",
			[]Stored{st("e.w_blocks", dtype.U8, 4, 3, 8), st("e.w_scales", dtype.U8, 4, 3)},
			Sources{ConfigJSON: []byte(`{"quantization_config":{"quant_method":"mxfp4"}}`)}, dataShape, "e.w_blocks"},
		{"mxfp4 logical name taken",
			[]Stored{st("e.w_blocks", dtype.U8, 4, 3, 16), st("e.w_scales", dtype.U8, 4, 3), st("e.w", dtype.BF16, 4, 96)},
			Sources{}, conflict, "e.w_blocks"},
		{"fbgemm per-tensor scale",
			[]Stored{st("a.weight", dtype.F8_E4M3, 8, 16), st("a.weight_scale", dtype.F32)},
			Sources{ConfigJSON: []byte(`{"quantization_config":{"quant_method":"fbgemm_fp8"}}`)}, scaleShape, "a.weight_scale"},
		{"comfy legacy scale not a scalar",
			[]Stored{st("scaled_fp8", dtype.F8_E4M3, 0), st("a.weight", dtype.F8_E4M3, 8, 16), st("a.scale_weight", dtype.F32, 8)},
			Sources{}, scaleShape, "a.scale_weight"},
		{"comfy metadata layer without its weight scale",
			[]Stored{st("a.weight", dtype.F8_E4M3, 8, 16)},
			Sources{Metadata: map[string]string{"_quantization_metadata": `{"layers":{"a":{"format":"float8_e4m3fn"}}}`}}, missingScale, "a.weight"},
		{"comfy metadata format contradicts the dtype",
			[]Stored{st("a.weight", dtype.F8_E5M2, 8, 16), st("a.weight_scale", dtype.F32)},
			Sources{Metadata: map[string]string{"_quantization_metadata": `{"layers":{"a":{"format":"float8_e4m3fn"}}}`}}, mismatch, "a.weight"},
		{"duplicate tensor",
			[]Stored{st("a", dtype.F32), st("a", dtype.F32)},
			Sources{}, conflict, "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Detect(tc.tensors, tc.src)
			var e *Error
			if !errors.As(err, &e) || !tc.kind.Matches(err) || e.Tensor != tc.tensor {
				t.Fatalf("Detect = %+v, %v; want %s naming %q", s, err, tc.kind, tc.tensor)
			}
			if !strings.Contains(err.Error(), tc.tensor) {
				t.Errorf("message %q does not name the tensor", err)
			}
		})
	}
}

func TestConfigErrors(t *testing.T) {
	w := []Stored{st("a.weight", dtype.F8_E4M3, 8, 16), st("a.weight_scale_inv", dtype.F32, 1, 1)}
	for _, tc := range []struct {
		src   Sources
		field string
	}{
		{Sources{ConfigJSON: []byte(`{`)}, "config.json"},
		{Sources{ConfigJSON: []byte(`{"quantization_config":[1]}`)}, "config.json quantization_config"},
		{Sources{ConfigJSON: []byte(`{"quantization_config":{"quant_method":7}}`)}, "config.json quantization_config.quant_method"},
		{Sources{ConfigJSON: []byte(`{"quantization_config":{"quant_method":"fp8","weight_block_size":[128]}}`)}, "config.json quantization_config.weight_block_size"},
		{Sources{ConfigJSON: []byte(`{"quantization_config":{"quant_method":"fp8","weight_block_size":[128,0.5]}}`)}, "config.json quantization_config.weight_block_size"},
		{Sources{ConfigJSON: []byte(`{"quantization_config":{"quant_method":"fp8","weight_block_size":[1e300,128]}}`)}, "config.json quantization_config.weight_block_size"},
		{Sources{ConfigJSON: []byte(`{"quantization_config":{"quant_method":"compressed-tensors","ignore":["re:(?=x)"]}}`)}, "config.json quantization_config.ignore"},
		{Sources{HFQuantConfig: []byte(`{"producer":{}}`)}, "hf_quant_config.json quantization"},
		{Sources{HFQuantConfig: []byte(`{"quantization":{"quant_algo":"FP8","exclude_modules":["[a"]}}`)}, ""},
		{Sources{Metadata: map[string]string{"quantization_config": "nope"}}, "__metadata__ quantization_config"},
		{Sources{Metadata: map[string]string{"_quantization_metadata": `{"layers":{"a":{"fmt":1}}}`}}, "__metadata__ _quantization_metadata.layers.a.format"},
	} {
		_, err := Detect(w, tc.src)
		var e *Error
		if tc.field == "" { // "[a" is a literal bracket in fnmatch: valid
			if errors.Is(err, ErrConfig) {
				t.Errorf("%+v: %v", tc.src, err)
			}
			continue
		}
		if !errors.As(err, &e) || e.Kind != ErrConfig || e.Field != tc.field {
			t.Errorf("%s: got %v, want ErrConfig on %q", tc.src.ConfigJSON, err, tc.field)
		}
	}
}

func TestUnknownLayoutIsReported(t *testing.T) {
	tensors := []Stored{
		st("a.qweight", dtype.I32, 16, 64),
		st("a.qzeros", dtype.I32, 1, 64),
		st("a.scales", dtype.F16, 1, 512),
		st("a.g_idx", dtype.I32, 128),
		st("b.weight", dtype.F8_E4M3, 4, 4),
		st("b.weight_scale", dtype.F32),
		st("b.input_scale", dtype.F32),
		st("norm.weight", dtype.F32, 4),
	}
	s := mustDetect(t, tensors, Sources{ConfigJSON: []byte(`{"quantization_config":{"quant_method":"gptq","bits":4}}`)})
	want := []string{"a.g_idx", "a.qweight", "a.qzeros", "a.scales", "b.input_scale", "b.weight_scale"}
	if s.Layout != None || !slices.Equal(s.Unconsumed, want) || !slices.Equal(s.Unsupported, []string{`quant_method "gptq"`}) ||
		len(s.Weights) != 0 || s.Consumed("b.weight_scale") {
		t.Fatalf("scheme %+v", s)
	}
	// compressed-tensors integer weights: declared, not decoded, reported.
	s = mustDetect(t, []Stored{st("m.weight_packed", dtype.I32, 8, 2), st("m.weight_scale", dtype.BF16, 8, 1), st("m.weight_shape", dtype.I64, 2)},
		Sources{ConfigJSON: []byte(`{"quantization_config":{"quant_method":"compressed-tensors","format":"pack-quantized",
		  "config_groups":{"g":{"targets":["Linear"],"weights":{"num_bits":4,"type":"int","strategy":"channel"}}}}}`)})
	if len(s.Weights) != 0 || !slices.Equal(s.Unconsumed, []string{"m.weight_packed", "m.weight_scale"}) ||
		!slices.Equal(s.Unsupported, []string{`config group "g": weights type "int"`}) {
		t.Fatalf("scheme %+v", s)
	}
	// No config at all: an FP8 weight with a scale is not guessed at.
	s = mustDetect(t, tensors[4:], Sources{})
	if s.Layout != None || s.Source != "" || !slices.Equal(s.Unconsumed, []string{"b.input_scale", "b.weight_scale"}) {
		t.Fatalf("scheme %+v", s)
	}
	// A plain checkpoint: nothing to report.
	s = mustDetect(t, []Stored{st("x.weight", dtype.BF16, 2, 2), st("x.norm.scale", dtype.F32, 2)}, Sources{})
	if s.Layout != None || len(s.Unconsumed)+len(s.Unsupported)+len(s.Weights) != 0 {
		t.Fatalf("scheme %+v", s)
	}
}

func TestSourceOrder(t *testing.T) {
	tensors := []Stored{st("a.weight", dtype.F8_E4M3, 8, 16), st("a.weight_scale", dtype.F32, 8, 1)}
	meta := map[string]string{"quantization_config": `{"quant_method":"fbgemm_fp8"}`}
	hf := []byte(`{"quantization":{"quant_algo":"FP8"}}`)
	for _, tc := range []struct {
		src    Sources
		layout Layout
		source string
	}{
		{Sources{ConfigJSON: []byte(ctFP8), HFQuantConfig: hf, Metadata: meta}, CompressedTensorsFP8, "config.json quantization_config"},
		{Sources{ConfigJSON: []byte(`{"model_type":"llama"}`), HFQuantConfig: hf, Metadata: meta}, ModelOptFP8, "hf_quant_config.json"},
		{Sources{Metadata: meta}, FBGEMMFP8, "__metadata__ quantization_config"},
		{Sources{ConfigJSON: []byte(`{"compression_config":` + ctFP8[len(`{"quantization_config":`):])}, CompressedTensorsFP8, "config.json quantization_config"},
	} {
		s := mustDetect(t, tensors, tc.src)
		if s.Layout != tc.layout || s.Source != tc.source || len(s.Weights) != 1 {
			t.Errorf("%+v: got %v from %q", tc.src, s.Layout, s.Source)
		}
	}
}

func TestBlockFromShape(t *testing.T) {
	for _, tc := range []struct {
		n, s             int64
		b                int64
		possible, unique bool
	}{
		{7168, 56, 128, true, false}, // 128..130 all give 56 blocks
		{256, 2, 128, true, false},
		{3, 2, 2, true, true},
		{10, 10, 1, true, true},
		{10, 1, 10, true, true},
		{0, 0, 1, true, true},
		{10, 11, 0, false, false},
		{10, 0, 0, false, false},
		{7, 5, 0, false, false}, // ceil(7/b) is 7, 4, 3, 2, 1: never 5
	} {
		b, p, u := blockFromShape(tc.n, tc.s)
		if p != tc.possible || u != tc.unique || (p && b != tc.b) {
			t.Errorf("blockFromShape(%d, %d) = %d %v %v", tc.n, tc.s, b, p, u)
		}
	}
	// No config, but the shapes determine the block: taken.
	s := mustDetect(t, []Stored{st("a.weight", dtype.F8_E4M3, 3, 10), st("a.weight_scale_inv", dtype.F32, 2, 1)}, Sources{})
	if s.Layout != DeepSeekFP8Block || s.Source != "tensor names" || s.Weights[0].Scales[0].Block != [2]int64{2, 10} {
		t.Fatalf("scheme %+v", s)
	}
}

func TestIgnoreMatching(t *testing.T) {
	for _, tc := range []struct {
		kind    matchKind
		pattern string
		module  string
		want    bool
	}{
		{matchCT, "lm_head", "lm_head", true},
		{matchCT, "lm_head", "model.lm_head", false},
		{matchCT, "re:.*mlp\\.gate$", "model.layers.3.mlp.gate", true},
		{matchCT, "re:.*mlp\\.gate$", "model.layers.3.mlp.gate_proj", false},
		{matchCT, "re:model.layers.1", "model.layers.12.x", true}, // re.match: a prefix match
		{matchGlob, "model.layers.*.mlp.gate", "model.layers.3.mlp.gate", true},
		{matchGlob, "model.layers.*.mlp.gate", "model.layers.3.mlp.gate_proj", false},
		{matchGlob, "*self_attn*", "model.layers.0.self_attn.q_proj", true},
		{matchGlob, "model.vision", "model.vision.blocks.0.fc1", true}, // a parent is excluded
		{matchGlob, "model.layers.[0-1].x", "model.layers.1.x", true},
		{matchGlob, "model.layers.[!0-1].x", "model.layers.1.x", false},
		{matchHF, "lm_head", "model.lm_head", true},
		{matchHF, "model.layers.*.self_attn", "model.layers.5.self_attn", true},
		{matchHF, "model.layers.*.self_attn", "model.layers.5.mlp.experts", false},
		{matchHF, "gate", "model.layers.5.mlp.gate_proj", false},
	} {
		m, err := newMatcher([]string{tc.pattern}, tc.kind, "f")
		if err != nil {
			t.Fatal(err)
		}
		if got := m.match(tc.module); got != tc.want {
			t.Errorf("kind %d: %q matches %q = %v", tc.kind, tc.pattern, tc.module, got)
		}
	}
}

func TestDequantizeErrors(t *testing.T) {
	w := &Weight{Name: "w", Shape: []int64{4, 8}, Elem: dtype.F8_E4M3, Data: st("w", dtype.F8_E4M3, 4, 8),
		Scales: []Scale{{Role: RoleScale, Stored: st("s", dtype.F32, 4, 1), Block: [2]int64{1, 8}}}}
	data, sc, dst := make([]byte, 32), make([]byte, 16), make([]byte, 64)
	for _, tc := range []struct {
		name string
		mod  func(w *Weight) ([]byte, dtype.DType, []byte, [][]byte)
		kind failure
	}{
		{"ok", func(w *Weight) ([]byte, dtype.DType, []byte, [][]byte) { return dst, dtype.F16, data, [][]byte{sc} }, failure{}},
		{"integer target", func(w *Weight) ([]byte, dtype.DType, []byte, [][]byte) { return dst, dtype.I16, data, [][]byte{sc} }, target},
		{"short dst", func(w *Weight) ([]byte, dtype.DType, []byte, [][]byte) {
			return dst[:63], dtype.F16, data, [][]byte{sc}
		}, length},
		{"short data", func(w *Weight) ([]byte, dtype.DType, []byte, [][]byte) {
			return dst, dtype.F16, data[:31], [][]byte{sc}
		}, length},
		{"short scale", func(w *Weight) ([]byte, dtype.DType, []byte, [][]byte) {
			return dst, dtype.F16, data, [][]byte{sc[:12]}
		}, length},
		{"no scale bytes", func(w *Weight) ([]byte, dtype.DType, []byte, [][]byte) { return dst, dtype.F16, data, nil }, length},
		{"unknown role", func(w *Weight) ([]byte, dtype.DType, []byte, [][]byte) {
			w.Scales[0].Role = "shift"
			return dst, dtype.F16, data, [][]byte{sc}
		}, invalidWeight},
		{"block does not tile", func(w *Weight) ([]byte, dtype.DType, []byte, [][]byte) {
			w.Scales[0].Block = [2]int64{2, 8}
			return dst, dtype.F16, data, [][]byte{sc}
		}, invalidWeight},
		{"zero block", func(w *Weight) ([]byte, dtype.DType, []byte, [][]byte) {
			w.Scales[0].Block = [2]int64{0, 8}
			return dst, dtype.F16, data, [][]byte{sc}
		}, invalidWeight},
		{"varying divisor", func(w *Weight) ([]byte, dtype.DType, []byte, [][]byte) {
			w.Scales[0].Role = RoleGlobalScale
			return dst, dtype.F16, data, [][]byte{sc}
		}, invalidWeight},
		{"integer scale", func(w *Weight) ([]byte, dtype.DType, []byte, [][]byte) {
			w.Scales[0].DType = dtype.I32
			return dst, dtype.F16, data, [][]byte{sc}
		}, scaleDType},
		{"bf16 elements", func(w *Weight) ([]byte, dtype.DType, []byte, [][]byte) {
			w.Elem = dtype.BF16
			return dst, dtype.F16, data, [][]byte{sc}
		}, invalidWeight},
		{"odd F4 target", func(w *Weight) ([]byte, dtype.DType, []byte, [][]byte) {
			w.Shape = []int64{1, 3}
			w.Scales[0].Block = [2]int64{1, 3}
			w.Scales[0].Shape = []int64{1}
			return make([]byte, 2), dtype.F4, data[:3], [][]byte{sc[:4]}
		}, target},
	} {
		w2 := *w
		w2.Scales = slices.Clone(w.Scales)
		d, to, da, s := tc.mod(&w2)
		_, err := w2.Dequantize(d, to, da, s, dtype.Options{})
		if tc.kind == (failure{}) {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if !tc.kind.Matches(err) {
			t.Errorf("%s: got %v, want %s", tc.name, err, tc.kind)
		}
	}
}

func TestDequantizeContext(t *testing.T) {
	w := &Weight{Name: "w", Shape: []int64{512, 1024}, Elem: dtype.F8_E4M3, Data: st("w", dtype.F8_E4M3, 512, 1024),
		Scales: []Scale{{Role: RoleScale, Stored: st("s", dtype.F32), Block: [2]int64{512, 1024}}}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := w.DequantizeContext(ctx, make([]byte, 2<<19), dtype.BF16, make([]byte, 1<<19), [][]byte{make([]byte, 4)}, dtype.Options{})
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "canceled") {
		t.Fatalf("err %v", err)
	}
	st, err := w.DequantizeContext(context.Background(), make([]byte, 2<<19), dtype.BF16, make([]byte, 1<<19), [][]byte{make([]byte, 4)}, dtype.Options{})
	if err != nil || st.Elements != 1<<19 {
		t.Fatalf("%v %v", st, err)
	}
}

// A name listed twice is a conflict naming it.
func TestDuplicateName(t *testing.T) {
	ts := []Stored{{Name: "a.weight", DType: dtype.F32, Shape: []int64{2}}, {Name: "b", DType: dtype.F32}, {Name: "a.weight", DType: dtype.F32, Shape: []int64{2}}}
	_, err := Detect(ts, Sources{})
	var qe *Error
	if !errors.As(err, &qe) || !conflict.Matches(err) || qe.Tensor != "a.weight" {
		t.Errorf("Detect with a name twice: %v", err)
	}
}

// Without a config and without a name any layout reads, Detect returns a
// plain Scheme without indexing the names, and still refuses a name that
// appears twice, plain or beside scales.
func TestDetectPlainNames(t *testing.T) {
	var plain []Stored
	for i := range 1000 {
		plain = append(plain, Stored{Name: fmt.Sprintf("layers.%d.weight", i), DType: dtype.BF16, Shape: []int64{4, 4}})
	}
	s, err := Detect(plain, Sources{})
	if err != nil || s.Layout != None || len(s.Weights) != 0 || len(s.Unconsumed) != 0 || len(s.Kept) != 0 {
		t.Fatalf("plain: %+v %v", s, err)
	}
	for _, extra := range []Stored{
		{Name: "layers.7.weight", DType: dtype.F32, Shape: []int64{4}},
		{Name: "layers.7.weight_scale", DType: dtype.F32, Shape: []int64{1}},
	} {
		ts := append(slices.Clone(plain), extra)
		if extra.Name != "layers.7.weight" {
			ts = append(ts, Stored{Name: "layers.3.weight", DType: dtype.F32, Shape: []int64{4}})
		}
		_, err := Detect(ts, Sources{})
		var e *Error
		if !conflict.Matches(err) || !errors.As(err, &e) || !strings.Contains(err.Error(), "appears twice") {
			t.Errorf("with %s: %v", extra.Name, err)
		}
	}
	// A name that looks like a scale takes the full path: reported unconsumed.
	s, err = Detect(append(slices.Clone(plain), Stored{Name: "layers.0.weight_scale", DType: dtype.F32, Shape: []int64{1}}), Sources{})
	if err != nil || !slices.Equal(s.Unconsumed, []string{"layers.0.weight_scale"}) {
		t.Errorf("a scale-like name: %+v %v", s, err)
	}
}
