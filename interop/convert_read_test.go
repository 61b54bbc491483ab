package interop_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/safetensors"
)

// TestConvertingReadsAgree: tensors of every narrow float dtype, some larger
// than ckpt's 4 MiB conversion chunk, read as float32 by ckpt (Float32s,
// through pread chunks, the mapping, and from memory) and by the reference
// (raw bytes from deserialize, widened by ml_dtypes): the same values. This
// checks the converting read path and the packed F4/F6 layout in files on
// top of the per-value oracle of TestConvertF32.
func TestConvertingReadsAgree(t *testing.T) {
	python(t)
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(7, 0xf32))
	type spec struct {
		dt dtype.DType
		n  int64
	}
	specs := []spec{
		{dtype.BF16, 3_000_001}, {dtype.F16, 2_500_000}, {dtype.F32, 1_000},
		{dtype.F8_E4M3, 6_000_003}, {dtype.F8_E5M2, 5_000}, {dtype.F8_E4M3FNUZ, 4_194_305},
		{dtype.F8_E5M2FNUZ, 4_099}, {dtype.F8_E8M0, 256 * 33},
		{dtype.F4, 10_000_002}, {dtype.F4, 14}, {dtype.F6_E2M3, 8_000_004}, {dtype.F6_E3M2, 4_096},
	}
	var tds []safetensors.TensorData
	for i, s := range specs {
		b, err := s.dt.ByteLen(s.n)
		if err != nil {
			t.Fatal(err)
		}
		data := make([]byte, b)
		for j := 0; j < len(data); j += 8 {
			var w [8]byte
			binary.LittleEndian.PutUint64(w[:], r.Uint64())
			copy(data[j:], w[:])
		}
		tds = append(tds, safetensors.TensorData{Name: fmt.Sprintf("%02d.%s", i, s.dt), DType: s.dt, Shape: []int64{s.n}, Data: data})
	}
	path := filepath.Join(dir, "narrow.safetensors")
	if err := safetensors.Save(context.Background(), path, tds, nil); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "decode.json")
	runPy(t, "st_oracle.py", "decode", out, path)
	var want map[string]struct {
		N      int64  `json:"n"`
		SHA256 string `json:"sha256"`
	}
	readJSON(t, out, &want)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	opens := map[string]func() (*safetensors.File, error){
		"pread": func() (*safetensors.File, error) {
			return safetensors.Open(path, safetensors.WithReadMode(safetensors.ReadPread))
		},
		"mapped": func() (*safetensors.File, error) {
			return safetensors.Open(path, safetensors.WithReadMode(safetensors.ReadMapped))
		},
		"readat": func() (*safetensors.File, error) { return safetensors.Open(path, safetensors.WithReadAt()) },
		"bytes":  func() (*safetensors.File, error) { return safetensors.OpenBytes(raw) },
	}
	for mode, open := range opens {
		f, err := open()
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		for _, td := range tds {
			w, ok := want[td.Name]
			if !ok {
				t.Fatalf("the reference did not decode %s", td.Name)
			}
			tn, err := f.Tensor(td.Name)
			if err != nil {
				t.Fatal(err)
			}
			v, err := tn.Float32s()
			if err != nil {
				t.Errorf("%s: %s: Float32s: %v", mode, td.Name, err)
				continue
			}
			if int64(len(v)) != w.N {
				t.Errorf("%s: %s: %d values, the reference %d", mode, td.Name, len(v), w.N)
				continue
			}
			buf := make([]byte, 4*len(v))
			for i, x := range v {
				bits := math.Float32bits(x)
				if x != x {
					bits = 0x7fc00000
				}
				binary.LittleEndian.PutUint32(buf[4*i:], bits)
			}
			if sha(buf) != w.SHA256 {
				t.Errorf("%s: %s: values differ from the reference's%s", mode, td.Name, firstDiff(td, v))
			}
		}
		f.Close()
	}
}

// firstDiff locates where v differs from a one-goroutine dtype.Convert of
// the tensor's bytes (to tell a read-path bug from a conversion bug).
func firstDiff(td safetensors.TensorData, v []float32) string {
	n := len(v)
	dst := make([]byte, 4*n)
	if _, err := dtype.Convert(dst, dtype.F32, td.Data, td.DType, dtype.Options{Workers: 1}); err != nil {
		return fmt.Sprintf(" (Convert: %v)", err)
	}
	for i, x := range v {
		w := binary.LittleEndian.Uint32(dst[4*i:])
		g := math.Float32bits(x)
		if g != w && !(x != x && isNaN32(w)) {
			return fmt.Sprintf(" (first difference from a one-goroutine Convert at element %d of %d: %#08x vs %#08x)", i, n, g, w)
		}
	}
	return " (same as a one-goroutine Convert: the conversion itself differs from ml_dtypes)"
}
