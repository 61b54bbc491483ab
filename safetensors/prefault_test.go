package safetensors

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/ckpt-go/ckpt/dtype"
)

// prefault changes no byte: of fresh memory, of memory in use, of a range
// that does not start or end on a page.
func TestPrefaultKeepsBytes(t *testing.T) {
	for _, size := range []int{prefaultMin - 1, prefaultMin, 1<<20 + 123} {
		fresh := make([]byte, size+8)
		prefault(fresh[3 : size+3])
		for i, c := range fresh {
			if c != 0 {
				t.Fatalf("%d bytes, fresh: byte %d is %d", size, i, c)
			}
		}
		used := make([]byte, size)
		for i := range used {
			used[i] = byte(i*7 + 1)
		}
		prefault(used[1:])
		for i, c := range used {
			if c != byte(i*7+1) {
				t.Fatalf("%d bytes, in use: byte %d is %d", size, i, c)
			}
		}
	}
}

// Float32s and Float64s of outputs large enough to be prefaulted convert
// every element.
func TestFloatsOfLargeTensors(t *testing.T) {
	const n = 3*prefaultMin/4 + 5 // F32 output beyond prefaultMin
	data := make([]byte, 2*n)
	for i := range n {
		binary.LittleEndian.PutUint16(data[2*i:], uint16(0x3f80+i%64)) // BF16 1.0, 1.0078125, ...
	}
	path := saveTemp(t, []TensorData{{Name: "w", DType: dtype.BF16, Shape: []int64{n}, Data: data}}, nil)
	f := mustOpen(t, path)
	defer f.Close()
	tn, err := f.Tensor("w")
	if err != nil {
		t.Fatal(err)
	}
	f32, err := tn.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	f64, err := tn.Float64s()
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		want := math.Float32frombits(uint32(0x3f80+i%64) << 16)
		if f32[i] != want || f64[i] != float64(want) {
			t.Fatalf("element %d: %v and %v, want %v", i, f32[i], f64[i], want)
		}
	}
}
