package ckpt_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/convert"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/testutil"
)

// benchTorchPair writes, once per process, a PyTorch file and a
// safetensors file holding the same 64 MiB of F32 tensors: eight
// contiguous [1024, 2048] weights, or (transposed) one [256, 65536] view
// with strides [1, 256], a transposed weight whose every piece of a few
// rows spans its whole storage. It returns the two paths and the bytes.
func benchTorchPair(b *testing.B, transposed bool) (pt, st string, n int64) {
	b.Helper()
	name := "contiguous"
	if transposed {
		name = "transposed"
	}
	dir := filepath.Join(os.TempDir(), "ckpt-bench-torch-"+name)
	pt, st = filepath.Join(dir, "pt", "model.pt"), filepath.Join(dir, "st", "model.safetensors")
	type view struct {
		name   string
		r, c   int64
		stored []byte // the storage: the view's elements in storage order
		data   []byte // the view's elements in row-major order
	}
	var views []view
	fill := func(k int, r, c int64) []byte {
		out := make([]byte, 4*r*c)
		for i := range r * c {
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(float32((i*7+int64(k))%8191-4095)*0.001))
		}
		return out
	}
	if transposed {
		const r, c = 256, 65536
		s := fill(0, c, r) // [c, r] row-major: the storage of its [r, c] transpose
		d := make([]byte, len(s))
		for i := range int64(r) {
			for j := range int64(c) {
				copy(d[4*(i*c+j):4*(i*c+j+1)], s[4*(j*r+i):])
			}
		}
		views = append(views, view{"w_t", r, c, s, d})
	} else {
		for k := range 8 {
			d := fill(k, 1024, 2048)
			views = append(views, view{fmt.Sprintf("layers.%d.weight", k), 1024, 2048, d, d})
		}
	}
	for _, v := range views {
		n += int64(len(v.data))
	}
	if _, err := os.Stat(st); err == nil {
		return pt, st, n
	}
	var tvs []ckpttest.TorchTensor
	storages := map[string]ckpttest.TorchStorage{}
	var sts []ckpttest.Tensor
	for i, v := range views {
		stride := []int64{v.c, 1}
		if transposed {
			stride = []int64{1, v.r}
		}
		key := fmt.Sprint(i)
		tvs = append(tvs, ckpttest.TorchTensor{Name: v.name, Storage: key, Shape: []int64{v.r, v.c}, Stride: stride})
		storages[key] = ckpttest.TorchStorage{DType: dtype.F32, Data: v.stored}
		sts = append(sts, ckpttest.Tensor{Name: v.name, DType: dtype.F32, Shape: []int64{v.r, v.c}, Data: v.data})
	}
	arc, err := ckpttest.EncodeTorch(tvs, storages, false)
	if err == nil {
		err = os.MkdirAll(filepath.Dir(pt), 0o755)
	}
	if err == nil {
		err = os.WriteFile(pt, arc, 0o644)
	}
	if err == nil {
		err = ckpttest.WriteFile(st, sts, nil)
	}
	if err != nil {
		os.RemoveAll(dir)
		b.Fatal(err)
	}
	return pt, st, n
}

// BenchmarkTorchLoad loads a PyTorch file and a safetensors file holding
// the same tensors, as stored and converted to BF16, taking turns in each
// iteration: "pt/st" is the PyTorch load's time over the safetensors
// load's in the same run. The safetensors load reads with pread into owned
// memory, as a PyTorch load does (as stored, its default would be
// zero-copy views of the mapping: no work to compare); neither verifies.
// MB/s are of the tensors' bytes, for the PyTorch load.
func BenchmarkTorchLoad(b *testing.B) {
	for _, transposed := range []bool{false, true} {
		for _, to := range []dtype.DType{dtype.F32, dtype.BF16} {
			name := "contiguous"
			if transposed {
				name = "transposed"
			}
			name += "/" + map[dtype.DType]string{dtype.F32: "stored", dtype.BF16: "bf16"}[to]
			b.Run(name, func(b *testing.B) {
				pt, st, n := benchTorchPair(b, transposed)
				var ms [2]*ckpt.Model
				for i, path := range []string{pt, st} {
					m, err := ckpt.Open(path, ckpt.WithDType(ckpt.To(to)), ckpt.WithBudget(-1), ckpt.WithVerify(ckpt.VerifyNever), ckpt.WithReadStrategy("pread"))
					if err != nil {
						b.Fatal(err)
					}
					defer m.Close()
					ms[i] = m
				}
				loadTurns(b, ms, n, "pt/st")
			})
		}
	}
}

// loadTurns loads ms[0] and ms[1] into arenas of their own, taking turns
// in each iteration (testutil.Turns: after a warm load of each, the page
// cache and the arenas grown), and reports ms[0]'s ns/op and MB/s (of n
// bytes) and its time over ms[1]'s as ratio.
func loadTurns(b *testing.B, ms [2]*ckpt.Model, n int64, ratio string) {
	ctx := context.Background()
	var arenas [2]*ckpt.Arena
	for i := range arenas {
		arenas[i] = ckpt.NewArena()
		defer arenas[i].Free()
	}
	took := testutil.Turns(b, n, 2, nil, func(i, _ int) {
		w, err := ms[i].Load(ctx, ckpt.IntoArena(arenas[i]))
		if err != nil {
			b.Fatal(err)
		}
		w.Close()
	})
	testutil.Ratio(b, took, 0, 1, ratio)
}

// BenchmarkTorchLoadVerified loads the PyTorch file of BenchmarkTorchLoad
// verified and not (VerifyNever), taking turns in each iteration:
// "verified/unverified" is the verified load's time over the unverified
// one's in the same run. The contiguous weights are their storage
// records' bytes, verified as they are read (VerifyPresent: the CRC-32 of
// the bytes read, combined across pieces); the transposed view is
// verified with VerifyAlways, which reads its storage record once more
// only to verify it. Both read with pread into a reused arena.
func BenchmarkTorchLoadVerified(b *testing.B) {
	for _, transposed := range []bool{false, true} {
		for _, to := range []dtype.DType{dtype.F32, dtype.BF16} {
			name, v := "contiguous", ckpt.VerifyPresent
			if transposed {
				name, v = "transposed", ckpt.VerifyAlways
			}
			name += "/" + map[dtype.DType]string{dtype.F32: "stored", dtype.BF16: "bf16"}[to]
			b.Run(name, func(b *testing.B) {
				pt, _, n := benchTorchPair(b, transposed)
				var ms [2]*ckpt.Model
				for i, v := range []ckpt.Verify{v, ckpt.VerifyNever} {
					m, err := ckpt.Open(pt, ckpt.WithDType(ckpt.To(to)), ckpt.WithBudget(-1), ckpt.WithVerify(v))
					if err != nil {
						b.Fatal(err)
					}
					defer m.Close()
					ms[i] = m
				}
				loadTurns(b, ms, n, "verified/unverified")
			})
		}
	}
}

// BenchmarkTorchConvert runs convert.Run to BF16 of a PyTorch file and of
// the safetensors file holding the same tensors, taking turns in each
// iteration ("pt/st": the PyTorch source's time over the safetensors
// source's in the same run); the output is written again each time
// (Overwrite), fsync included.
func BenchmarkTorchConvert(b *testing.B) {
	for _, transposed := range []bool{false, true} {
		name := "contiguous"
		if transposed {
			name = "transposed"
		}
		b.Run(name, func(b *testing.B) {
			pt, st, n := benchTorchPair(b, transposed)
			ctx := context.Background()
			out := b.TempDir()
			opts := convert.Options{Policy: ckpt.Policy{Default: ckpt.To(dtype.BF16), Verify: ckpt.VerifyNever}, Overwrite: true}
			srcs := []string{pt, st}
			dsts := []string{filepath.Join(out, "pt.safetensors"), filepath.Join(out, "st.safetensors")}
			took := testutil.Turns(b, n, 2, nil, func(i, _ int) {
				if _, err := convert.Run(ctx, srcs[i], dsts[i], opts); err != nil {
					b.Fatal(err)
				}
			})
			testutil.Ratio(b, took, 0, 1, "pt/st")
		})
	}
}

// BenchmarkTorchConvertVerified runs convert.Run to BF16 of the PyTorch
// file of BenchmarkTorchConvert verified and not (VerifyNever), taking
// turns in each iteration ("verified/unverified": the verified run's
// time over the other's in the same run): the contiguous weights with
// VerifyPresent, the transposed view with VerifyAlways (its record read
// once more, by the Part's first ReadAt).
func BenchmarkTorchConvertVerified(b *testing.B) {
	for _, transposed := range []bool{false, true} {
		name, v := "contiguous", ckpt.VerifyPresent
		if transposed {
			name, v = "transposed", ckpt.VerifyAlways
		}
		b.Run(name, func(b *testing.B) {
			pt, _, n := benchTorchPair(b, transposed)
			ctx := context.Background()
			out := b.TempDir()
			opts := []convert.Options{
				{Policy: ckpt.Policy{Default: ckpt.To(dtype.BF16), Verify: v}, Overwrite: true},
				{Policy: ckpt.Policy{Default: ckpt.To(dtype.BF16), Verify: ckpt.VerifyNever}, Overwrite: true},
			}
			dsts := []string{filepath.Join(out, "v.safetensors"), filepath.Join(out, "u.safetensors")}
			took := testutil.Turns(b, n, 2, nil, func(i, _ int) {
				if _, err := convert.Run(ctx, pt, dsts[i], opts[i]); err != nil {
					b.Fatal(err)
				}
			})
			testutil.Ratio(b, took, 0, 1, "verified/unverified")
		})
	}
}

// BenchmarkPreadLoadVerified is BenchmarkTorchLoadVerified's contiguous
// BF16 case for the safetensors file of the same tensors read with pread
// (the strategy of network file systems): its CRC-32C, verified a step at
// a time with the conversion, against the same load unverified.
func BenchmarkPreadLoadVerified(b *testing.B) {
	_, st, n := benchTorchPair(b, false)
	var ms [2]*ckpt.Model
	for i, v := range []ckpt.Verify{ckpt.VerifyPresent, ckpt.VerifyNever} {
		m, err := ckpt.Open(st, ckpt.WithDType(ckpt.To(dtype.BF16)), ckpt.WithBudget(-1), ckpt.WithVerify(v), ckpt.WithReadStrategy("pread"))
		if err != nil {
			b.Fatal(err)
		}
		defer m.Close()
		ms[i] = m
	}
	loadTurns(b, ms, n, "verified/unverified")
}
