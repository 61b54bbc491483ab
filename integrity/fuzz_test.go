package integrity_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/integrity"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/torch"
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

// FuzzVerifyTorch: any bytes as the PyTorch shard of an index are checked
// without a panic or an error other than a report; a clean report means
// the shard opens and holds exactly the tensor the index names, whose
// storage record matches its CRC-32.
func FuzzVerifyTorch(f *testing.F) {
	good, err := ckpttest.EncodeTorch([]ckpttest.TorchTensor{{Name: "w", Storage: "0", Shape: []int64{4}, Stride: []int64{1}}},
		map[string]ckpttest.TorchStorage{"0": {DType: dtype.U8, Data: []byte("wxyz")}}, false)
	if err == nil {
		f.Add(good)
	}
	f.Add([]byte("PK\x05\x06" + string(make([]byte, 18))))
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "pytorch_model-00001-of-00001.bin"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		idx := `{"metadata":{"total_size":4},"weight_map":{"w":"pytorch_model-00001-of-00001.bin"}}`
		if err := os.WriteFile(filepath.Join(dir, "pytorch_model.bin.index.json"), []byte(idx), 0o644); err != nil {
			t.Fatal(err)
		}
		rep, err := integrity.Verify(context.Background(), dir)
		if err != nil {
			t.Fatalf("Verify: %v", err)
		}
		if rep.OK() {
			c, err := torch.Open(filepath.Join(dir, "pytorch_model.bin.index.json"))
			if err != nil {
				t.Fatalf("clean report for a set that does not open: %v", err)
			}
			defer c.Close()
			if c.Len() != 1 || rep.ArchiveTensors != 1 {
				t.Fatalf("clean report: %d tensors, %d verified", c.Len(), rep.ArchiveTensors)
			}
		}
	})
}
