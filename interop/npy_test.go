package interop_test

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/npy"
)

// npyResult is what py/npy_oracle.py reports for one .npy file.
type npyResult struct {
	File        string   `json:"file"`
	OK          bool     `json:"ok"`
	Error       string   `json:"error"`
	DType       string   `json:"dtype"`
	Shape       []int64  `json:"shape"`
	Hex         string   `json:"hex"`
	Values      []string `json:"values"`
	ResaveEqual bool     `json:"resave_equal"`
}

// numpyNames are the dtype names np.load gives for ckpt's .npy files (with
// ml_dtypes imported).
var numpyNames = map[dtype.DType]string{
	dtype.BOOL: "bool", dtype.U8: "uint8", dtype.I8: "int8", dtype.I16: "int16", dtype.U16: "uint16",
	dtype.I32: "int32", dtype.U32: "uint32", dtype.I64: "int64", dtype.U64: "uint64",
	dtype.F16: "float16", dtype.F32: "float32", dtype.F64: "float64", dtype.C64: "complex64",
	dtype.BF16: "bfloat16", dtype.F8_E4M3: "float8_e4m3fn", dtype.F8_E5M2: "float8_e5m2",
	dtype.F8_E4M3FNUZ: "float8_e4m3fnuz", dtype.F8_E5M2FNUZ: "float8_e5m2fnuz", dtype.F8_E8M0: "float8_e8m0fnu",
	dtype.F4: "float4_e2m1fn", dtype.F6_E2M3: "float6_e2m3fn", dtype.F6_E3M2: "float6_e3m2fn",
}

type npyCase struct {
	dt    dtype.DType
	shape []int64
	data  []byte // the safetensors bytes
}

// TestNPYLoadsInNumpy writes every builtin dtype in several shapes with
// internal/npy (what `ckpt get --format npy` writes) and has np.load read
// them: with ml_dtypes imported every file loads with the dtype of the same
// name, the same shape, the same element bytes (F4/F6 one code a byte) and
// the values ckpt decodes; numpy's own dtypes are byte for byte what np.save
// writes; without ml_dtypes, the narrow float files are refused by name.
func TestNPYLoadsInNumpy(t *testing.T) {
	dir := t.TempDir()
	var cases []npyCase
	var paths []string
	for _, d := range dtype.Builtins() {
		for _, shape := range [][]int64{{}, {8}, {2, 3, 4}, {0, 5}, {4, 1, 16}} {
			n := int64(1)
			for _, s := range shape {
				n *= s
			}
			if _, err := d.ByteLen(n); err != nil {
				continue // e.g. one F4 element: not whole bytes
			}
			data, err := ckpttest.Fill(fmt.Sprint("npy", len(cases)), d, shape)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, fmt.Sprintf("%d-%s.npy", len(cases), d))
			var b bytes.Buffer
			if err := npy.Write(&b, d, shape, data); err != nil {
				t.Fatalf("%s %v: %v", d, shape, err)
			}
			if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			cases = append(cases, npyCase{d, shape, data})
			paths = append(paths, path)
		}
	}
	list := writeList(t, dir, "list.txt", paths)

	withML := filepath.Join(dir, "ml.json")
	runPy(t, "npy_oracle.py", "load", withML, list, "--ml-dtypes")
	var res []npyResult
	readJSON(t, withML, &res)
	if len(res) != len(cases) {
		t.Fatalf("%d results for %d files", len(res), len(cases))
	}
	var bad mismatches
	for i, c := range cases {
		r := res[i]
		what := fmt.Sprintf("%s %v", c.dt, c.shape)
		if !r.OK {
			bad.add("%s: np.load refused it: %s", what, r.Error)
			continue
		}
		if r.DType != numpyNames[c.dt] || fmt.Sprint(r.Shape) != fmt.Sprint(c.shape) {
			bad.add("%s: np.load gives %s %v", what, r.DType, r.Shape)
		}
		want := unpacked(c.dt, c.data)
		if got, _ := hex.DecodeString(r.Hex); !bytes.Equal(got, want) {
			bad.add("%s: element bytes %x, want %x", what, got, want)
		}
		if !npy.NeedsMLDtypes(c.dt) && !r.ResaveEqual {
			bad.add("%s: np.save of the loaded array writes other bytes than ckpt's file", what)
		}
		if c.dt.IsFloat() || c.dt == dtype.C64 {
			n := len(r.Values)
			dec := make([]float64, n)
			src := c.data
			from := c.dt
			if c.dt == dtype.C64 { // two F32 per element
				from = dtype.F32
			}
			if _, err := dtype.DecodeFloat64(dec, src, from); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			for j, s := range r.Values {
				v, err := strconv.ParseFloat(s, 64)
				if err != nil {
					t.Fatalf("%s: value %q: %v", what, s, err)
				}
				if !(v == dec[j] && math.Signbit(v) == math.Signbit(dec[j]) || math.IsNaN(v) && math.IsNaN(dec[j])) {
					bad.add("%s[%d]: numpy %g, ckpt %g", what, j, v, dec[j])
				}
			}
		}
	}
	bad.report(t, "np.load with ml_dtypes of ckpt's .npy files", len(cases))

	plain := filepath.Join(dir, "plain.json")
	runPy(t, "npy_oracle.py", "load", plain, list)
	res = nil
	readJSON(t, plain, &res)
	bad = mismatches{}
	for i, c := range cases {
		r := res[i]
		switch {
		case npy.NeedsMLDtypes(c.dt) && (r.OK || !strings.Contains(r.Error, "not a valid dtype descriptor")):
			bad.add("%s without ml_dtypes: ok=%v error %q, want a refusal naming the descr", c.dt, r.OK, r.Error)
		case !npy.NeedsMLDtypes(c.dt) && !r.OK:
			bad.add("%s without ml_dtypes: refused: %s", c.dt, r.Error)
		}
	}
	bad.report(t, "np.load without ml_dtypes", len(cases))
}

// unpacked returns the element bytes numpy holds for safetensors data: F4
// and F6 one code a byte, the others as they are.
func unpacked(d dtype.DType, data []byte) []byte {
	switch d {
	case dtype.F4:
		out := make([]byte, 0, 2*len(data))
		for _, b := range data {
			out = append(out, b&0xF, b>>4)
		}
		return out
	case dtype.F6_E2M3, dtype.F6_E3M2:
		out := make([]byte, 0, len(data)/3*4)
		for i := 0; i+2 < len(data); i += 3 {
			g := uint32(data[i]) | uint32(data[i+1])<<8 | uint32(data[i+2])<<16
			for j := range 4 {
				out = append(out, byte(g>>(6*j))&0x3F)
			}
		}
		return out
	}
	return data
}
