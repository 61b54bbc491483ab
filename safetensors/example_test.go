package safetensors_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"math"
	"os"
	"path/filepath"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/safetensors"
)

// bf16 returns the little-endian BF16 bytes of values that BF16 holds
// exactly.
func bf16(vals ...float32) []byte {
	var out []byte
	for _, v := range vals {
		b := math.Float32bits(v) >> 16
		out = append(out, byte(b), byte(b>>8))
	}
	return out
}

// Save a checkpoint, then open it and read a BF16 tensor as float32.
func Example() {
	dir, _ := os.MkdirTemp("", "ckpt-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "model.safetensors")

	err := safetensors.Save(context.Background(), path, []safetensors.TensorData{
		{Name: "w", DType: dtype.BF16, Shape: []int64{2, 2}, Data: bf16(1, -2, 0.5, 3)},
		{Name: "step", DType: dtype.I64, Shape: []int64{}, Data: []byte{42, 0, 0, 0, 0, 0, 0, 0}},
	}, map[string]string{"format": "pt"})
	if err != nil {
		log.Fatal(err)
	}

	f, err := safetensors.Open(path)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	for name, t := range f.Tensors() {
		fmt.Println(name, t.DType(), t.Shape(), t.ByteLen())
	}
	w, _ := f.Tensor("w")
	vals, err := w.Float32s()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(vals, f.Metadata()["format"])
	// Output:
	// step I64 [] 8
	// w BF16 [2 2] 8
	// [1 -2 0.5 3] pt
}

// Errors carry a kind for errors.Is and name the tensor concerned.
func ExampleErrorKind() {
	header := `{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`
	raw := append([]byte{byte(len(header)), 0, 0, 0, 0, 0, 0, 0}, header...)
	raw = append(raw, 0, 0, 0, 0)
	_, err := safetensors.OpenBytes(raw)
	fmt.Println(errors.Is(err, safetensors.ErrTensorSizeMismatch))
	var e *safetensors.Error
	if errors.As(err, &e) {
		fmt.Println(e.Kind.String(), e.Tensor, e.Field)
	}
	// Output:
	// true
	// tensor_size_mismatch w data_offsets
}

// Slice reads part of a tensor, e.g. one shard of a tensor-parallel split.
func ExampleTensor_Slice() {
	data := make([]byte, 2*4)
	for i := range data {
		data[i] = byte(i)
	}
	raw, _ := safetensors.Serialize([]safetensors.TensorData{{Name: "m", DType: dtype.U8, Shape: []int64{2, 4}, Data: data}}, nil)
	f, _ := safetensors.OpenBytes(raw)
	m, _ := f.Tensor("m")

	rows, _ := m.Slice(safetensors.At(1)) // second row: contiguous, zero-copy
	b, _ := rows.Bytes()
	fmt.Println(rows.Shape(), rows.Contiguous(), b)

	cols, _ := m.Slice(safetensors.Full(), safetensors.Span(2, 4)) // right half of every row
	b, _ = cols.Bytes()
	fmt.Println(cols.Shape(), cols.Contiguous(), b)
	// Output:
	// [4] true [4 5 6 7]
	// [2 2] false [2 3 6 7]
}

// Stream tensors to any io.Writer without holding them in memory.
func ExampleNewWriter() {
	var out countingWriter
	w, err := safetensors.NewWriter(&out, []safetensors.TensorSpec{
		{Name: "b", DType: dtype.F32, Shape: []int64{1024}},
		{Name: "a", DType: dtype.F8_E4M3, Shape: []int64{16}},
	}, nil)
	if err != nil {
		log.Fatal(err)
	}
	for {
		spec, tw, err := w.Next()
		if err != nil {
			break // io.EOF after the last tensor
		}
		n, _ := spec.ByteLen()
		chunk := make([]byte, 256)
		for ; n > 0; n -= int64(len(chunk)) {
			tw.Write(chunk[:min(int64(len(chunk)), n)])
		}
		fmt.Println("wrote", spec.Name, spec.DType)
	}
	if err := w.Close(); err != nil {
		log.Fatal(err)
	}
	fmt.Println(out.n == w.Size())
	// Output:
	// wrote b F32
	// wrote a F8_E4M3
	// true
}

type countingWriter struct{ n int64 }

func (c *countingWriter) Write(b []byte) (int, error) { c.n += int64(len(b)); return len(b), nil }
