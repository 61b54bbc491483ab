package safetensors_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/safetensors"
)

var (
	registerOnce sync.Once
	e3m4         dtype.DType
	registerErr  error
)

// e3m4Type registers, once per test binary, a toy 8-bit float the library
// does not know: sign, 3 exponent bits (bias 3), 4 mantissa bits, no Inf or
// NaN, encoded by truncation toward zero and clamped to ±31.
func e3m4Type(t *testing.T) dtype.DType {
	t.Helper()
	registerOnce.Do(func() {
		decode := func(b byte) float32 {
			e := int(b>>4) & 7
			m := float32(b & 15)
			var v float32
			if e == 0 {
				v = m / 16 * 0.25 // subnormal: 2^(1-3) * m/16
			} else {
				v = (1 + m/16) * float32(int(1)<<e) / 8
			}
			if b&0x80 != 0 {
				v = -v
			}
			return v
		}
		var table [256]float32
		for i := range table {
			table[i] = decode(byte(i))
		}
		e3m4, registerErr = dtype.Register(dtype.Spec{
			Name: "F8_TEST_E3M4", Aliases: []string{"float8_test_e3m4"}, Bits: 8, Min: -31, Max: 31,
			Decode: func(dst []float32, src []byte) {
				for i, b := range src {
					dst[i] = table[b]
				}
			},
			Encode: func(dst []byte, src []float32, _ dtype.Options) dtype.Stats {
				st := dtype.Stats{Elements: int64(len(src))}
				for i, v := range src {
					best := byte(0)
					for c := 0; c < 256; c++ { // largest magnitude not above |v|
						if (table[c] >= 0) == (v >= 0) && abs32(table[c]) <= abs32(v) && abs32(table[c]) > abs32(table[best]) {
							best = byte(c)
						}
					}
					dst[i] = best
				}
				return st
			},
		})
	})
	if registerErr != nil {
		// Another test of the same binary may have registered the name.
		if d, err := dtype.Parse("F8_TEST_E3M4"); err == nil {
			return d
		}
		t.Fatal(registerErr)
	}
	return e3m4
}

func abs32(v float32) float32 {
	if v < 0 {
		return -v
	}
	return v
}

// A dtype registered by the program is written to and read from files, and
// converted on read, like a built-in one.
func TestRegisteredDTypeRoundTrip(t *testing.T) {
	d := e3m4Type(t)
	path := filepath.Join(t.TempDir(), "custom.safetensors")
	raw := []byte{0x00, 0x30, 0xB8, 0x7F} // 0, 1, -1.5, 31
	err := safetensors.Save(context.Background(), path, []safetensors.TensorData{
		{Name: "w", DType: d, Shape: []int64{2, 2}, Data: raw},
		{Name: "b", DType: dtype.F32, Shape: []int64{1}, Data: dtype.Float32Bytes([]float32{2})},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := safetensors.ReadHeaderFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if info, _ := h.Lookup("w"); info.DType != d {
		t.Fatalf("header dtype %v, want %v", info.DType, d)
	}
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := f.Tensor("w")
	if err != nil {
		t.Fatal(err)
	}
	got, err := w.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	want := []float32{0, 1, -1.5, 31}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("Float32s = %v, want %v", got, want)
		}
	}
	// Convert to a built-in narrow type and back into the registered one.
	bf := make([]byte, 8)
	if _, err := w.ConvertTo(dtype.BF16, bf, dtype.Options{}); err != nil {
		t.Fatal(err)
	}
	back := make([]byte, 4)
	if _, err := dtype.Convert(back, d, bf, dtype.BF16, dtype.Options{}); err != nil {
		t.Fatal(err)
	}
	if string(back) != string(raw) {
		t.Fatalf("BF16 round trip gave % x, want % x", back, raw)
	}
}

// Before registration, the same name in a header is an unknown dtype.
func TestUnregisteredDTypeIsUnknown(t *testing.T) {
	header := `{"w":{"dtype":"F8_NOT_REGISTERED","shape":[1],"data_offsets":[0,1]}}`
	_, err := safetensors.ParseHeader([]byte(header), 1)
	if !errors.Is(err, safetensors.ErrUnknownDType) {
		t.Fatalf("got %v, want ErrUnknownDType", err)
	}
	var se *safetensors.Error
	if !errors.As(err, &se) || se.Tensor != "w" {
		t.Fatalf("error %#v should name tensor w", err)
	}
}
