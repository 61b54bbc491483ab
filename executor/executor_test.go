package executor

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/quant"
)

// fakeBuf is a Buffer with no memory behind it.
type fakeBuf struct {
	dt    dtype.DType
	shape []int64
	name  string
}

func (b *fakeBuf) DType() dtype.DType { return b.dt }
func (b *fakeBuf) Shape() []int64     { return slices.Clone(b.shape) }
func (b *fakeBuf) Name() string       { return b.name }
func (b *fakeBuf) Bytes() int64 {
	n := int64(1)
	for _, d := range b.shape {
		n *= d
	}
	nb, _ := b.dt.ByteLen(n)
	return nb
}

func buf(dt dtype.DType, name string, shape ...int64) *fakeBuf {
	return &fakeBuf{dt: dt, shape: shape, name: name}
}

// fakeEx counts Free calls; its other methods are never called here.
type fakeEx struct {
	Executor
	name  string
	freed []string
}

func (f *fakeEx) Info() DeviceInfo { return DeviceInfo{Kind: f.name, Name: "fake " + f.name} }
func (f *fakeEx) Free(b Buffer) error {
	f.freed = append(f.freed, b.Name())
	return nil
}
func (f *fakeEx) Close() error { return nil }

func TestErrorKinds(t *testing.T) {
	seen := map[string]bool{}
	for k := ErrorKind(1); int(k) < len(kindNames); k++ {
		s := k.String()
		if s == "" || s == "unknown" || seen[s] {
			t.Errorf("kind %d: name %q", int(k), s)
		}
		seen[s] = true
		e := &Error{Kind: k, Executor: "cpu", Op: OpLinear, Tensor: "fc1.weight", Msg: "m", Err: context.Canceled}
		if !errors.Is(e, k) || errors.Is(e, k%ErrorKind(len(kindNames)-1)+1) || !errors.Is(e, context.Canceled) {
			t.Errorf("%s: errors.Is", k)
		}
		if msg := e.Error(); !strings.Contains(msg, s) || !strings.Contains(msg, `"fc1.weight"`) || !strings.Contains(msg, "Linear") || !strings.Contains(msg, "cpu") {
			t.Errorf("message %q", msg)
		}
	}
	if ErrorKind(99).String() != "unknown" {
		t.Error(ErrorKind(99).String())
	}
	nf := &NonFiniteError{Executor: "cpu", Op: OpAdd, Seq: 3, Tensor: "res", DType: "F16", NaN: 1, Inf: 2, Elements: 8}
	var err error = nf
	if !errors.Is(err, ErrNonFinite) || errors.Is(err, ErrArgument) || !strings.Contains(err.Error(), `op 3 Add: tensor "res": 1 NaN and 2 Inf in 8 F16`) {
		t.Errorf("NonFiniteError: %v", err)
	}
}

func TestOptionsFinite(t *testing.T) {
	r := &NonFiniteError{Op: OpGELU, NaN: 1}
	if o := Apply(); o.Finite(r) != nil {
		t.Error("Finite without the option")
	}
	o := Apply(WithCheckFinite(), WithWorkers(3), WithDevice(1), nil)
	if o.Workers != 3 || o.Device != 1 || !o.CheckFinite {
		t.Errorf("%+v", o)
	}
	if o.Finite(&NonFiniteError{Op: OpGELU}) != nil {
		t.Error("finite output reported")
	}
	if err := o.Finite(r); err != r {
		t.Errorf("Finite = %v", err)
	}
	var got []*NonFiniteError
	o = Apply(WithFiniteReport(func(e *NonFiniteError) { got = append(got, e) }))
	if err := o.Finite(r); err != nil || len(got) != 1 || got[0] != r {
		t.Errorf("report mode: %v %v", err, got)
	}
	u := ApplyUpload(WithReaders(4), WithStaging(1<<20), WithDeviceBudget(-1), WithProgress(func(ckpt.Progress) {}), nil)
	if u.Readers != 4 || u.StagingBytes != 1<<20 || u.BudgetBytes != -1 || u.Progress == nil {
		t.Errorf("%+v", u)
	}
}

func withBackends(t *testing.T, bs ...Backend) {
	t.Helper()
	regMu.Lock()
	saved := backends
	backends = nil
	regMu.Unlock()
	t.Cleanup(func() { regMu.Lock(); backends = saved; regMu.Unlock() })
	for _, b := range bs {
		if err := Register(b); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRegistry(t *testing.T) {
	noDriver := &Error{Kind: ErrUnavailable, Executor: "cuda", Msg: "libcuda.so.1 not found"}
	cpu := Backend{Name: "cpu", New: func(...Option) (Executor, error) { return &fakeEx{name: "cpu"}, nil }}
	cuda := Backend{Name: "cuda", Priority: 100, New: func(...Option) (Executor, error) { return nil, noDriver }}
	withBackends(t, cpu, cuda)
	if err := Register(cpu); !errors.Is(err, ErrArgument) {
		t.Errorf("duplicate: %v", err)
	}
	if err := Register(Backend{Name: "x"}); !errors.Is(err, ErrArgument) {
		t.Errorf("nil New: %v", err)
	}
	if bs := Backends(); len(bs) != 2 || bs[0].Name != "cuda" || bs[1].Name != "cpu" {
		t.Fatalf("Backends order %v", bs)
	}
	if _, ok := Lookup("cpu"); !ok {
		t.Error("Lookup cpu")
	}
	ex, skipped, err := NewBest()
	if err != nil || ex.Info().Kind != "cpu" || len(skipped) != 1 || skipped[0].Name != "cuda" || !errors.Is(skipped[0].Err, ErrUnavailable) || skipped[0].Err != noDriver {
		t.Fatalf("NewBest: %v %v %v", ex, skipped, err)
	}
	st := Probe()
	if len(st) != 2 || st[0].Name != "cuda" || st[0].Available() || !st[1].Available() || st[1].Info.Name != "fake cpu" {
		t.Fatalf("Probe %+v", st)
	}
}

// A program built without executor/cuda says so, before the CPU.
func TestRegistryNotBuiltIn(t *testing.T) {
	withBackends(t, Backend{Name: "cpu", New: func(...Option) (Executor, error) { return &fakeEx{name: "cpu"}, nil }})
	_, skipped, err := NewBest()
	if err != nil || len(skipped) != 1 || skipped[0].Name != "cuda" || skipped[0].Registered ||
		!errors.Is(skipped[0].Err, ErrUnavailable) || !strings.Contains(skipped[0].Err.Error(), "executor/cuda") {
		t.Fatalf("NewBest: %+v %v", skipped, err)
	}
	st := Probe()
	if len(st) != 2 || st[0].Name != "cuda" || st[0].Registered || st[1].Name != "cpu" {
		t.Fatalf("Probe %+v", st)
	}
	withBackends(t)
	if _, skipped, err := NewBest(); !errors.Is(err, ErrUnavailable) || len(skipped) != 2 {
		t.Fatalf("no backends: %v %v", skipped, err)
	}
}

func TestModel(t *testing.T) {
	ex := &fakeEx{}
	released := 0
	w1 := &Weight{Data: buf(dtype.F32, "a", 2, 3)}
	w2 := &Weight{Data: buf(dtype.F8_E4M3, "b", 4, 4), Scales: []Buffer{buf(dtype.F32, "b_scale")}}
	m, err := NewModel(ex, []string{"c/a", "c/b"}, []*Weight{w1, w2}, func() error { released++; return nil })
	if err != nil {
		t.Fatal(err)
	}
	if m.Len() != 2 || !slices.Equal(m.Names(), []string{"c/a", "c/b"}) || m.Bytes() != 24+16+4 {
		t.Errorf("%d %v %d", m.Len(), m.Names(), m.Bytes())
	}
	if w, err := m.Weight("c/b"); err != nil || w != w2 {
		t.Error(err)
	}
	if _, err := m.Weight("b"); !errors.Is(err, ErrNotFound) {
		t.Error(err)
	}
	if err := m.Close(); err != nil || !slices.Equal(ex.freed, []string{"a", "b", "b_scale"}) || released != 1 {
		t.Errorf("Close: %v freed %v released %d", err, ex.freed, released)
	}
	if err := m.Close(); err != nil || released != 1 {
		t.Error("second Close")
	}
	if _, err := m.Weight("c/a"); !errors.Is(err, ErrClosed) {
		t.Error(err)
	}
	if _, err := NewModel(ex, []string{"a", "a"}, []*Weight{w1, w1}, nil); !errors.Is(err, ErrArgument) {
		t.Error(err)
	}
	if _, err := NewModel(ex, []string{"a"}, nil, nil); !errors.Is(err, ErrArgument) {
		t.Error(err)
	}
}

func TestWeightAccessors(t *testing.T) {
	plain := &Weight{Data: buf(dtype.BF16, "p", 3, 5)}
	if plain.Quantized() || plain.DType() != dtype.BF16 || !slices.Equal(plain.Shape(), []int64{3, 5}) || plain.Name() != "p" {
		t.Error("plain accessors")
	}
	q := &quant.Weight{Name: "q", Shape: []int64{4, 6}, Elem: dtype.F4, Data: quant.Stored{DType: dtype.U8, Shape: []int64{4, 3}}}
	w := &Weight{Data: buf(dtype.U8, "q", 4, 3), Quant: q}
	if !w.Quantized() || w.DType() != dtype.F4 || !slices.Equal(w.Shape(), []int64{4, 6}) {
		t.Error("quantized accessors")
	}
	if err := FreeWeight(&fakeEx{}, nil); err != nil {
		t.Error(err)
	}
}
