package interop_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/safetensors"
)

// nestedJSON returns a JSON value of exactly levels nested containers:
// arrays, objects ({"k":...}) or both alternating, around a 0.
func nestedJSON(shape string, levels int) string {
	isArray := func(i int) bool { return shape == "arrays" || (shape == "mixed" && i%2 == 0) }
	var b strings.Builder
	for i := range levels {
		if isArray(i) {
			b.WriteString("[")
		} else {
			b.WriteString(`{"k":`)
		}
	}
	b.WriteString("0")
	for i := levels - 1; i >= 0; i-- {
		if isArray(i) {
			b.WriteString("]")
		} else {
			b.WriteString("}")
		}
	}
	return b.String()
}

// TestNestingDepthAgrees sweeps JSON nesting from 120 to 132 levels in every
// position of a header (an unknown tensor field, a metadata value,
// __metadata__ itself, a tensor entry, a shape element, the whole header)
// with arrays, objects and both, and checks that ckpt accepts exactly what
// the reference accepts, with a compatible error kind.
func TestNestingDepthAgrees(t *testing.T) {
	python(t)
	dir := t.TempDir()
	const entry = `"dtype":"U8","shape":[1],"data_offsets":[0,1]`
	var names, paths []string
	var files [][]byte
	for _, shape := range []string{"arrays", "objects", "mixed"} {
		for depth := 120; depth <= 132; depth++ {
			for pos, h := range map[string]string{
				"tensor-field":   `{"a":{` + entry + `,"x":` + nestedJSON(shape, depth-2) + `}}`,
				"tensor-field-0": `{"a":{"x":` + nestedJSON(shape, depth-2) + `,` + entry + `}}`,
				"metadata-value": `{"__metadata__":{"k":` + nestedJSON(shape, depth-2) + `},"a":{` + entry + `}}`,
				"metadata":       `{"__metadata__":` + nestedJSON(shape, depth-1) + `,"a":{` + entry + `}}`,
				"tensor-entry":   `{"a":` + nestedJSON(shape, depth-1) + `}`,
				"shape-element":  `{"a":{"dtype":"U8","shape":[` + nestedJSON(shape, depth-3) + `],"data_offsets":[0,1]}}`,
				"top-level":      nestedJSON(shape, depth),
			} {
				raw := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
				raw = append(append(raw, h...), 1)
				name := fmt.Sprintf("%s-%s-%d", pos, shape, depth)
				p := filepath.Join(dir, name+".safetensors")
				if err := os.WriteFile(p, raw, 0o644); err != nil {
					t.Fatal(err)
				}
				names, paths, files = append(names, name), append(paths, p), append(files, raw)
			}
		}
	}
	list := writeList(t, dir, "depth-list.txt", paths)
	out := filepath.Join(dir, "depth.json")
	runPy(t, "st_oracle.py", "check", out, list)
	var checks []pyCheck
	readJSON(t, out, &checks)
	if len(checks) != len(paths) {
		t.Fatalf("the reference checked %d files of %d", len(checks), len(paths))
	}
	var disagree, wrongKind mismatches
	accepted := 0
	for i, name := range names {
		ref := checks[i].Deserialize
		_, err := safetensors.OpenBytes(files[i])
		if (ref == "") != (err == nil) {
			disagree.add("%s: reference %q, ckpt %v", name, ref, err)
			continue
		}
		if err == nil {
			accepted++
			continue
		}
		var se *safetensors.Error
		if !errors.As(err, &se) {
			t.Errorf("%s: not a *safetensors.Error: %v", name, err)
			continue
		}
		want := refKinds(ref)
		if strings.Contains(ref, "unknown variant") {
			// serde reads a tensor entry given as an array as the
			// sequence of its fields, so it reads the first element as a
			// dtype; ckpt refuses the entry for not being an object.
			want = append(want, safetensors.ErrInvalidHeader)
		}
		if want != nil && !slices.Contains(want, se.Kind) {
			wrongKind.add("%s: ckpt says %s, the reference %q", name, se.Kind, ref)
		}
	}
	t.Logf("%d headers, %d accepted by both", len(names), accepted)
	if accepted == 0 {
		t.Error("no header accepted: the sweep does not reach the limit from below")
	}
	if disagree.n > 0 {
		t.Errorf("ckpt and the reference disagree on %d of %d nesting depths, e.g.\n\t%s", disagree.n, len(names), strings.Join(disagree.examples, "\n\t"))
	}
	if wrongKind.n > 0 {
		t.Errorf("ckpt reports another kind than the reference for %d headers, e.g.\n\t%s", wrongKind.n, strings.Join(wrongKind.examples, "\n\t"))
	}
}
