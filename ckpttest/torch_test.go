package ckpttest_test

import (
	"bytes"
	"encoding/binary"
	"math"
	"slices"
	"testing"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/torch"
)

// TestEncodeTorchReadsBack: package torch reads what EncodeTorch writes,
// in either byte order: contiguous tensors of every dtype PyTorch stores
// (typed and untyped storages), a transposed view, an offset slice and a
// tie.
func TestEncodeTorchReadsBack(t *testing.T) {
	tensors := ckpttest.Tensors(t, "a:F32[3,4] b:BF16[5] c:F16[2,2] d:F64[2] e:I64[3] f:I32[2] g:I16[2] h:I8[4] i:U8[4] j:BOOL[3] k:C64[2] l:F8_E4M3[8] m:F8_E5M2[4] n:U16[2] o:U32[2] p:U64[2] q:F32[]")
	views, storages, err := ckpttest.TorchOf(tensors)
	if err != nil {
		t.Fatal(err)
	}
	var w []byte
	for i := range 12 {
		w = binary.LittleEndian.AppendUint32(w, math.Float32bits(float32(i)))
	}
	storages["w"] = ckpttest.TorchStorage{DType: dtype.F32, Data: w}
	views = append(views,
		ckpttest.TorchTensor{Name: "w", Storage: "w", Shape: []int64{3, 4}, Stride: []int64{4, 1}},
		ckpttest.TorchTensor{Name: "w.tied", Storage: "w", Shape: []int64{3, 4}, Stride: []int64{4, 1}},
		ckpttest.TorchTensor{Name: "w.t", Storage: "w", Shape: []int64{4, 3}, Stride: []int64{1, 4}},
		ckpttest.TorchTensor{Name: "w.row", Storage: "w", Offset: 4, Shape: []int64{4}, Stride: []int64{1}})
	want := map[string][]byte{"w": w, "w.tied": w, "w.row": w[16:32]}
	var wt []byte
	for j := range 4 {
		for i := range 3 {
			wt = append(wt, w[4*(4*i+j):4*(4*i+j)+4]...)
		}
	}
	want["w.t"] = wt
	for _, tt := range tensors {
		want[tt.Name], _ = tt.Contents()
	}
	for _, big := range []bool{false, true} {
		b, err := ckpttest.EncodeTorch(views, storages, big)
		if err != nil {
			t.Fatal(err)
		}
		c, err := torch.NewReader(bytes.NewReader(b), int64(len(b)), "x.pt")
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Aliases(); len(got) != 1 || got["w.tied"] != "w" {
			t.Errorf("aliases %v", got)
		}
		for _, v := range views {
			tn, err := c.Tensor(v.Name)
			if err != nil {
				t.Fatal(err)
			}
			got, err := tn.Bytes()
			if err != nil || !bytes.Equal(got, want[v.Name]) || !slices.Equal(tn.Shape(), v.Shape) || tn.DType() != storages[v.Storage].DType {
				t.Errorf("big-endian %v: %s: %s %v, %v", big, v.Name, tn.DType(), tn.Shape(), err)
			}
		}
	}
	if _, err := ckpttest.EncodeTorch([]ckpttest.TorchTensor{{Name: "x", Storage: "none"}}, nil, false); err == nil {
		t.Error("a missing storage is not an error")
	}
	v, s, err := ckpttest.TorchOf(ckpttest.Tensors(t, "x:F4[4]"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ckpttest.EncodeTorch(v, s, false); err == nil {
		t.Error("F4, which PyTorch cannot store, is not an error")
	}
}
