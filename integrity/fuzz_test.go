package integrity_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/integrity"
	"github.com/ckpt-go/ckpt/safetensors"
)

// FuzzVerify: any bytes as a checkpoint's file, beside a valid index that
// names it, are checked without a panic or an error other than a report:
// a damaged file is problems, never a failure to check. A file that
// verifies clean has intact checksums, or none.
func FuzzVerify(f *testing.F) {
	good, err := safetensors.Serialize([]safetensors.TensorData{
		{Name: "w", DType: dtype.U8, Shape: []int64{4}, Data: []byte("wxyz")},
	}, map[string]string{"format": "pt"})
	if err == nil {
		f.Add(good)
	}
	sum, _ := safetensors.Serialize([]safetensors.TensorData{
		{Name: "w", DType: dtype.U8, Shape: []int64{4}, Data: []byte("abcd")},
	}, nil)
	f.Add(sum)
	f.Add([]byte("\x08\x00\x00\x00\x00\x00\x00\x00{}      "))
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "model-00001-of-00001.safetensors"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		idx := `{"metadata":{"total_size":4},"weight_map":{"w":"model-00001-of-00001.safetensors"}}`
		if err := os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), []byte(idx), 0o644); err != nil {
			t.Fatal(err)
		}
		rep, err := integrity.Verify(context.Background(), dir)
		if err != nil {
			t.Fatalf("Verify: %v", err)
		}
		if rep.OK() {
			h, err := safetensors.ReadHeaderFile(filepath.Join(dir, "model-00001-of-00001.safetensors"))
			if err != nil {
				t.Fatalf("clean report for a file whose header does not parse: %v", err)
			}
			if _, err := h.Checksums(); err != nil {
				t.Fatalf("clean report for damaged checksums: %v", err)
			}
		}
	})
}
