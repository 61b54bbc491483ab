package quant

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/shapes"
)

// parseSpec reads a fuzzer's tensor list: one tensor a line, "NAME DTYPE
// DIM...". Lines that do not parse are skipped; dimensions may be anything
// an int64 holds, as in a hostile header.
func parseSpec(spec string) []Stored {
	var out []Stored
	for _, line := range strings.Split(spec, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		d, err := dtype.Parse(f[1])
		if err != nil {
			continue
		}
		s := Stored{Name: f[0], DType: d, Shape: []int64{}}
		for _, x := range f[2:] {
			v, err := strconv.ParseInt(x, 10, 64)
			if err != nil {
				continue
			}
			s.Shape = append(s.Shape, v)
		}
		out = append(out, s)
	}
	return out
}

// FuzzDetect feeds Detect hostile tensor lists and configs. It must never
// panic, fail only with a *Error, return a consistent Scheme, and every
// Weight it returns must dequantize (checked when small enough to
// allocate).
func FuzzDetect(f *testing.F) {
	seeds := []struct{ spec, cfg, hf, meta string }{
		{"a.weight F8_E4M3 300 200\na.weight_scale_inv F32 3 2", dsCfg, "", ""},
		{"a.weight F8_E4M3 7168 2048\na.weight_scale_inv F32 56 16", "", "", ""},
		{"a.weight_packed U8 8 16\na.weight_scale F8_E4M3 8 2\na.weight_global_scale F32 1\na.input_global_scale F32 1", ctNVFP4, "", ""},
		{"a.weight F8_E4M3 8 16\na.weight_scale F32 8 1", ctFP8, "", ""},
		{"a.weight U8 8 16\na.weight_scale F8_E4M3 8 2\na.weight_scale_2 F32", "", moNVFP4, ""},
		{"e.w_blocks U8 2 3 5 16\ne.w_scales U8 2 3 5", `{"quantization_config":{"quant_method":"mxfp4"}}`, "", ""},
		{"x.weight F8_E4M3 24 20\nx.weight_scale F32 24 1", `{"quantization_config":{"quant_method":"fbgemm_fp8","activation_scale_ub":1200}}`, "", ""},
		{"scaled_fp8 F8_E4M3 0\nb.weight F8_E4M3 4 3 3 3\nb.scale_weight F32", "", "", ""},
		{"a.weight F8_E4M3 8 16\na.weight_scale F32\na.comfy_quant U8 30", "", "", `{"layers":{"a":{"format":"float8_e4m3fn"}}}`},
		{"a.weight F8_E4M3 9223372036854775807 2\na.weight_scale_inv F32 1 1", `{"quantization_config":{"quant_method":"fp8","weight_block_size":[1099511627776,1]}}`, "", ""},
		{"e.w_blocks U8 9223372036854775807 16\ne.w_scales U8 9223372036854775807", "", "", ""},
	}
	for i, s := range seeds {
		f.Add(s.spec, []byte(s.cfg), []byte(s.hf), s.meta, uint8(i))
	}
	f.Fuzz(func(t *testing.T, spec string, cfg, hf []byte, meta string, flags uint8) {
		src := Sources{ConfigJSON: cfg, HFQuantConfig: hf}
		switch flags % 3 {
		case 1:
			src.Metadata = map[string]string{"quantization_config": meta}
		case 2:
			src.Metadata = map[string]string{"_quantization_metadata": meta}
		}
		if flags&4 != 0 {
			src.ReadTensor = func(string) ([]byte, error) { return []byte(meta), nil }
		}
		tensors := parseSpec(spec)
		s, err := Detect(tensors, src)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %T %v is not a *quant.Error", err, err)
			}
			return
		}
		if !slices.IsSortedFunc(s.Weights, func(a, b *Weight) int { return strings.Compare(a.Name, b.Name) }) {
			t.Fatal("weights not sorted")
		}
		for _, n := range s.Unconsumed {
			if s.Consumed(n) {
				t.Fatalf("%q both consumed and unconsumed", n)
			}
		}
		for _, w := range s.Weights {
			if !s.Consumed(w.Data.Name) || s.Weight(w.Name) != w {
				t.Fatalf("weight %q not recorded", w.Name)
			}
			n, err := shapes.Elements(w.Shape)
			if err != nil {
				t.Fatalf("weight %q: %v", w.Name, err)
			}
			if n > 1<<12 {
				continue
			}
			data := make([]byte, n*int64(w.Elem.Bits())/8)
			var scales [][]byte
			for _, sc := range w.Scales {
				sn, err := shapes.Elements(sc.Shape)
				if err != nil || sn > 1<<12 {
					t.Fatalf("weight %q: scale %q of %d elements (%v)", w.Name, sc.Name, sn, err)
				}
				b, _ := sc.DType.ByteLen(sn)
				scales = append(scales, make([]byte, b))
			}
			if _, err := w.Dequantize(make([]byte, 2*n), dtype.BF16, data, scales, dtype.Options{}); err != nil {
				t.Fatalf("detected weight %q does not dequantize: %v", w.Name, err)
			}
		}
	})
}
