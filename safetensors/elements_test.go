package safetensors

import (
	"bytes"
	"errors"
	"testing"

	"github.com/ckpt-go/ckpt/dtype"
)

// ConvertElementsTo over consecutive parts gives exactly ConvertTo's bytes
// and Stats, for every backend, including sub-byte dtypes and a copy.
func TestConvertElementsToParts(t *testing.T) {
	cases := []struct {
		from, to dtype.DType
		n        int64
	}{
		{dtype.BF16, dtype.F32, 5003},
		{dtype.F32, dtype.F8_E4M3, 4099},
		{dtype.F4, dtype.F32, 4098},
		{dtype.F32, dtype.F6_E2M3, 4100},
		{dtype.F16, dtype.F16, 777},
	}
	for _, c := range cases {
		raw := make([]byte, mustLen(t, c.from, c.n))
		for i := range raw {
			raw[i] = byte(i*131 + 7)
		}
		if c.from == dtype.F32 {
			// Finite F32 values with large magnitudes (some overflow FP8).
			for i := 0; i+4 <= len(raw); i += 4 {
				raw[i+3] = byte(0x40 + i%0x0f)
			}
		}
		path := saveTemp(t, []TensorData{{Name: "w", DType: c.from, Shape: []int64{c.n}, Data: raw}}, nil)
		for name, f := range backends(t, path) {
			tn, _ := f.Tensor("w")
			whole := make([]byte, mustLen(t, c.to, c.n))
			wst, err := tn.ConvertTo(c.to, whole, dtype.Options{})
			if err != nil {
				t.Fatal(err)
			}
			got := make([]byte, len(whole))
			var st dtype.Stats
			for first := int64(0); first < c.n; first += 1024 {
				cnt := min(1024, c.n-first)
				a := mustLen(t, c.to, first)
				b := int64(len(whole))
				if first+cnt < c.n {
					b = mustLen(t, c.to, first+cnt)
				}
				s, err := tn.ConvertElementsTo(c.to, got[a:b], first, dtype.Options{Workers: 1})
				if err != nil {
					t.Fatalf("%s %s->%s part at %d: %v", name, c.from, c.to, first, err)
				}
				st.Add(s)
			}
			if !bytes.Equal(got, whole) {
				t.Errorf("%s %s->%s: parts differ from the whole", name, c.from, c.to)
			}
			if c.from != c.to && st != wst {
				t.Errorf("%s %s->%s: stats %+v, whole %+v", name, c.from, c.to, st, wst)
			}
		}
	}
}

func TestConvertElementsToArguments(t *testing.T) {
	path := saveTemp(t, []TensorData{{Name: "w", DType: dtype.BF16, Shape: []int64{20}, Data: make([]byte, 40)}}, nil)
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tn, _ := f.Tensor("w")
	for _, c := range []struct {
		first int64
		n     int
	}{{-8, 8}, {16, 8}, {24, 0}, {3, 8}, {0, 5}} {
		_, err := tn.ConvertElementsTo(dtype.F32, make([]byte, 4*c.n), c.first, dtype.Options{})
		if !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("first %d n %d: %v", c.first, c.n, err)
		}
	}
	// A part ending at the tensor's end may be any length.
	if _, err := tn.ConvertElementsTo(dtype.F32, make([]byte, 4*4), 16, dtype.Options{}); err != nil {
		t.Error(err)
	}
}

func mustLen(t *testing.T, d dtype.DType, n int64) int64 {
	t.Helper()
	b, err := d.ByteLen(n)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Evict drops pages from the resident set but never the data: the tensor
// reads the same afterwards, and out-of-range or unmapped calls are no-ops.
func TestEvictKeepsData(t *testing.T) {
	raw := make([]byte, 3<<20)
	for i := range raw {
		raw[i] = byte(i * 13)
	}
	path := saveTemp(t, []TensorData{{Name: "w", DType: dtype.U8, Shape: []int64{int64(len(raw))}, Data: raw}}, nil)
	for name, f := range backends(t, path) {
		tn, _ := f.Tensor("w")
		tn.Evict(0, tn.NumElements())
		tn.Evict(1<<20, 5)
		tn.Evict(-1, 10)
		tn.Evict(0, 1<<40)
		b, err := tn.Bytes()
		if err != nil || !bytes.Equal(b, raw) {
			t.Errorf("%s: data changed after Evict (%v)", name, err)
		}
	}
}
