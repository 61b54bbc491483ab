package dtype_test

import (
	"fmt"
	"math"

	"github.com/ckpt-go/ckpt/dtype"
)

// Convert float32 weights to FP8 E4M3 and read the statistics: 500 is out
// of range (E4M3 tops out at 448) and 1e-4 is too small.
func ExampleConvert() {
	weights := []float32{1.5, -0.25, 500, 1e-4}
	fp8 := make([]byte, len(weights))
	st, err := dtype.Convert(fp8, dtype.F8_E4M3, dtype.Float32Bytes(weights), dtype.F32, dtype.Options{})
	if err != nil {
		panic(err)
	}
	fmt.Printf("% x\n", fp8)
	fmt.Println(st)

	// The same with saturation: 500 becomes 448 instead of NaN.
	st, _ = dtype.Convert(fp8, dtype.F8_E4M3, dtype.Float32Bytes(weights), dtype.F32, dtype.Options{Saturate: true})
	back := make([]float32, len(fp8))
	dtype.DecodeFloat32(back, fp8, dtype.F8_E4M3)
	fmt.Println(back, st.Saturated)
	// Output:
	// 3c a8 7f 00
	// 4 elements: 1 NaN, 0 Inf, 1 overflow, 0 saturated, 1 underflow, max |x| 500
	// [1.5 -0.25 448 0] 1
}

// Parse accepts safetensors names and framework spellings.
func ExampleParse() {
	for _, s := range []string{"BF16", "torch.float8_e4m3fn", "half", "float8_e8m0fnu"} {
		d, _ := dtype.Parse(s)
		fmt.Println(s, "->", d, d.Bits())
	}
	_, err := dtype.Parse("float7")
	fmt.Println(err != nil)
	// Output:
	// BF16 -> BF16 16
	// torch.float8_e4m3fn -> F8_E4M3 8
	// half -> F16 16
	// float8_e8m0fnu -> F8_E8M0 8
	// true
}

// Register a dtype the library does not know: a signed 8-bit fixed-point
// type with 4 fractional bits (value = int8 / 16).
func ExampleRegister() {
	spec := dtype.Spec{
		Name: "Q4_4",
		Bits: 8,
		Min:  -8, Max: 127.0 / 16,
		Doc: "signed fixed point, 4 fractional bits",
		Decode: func(dst []float32, src []byte) {
			for i, b := range src {
				dst[i] = float32(int8(b)) / 16
			}
		},
		Encode: func(dst []byte, src []float32, opts dtype.Options) dtype.Stats {
			var st dtype.Stats
			for i, x := range src {
				v := math.RoundToEven(float64(x) * 16)
				if v > 127 || v < -128 {
					st.Overflow++
					st.Saturated++
					v = math.Max(-128, math.Min(127, v))
				}
				dst[i] = byte(int8(v))
			}
			return st
		},
	}
	q44, err := dtype.Register(spec)
	if err != nil {
		panic(err)
	}
	// Convert BF16 values into it like into any built-in type.
	bf16 := make([]byte, 6)
	dtype.EncodeFloat32(bf16, dtype.BF16, []float32{1.25, -3, 20}, dtype.Options{})
	q := make([]byte, 3)
	st, _ := dtype.Convert(q, q44, bf16, dtype.BF16, dtype.Options{})
	back := make([]float32, 3)
	dtype.DecodeFloat32(back, q, q44)
	fmt.Println(q44, back, st.Saturated)
	// A name can be registered once.
	_, err = dtype.Register(spec)
	fmt.Println(err)
	// Output:
	// Q4_4 [1.25 -3 7.9375] 1
	// dtype: register "Q4_4": "q4_4" is already registered as Q4_4
}
