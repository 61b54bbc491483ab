// Package mlp is a small multilayer perceptron run on any executor.Executor:
// the reference model of `ckpt run-mlp`, `ckpt devices` and examples/mlp,
// and a quick end-to-end check for a backend of one's own. It writes the
// checkpoint (BF16 weights and a DeepSeek block-FP8 variant), loads a
// variant with the loader, uploads it and runs the forward pass.
//
// The network is named like the transformer blocks of a diffusion model, so
// that it runs on the sample checkpoint of `ckpt demo` too:
//
//	for each block N:  h = h + fc2(GELU(fc1(RMSNorm(h)) + b1)) + b2
//	                   (blocks.N.mlp.fc1.weight [F, D], fc2.weight [D, F],
//	                   biases optional)
//	out = proj_out(RMSNorm(h) · norm_out.weight)
package mlp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/executor"
	"github.com/ckpt-go/ckpt/quant"
	"github.com/ckpt-go/ckpt/safetensors"
)

// Eps is the RMSNorm epsilon of every norm.
const Eps = 1e-6

// Shape is the size of a generated MLP.
type Shape struct {
	Blocks int // number of residual MLP blocks
	Hidden int // D
	FFN    int // F
	Out    int // outputs of proj_out
	// FP8Block is the block size of the FP8 variant's scales (128 as
	// DeepSeek-V3).
	FP8Block int64
}

// Build writes the MLP under dir: dir/bf16 (every tensor BF16) and dir/fp8
// (the Linear weights quantized to F8_E4M3 with F32 weight_scale_inv per
// FP8Block×FP8Block block, the DeepSeek layout declared by config.json's
// quantization_config; biases and norms stay BF16). The FP8 weights are
// quantized from the BF16 values, so the two variants differ by the FP8
// rounding only. It returns the two folders.
func Build(ctx context.Context, dir string, s Shape, seed uint64) (bf16Dir, fp8Dir string, err error) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	type def struct {
		name  string
		shape []int64
		std   float64
		bias  bool // a bias (or norm), not quantized
		mean  float64
	}
	var defs []def
	for b := range s.Blocks {
		p := fmt.Sprintf("blocks.%d.mlp.", b)
		defs = append(defs,
			def{name: p + "fc1.weight", shape: []int64{int64(s.FFN), int64(s.Hidden)}, std: 1 / math.Sqrt(float64(s.Hidden))},
			def{name: p + "fc1.bias", shape: []int64{int64(s.FFN)}, std: 0.02, bias: true},
			def{name: p + "fc2.weight", shape: []int64{int64(s.Hidden), int64(s.FFN)}, std: 0.5 / math.Sqrt(float64(s.FFN))},
			def{name: p + "fc2.bias", shape: []int64{int64(s.Hidden)}, std: 0.02, bias: true})
	}
	defs = append(defs,
		def{name: "norm_out.weight", shape: []int64{int64(s.Hidden)}, std: 0.1, mean: 1, bias: true},
		def{name: "proj_out.weight", shape: []int64{int64(s.Out), int64(s.Hidden)}, std: 1 / math.Sqrt(float64(s.Hidden))})

	var bf, f8 []safetensors.TensorData
	for _, d := range defs {
		n := int64(1)
		for _, x := range d.shape {
			n *= x
		}
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(d.mean + r.NormFloat64()*d.std)
		}
		b16 := make([]byte, 2*n)
		if _, err := dtype.EncodeFloat32(b16, dtype.BF16, v, dtype.Options{}); err != nil {
			return "", "", err
		}
		bf = append(bf, safetensors.TensorData{Name: d.name, DType: dtype.BF16, Shape: d.shape, Data: b16})
		if d.bias {
			f8 = append(f8, safetensors.TensorData{Name: d.name, DType: dtype.BF16, Shape: d.shape, Data: b16})
			continue
		}
		// Quantize the BF16 values (not the F32 ones): the variants differ by
		// the FP8 rounding only.
		if _, err := dtype.DecodeFloat32(v, b16, dtype.BF16); err != nil {
			return "", "", err
		}
		q, err := quant.NewFP8Quantizer(dtype.F8_E4M3, d.shape, quant.PerBlock, s.FP8Block)
		if err != nil {
			return "", "", err
		}
		if err := q.Observe(0, v); err != nil {
			return "", "", err
		}
		codes := make([]byte, n)
		if _, err := q.Quantize(codes, 0, v, dtype.Options{}); err != nil {
			return "", "", err
		}
		f8 = append(f8,
			safetensors.TensorData{Name: d.name, DType: dtype.F8_E4M3, Shape: d.shape, Data: codes},
			safetensors.TensorData{Name: d.name + "_scale_inv", DType: dtype.F32, Shape: q.ScaleShape(), Data: dtype.Float32Bytes(q.Scales())})
	}
	cfg := map[string]any{"model_type": "mlp", "hidden_size": s.Hidden, "intermediate_size": s.FFN, "num_layers": s.Blocks}
	bf16Dir, fp8Dir = filepath.Join(dir, "bf16"), filepath.Join(dir, "fp8")
	for _, v := range []struct {
		dir     string
		tensors []safetensors.TensorData
		quant   bool
	}{{bf16Dir, bf, false}, {fp8Dir, f8, true}} {
		if err := os.MkdirAll(v.dir, 0o755); err != nil {
			return "", "", err
		}
		c := maps.Clone(cfg)
		if v.quant {
			c["quantization_config"] = map[string]any{"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
				"weight_block_size": []int64{s.FP8Block, s.FP8Block}}
		}
		js, _ := json.MarshalIndent(c, "", "  ")
		if err := os.WriteFile(filepath.Join(v.dir, "config.json"), append(js, '\n'), 0o644); err != nil {
			return "", "", err
		}
		if err := safetensors.Save(ctx, filepath.Join(v.dir, "model.safetensors"), v.tensors, map[string]string{"format": "pt"}); err != nil {
			return "", "", err
		}
	}
	return bf16Dir, fp8Dir, nil
}

// Weights looks a weight up by name; it returns (nil, nil) for an optional
// weight the model does not have.
type Weights func(name string) (*executor.Weight, error)

// FromModel looks weights up in an uploaded model; a missing one is
// (nil, nil).
func FromModel(m *executor.Model) Weights {
	return func(name string) (*executor.Weight, error) {
		w, err := m.Weight(name)
		if errors.Is(err, executor.ErrNotFound) {
			return nil, nil
		}
		return w, err
	}
}

// Blocks returns the number of MLP blocks among names (blocks.N.mlp.fc1.weight).
func Blocks(names []string) int {
	n := 0
	for _, name := range names {
		rest, ok := strings.CutPrefix(name, "blocks.")
		if !ok {
			continue
		}
		num, tail, ok := strings.Cut(rest, ".")
		if i, err := strconv.Atoi(num); ok && err == nil && tail == "mlp.fc1.weight" && i+1 > n {
			n = i + 1
		}
	}
	return n
}

// Forward runs the MLP on x ([rows, D], an activation dtype) with
// activations in act and returns proj_out's output in F32. Every
// intermediate buffer is freed.
func Forward(ctx context.Context, ex executor.Executor, w Weights, blocks int, x executor.Buffer, act dtype.DType) (executor.Buffer, error) {
	var live []executor.Buffer
	defer func() {
		for _, b := range live {
			_ = ex.Free(b)
		}
	}()
	keep := func(b executor.Buffer, err error) (executor.Buffer, error) {
		if err == nil {
			live = append(live, b)
		}
		return b, err
	}
	get := func(name string, required bool) (*executor.Weight, error) {
		v, err := w(name)
		if err == nil && v == nil && required {
			err = fmt.Errorf("mlp: the model has no %s", name)
		}
		return v, err
	}
	data := func(v *executor.Weight) executor.Buffer {
		if v == nil {
			return nil
		}
		return v.Data
	}
	h := x
	for b := range blocks {
		p := fmt.Sprintf("blocks.%d.mlp.", b)
		fc1, err := get(p+"fc1.weight", true)
		if err != nil {
			return nil, err
		}
		fc2, err := get(p+"fc2.weight", true)
		if err != nil {
			return nil, err
		}
		b1, err := get(p+"fc1.bias", false)
		if err != nil {
			return nil, err
		}
		b2, err := get(p+"fc2.bias", false)
		if err != nil {
			return nil, err
		}
		n, err := keep(ex.RMSNorm(ctx, h, nil, Eps))
		if err != nil {
			return nil, err
		}
		a, err := keep(ex.Linear(ctx, n, fc1, data(b1), act))
		if err != nil {
			return nil, err
		}
		g, err := keep(ex.GELU(ctx, a))
		if err != nil {
			return nil, err
		}
		o, err := keep(ex.Linear(ctx, g, fc2, data(b2), act))
		if err != nil {
			return nil, err
		}
		if h, err = keep(ex.Add(ctx, h, o)); err != nil {
			return nil, err
		}
	}
	norm, err := get("norm_out.weight", true)
	if err != nil {
		return nil, err
	}
	proj, err := get("proj_out.weight", true)
	if err != nil {
		return nil, err
	}
	n, err := keep(ex.RMSNorm(ctx, h, norm.Data, Eps))
	if err != nil {
		return nil, err
	}
	return ex.Linear(ctx, n, proj, nil, dtype.F32)
}

// Result is one run of a variant.
type Result struct {
	Out      []float32 // proj_out's output, [rows, Out]
	Weights  int       // tensors uploaded
	Bytes    int64     // their bytes on the executor
	Quantize []string  // layouts of the weights kept quantized
}

// Run opens a variant folder with the loader (quantized weights stay
// narrow), uploads it to ex, runs Forward on x ([rows, D] F32 values,
// converted to act) and downloads the output.
func Run(ctx context.Context, ex executor.Executor, dir string, x []float32, rows int64, act dtype.DType, opts ...ckpt.Option) (*Result, error) {
	m, err := ckpt.Open(dir, opts...)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	model, err := ex.UploadModel(ctx, m)
	if err != nil {
		return nil, err
	}
	defer model.Close()
	res := &Result{Weights: model.Len(), Bytes: model.Bytes()}
	for _, n := range model.Names() {
		w, _ := model.Weight(n)
		if w.Quantized() && !slices.Contains(res.Quantize, w.Quant.Layout.String()) {
			res.Quantize = append(res.Quantize, w.Quant.Layout.String())
		}
	}
	d := int64(len(x)) / rows
	xb := make([]byte, int64(len(x))*int64(act.Bits()/8))
	if _, err := dtype.EncodeFloat32(xb, act, x, dtype.Options{}); err != nil {
		return nil, err
	}
	xbuf, err := ex.FromHost(ctx, xb, act, []int64{rows, d}, "input")
	if err != nil {
		return nil, err
	}
	defer ex.Free(xbuf)
	y, err := Forward(ctx, ex, FromModel(model), Blocks(model.Names()), xbuf, act)
	if err != nil {
		return nil, err
	}
	defer ex.Free(y)
	raw := make([]byte, y.Bytes())
	if err := ex.Download(ctx, y, raw); err != nil {
		return nil, err
	}
	res.Out = make([]float32, len(raw)/4)
	if _, err := dtype.DecodeFloat32(res.Out, raw, dtype.F32); err != nil {
		return nil, err
	}
	return res, nil
}

// Input returns deterministic normal inputs [rows, d].
func Input(rows, d int, seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, 7))
	x := make([]float32, rows*d)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

// MaxDiff returns max|a−b| and max|b| (the scale the difference is
// relative to).
func MaxDiff(a, b []float32) (diff, scale float64) {
	for i := range min(len(a), len(b)) {
		diff = max(diff, math.Abs(float64(a[i])-float64(b[i])))
		scale = max(scale, math.Abs(float64(b[i])))
	}
	return diff, scale
}
