package safetensors

import (
	"bytes"
	"errors"
	"io"
	"os"
	"testing"

	"github.com/ckpt-go/ckpt/dtype"
)

// ReadAt reads any byte range of a tensor's data on every backend, ends
// with io.EOF at the tensor's end (never reading the next tensor), and
// refuses a negative offset and a closed file.
func TestTensorReadAt(t *testing.T) {
	data := i32Data(12)
	path := saveTemp(t, []TensorData{
		{Name: "a", DType: dtype.I32, Shape: []int64{3, 4}, Data: data},
		{Name: "b", DType: dtype.U8, Shape: []int64{3}, Data: []byte{9, 9, 9}},
	}, nil)
	for name, f := range backends(t, path) {
		tt, err := f.Tensor("a")
		if err != nil {
			t.Fatal(err)
		}
		var _ io.ReaderAt = tt
		for _, c := range []struct{ off, n int64 }{{0, 48}, {5, 7}, {16, 16}, {47, 1}, {0, 0}} {
			p := make([]byte, c.n)
			n, err := tt.ReadAt(p, c.off)
			if err != nil || int64(n) != c.n || !bytes.Equal(p, data[c.off:c.off+c.n]) {
				t.Errorf("%s: ReadAt(%d bytes at %d) = %d, %v", name, c.n, c.off, n, err)
			}
		}
		p := make([]byte, 10)
		if n, err := tt.ReadAt(p, 40); n != 8 || err != io.EOF || !bytes.Equal(p[:8], data[40:]) {
			t.Errorf("%s: read past the end = %d, %v", name, n, err)
		}
		if n, err := tt.ReadAt(p, 48); n != 0 || err != io.EOF {
			t.Errorf("%s: read at the end = %d, %v", name, n, err)
		}
		_, err = tt.ReadAt(p, -1)
		wantKind(t, err, ErrInvalidArgument)
	}
	f := mustOpen(t, path, WithReadAt())
	tt, _ := f.Tensor("a")
	f.Close()
	_, err := tt.ReadAt(make([]byte, 4), 0)
	wantKind(t, err, ErrClosed)
	// A file truncated while open: ErrIO, not a short read without an error.
	f = mustOpen(t, path, WithReadAt())
	defer f.Close()
	if err := os.Truncate(path, 20); err != nil {
		t.Fatal(err)
	}
	tt, _ = f.Tensor("a")
	if _, err := tt.ReadAt(make([]byte, 8), 40); !errors.Is(err, ErrIO) {
		t.Errorf("truncated: %v", err)
	}
}
