//go:build (linux && (amd64 || arm64)) || (linux && cgo)

package cuda

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/executor"
	"github.com/ckpt-go/ckpt/executor/cpu"
	"github.com/ckpt-go/ckpt/internal/s3test"
	"github.com/ckpt-go/ckpt/remote"
	"github.com/ckpt-go/ckpt/safetensors"
)

// The one load path verifies, seen from outside: a checkpoint whose files
// name checksums, with one bit flipped in the data of one stored tensor,
// is refused with ckpt.ErrChecksum naming the file and the tensor by every
// consumer of one opened model — Load (nil Weights), the CPU executor's
// UploadModel and the CUDA executor's UploadModel on the driver emulator
// (no model, no device or pinned allocation left) — for every stored
// tensor (BF16 projections, an F32 norm, a block-FP8 weight and its
// scales), converted, dequantized, kept quantized and as stored, whole and
// in rank parts (VerifyAlways reads the rest), from a path, an fs.FS and
// S3. The undamaged checkpoint loads and uploads the same bytes everywhere
// (TestOneLoadPath's check), and VerifyNever loads the damaged one.
func TestOneLoadPathRefusesDamage(t *testing.T) {
	if testing.Short() {
		t.Skip("the emulator runs every kernel thread as a fiber: seconds")
	}
	clean := writeOnePathModel(t)
	checksummed(t, clean)
	q := ckpt.MustParsePattern("**.q_proj.weight")
	o := ckpt.MustParsePattern("**.o_proj.weight")
	fc := ckpt.MustParsePattern("fc.weight")
	f32 := ckpt.To(dtype.F32)
	rows := []ckpt.Split{{Pattern: q, Dim: 0}, {Pattern: o, Dim: 1}, {Pattern: fc, Dim: 0}}
	cols := []ckpt.Split{{Pattern: q, Dim: 1}, {Pattern: o, Dim: 1}, {Pattern: fc, Dim: 1}}
	always := ckpt.WithVerify(ckpt.VerifyAlways)
	cases := []struct {
		name    string
		opts    []ckpt.Option
		sources bool // also through an fs.FS and S3
	}{
		{"stored", nil, true},
		{"f32", []ckpt.Option{ckpt.WithDType(f32)}, true},
		{"f32-split-rank1", []ckpt.Option{ckpt.WithDType(f32), ckpt.WithRank(1, 2, rows...), always}, true},
		{"quantized-split-columns-rank0", []ckpt.Option{ckpt.WithDType(ckpt.Quantized), ckpt.WithRank(0, 2, cols...), always}, false},
		// fc's 192 rows in 5 parts start inside its 32-row scale blocks:
		// the CUDA upload takes the loader's bytes (Item.Produce).
		{"bf16-split5-rank1", []ckpt.Option{ckpt.WithDType(ckpt.To(dtype.BF16)), ckpt.WithRank(1, 5, rows...), always}, false},
	}
	stored := []string{"layers.0.q_proj.weight", "layers.0.o_proj.weight", "layers.0.norm.weight", "fc.weight", "fc.weight_scale_inv"}

	gpu := onEmu(emuDevices[2], 1<<30)(t)
	host, err := cpu.New()
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	s3Once.Do(func() { s3Srv, s3Reason, s3Err = s3test.Start() })
	if s3Err != nil {
		t.Fatal(s3Err)
	}
	var bucket string
	if s3Srv != nil {
		remote.SetS3Client(s3Srv.Client())
		t.Cleanup(func() { remote.SetS3Client(nil) })
		bucket = s3Srv.NewBucket(t)
	} else {
		t.Logf("S3 source not covered: %s", s3Reason)
	}

	// The damaged copies, one per stored tensor, and where the bit is.
	rng := rand.New(rand.NewPCG(11, 12))
	type damaged struct {
		dir, file, tensor string
		at                int64
	}
	var copies []damaged
	for i, name := range stored {
		dir := filepath.Join(t.TempDir(), "onepath")
		if err := os.CopyFS(dir, os.DirFS(clean)); err != nil {
			t.Fatal(err)
		}
		file, at := flipStored(t, dir, name, rng)
		copies = append(copies, damaged{dir, file, name, at})
		if s3Srv != nil {
			s3Srv.PutDir(t, bucket, fmt.Sprintf("damaged%d", i), dir)
		}
	}
	if s3Srv != nil {
		s3Srv.PutDir(t, bucket, "clean", clean)
	}

	// VerifyAlways refuses a checkpoint without checksums everywhere.
	t.Run("always-without-checksums", func(t *testing.T) {
		m, err := ckpt.Open(writeOnePathModel(t), ckpt.WithVerify(ckpt.VerifyAlways))
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		if ws, err := m.Load(ctx); ws != nil || !errors.Is(err, ckpt.ErrChecksum) {
			t.Errorf("Load: %v", err)
		}
		for _, e := range []executor.Executor{host, gpu} {
			dev, pinned := emuAllocs()
			um, err := e.UploadModel(ctx, m, executor.WithStaging(5<<20), executor.WithReaders(2))
			if um != nil || !errors.Is(err, ckpt.ErrChecksum) || !errors.Is(err, executor.ErrRead) || !strings.Contains(err.Error(), "names no checksums") {
				t.Errorf("%s UploadModel: %v", e.Info().Kind, err)
			}
			if dv, h := emuAllocs(); dv != dev || h != pinned {
				t.Errorf("%s UploadModel: %d device and %d pinned allocations, were %d and %d: refused after allocating", e.Info().Kind, dv, h, dev, pinned)
			}
		}
	})

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			type source struct {
				name string
				open func(i int, extra ...ckpt.Option) (*ckpt.Model, error) // i -1: the clean checkpoint
			}
			dirOf := func(i int) string {
				if i < 0 {
					return clean
				}
				return copies[i].dir
			}
			opts := func(extra []ckpt.Option) []ckpt.Option { return append(slices.Clone(c.opts), extra...) }
			sources := []source{{"path", func(i int, extra ...ckpt.Option) (*ckpt.Model, error) { return ckpt.Open(dirOf(i), opts(extra)...) }}}
			if c.sources {
				sources = append(sources, source{"fs", func(i int, extra ...ckpt.Option) (*ckpt.Model, error) {
					return ckpt.Open(".", append(opts(extra), ckpt.WithFS(os.DirFS(dirOf(i))))...)
				}})
				if s3Srv != nil {
					sources = append(sources, source{"s3", func(i int, extra ...ckpt.Option) (*ckpt.Model, error) {
						loc := "s3://" + bucket + "/clean"
						if i >= 0 {
							loc = fmt.Sprintf("s3://%s/damaged%d", bucket, i)
						}
						return ckpt.Open(loc, opts(extra)...)
					}})
				}
			}
			for _, src := range sources {
				t.Run(src.name, func(t *testing.T) {
					m, err := src.open(-1)
					if err != nil {
						t.Fatal(err)
					}
					p, err := m.Plan()
					if err != nil {
						t.Fatal(err)
					}
					if p.Verify.Tensors != len(p.Components[0].Tensors) || p.Verify.Unverified+p.Verify.Refused != 0 {
						t.Errorf("plan: %s", p.Verify.String())
					}
					ws, err := m.Load(ctx)
					if err != nil {
						t.Fatal(err)
					}
					ws.Close()
					for _, e := range []executor.Executor{host, gpu} {
						um, err := e.UploadModel(ctx, m, executor.WithStaging(5<<20), executor.WithReaders(2))
						if err != nil {
							t.Fatalf("%s: the undamaged checkpoint: %v", e.Info().Kind, err)
						}
						um.Close()
					}
					m.Close()
					for i, d := range copies {
						m, err := src.open(i)
						if err != nil {
							t.Fatal(err)
						}
						what := func(consumer string) string { return fmt.Sprintf("%s damaged: %s", d.tensor, consumer) }
						ws, err := m.Load(ctx)
						if ws != nil {
							ws.Close()
							t.Errorf("%s: weights returned", what("Load"))
						}
						checkDamage(t, what("Load"), err, d.file, d.tensor)
						for _, e := range []executor.Executor{host, gpu} {
							dev, pinned := emuAllocs()
							um, err := e.UploadModel(ctx, m, executor.WithStaging(5<<20), executor.WithReaders(2))
							if um != nil {
								um.Close()
								t.Errorf("%s: a model returned", what(e.Info().Kind+" UploadModel"))
							}
							checkDamage(t, what(e.Info().Kind+" UploadModel"), err, d.file, d.tensor)
							if !errors.Is(err, executor.ErrRead) {
								t.Errorf("%s: %v, want executor.ErrRead", what(e.Info().Kind+" UploadModel"), err)
							}
							if dv, h := emuAllocs(); dv != dev || h > pinned {
								t.Errorf("%s: %d device and %d pinned allocations left, were %d and %d", what(e.Info().Kind+" UploadModel"), dv, h, dev, pinned)
							}
						}
						m.Close()
						// VerifyNever loads the damaged bytes.
						m, err = src.open(i, ckpt.WithVerify(ckpt.VerifyNever))
						if err != nil {
							t.Fatal(err)
						}
						if ws, err := m.Load(ctx); err != nil {
							t.Errorf("%s: %v", what("Load with VerifyNever"), err)
						} else {
							ws.Close()
						}
						m.Close()
					}
				})
			}
		})
	}
}

// checkDamage checks that err is ErrChecksum naming the file and the
// tensor (a *safetensors.ChecksumError).
func checkDamage(t *testing.T, what string, err error, file, tensor string) {
	t.Helper()
	var ce *safetensors.ChecksumError
	if !errors.Is(err, ckpt.ErrChecksum) || !errors.As(err, &ce) {
		t.Errorf("%s: %v, want a checksum mismatch", what, err)
		return
	}
	if ce.Tensor != tensor || filepath.Base(ce.File) != filepath.Base(file) || !strings.Contains(err.Error(), tensor) {
		t.Errorf("%s: %v names %s of %s, the bit is in %s of %s", what, err, ce.Tensor, ce.File, tensor, file)
	}
}

// checksummed rewrites every safetensors file under dir with package
// safetensors' writer, which names a checksum for every tensor.
func checksummed(t *testing.T, dir string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".safetensors") {
			return err
		}
		f, err := safetensors.Open(path)
		if err != nil {
			return err
		}
		var ts []safetensors.TensorData
		for _, info := range f.Header().Tensors {
			st, err := f.Tensor(info.Name)
			if err != nil {
				return err
			}
			b := make([]byte, st.ByteLen())
			if err := st.ReadTo(b); err != nil {
				return err
			}
			ts = append(ts, safetensors.TensorData{Name: info.Name, DType: info.DType, Shape: info.Shape, Data: b})
		}
		meta := f.Metadata()
		f.Close()
		return safetensors.Save(context.Background(), path, ts, meta)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// flipStored flips one bit at a random byte of the stored tensor name of
// the files under dir and returns the file and the offset.
func flipStored(t *testing.T, dir, name string, rng *rand.Rand) (string, int64) {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		path := filepath.Join(dir, e.Name())
		if !strings.HasSuffix(path, ".safetensors") {
			continue
		}
		h, err := safetensors.ReadHeaderFile(path)
		if err != nil {
			t.Fatal(err)
		}
		info, ok := h.Lookup(name)
		if !ok {
			continue
		}
		at := h.DataOffset + info.Begin + rng.Int64N(info.End-info.Begin)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		b[at] ^= 1 << rng.IntN(8)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return path, at
	}
	t.Fatalf("no stored tensor %s under %s", name, dir)
	return "", 0
}
