package ckpt

import (
	"bytes"
	"testing"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/quant"
)

// A weight kept quantized describes itself with QuantWeight, and that
// description with the tensor's bytes dequantizes exactly as the loader
// does; other tensors have none, and the copy is the caller's.
func TestTensorQuantWeight(t *testing.T) {
	dir, _, _ := deepseekFolder(t, []int64{2, 3})
	w := mustLoad(t, mustOpen(t, dir))
	tt, err := w.Tensor("proj.weight")
	if err != nil {
		t.Fatal(err)
	}
	q := tt.QuantWeight()
	if q == nil || q.Layout != quant.DeepSeekFP8Block || q.Elem != dtype.F8_E4M3 || len(q.Scales) != len(tt.Scales) ||
		q.Scales[0].Role != tt.Scales[0].Role || q.Scales[0].Block != [2]int64{128, 128} {
		t.Fatalf("QuantWeight = %+v", q)
	}
	q.Shape[0], q.Scales[0].Block[0] = 1, 1
	if again := tt.QuantWeight(); again.Shape[0] != 130 || again.Scales[0].Block[0] != 128 {
		t.Fatalf("QuantWeight shares memory with the tensor: %+v", again)
	}
	q = tt.QuantWeight()
	got := make([]byte, 130*260*4)
	scales := [][]byte{tt.Scales[0].Bytes()}
	if _, err := q.Dequantize(got, dtype.F32, tt.Bytes(), scales, dtype.Options{}); err != nil {
		t.Fatal(err)
	}
	wf := mustLoad(t, mustOpen(t, dir, WithDType(To(dtype.F32))))
	want, _ := wf.Tensor("proj.weight")
	if !bytes.Equal(got, want.Bytes()) {
		t.Error("QuantWeight's Dequantize differs from the loader's")
	}
	for _, name := range []string{"proj.bias"} {
		if b, _ := w.Tensor(name); b.QuantWeight() != nil {
			t.Errorf("%s: QuantWeight of a plain tensor", name)
		}
	}
	if want.QuantWeight() != nil {
		t.Error("QuantWeight of a dequantized tensor")
	}
}
