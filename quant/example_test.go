package quant_test

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/quant"
)

// Detect a DeepSeek-style block FP8 weight from its headers and config, then
// dequantize it to F32. The weight is [3, 4] with blocks of [2, 2]: the
// scale is [2, 2] and its last row covers a partial block.
func Example() {
	tensors := []quant.Stored{
		{Name: "mlp.down_proj.weight", DType: dtype.F8_E4M3, Shape: []int64{3, 4}},
		{Name: "mlp.down_proj.weight_scale_inv", DType: dtype.F32, Shape: []int64{2, 2}},
		{Name: "norm.weight", DType: dtype.BF16, Shape: []int64{4}},
	}
	config := []byte(`{"quantization_config": {"quant_method": "fp8", "weight_block_size": [2, 2]}}`)
	s, err := quant.Detect(tensors, quant.Sources{ConfigJSON: config})
	if err != nil {
		panic(err)
	}
	fmt.Println(s.Layout, "from", s.Source)
	for _, t := range tensors {
		fmt.Printf("%s consumed: %v\n", t.Name, s.Consumed(t.Name))
	}

	w := s.Weight("mlp.down_proj.weight")
	data := []byte{ // E4M3 codes: 1, 2, -1, 0.5 in every row
		0x38, 0x40, 0xB8, 0x30,
		0x38, 0x40, 0xB8, 0x30,
		0x38, 0x40, 0xB8, 0x30,
	}
	scale := make([]byte, 16)
	for i, v := range []float32{1, 10, 100, 1000} {
		binary.LittleEndian.PutUint32(scale[4*i:], math.Float32bits(v))
	}
	dst := make([]float32, 12)
	st, err := w.Dequantize(dtype.Float32Bytes(dst), dtype.F32, data, [][]byte{scale}, dtype.Options{})
	if err != nil {
		panic(err)
	}
	for r := 0; r < 3; r++ {
		fmt.Println(dst[4*r : 4*r+4])
	}
	fmt.Println(st.Elements, "elements")
	// Output:
	// deepseek-fp8-block from config.json quantization_config
	// mlp.down_proj.weight consumed: true
	// mlp.down_proj.weight_scale_inv consumed: true
	// norm.weight consumed: false
	// [1 2 -10 5]
	// [1 2 -10 5]
	// [100 200 -1000 500]
	// 12 elements
}
