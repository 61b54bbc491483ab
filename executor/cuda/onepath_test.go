//go:build (linux && (amd64 || arm64)) || (linux && cgo)

package cuda

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/convert"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/executor"
	"github.com/ckpt-go/ckpt/executor/cpu"
	"github.com/ckpt-go/ckpt/internal/s3test"
	"github.com/ckpt-go/ckpt/remote"
	"github.com/ckpt-go/ckpt/shard"
)

// The one load path, proven from outside: for one opened model, Load, the
// CPU executor's UploadModel, the CUDA executor's UploadModel (on the
// driver emulator) and convert.Run followed by a reload all give the same
// tensors — dtype, shape, bytes, and the scales of weights kept quantized —
// across rank splits (dimension 0 and 1, with and without conversion, a
// block-FP8 weight split on its blocks and inside one), tied names (of a
// PyTorch checkpoint, and recorded in a safetensors file's metadata),
// sources (a path,
// an fs.FS, S3 on the test server), scaled layouts (dequantized, kept
// quantized) and a pipeline with a variant and per-component dtypes.

// onePathCase is one model opened one way.
type onePathCase struct {
	name    string
	dir     string // the model's folder
	variant string
	opts    []ckpt.Option // the policy and rank options
	conv    convert.Options
	rank    func() ckpt.Option // the rank option again, for the reload of convert's output; nil: none
}

func TestOneLoadPath(t *testing.T) {
	if testing.Short() {
		t.Skip("the emulator runs every kernel thread as a fiber: seconds")
	}
	model := writeOnePathModel(t)
	pipe := writeOnePathPipeline(t)
	pt := writeOnePathTorch(t, model)
	// The PyTorch checkpoint converted: safetensors, its tie in the
	// metadata.
	tied := filepath.Join(t.TempDir(), "onepath-tied")
	if _, err := convert.Run(ctx, pt, tied, convert.Options{}); err != nil {
		t.Fatal(err)
	}
	if tm, err := ckpt.Open(tied); err != nil || !slices.Contains(tm.Names(), "lm_head.weight") {
		t.Fatalf("the converted PyTorch checkpoint lost its tie: %v", err)
	} else {
		tm.Close()
	}
	q := ckpt.MustParsePattern("**.q_proj.weight")
	o := ckpt.MustParsePattern("**.o_proj.weight")
	fc := ckpt.MustParsePattern("fc.weight")
	norm := ckpt.MustParsePattern("**.norm.weight")
	f32, bf16 := ckpt.To(dtype.F32), ckpt.To(dtype.BF16)
	var cases []onePathCase
	add := func(name, dir, variant string, conv convert.Options, world int, splits []ckpt.Split, opts ...ckpt.Option) {
		if world == 0 {
			cases = append(cases, onePathCase{name: name, dir: dir, variant: variant, opts: opts, conv: conv})
			return
		}
		for r := range world {
			rk := func() ckpt.Option { return ckpt.WithRank(r, world, splits...) }
			cases = append(cases, onePathCase{name: fmt.Sprintf("%s/rank%dof%d", name, r, world), dir: dir, variant: variant,
				opts: append(slices.Clone(opts), rk()), conv: conv, rank: rk})
		}
	}
	rows := []ckpt.Split{{Pattern: q, Dim: 0}, {Pattern: o, Dim: 1}, {Pattern: fc, Dim: 0}}
	cols := []ckpt.Split{{Pattern: q, Dim: 1}, {Pattern: o, Dim: 1}, {Pattern: fc, Dim: 1}}
	add("stored", model, "", convert.Options{}, 0, nil)
	add("f32", model, "", convert.Options{Policy: ckpt.Policy{Default: f32}}, 0, nil, ckpt.WithDType(f32))
	add("stored-split", model, "", convert.Options{}, 2, rows)
	add("f32-split", model, "", convert.Options{Policy: ckpt.Policy{Default: f32}}, 2, rows, ckpt.WithDType(f32))
	add("f32-split-columns", model, "", convert.Options{Policy: ckpt.Policy{Default: f32}}, 2, cols, ckpt.WithDType(f32))
	add("quantized-split-columns", model, "", convert.Options{}, 2, cols, ckpt.WithDType(ckpt.Quantized))
	// Five ranks: uneven parts, and fc's 192 rows split inside its 32-row
	// scale blocks (dequantized on the host by the CUDA upload).
	normF32 := ckpt.Rule{Pattern: norm, Target: f32}
	add("bf16-norm-f32-split5", model, "", convert.Options{Policy: ckpt.Policy{Default: bf16, Rules: []ckpt.Rule{normF32}}}, 5, rows,
		ckpt.WithDType(bf16), ckpt.WithRules(normF32))
	// The same model as a PyTorch checkpoint (o_proj stored transposed).
	add("torch-stored", pt, "", convert.Options{}, 0, nil)
	add("torch-f32-split", pt, "", convert.Options{Policy: ckpt.Policy{Default: f32}}, 2, rows, ckpt.WithDType(f32))
	add("torch-quantized-split-columns", pt, "", convert.Options{}, 2, cols, ckpt.WithDType(ckpt.Quantized))
	add("tied-stored", tied, "", convert.Options{}, 0, nil)
	add("tied-f32-split", tied, "", convert.Options{Policy: ckpt.Policy{Default: f32}}, 2, rows, ckpt.WithDType(f32))
	add("pipeline", pipe, "fp16", convert.Options{SourceVariant: "fp16", Policy: ckpt.Policy{Components: map[string]ckpt.Target{"text_encoder": f32}}}, 2,
		[]ckpt.Split{{Component: "unet", Pattern: q, Dim: 0}},
		ckpt.WithVariant("fp16"), ckpt.WithComponentDType("text_encoder", f32))

	gpu := onEmu(emuDevices[2], 1<<30)(t)
	host, err := cpu.New()
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()

	var s3 *s3test.Server
	s3Once.Do(func() { s3Srv, s3Reason, s3Err = s3test.Start() })
	if s3Err != nil {
		t.Fatal(s3Err)
	}
	var bucket string
	if s3Srv != nil {
		s3 = s3Srv
		remote.SetS3Client(s3.Client())
		t.Cleanup(func() { remote.SetS3Client(nil) })
		bucket = s3.NewBucket(t)
		s3.PutDir(t, bucket, "model", model)
		s3.PutDir(t, bucket, "pipe", pipe)
		s3.PutDir(t, bucket, "pt", pt)
		s3.PutDir(t, bucket, "tied", tied)
	} else {
		t.Logf("S3 source not covered: %s", s3Reason)
	}
	location := func(dir string) string {
		return "s3://" + bucket + "/" + map[string]string{model: "model", pipe: "pipe", pt: "pt", tied: "tied"}[dir]
	}

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sources := []struct {
				name string
				path string
				opts []ckpt.Option
			}{
				{"path", c.dir, nil},
				{"fs", ".", []ckpt.Option{ckpt.WithFS(os.DirFS(c.dir))}},
			}
			if s3 != nil {
				sources = append(sources, struct {
					name string
					path string
					opts []ckpt.Option
				}{"s3", location(c.dir), nil})
			}
			for _, src := range sources {
				t.Run(src.name, func(t *testing.T) {
					m, err := ckpt.Open(src.path, append(slices.Clone(src.opts), c.opts...)...)
					if err != nil {
						t.Fatal(err)
					}
					defer m.Close()
					ws, err := m.Load(ctx)
					if err != nil {
						t.Fatal(err)
					}
					defer ws.Close()
					want := map[string]onePathTensor{}
					for key, tt := range ws.All() {
						want[key] = fromTensor(tt)
					}
					if len(want) == 0 {
						t.Fatal("nothing loaded")
					}
					for _, e := range []executor.Executor{host, gpu} {
						um, err := e.UploadModel(ctx, m, executor.WithStaging(5<<20), executor.WithReaders(2))
						if err != nil {
							t.Fatalf("%s: %v", e.Info().Kind, err)
						}
						for key, w := range want {
							got, err := fromWeight(e, um, key)
							if err != nil {
								t.Fatalf("%s: %s: %v", e.Info().Kind, key, err)
							}
							if d := got.diff(w); d != "" {
								t.Errorf("%s's UploadModel: %s: %s", e.Info().Kind, key, d)
							}
						}
						if um.Len() != len(want) {
							t.Errorf("%s's UploadModel: %d tensors, the loader %d", e.Info().Kind, um.Len(), len(want))
						}
						um.Close()
					}
					if src.name == "fs" {
						return // convert.Run takes a path or a location
					}
					out := filepath.Join(t.TempDir(), "out")
					if _, err := convert.Run(ctx, src.path, out, c.conv); err != nil {
						t.Fatalf("convert.Run: %v", err)
					}
					ropts := []ckpt.Option{ckpt.WithVariant(c.variant)}
					if c.rank != nil {
						ropts = append(ropts, c.rank())
					}
					rm, err := ckpt.Open(out, ropts...)
					if err != nil {
						t.Fatalf("reopening convert's output: %v", err)
					}
					defer rm.Close()
					rws, err := rm.Load(ctx)
					if err != nil {
						t.Fatal(err)
					}
					defer rws.Close()
					n := 0
					for key, tt := range rws.All() {
						n++
						w, ok := want[key]
						if !ok {
							t.Errorf("convert wrote %s, which the loader does not load", key)
							continue
						}
						if d := fromTensor(tt).diff(w); d != "" {
							t.Errorf("convert.Run and reload: %s: %s", key, d)
						}
					}
					if n != len(want) {
						t.Errorf("convert's output reloads as %d tensors, the loader loads %d", n, len(want))
					}
				})
			}
		})
	}
}

// onePathTensor is what every consumer must agree on.
type onePathTensor struct {
	dt     dtype.DType
	shape  []int64
	data   []byte
	scales []onePathTensor
}

func fromTensor(t *ckpt.Tensor) onePathTensor {
	out := onePathTensor{dt: t.DType, shape: slices.Clone(t.Shape), data: bytes.Clone(t.Bytes())}
	for _, s := range t.Scales {
		out.scales = append(out.scales, fromTensor(s))
	}
	return out
}

func fromWeight(e executor.Executor, um *executor.Model, key string) (onePathTensor, error) {
	w, err := um.Weight(key)
	if err != nil {
		return onePathTensor{}, err
	}
	get := func(b executor.Buffer) ([]byte, error) {
		out := make([]byte, b.Bytes())
		return out, e.Download(ctx, b, out)
	}
	out := onePathTensor{dt: w.DType(), shape: w.Shape()}
	if out.data, err = get(w.Data); err != nil {
		return out, err
	}
	for _, s := range w.Scales {
		b, err := get(s)
		if err != nil {
			return out, err
		}
		out.scales = append(out.scales, onePathTensor{dt: s.DType(), shape: s.Shape(), data: b})
	}
	return out, nil
}

// diff says how got differs from want ("" when it does not).
func (got onePathTensor) diff(want onePathTensor) string {
	switch {
	case got.dt != want.dt:
		return fmt.Sprintf("dtype %s, want %s", got.dt, want.dt)
	case !slices.Equal(got.shape, want.shape):
		return fmt.Sprintf("shape %v, want %v", got.shape, want.shape)
	case len(got.data) != len(want.data):
		return fmt.Sprintf("%d bytes, want %d", len(got.data), len(want.data))
	case !bytes.Equal(got.data, want.data):
		i := 0
		for got.data[i] == want.data[i] {
			i++
		}
		return fmt.Sprintf("bytes differ from byte %d on", i)
	case len(got.scales) != len(want.scales):
		return fmt.Sprintf("%d scales, want %d", len(got.scales), len(want.scales))
	}
	for i := range got.scales {
		if d := got.scales[i].diff(want.scales[i]); d != "" {
			return fmt.Sprintf("scale %d: %s", i, d)
		}
	}
	return ""
}

// writeOnePathModel writes a model in two shards: BF16 projections (96×64
// and 64×96), an F32 norm, and a DeepSeek block-FP8 weight fc.weight of
// 192×128 with 32×32 blocks.
func writeOnePathModel(t *testing.T) string {
	rng := rand.New(rand.NewPCG(5, 6))
	codes := make([]byte, 192*128)
	for i := range codes {
		if codes[i] = byte(rng.IntN(256)); codes[i]&0x7f == 0x7f {
			codes[i] ^= 1 // finite: NaN codes dequantize to NaNs whose payload is not compared
		}
	}
	sc := make([]float32, 6*4)
	for i := range sc {
		sc[i] = float32(math.Ldexp(1+rng.Float64(), -rng.IntN(8)))
	}
	return writeBlockFP8Model(t, "onepath", []ckpttest.Tensor{
		{Name: "layers.0.q_proj.weight", DType: dtype.BF16, Shape: []int64{96, 64}, Data: randBytes(rng, dtype.BF16, 96*64, 1)},
		{Name: "layers.0.o_proj.weight", DType: dtype.BF16, Shape: []int64{64, 96}, Data: randBytes(rng, dtype.BF16, 64*96, 1)},
		{Name: "layers.0.norm.weight", DType: dtype.F32, Shape: []int64{64}, Data: randBytes(rng, dtype.F32, 64, 1)},
	}, []int64{192, 128}, 32, codes, sc, 2)
}

// writeOnePathTorch writes the tensors of the one-path model in dir as a
// PyTorch checkpoint (pytorch_model.bin beside the same config.json), with
// layers.0.o_proj.weight stored transposed: a view the loader gathers,
// and lm_head.weight tied to it.
func writeOnePathTorch(t *testing.T, dir string) string {
	ck, err := shard.Open(filepath.Join(dir, "model.safetensors.index.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	var views []ckpttest.TorchTensor
	storages := map[string]ckpttest.TorchStorage{}
	for name, st := range ck.Tensors() {
		b, err := st.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		shape, es := st.Shape(), int64(st.DType().Bits()/8)
		v := ckpttest.TorchTensor{Name: name, Storage: fmt.Sprint(len(views)), Shape: shape, Stride: []int64{1}}
		if len(shape) == 2 {
			v.Stride = []int64{shape[1], 1}
		}
		if name == "layers.0.o_proj.weight" {
			r, c := shape[0], shape[1]
			tb := make([]byte, 0, len(b))
			for j := range c {
				for i := range r {
					tb = append(tb, b[(i*c+j)*es:(i*c+j+1)*es]...)
				}
			}
			b, v.Stride = tb, []int64{1, r}
		}
		views = append(views, v)
		storages[v.Storage] = ckpttest.TorchStorage{DType: st.DType(), Data: b}
	}
	// lm_head.weight is tied to the transposed o_proj (the same view of
	// its storage): convert writes it once, the tie in the metadata, and
	// the reload loads it again.
	for _, v := range views {
		if v.Name == "layers.0.o_proj.weight" {
			v.Name = "lm_head.weight"
			views = append(views, v)
			break
		}
	}
	out := filepath.Join(t.TempDir(), "onepath-pt")
	cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err == nil {
		err = ckpttest.WriteTorch(filepath.Join(out, "pytorch_model.bin"), views, storages)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(out, "config.json"), cfg, 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// writeOnePathPipeline writes a pipeline of two components, each with
// untagged F32 weights and an fp16 variant (which the cases load).
func writeOnePathPipeline(t *testing.T) string {
	rng := rand.New(rand.NewPCG(7, 8))
	root := filepath.Join(t.TempDir(), "pipe")
	comp := func(name string, shards int) ckpttest.Component {
		var ws []ckpttest.Weights
		for _, v := range []struct {
			variant string
			dt      dtype.DType
		}{{"", dtype.F32}, {"fp16", dtype.F16}} {
			ws = append(ws, ckpttest.Weights{Variant: v.variant, Shards: shards, Tensors: []ckpttest.Tensor{
				{Name: "blocks.0.q_proj.weight", DType: v.dt, Shape: []int64{48, 32}, Data: randBytes(rng, v.dt, 48*32, 1)},
				{Name: "blocks.0.norm.weight", DType: v.dt, Shape: []int64{32}, Data: randBytes(rng, v.dt, 32, 1)},
			}})
		}
		return ckpttest.Component{Name: name, Weights: ws, Files: map[string]string{"config.json": "{}"}}
	}
	if err := ckpttest.WritePipeline(root, ckpttest.Pipeline{Components: []ckpttest.Component{comp("text_encoder", 1), comp("unet", 2)}}); err != nil {
		t.Fatal(err)
	}
	return root
}
