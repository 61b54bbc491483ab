package safetensors

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/ckpt-go/ckpt/dtype"
)

func TestHeaderBytesChecksum(t *testing.T) {
	b, err := Serialize([]TensorData{{Name: "a", DType: dtype.F32, Shape: []int64{2}, Data: make([]byte, 8)}, {Name: "b", DType: dtype.U8, Shape: []int64{3}, Data: []byte{1, 2, 3}}}, map[string]string{"k": "v"})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "m.safetensors")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, opts := range [][]OpenOption{nil, {WithReadAt()}} {
		f, err := Open(path, opts...)
		if err != nil {
			t.Fatal(err)
		}
		h, err := f.HeaderBytesChecksum()
		if want := Checksum(b[:f.Header().DataOffset]); err != nil || h != want {
			t.Errorf("HeaderChecksum = %08x, %v; want %08x", h, err, want)
		}
		// With the tensors' checksums: the whole file's.
		sums, _ := f.Header().Checksums()
		crc := h
		for _, ti := range f.Header().Tensors {
			crc = CombineChecksums(crc, sums[ti.Name], ti.ByteLen())
		}
		if crc != Checksum(b) {
			t.Errorf("combined %08x, the file's %08x", crc, Checksum(b))
		}
		f.Close()
		if _, err := f.HeaderBytesChecksum(); f.Mapped() && !errors.Is(err, ErrClosed) {
			t.Errorf("after Close: %v", err)
		}
	}
}
