package integrity_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/integrity"
	"github.com/ckpt-go/ckpt/internal/testutil"
	"github.com/ckpt-go/ckpt/safetensors"
)

// data returns the tensors of spec with ckpttest's deterministic contents.
func data(t testing.TB, spec string) []safetensors.TensorData {
	t.Helper()
	var out []safetensors.TensorData
	for _, x := range ckpttest.Tensors(t, spec) {
		d, err := x.Contents()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, safetensors.TensorData{Name: x.Name, DType: x.DType, Shape: x.Shape, Data: d})
	}
	return out
}

// save writes a checksummed safetensors file (safetensors.Save) at path.
func save(t testing.TB, path string, tensors []safetensors.TensorData, md map[string]string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := safetensors.Save(context.Background(), path, tensors, md); err != nil {
		t.Fatal(err)
	}
}

// verify runs Verify under a deadline (a hang fails the test) and fails t
// on an error.
func verify(t testing.TB, location string, opts ...integrity.Option) *integrity.Report {
	t.Helper()
	var rep *integrity.Report
	err := testutil.Within(t, "Verify "+location, func() error {
		var err error
		rep, err = integrity.Verify(context.Background(), location, opts...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// messages returns the report's problems, one line each.
func messages(rep *integrity.Report) []string {
	out := []string{}
	for _, p := range rep.Problems {
		out = append(out, p.Message)
	}
	return out
}

// wantProblems checks the report's problems: exactly these lines, in
// order, and the kind of each.
func wantProblems(t testing.TB, rep *integrity.Report, kinds []integrity.Kind, lines ...string) {
	t.Helper()
	got := messages(rep)
	if !slices.Equal(got, lines) {
		t.Fatalf("problems:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(lines, "\n  "))
	}
	for i, p := range rep.Problems {
		if p.Kind != kinds[i] {
			t.Errorf("problem %q: kind %v, want %v", p.Message, p.Kind, kinds[i])
		}
		if !strings.HasPrefix(p.Message, p.File+": ") {
			t.Errorf("problem %q does not start with its file %q", p.Message, p.File)
		}
	}
}

// hasKind reports whether err is a *Problem of kind k, or a
// *ProblemsError holding one.
func hasKind(err error, k integrity.Kind) bool {
	var pe *integrity.ProblemsError
	if errors.As(err, &pe) {
		return slices.ContainsFunc(pe.Problems, func(p *integrity.Problem) bool { return p.Kind == k })
	}
	var p *integrity.Problem
	return errors.As(err, &p) && p.Kind == k
}

// wantOK fails t unless the report has no problem.
func wantOK(t testing.TB, rep *integrity.Report) {
	t.Helper()
	if !rep.OK() {
		t.Fatalf("problems:\n  %s", strings.Join(messages(rep), "\n  "))
	}
}

// writeJSON writes v as JSON to path.
func writeJSON(t testing.TB, path string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// flip flips bit 0 of the byte at off in the file at path.
func flip(t testing.TB, path string, off int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[off] ^= 1
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// tensorOffset returns the file offsets of a tensor's bytes.
func tensorOffset(t testing.TB, path, name string) (int64, int64) {
	t.Helper()
	h, err := safetensors.ReadHeaderFile(path)
	if err != nil {
		t.Fatal(err)
	}
	info, ok := h.Lookup(name)
	if !ok {
		t.Fatalf("%s has no tensor %q", path, name)
	}
	return h.DataOffset + info.Begin, h.DataOffset + info.End
}

func formatInt(n int64) string { return strconv.FormatInt(n, 10) }

// withEntry returns a copy of the weight map wm in which tensor k maps to
// file v, or, when v is "", in which k is left out.
func withEntry(wm map[string]string, k, v string) map[string]string {
	m := maps.Clone(wm)
	if v == "" {
		delete(m, k)
	} else {
		m[k] = v
	}
	return m
}
