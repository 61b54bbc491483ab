package interop_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/safetensors"
)

// TestSliceAgrees: random selections (whole dimensions, spans, single
// indices; some out of range) of random tensors through ckpt's Tensor.Slice
// and the reference's get_slice: same accept/reject, same shape, same bytes.
func TestSliceAgrees(t *testing.T) {
	python(t)
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(6, 0x511ce))
	numpyDTypes := []dtype.DType{dtype.BOOL, dtype.U8, dtype.I8, dtype.I16, dtype.U16, dtype.F16,
		dtype.I32, dtype.U32, dtype.F32, dtype.I64, dtype.U64, dtype.F64}

	type query struct {
		File   string  `json:"file"`
		Tensor string  `json:"tensor"`
		Sel    [][]any `json:"sel"`
		ranges []safetensors.Range
	}
	var queries []query
	for fi := range 8 {
		path := filepath.Join(dir, fmt.Sprintf("s%d.safetensors", fi))
		var tds []safetensors.TensorData
		for ti := range 6 {
			dt := numpyDTypes[r.IntN(len(numpyDTypes))]
			shape := make([]int64, 1+r.IntN(4))
			for i := range shape {
				shape[i] = int64(1 + r.IntN(6))
			}
			data := randData(r, dt, shape)
			name := fmt.Sprintf("t%d", ti)
			tds = append(tds, safetensors.TensorData{Name: name, DType: dt, Shape: shape, Data: data})
			for range 12 {
				q := query{File: path, Tensor: name}
				for _, d := range shape[:r.IntN(len(shape)+1)] {
					switch k := r.IntN(10); {
					case k < 3:
						q.Sel = append(q.Sel, []any{"full"})
						q.ranges = append(q.ranges, safetensors.Full())
					case k < 8:
						a := r.Int64N(d + 1)
						b := a + r.Int64N(d-a+1)
						if r.IntN(12) == 0 {
							b = d + 1 + r.Int64N(3) // past the end
						}
						q.Sel = append(q.Sel, []any{"span", a, b})
						q.ranges = append(q.ranges, safetensors.Span(a, b))
					default:
						i := r.Int64N(d)
						if r.IntN(10) == 0 {
							i = d // out of range
						}
						q.Sel = append(q.Sel, []any{"at", i})
						q.ranges = append(q.ranges, safetensors.At(i))
					}
				}
				queries = append(queries, q)
			}
		}
		if err := safetensors.Save(context.Background(), path, tds, nil); err != nil {
			t.Fatal(err)
		}
	}
	spec, err := json.Marshal(queries)
	if err != nil {
		t.Fatal(err)
	}
	specPath, outPath := filepath.Join(dir, "slices.json"), filepath.Join(dir, "slices-out.json")
	if err := os.WriteFile(specPath, spec, 0o644); err != nil {
		t.Fatal(err)
	}
	runPy(t, "st_oracle.py", "slice", specPath, outPath)
	var res []struct {
		Error  string  `json:"error"`
		Shape  []int64 `json:"shape"`
		SHA256 string  `json:"sha256"`
	}
	if readJSON(t, outPath, &res); len(res) != len(queries) {
		t.Fatalf("slices-out.json: %d results for %d queries", len(res), len(queries))
	}

	files := map[string]*safetensors.File{}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	var mm mismatches
	var ok, rejected, endEmpty int
	for i, q := range queries {
		f := files[q.File]
		if f == nil {
			if f, err = safetensors.Open(q.File); err != nil {
				t.Fatal(err)
			}
			files[q.File] = f
		}
		tn, err := f.Tensor(q.Tensor)
		if err != nil {
			t.Fatal(err)
		}
		what := fmt.Sprintf("%s%v%v", tn.DType(), tn.Shape(), q.ranges)
		want := res[i]
		sv, err := tn.Slice(q.ranges...)
		var data []byte
		if err == nil {
			data, err = sv.Bytes()
		}
		switch {
		case want.Error != "" && err != nil:
			rejected++
			var se *safetensors.Error
			if !errors.As(err, &se) {
				mm.add("%s: error is not a *safetensors.Error: %v", what, err)
			}
		case want.Error != "" && emptySpanAtEnd(tn.Shape(), q.ranges):
			// The reference refuses a span [d:d] at the end of a dimension
			// of size d ("index d out of bounds"); ckpt, like numpy, gives
			// an empty selection.
			endEmpty++
		case want.Error != "":
			mm.add("%s: the reference rejects it (%s), ckpt gives shape %v", what, want.Error, sv.Shape())
		case err != nil:
			mm.add("%s: ckpt rejects it (%v), the reference gives shape %v", what, err, want.Shape)
		default:
			ok++
			if !slices.Equal(sv.Shape(), want.Shape) {
				mm.add("%s: shape %v, the reference %v", what, sv.Shape(), want.Shape)
			} else if sha(data) != want.SHA256 {
				mm.add("%s: bytes differ from the reference's", what)
			}
		}
	}
	t.Logf("%d selections: %d read identically, %d rejected by both, %d empty spans at the end of a dimension (the reference refuses them, ckpt returns an empty selection)",
		len(queries), ok, rejected, endEmpty)
	if mm.n > 0 {
		t.Errorf("ckpt's Slice and the reference's get_slice disagree on %d of %d selections, e.g.\n\t%s",
			mm.n, len(queries), strings.Join(mm.examples, "\n\t"))
	}
}

// emptySpanAtEnd reports whether the selection is otherwise in range and has
// a span [d:d] at the end of a dimension of size d.
func emptySpanAtEnd(shape []int64, ranges []safetensors.Range) bool {
	found := false
	for i, r := range ranges {
		s := r.String()
		var a, b int64
		if n, _ := fmt.Sscanf(s, "%d:%d", &a, &b); n == 2 {
			if a == b && a == shape[i] {
				found = true
			} else if a > b || b > shape[i] {
				return false
			}
		} else if n, _ := fmt.Sscanf(s, "%d", &a); n == 1 && s == fmt.Sprint(a) && a >= shape[i] {
			return false
		}
	}
	return found
}
