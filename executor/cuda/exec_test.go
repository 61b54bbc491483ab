package cuda

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/executor"
)

var ctx = context.Background()

func fakeEx(t *testing.T, f *fakeDriver, opts ...executor.Option) *Executor {
	t.Helper()
	e, err := newExecutor(f, executor.Apply(opts...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// checkReleased checks that the fake holds nothing after Close.
func checkReleased(t *testing.T, f *fakeDriver) {
	t.Helper()
	if d, h := f.liveDevice(), f.liveHost(); d != 0 || h != 0 {
		t.Errorf("after Close: %d device and %d pinned allocations live", d, h)
	}
	if f.retained != 0 {
		t.Errorf("primary context retained %d times after Close", f.retained)
	}
	if len(f.tids) > 1 {
		t.Errorf("driver calls on %d OS threads", len(f.tids))
	}
}

func TestNewOnFake(t *testing.T) {
	f := newFake()
	e, err := newExecutor(f, executor.Options{})
	if err != nil {
		t.Fatal(err)
	}
	info := e.Info()
	if info.Kind != "cuda" || info.Name != "Fake GPU" || info.ComputeCapability != "8.9" || info.TotalBytes != 8<<30 ||
		info.FreeBytes != 6<<30 || info.Driver != "CUDA 12.4" {
		t.Errorf("info %+v", info)
	}
	if strings.Join(f.modules, ",") != "sm_75,sm_89" {
		t.Errorf("modules %v", f.modules)
	}
	if f.retained != 1 {
		t.Errorf("retained %d", f.retained)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	checkReleased(t, f)
	if _, err := e.FromHost(ctx, make([]byte, 4), dtype.F32, []int64{1}, "x"); !errors.Is(err, executor.ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
}

func TestNewFailures(t *testing.T) {
	f := newFake()
	f.devices = 0
	_, err := newExecutor(f, executor.Options{})
	if !errors.Is(err, executor.ErrUnavailable) || !strings.Contains(err.Error(), "no CUDA device: cuda: unavailable: the driver reports no CUDA device") {
		t.Errorf("no device: %v", err)
	}
	checkReleased(t, f)

	f = newFake()
	f.cc = [2]int{7, 0}
	if _, err := newExecutor(f, executor.Options{}); !errors.Is(err, executor.ErrUnavailable) || !strings.Contains(err.Error(), "no CUDA device") || !strings.Contains(err.Error(), "Turing") {
		t.Errorf("Volta: %v", err)
	}
	checkReleased(t, f)

	f = newFake()
	f.fail["ModuleLoadData"] = 1
	f.jitLog = "ptxas fatal   : Unresolved extern function 'x'"
	_, err = newExecutor(f, executor.Options{})
	var ce *Error
	if !errors.As(err, &ce) || ce.Kind != executor.ErrDevice || ce.Log != f.jitLog || !strings.Contains(err.Error(), "Unresolved extern") ||
		!strings.Contains(err.Error(), "the PTX module failed to load") ||
		!strings.Contains(err.Error(), "CUDA_ERROR_INVALID_PTX") || !strings.Contains(err.Error(), "base_sm75.ptx") {
		t.Errorf("JIT failure: %v", err)
	}
	checkReleased(t, f)

	// Each allocation of the start failing: nothing leaks.
	for _, call := range []string{"MemAlloc", "MemHostAlloc", "StreamCreate", "ModuleGetFunction", "MemcpyHtoDAsync"} {
		f = newFake()
		f.fail[call] = 1
		if _, err := newExecutor(f, executor.Options{}); err == nil {
			t.Errorf("%s failing: no error", call)
		}
		checkReleased(t, f)
	}
}

func TestNewWithoutDriverIsUnavailable(t *testing.T) {
	e, err := New()
	if err == nil {
		e.Close()
		t.Skip("a CUDA device is present")
	}
	if !errors.Is(err, executor.ErrUnavailable) {
		t.Fatalf("%v", err)
	}
	t.Logf("New: %v", err)
}

func TestHostRoundTrip(t *testing.T) {
	f := newFake()
	e := fakeEx(t, f)
	data := make([]byte, ioBytes+4096) // more than the pinned I/O buffer
	for i := range data {
		data[i] = byte(i * 7)
	}
	b, err := e.FromHost(ctx, data, dtype.BF16, []int64{int64(len(data) / 2)}, "x")
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if err := e.Download(ctx, b, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Error("round trip differs")
	}
	if err := e.Download(ctx, b, got[1:]); !errors.Is(err, executor.ErrArgument) {
		t.Errorf("short dst: %v", err)
	}
	if err := e.Free(b); err != nil {
		t.Fatal(err)
	}
	if err := e.Free(b); !errors.Is(err, executor.ErrClosed) || !strings.Contains(err.Error(), `Free: tensor "x": buffer used after Free`) {
		t.Errorf("double free: %v", err)
	}
	if err := e.Download(ctx, b, got); !errors.Is(err, executor.ErrClosed) || !strings.Contains(err.Error(), "buffer used after Free") {
		t.Errorf("after free: %v", err)
	}
	if n, _ := e.Live(); n != 0 {
		t.Errorf("%d live", n)
	}
	e.Close()
	checkReleased(t, f)
}

func TestOpsOnFake(t *testing.T) {
	f := newFake()
	e := fakeEx(t, f)
	x, err := e.FromHost(ctx, make([]byte, 2*6*8), dtype.BF16, []int64{6, 8}, "h")
	if err != nil {
		t.Fatal(err)
	}
	wdata := make([]byte, 4*8)
	w, err := e.FromHost(ctx, wdata, dtype.F8_E4M3, []int64{4, 8}, "fc.weight")
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []func() (executor.Buffer, error){
		func() (executor.Buffer, error) { return e.GELU(ctx, x) },
		func() (executor.Buffer, error) { return e.SiLU(ctx, x) },
		func() (executor.Buffer, error) { return e.RMSNorm(ctx, x, nil, 1e-6) },
		func() (executor.Buffer, error) { return e.Linear(ctx, x, &executor.Weight{Data: w}, nil, dtype.F32) },
		func() (executor.Buffer, error) { return e.Dequantize(ctx, &executor.Weight{Data: w}, dtype.BF16) },
	} {
		y, err := op()
		if err != nil {
			t.Fatal(err)
		}
		e.Free(y)
	}
	if got := f.launched(); got != "ck_gelu ck_silu ck_rmsnorm ck_linear_mma_bf16 ck_convert" {
		t.Errorf("launched %q", got)
	}
	l := f.launches[3]
	if l.grid != [3]uint32{1, 1, 1} || l.args[1] != 6 || l.args[2] != 8 || l.args[4] != 4 || l.args[5] != 1 {
		t.Errorf("mma launch %+v", l)
	}
	if err := e.SetLinearKernel("tiled"); err != nil {
		t.Fatal(err)
	}
	y, err := e.Linear(ctx, x, &executor.Weight{Data: w}, nil, dtype.F16)
	if err != nil {
		t.Fatal(err)
	}
	e.Free(y)
	if l := f.launches[len(f.launches)-1]; l.kernel != kLinear || l.args[5] != ckTab || l.args[7] != uint64(w.(*buffer).ptr) {
		t.Errorf("tiled launch %+v", l)
	}
	// Foreign and wrong arguments.
	if _, err := e.GELU(ctx, w); !errors.Is(err, executor.ErrArgument) || !strings.Contains(err.Error(), "activation dtype F8_E4M3") {
		t.Errorf("GELU of FP8: %v", err)
	}
	other := fakeEx(t, newFake())
	ob, _ := other.FromHost(ctx, make([]byte, 96), dtype.BF16, []int64{6, 8}, "o")
	if _, err := e.Add(ctx, x, ob); !errors.Is(err, executor.ErrArgument) || !strings.Contains(err.Error(), "buffer of another executor") {
		t.Errorf("foreign: %v", err)
	}
	// An output that cannot be allocated: ErrBudget, out of memory, nothing leaks
	// (the freed outputs above wait in the executor's cache: release them
	// so that the next output needs cuMemAlloc).
	if err := e.ReleaseCached(); err != nil {
		t.Fatal(err)
	}
	live := f.liveDevice()
	f.fail["MemAlloc"] = 1
	if _, err := e.SiLU(ctx, x); !errors.Is(err, executor.ErrBudget) || !strings.Contains(err.Error(), "CUDA_ERROR_OUT_OF_MEMORY") {
		t.Errorf("OOM: %v", err)
	}
	f.fail["LaunchKernel"] = 1
	if _, err := e.SiLU(ctx, x); !errors.Is(err, executor.ErrDevice) {
		t.Errorf("launch failure: %v", err)
	}
	if err := e.ReleaseCached(); err != nil {
		t.Fatal(err)
	}
	if f.liveDevice() != live {
		t.Errorf("%d device allocations after failed ops, want %d", f.liveDevice(), live)
	}
}

// Freed buffers' memory is reused by size class instead of going back to
// the driver; an allocation the device cannot satisfy releases the cache
// and tries again; Close frees the cache.
func TestDeviceCacheOnFake(t *testing.T) {
	f := newFake()
	e := fakeEx(t, f)
	x, _ := e.FromHost(ctx, make([]byte, 4000), dtype.F32, []int64{1000}, "x")
	allocs, frees := f.calls["MemAlloc"], f.calls["MemFree"]
	for range 5 {
		y, err := e.Add(ctx, x, x) // 4000 bytes: the 4 KiB class
		if err != nil {
			t.Fatal(err)
		}
		e.Free(y)
	}
	if n := f.calls["MemAlloc"] - allocs; n != 1 {
		t.Errorf("5 outputs of one size class: %d cuMemAlloc calls, want 1", n)
	}
	if n := f.calls["MemFree"] - frees; n != 0 {
		t.Errorf("5 outputs freed: %d cuMemFree calls, want 0", n)
	}
	before := e.Info().FreeBytes
	y, _ := e.Add(ctx, x, x)
	if after := e.Info().FreeBytes; after != before-4096 {
		t.Errorf("free bytes %d with the cached 4 KiB in use, %d before", after, before)
	}
	e.Free(y)
	// Another class while the device is out of memory: the cache goes
	// and the allocation is tried again.
	f.fail["MemAlloc"] = 1
	z, err := e.FromHost(ctx, make([]byte, 40000), dtype.F32, []int64{10000}, "z")
	if err != nil {
		t.Fatalf("after releasing the cache: %v", err)
	}
	if n := f.calls["MemFree"] - frees; n != 1 {
		t.Errorf("%d cuMemFree calls, want 1 (the cached 4 KiB)", n)
	}
	e.Free(z)
	e.Free(x)
	if n, _ := e.Live(); n != 0 {
		t.Errorf("%d live", n)
	}
	e.Close()
	checkReleased(t, f)
}

// An F16 activation that overflows in Add: the check-finite report names
// the op and the layer.
func TestCheckFiniteOnFake(t *testing.T) {
	f := newFake()
	e := fakeEx(t, f, executor.WithCheckFinite())
	h := make([]byte, 2*4)
	for i := range 4 {
		h[2*i], h[2*i+1] = 0x00, 0x7A // 49152 in F16
	}
	x, err := e.FromHost(ctx, h, dtype.F16, []int64{4}, "blocks.0.fc2")
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.Add(ctx, x, x)
	var nf *executor.NonFiniteError
	if !errors.As(err, &nf) || nf.Op != executor.OpAdd || nf.Tensor != "blocks.0.fc2" || nf.Inf != 4 || nf.NaN != 0 || nf.Executor != "cuda" {
		t.Fatalf("report: %v", err)
	}
	if n, _ := e.Live(); n != 1 {
		t.Errorf("%d live buffers: the failing op's output was not freed", n)
	}
}

// writeModel writes a model of BF16 tensors, an F32 norm, and a DeepSeek
// block-FP8 weight with its scale_inv.
func writeModel(t *testing.T) string {
	t.Helper()
	codes := make([]byte, 40*70)
	for i := range codes {
		codes[i] = byte(i*13 + 1)
	}
	sc := make([]float32, 2*3)
	for i := range sc {
		sc[i] = float32(math.Ldexp(1+float64(i)/4, i-3))
	}
	return writeBlockFP8Model(t, "m", []ckpttest.Tensor{
		ckpttest.T("a.weight", dtype.BF16, 300, 1000),
		ckpttest.T("a.bias", dtype.BF16, 1000),
		ckpttest.T("norm.weight", dtype.F32, 64),
	}, []int64{40, 70}, 32, codes, sc, 1)
}

// writeBlockFP8Model writes folder name of a temporary folder: the tensors
// plain and the DeepSeek block-FP8 weight fc.weight (shape, codes) with its
// fc.weight_scale_inv (scales, one per block×block block), in one
// model.safetensors or a set of shards with its index, and the config.json
// that declares the format.
func writeBlockFP8Model(t *testing.T, name string, plain []ckpttest.Tensor, shape []int64, block int64, codes []byte, scales []float32, shards int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	grid := []int64{(shape[0] + block - 1) / block, (shape[1] + block - 1) / block}
	ts := append(plain,
		ckpttest.Tensor{Name: "fc.weight", DType: dtype.F8_E4M3, Shape: shape, Data: codes},
		ckpttest.Tensor{Name: "fc.weight_scale_inv", DType: dtype.F32, Shape: grid, Data: dtype.Float32Bytes(scales)})
	if _, err := ckpttest.WriteWeights(dir, ckpttest.Weights{Shards: shards, Tensors: ts}); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`{"quantization_config":{"quant_method":"fp8","fmt":"e4m3","weight_block_size":[%d,%d]}}`, block, block)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestUploadModelOnFake(t *testing.T) {
	dir := writeModel(t)
	f := newFake()
	e := fakeEx(t, f)
	m, err := ckpt.Open(dir, ckpt.WithRules(ckpt.Rule{Pattern: mustPattern(t, "a.*"), Target: ckpt.To(dtype.F32)}))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var last ckpt.Progress
	calls := 0
	um, err := e.UploadModel(ctx, m, executor.WithStaging(1<<20), executor.WithReaders(3),
		executor.WithProgress(func(p ckpt.Progress) { last = p; calls++ }))
	if err != nil {
		t.Fatal(err)
	}
	if last.Done != last.Total || last.Total == 0 || calls < 3 {
		t.Errorf("progress %+v after %d calls", last, calls)
	}
	ref, err := m.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	for name, want := range ref.All() {
		w, err := um.Weight(name)
		if err != nil {
			t.Fatal(err)
		}
		if w.Data.DType() != want.DType || (want.QuantWeight() != nil) != w.Quantized() {
			t.Errorf("%s: %s quantized %v, want %s", name, w.Data.DType(), w.Quantized(), want.DType)
		}
		got := make([]byte, w.Data.Bytes())
		if err := e.Download(ctx, w.Data, got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want.Bytes()) {
			t.Errorf("%s: device bytes differ from the loader's", name)
		}
		for i, s := range want.Scales {
			got := make([]byte, w.Scales[i].Bytes())
			e.Download(ctx, w.Scales[i], got)
			if !bytes.Equal(got, s.Bytes()) {
				t.Errorf("%s: scale %s differs", name, s.Name)
			}
		}
	}
	if !strings.Contains(f.launched(), "ck_convert") {
		t.Errorf("no conversion on the device: %s", f.launched())
	}
	pinned := f.liveHost()
	if err := um.Close(); err != nil {
		t.Fatal(err)
	}
	if n, _ := e.Live(); n != 0 {
		t.Errorf("%d live after the model's Close", n)
	}
	if f.liveHost() != pinned {
		t.Error("the ring was not kept")
	}
	e.Close()
	checkReleased(t, f)
}

func mustPattern(t *testing.T, s string) ckpt.Pattern {
	r, err := ckpt.ParseRule(s + "=F32")
	if err != nil {
		t.Fatal(err)
	}
	return r.Pattern
}

// A failed or canceled upload frees every device and pinned allocation it
// made; a model that does not fit is refused before any allocation.
func TestUploadModelFailuresFreeEverything(t *testing.T) {
	dir := writeModel(t)
	m, err := ckpt.Open(dir, ckpt.WithDType(ckpt.To(dtype.F32)))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, c := range []struct {
		name string
		set  func(f *fakeDriver)
		ctx  func() (context.Context, func(ckpt.Progress))
		kind error
		msg  string
	}{
		{"copy fails", func(f *fakeDriver) { f.fail["MemcpyHtoDAsync"] = 3 }, nil, executor.ErrDevice, "MemcpyHtoDAsync returned"},
		{"kernel fails", func(f *fakeDriver) { f.fail["LaunchKernel"] = 2 }, nil, executor.ErrDevice, "LaunchKernel returned"},
		{"arena allocation fails", func(f *fakeDriver) { f.fail["MemAlloc"] = 1 }, nil, executor.ErrBudget, "MemAlloc returned CUDA_ERROR_OUT_OF_MEMORY"},
		{"pinned allocation fails", func(f *fakeDriver) { f.fail["MemHostAlloc"] = 5 }, nil, executor.ErrBudget, "MemHostAlloc returned CUDA_ERROR_OUT_OF_MEMORY"},
		{"canceled", nil, func() (context.Context, func(ckpt.Progress)) {
			c, cancel := context.WithCancel(context.Background())
			return c, func(ckpt.Progress) { cancel() }
		}, context.Canceled, "canceled"},
		{"does not fit", func(f *fakeDriver) { f.freeMem = 260 << 20 }, nil, executor.ErrBudget, "on the device"},
	} {
		f := newFake()
		e := fakeEx(t, f)
		dev, host, allocs := f.liveDevice(), f.liveHost(), f.calls["MemAlloc"]+f.calls["MemHostAlloc"]
		if c.set != nil {
			c.set(f)
		}
		cx, prog := ctx, func(ckpt.Progress) {}
		if c.ctx != nil {
			cx, prog = c.ctx()
		}
		_, err := e.UploadModel(cx, m, executor.WithStaging(1<<20), executor.WithProgress(prog))
		if !errors.Is(err, c.kind) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: %v, want %v saying %q", c.name, err, c.kind, c.msg)
		}
		if f.liveDevice() != dev || f.liveHost() != host {
			t.Errorf("%s: %d device and %d pinned allocations live, want %d and %d", c.name, f.liveDevice(), f.liveHost(), dev, host)
		}
		if c.kind == executor.ErrBudget && !errors.Is(err, ckpt.ErrBudget) {
			t.Errorf("%s: the device's memory did not suffice, but the error does not match ckpt.ErrBudget: %v", c.name, err)
		}
		if c.name == "does not fit" {
			if n := f.calls["MemAlloc"] + f.calls["MemHostAlloc"]; n != allocs {
				t.Errorf("refused after %d allocations", n-allocs)
			}
			if !errors.Is(err, ckpt.ErrBudget) {
				t.Errorf("a refusal for the device's budget does not match ckpt.ErrBudget: %v", err)
			}
		}
		e.Close()
		checkReleased(t, f)
	}
}

func TestPinnedAndCopyOnFake(t *testing.T) {
	f := newFake()
	e := fakeEx(t, f)
	p, err := e.AllocPinned(1 << 20)
	if err != nil || len(p.Bytes()) != 1<<20 {
		t.Fatal(err)
	}
	if err := p.Free(); err != nil || p.Free() != nil {
		t.Fatal(err)
	}
	x, _ := e.FromHost(ctx, []byte{1, 2, 3, 4}, dtype.U8, []int64{4}, "x")
	y, err := e.Copy(ctx, x)
	if err != nil {
		t.Fatal(err)
	}
	if got := download(t, e, y); !bytes.Equal(got, []byte{1, 2, 3, 4}) {
		t.Errorf("copy %v", got)
	}
	e.Free(x)
	e.Close()
	checkReleased(t, f)
}
