package convert

import (
	"testing"

	"github.com/ckpt-go/ckpt"
)

// contents returns the stored tensors of m's only component, as the
// loader reads them.
func contents(t *testing.T, m *ckpt.Model) *ckpt.Contents {
	t.Helper()
	cs, err := m.Contents(m.Components()[0])
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// storedPart returns the loader's Part of the stored tensor name.
func storedPart(t *testing.T, cs *ckpt.Contents, name string) *ckpt.Part {
	t.Helper()
	for i := range cs.Tensors {
		if cs.Tensors[i].Tensor == name {
			return &cs.Tensors[i]
		}
	}
	t.Fatalf("no stored tensor %s", name)
	return nil
}

// storedBytes reads the stored bytes of the tensor name through the
// loader (verified when its file names checksums).
func storedBytes(t *testing.T, cs *ckpt.Contents, name string) []byte {
	t.Helper()
	p := storedPart(t, cs, name)
	b := make([]byte, p.Size())
	if _, err := p.ReadAt(b, 0); err != nil && len(b) > 0 {
		t.Fatalf("%s: %v", name, err)
	}
	return b
}
