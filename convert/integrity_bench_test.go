package convert_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/convert"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/safetensors"
)

// BenchmarkRunVerify converts a 256 MiB F32 checkpoint with checksums
// (16 linear weights of 4 MiB elements) as stored and to BF16, verifying
// the source as it is read (the default, VerifyPresent) and not
// (VerifyNever, the baseline of each pair). bytes/s is source data read.
// The source is in the page cache after the first round.
func BenchmarkRunVerify(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	var ts []safetensors.TensorData
	var total int64
	for i := range 16 {
		x := make([]float32, 1<<20)
		for j := range x {
			x[j] = float32(rng.NormFloat64())
		}
		data := make([]byte, 4*len(x))
		dtype.EncodeFloat32(data, dtype.F32, x, dtype.Options{})
		ts = append(ts, safetensors.TensorData{Name: fmt.Sprintf("model.layers.%d.mlp.up_proj.weight", i), DType: dtype.F32, Shape: []int64{1024, 1024}, Data: data})
		total += int64(len(data))
	}
	src := b.TempDir()
	if err := safetensors.Save(context.Background(), filepath.Join(src, "model.safetensors"), ts, nil); err != nil {
		b.Fatal(err)
	}
	ts = nil
	bf16, err := ckpt.ParseTarget("BF16")
	if err != nil {
		b.Fatal(err)
	}
	for _, to := range []struct {
		name   string
		target ckpt.Target
	}{{"copy", ckpt.Target{}}, {"bf16", bf16}} {
		for _, v := range []ckpt.Verify{ckpt.VerifyNever, ckpt.VerifyPresent} {
			b.Run(to.name+"/"+v.String(), func(b *testing.B) {
				dst := filepath.Join(b.TempDir(), "out")
				b.SetBytes(total)
				for range b.N {
					o := convert.Options{Policy: ckpt.Policy{Default: to.target, Verify: v}, Overwrite: true}
					if _, err := convert.Run(context.Background(), src, dst, o); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				os.RemoveAll(dst)
			})
		}
	}
}
