package cpu

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/executor"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/torch"
)

// A PyTorch checkpoint (the DeepSeek block-FP8 component of deepseekDir
// as pytorch_model.bin, with a transposed F32 view and a tied name)
// uploads exactly as the loader loads it: as stored (the weight kept
// quantized with its scale), converted (dequantized), and split by rank
// along dimension 0 and 1.
func TestUploadModelTorch(t *testing.T) {
	src := open(t, deepseekDir(t))
	ws, err := src.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var views []ckpttest.TorchTensor
	storages := map[string]ckpttest.TorchStorage{}
	for _, tt := range ws.All() {
		for _, x := range append([]*ckpt.Tensor{tt}, tt.Scales...) {
			stride := []int64{1}
			if len(x.Shape) == 2 {
				stride = []int64{x.Shape[1], 1}
			}
			key := x.Name
			views = append(views, ckpttest.TorchTensor{Name: x.Name, Storage: key, Shape: x.Shape, Stride: stride})
			storages[key] = ckpttest.TorchStorage{DType: x.DType, Data: bytes.Clone(x.Bytes())}
		}
	}
	ws.Close()
	t32 := make([]byte, 0, 6*4*4)
	for j := range 4 {
		for i := range 6 {
			t32 = append(t32, dtype.Float32Bytes([]float32{float32(i*4+j) / 8})...)
		}
	}
	storages["t"] = ckpttest.TorchStorage{DType: dtype.F32, Data: t32}
	views = append(views,
		ckpttest.TorchTensor{Name: "proj.weight", Storage: "t", Shape: []int64{6, 4}, Stride: []int64{1, 6}},
		ckpttest.TorchTensor{Name: "head.weight", Storage: "t", Shape: []int64{6, 4}, Stride: []int64{1, 6}})
	dir := filepath.Join(t.TempDir(), "pt")
	cfg, err := os.ReadFile(filepath.Join(deepseekDir(t), "config.json"))
	if err == nil {
		err = ckpttest.WriteTorch(filepath.Join(dir, "pytorch_model.bin"), views, storages)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
	e := newEx(t)
	fc, proj := ckpt.MustParsePattern("fc.*"), ckpt.MustParsePattern("*.weight")
	for _, opts := range [][]ckpt.Option{
		nil,
		{ckpt.WithDType(ckpt.To(dtype.F32))},
		{ckpt.WithRank(1, 2, ckpt.Split{Pattern: fc, Dim: 0}, ckpt.Split{Pattern: proj, Dim: 1}), ckpt.WithDType(ckpt.To(dtype.F32))},
		{ckpt.WithRank(0, 2, ckpt.Split{Pattern: proj, Dim: 0}), ckpt.WithDType(ckpt.To(dtype.BF16))},
	} {
		m := open(t, dir, opts...)
		w, err := m.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		um, err := e.UploadModel(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		if um.Len() != w.Len() || w.Len() != 4 {
			t.Errorf("%d weights uploaded, %d loaded, want 4", um.Len(), w.Len())
		}
		for key, tt := range w.All() {
			got, err := um.Weight(key)
			if err != nil {
				t.Fatal(err)
			}
			download := func(b executor.Buffer) []byte {
				out := make([]byte, b.Bytes())
				if err := e.Download(ctx, b, out); err != nil {
					t.Fatal(err)
				}
				return out
			}
			ok := got.DType() == tt.DType && slices.Equal(got.Shape(), tt.Shape) && bytes.Equal(download(got.Data), tt.Bytes()) && len(got.Scales) == len(tt.Scales)
			for i := range min(len(got.Scales), len(tt.Scales)) {
				ok = ok && got.Scales[i].DType() == tt.Scales[i].DType && bytes.Equal(download(got.Scales[i]), tt.Scales[i].Bytes())
			}
			if !ok {
				t.Errorf("%v: %s: uploaded %s %v, loaded %s %v", opts, key, got.DType(), got.Shape(), tt.DType, tt.Shape)
			}
		}
		um.Close()
		w.Close()
	}
	// A bit flipped in a storage record's data: the upload fails naming
	// the tensor and the record (the transposed view's only with
	// VerifyAlways, which reads its record), and hands out no model.
	for _, c := range []struct {
		name string
		opts []ckpt.Option
	}{
		{views[0].Name, nil},
		{views[0].Name, []ckpt.Option{ckpt.WithDType(ckpt.To(dtype.F32))}},
		{"proj.weight", []ckpt.Option{ckpt.WithVerify(ckpt.VerifyAlways)}},
	} {
		bad := filepath.Join(t.TempDir(), "pt")
		if err := os.CopyFS(bad, os.DirFS(dir)); err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(bad, "pytorch_model.bin")
		tc, err := torch.Open(file)
		if err != nil {
			t.Fatal(err)
		}
		tn, err := tc.Tensor(c.name)
		if err != nil {
			t.Fatal(err)
		}
		rec, off, _ := tn.Record()
		tc.Close()
		b, _ := os.ReadFile(file)
		b[off+1] ^= 0x10
		os.WriteFile(file, b, 0o644)
		um, err := e.UploadModel(ctx, open(t, bad, c.opts...))
		var ce *safetensors.ChecksumError
		if um != nil || !errors.Is(err, executor.ErrRead) || !errors.Is(err, ckpt.ErrChecksum) || !errors.As(err, &ce) || ce.Record != rec ||
			ce.Tensor != c.name && !(c.name == "proj.weight" && ce.Tensor == "head.weight") {
			t.Errorf("%s damaged, %v: model %v, %v; want ErrRead, ErrChecksum naming the tensor and %s", c.name, c.opts, um != nil, err, rec)
		}
		if c.name == "proj.weight" {
			if um, err := e.UploadModel(ctx, open(t, bad)); err != nil {
				t.Errorf("the transposed view damaged, VerifyPresent: %v", err)
			} else {
				um.Close()
			}
		}
	}
}
