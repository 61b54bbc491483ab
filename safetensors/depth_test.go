package safetensors

import (
	"fmt"
	"strings"
	"testing"
)

// nested returns a JSON value of exactly levels nested containers: arrays
// ([[...[0]...]]), objects ({"k":{"k":...{"k":0}...}}) or both alternating,
// outermost first.
func nested(shape string, levels int) string {
	var b strings.Builder
	for i := range levels {
		if shape == "arrays" || (shape == "mixed" && i%2 == 0) {
			b.WriteString("[")
		} else {
			b.WriteString(`{"k":`)
		}
	}
	b.WriteString("0")
	b.WriteString(closing(shape, levels))
	return b.String()
}

// closing returns the closing brackets for nested(shape, levels).
func closing(shape string, levels int) string {
	var b strings.Builder
	for i := levels - 1; i >= 0; i-- {
		if shape == "arrays" || (shape == "mixed" && i%2 == 0) {
			b.WriteString("]")
		} else {
			b.WriteString("}")
		}
	}
	return b.String()
}

// TestNestingDepthSweep checks the nesting limit against the reference
// (serde_json's recursion limit as safetensors 0.8 uses it): a header whose
// deepest container is 127 levels down, counting the header object itself,
// is accepted; 128 is refused as invalid JSON. Each position and container
// shape is swept over depths 126 to 130; the verdicts were taken from the
// reference (interop.TestNestingDepthAgrees checks them against it).
func TestNestingDepthSweep(t *testing.T) {
	const entry = `"dtype":"U8","shape":[1],"data_offsets":[0,1]`
	for _, shape := range []string{"arrays", "objects", "mixed"} {
		for depth := 126; depth <= 130; depth++ {
			// total depth -> the header, and the kind the reference's
			// verdict maps to (0: accepted).
			positions := []struct {
				name   string
				header string
				kind   ErrorKind
			}{
				// An unknown field of a tensor entry: header object (1),
				// tensor entry (2), then the value.
				{"tensor field", `{"a":{` + entry + `,"x":` + nested(shape, depth-2) + `}}`, deepKind(depth, 0)},
				// The same field before the known ones.
				{"tensor field first", `{"a":{"x":` + nested(shape, depth-2) + `,` + entry + `}}`, deepKind(depth, 0)},
				// A metadata value: never a string, so always refused;
				// too deep is a syntax error, which wins.
				{"metadata value", `{"__metadata__":{"k":` + nested(shape, depth-2) + `},"a":{` + entry + `}}`, deepKind(depth, ErrInvalidHeader)},
				// __metadata__ itself.
				{"metadata", `{"__metadata__":` + nested(shape, depth-1) + `,"a":{` + entry + `}}`, deepKind(depth, ErrInvalidHeader)},
				// A tensor entry that is not an object.
				{"tensor entry", `{"a":` + nested(shape, depth-1) + `}`, deepKind(depth, ErrInvalidHeader)},
				// Inside shape.
				{"shape element", `{"a":{"dtype":"U8","shape":[` + nested(shape, depth-3) + `],"data_offsets":[0,1]}}`, deepKind(depth, ErrInvalidHeader)},
				// The whole header.
				{"top level", nested(shape, depth), deepKind(depth, ErrInvalidHeader)},
			}
			for _, p := range positions {
				t.Run(fmt.Sprintf("%s/%s/%d", p.name, shape, depth), func(t *testing.T) {
					raw := file(p.header, []byte{1})
					_, err := OpenBytes(raw)
					if p.kind == 0 {
						if err != nil {
							t.Fatalf("depth %d refused: %v", depth, err)
						}
						return
					}
					wantKind(t, err, p.kind)
					_, err = NewReader(strings.NewReader(string(raw)), int64(len(raw)))
					wantKind(t, err, p.kind)
				})
			}
		}
	}
}

// deepKind is the kind of error expected for a header nested depth levels
// deep whose value is otherwise refused with kind (0: accepted).
func deepKind(depth int, kind ErrorKind) ErrorKind {
	if depth >= 128 {
		return ErrInvalidJSON
	}
	return kind
}
