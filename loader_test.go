package ckpt

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/variant"
)

// want returns the bytes a tensor of the fixture should load as: its Fill
// contents converted with dtype.Convert.
func want(t *testing.T, name string, stored dtype.DType, shape []int64, to dtype.DType) []byte {
	t.Helper()
	src, err := ckpttest.Fill(name, stored, shape)
	if err != nil {
		t.Fatal(err)
	}
	if to == stored {
		return src
	}
	n, _ := to.ByteLen(numElements(shape))
	dst := make([]byte, n)
	if _, err := dtype.Convert(dst, to, src, stored, dtype.Options{}); err != nil {
		t.Fatal(err)
	}
	return dst
}

func mustOpen(t *testing.T, path string, opts ...Option) *Model {
	t.Helper()
	m, err := Open(path, opts...)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func mustLoad(t *testing.T, m *Model, opts ...LoadOption) *Weights {
	t.Helper()
	w, err := m.Load(context.Background(), opts...)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func TestLoadSingleFileAsStoredIsZeroCopy(t *testing.T) {
	path := ckpttest.File(t, ckpttest.Tensors(t, "a:BF16[64,32] b:F8_E4M3[16,16] ids:I64[7]")...)
	m := mustOpen(t, path)
	w := mustLoad(t, m)
	if w.Len() != 3 {
		t.Fatalf("Len = %d", w.Len())
	}
	for name, tt := range w.All() {
		if tt.Location.Owned || tt.Action() != ActionView {
			t.Errorf("%s: owned=%v action=%s, want a view", name, tt.Location.Owned, tt.Action())
		}
		if tt.DType != tt.Stored {
			t.Errorf("%s: dtype %s, stored %s", name, tt.DType, tt.Stored)
		}
		if !bytes.Equal(tt.Bytes(), want(t, name, tt.Stored, tt.Shape, tt.Stored)) {
			t.Errorf("%s: wrong bytes", name)
		}
		// The location points at the very bytes in the file.
		raw, err := os.ReadFile(tt.Location.File)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(raw[tt.Location.Offset:tt.Location.Offset+tt.Location.Length], tt.Bytes()) {
			t.Errorf("%s: Location does not point at its bytes", name)
		}
	}
	p, err := m.Plan()
	if err != nil {
		t.Fatal(err)
	}
	if p.TotalOwnedBytes != 0 || p.TotalMappedBytes != p.Components[0].StoredBytes || p.StagingBytes != 0 {
		t.Errorf("plan: owned %d mapped %d staging %d, stored %d", p.TotalOwnedBytes, p.TotalMappedBytes, p.StagingBytes, p.Components[0].StoredBytes)
	}
}

func TestLoadConvertsFloatsNotIntegers(t *testing.T) {
	spec := "a:BF16[300,70] b:F8_E4M3[33,8] c:F16[5] ids:I64[7] mask:BOOL[9] big:BF16[1100,1000]"
	path := ckpttest.File(t, ckpttest.Tensors(t, spec)...)
	for _, strategy := range []readStrategy{readMmap, readPread} {
		t.Run(strategy.string(), func(t *testing.T) {
			m := mustOpen(t, path, WithDType(To(dtype.F32)), WithReadStrategy(strategy.string()), WithWorkers(3))
			w := mustLoad(t, m)
			for name, tt := range w.All() {
				isInt := name == "ids" || name == "mask"
				wantDT := dtype.F32
				if isInt {
					wantDT = tt.Stored
					if !strings.Contains(tt.Decision.Rule, "not applied") {
						t.Errorf("%s: rule %q should say the default was not applied", name, tt.Decision.Rule)
					}
				}
				if tt.DType != wantDT {
					t.Errorf("%s: dtype %s, want %s", name, tt.DType, wantDT)
				}
				if !bytes.Equal(tt.Bytes(), want(t, name, tt.Stored, tt.Shape, wantDT)) {
					t.Errorf("%s: wrong bytes", name)
				}
				if strategy == readPread && !tt.Location.Owned {
					t.Errorf("%s: pread strategy gave a view", name)
				}
				if st, err := m.comps[0].ck.(shardStore).Tensor(name); err != nil || st.File().Mapped() != (strategy == readMmap) {
					t.Errorf("%s: strategy %s but the file is mapped=%v (%v)", name, strategy.string(), st.File().Mapped(), err)
				}
				if !isInt && tt.Stats.Elements != tt.NumElements() {
					t.Errorf("%s: stats count %d elements of %d", name, tt.Stats.Elements, tt.NumElements())
				}
			}
		})
	}
}

func TestRuleCastsIntegers(t *testing.T) {
	path := ckpttest.File(t, ckpttest.Tensors(t, "ids:I64[7] w:BF16[4]")...)
	m := mustOpen(t, path, WithDType(To(dtype.F32)), WithRules(Rule{Pattern: MustParsePattern("ids"), Target: To(dtype.I32)}))
	w := mustLoad(t, m)
	ids, err := w.Tensor("ids")
	if err != nil {
		t.Fatal(err)
	}
	if ids.DType != dtype.I32 || !strings.HasPrefix(ids.Decision.Rule, "rule 1") {
		t.Fatalf("ids: %s by %q", ids.DType, ids.Decision.Rule)
	}
	if !bytes.Equal(ids.Bytes(), want(t, "ids", dtype.I64, []int64{7}, dtype.I32)) {
		t.Fatal("ids: wrong bytes")
	}
}

// The story this package exists for: an FP8 video model whose image
// encoder must load as F32 while the transformer stays FP8, and the text
// encoder as BF16 with its norms in F32.
func TestPipelinePerComponentPolicy(t *testing.T) {
	root := ckpttest.NewPipeline(t, ckpttest.Pipeline{Components: []ckpttest.Component{
		{Name: "transformer", Weights: []ckpttest.Weights{{Prefix: "diffusion_pytorch_model", Shards: 2,
			Tensors: ckpttest.Tensors(t, "blocks.0.attn.weight:F8_E4M3[64,64] blocks.0.norm.weight:F8_E4M3[64] blocks.1.attn.weight:F8_E4M3[64,64] blocks.1.layernorm.weight:F8_E4M3[64]")}}},
		{Name: "image_encoder", Weights: []ckpttest.Weights{{Tensors: ckpttest.Tensors(t, "proj.weight:BF16[32,16] proj.bias:BF16[32]")}}},
		{Name: "text_encoder", Weights: []ckpttest.Weights{{Tensors: ckpttest.Tensors(t, "layers.0.mlp.weight:F32[16,16] layers.0.norm.weight:F32[16] layers.0.mlp.bias:F32[16] pos:I64[4]")}}},
	}})
	m := mustOpen(t, root,
		WithComponentDType("transformer", AsStored),
		WithComponentDType("image_encoder", To(dtype.F32)),
		WithComponentDType("text_encoder", To(dtype.BF16)),
		WithRules(Rule{Component: "text_encoder", Pattern: MustParsePattern("norm"), Target: To(dtype.F32)}),
		WithRules(KeepNormsAndBiasesF32()...),
	)
	w := mustLoad(t, m)
	check := func(name string, dt dtype.DType, act, rule string) {
		t.Helper()
		tt, err := w.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		if tt.DType != dt || tt.Action().String() != act || !strings.Contains(tt.Decision.Rule, rule) {
			t.Errorf("%s: %s %s by %q, want %s %s by …%s…", name, tt.DType, tt.Action(), tt.Decision.Rule, dt, act, rule)
		}
		if !bytes.Equal(tt.Bytes(), want(t, tt.Name, tt.Stored, tt.Shape, dt)) {
			t.Errorf("%s: wrong bytes", name)
		}
	}
	check("transformer/blocks.0.attn.weight", dtype.F8_E4M3, "view", `component "transformer"=stored`)
	// The preset's norm rule matches "norm" and "*norm" parts.
	check("transformer/blocks.0.norm.weight", dtype.F32, "convert", "**.*norm.*=F32")
	check("transformer/blocks.1.layernorm.weight", dtype.F32, "convert", "**.*norm.*=F32")
	check("image_encoder/proj.weight", dtype.F32, "convert", `component "image_encoder"=F32`)
	check("image_encoder/proj.bias", dtype.F32, "convert", "**.bias=F32")
	check("text_encoder/layers.0.mlp.weight", dtype.BF16, "convert", `component "text_encoder"=BF16`)
	check("text_encoder/layers.0.norm.weight", dtype.F32, "view", "rule 1 text_encoder/norm=F32")
	check("text_encoder/layers.0.mlp.bias", dtype.F32, "view", "**.bias=F32")
	check("text_encoder/pos", dtype.I64, "view", "integer tensor")
	// A bare name that only one component has is found; the qualified
	// names are the keys.
	if _, err := w.Tensor("proj.weight"); err != nil {
		t.Errorf("bare unique name: %v", err)
	}
	got := 0
	for range w.Component("transformer") {
		got++
	}
	if got != 4 {
		t.Errorf("transformer has %d tensors", got)
	}
	p, err := m.Plan()
	if err != nil {
		t.Fatal(err)
	}
	// JSON keys that other tools rely on.
	b, _ := json.Marshal(p)
	var generic map[string]any
	if err := json.Unmarshal(b, &generic); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"components", "total_resident_bytes", "peak_bytes", "budget_bytes", "fits"} {
		if _, ok := generic[k]; !ok {
			t.Errorf("plan JSON lacks %q", k)
		}
	}
	comp0 := generic["components"].([]any)[0].(map[string]any)
	for _, k := range []string{"name", "resident_bytes"} {
		if _, ok := comp0[k]; !ok {
			t.Errorf("component JSON lacks %q", k)
		}
	}
}

func TestPipelineAmbiguousAndMissingNames(t *testing.T) {
	root := ckpttest.NewPipeline(t, ckpttest.Pipeline{Components: []ckpttest.Component{
		{Name: "unet", Weights: []ckpttest.Weights{{Prefix: "diffusion_pytorch_model", Tensors: ckpttest.Tensors(t, "w:F32[2] only_unet:F32[1]")}}},
		{Name: "vae", Weights: []ckpttest.Weights{{Prefix: "diffusion_pytorch_model", Tensors: ckpttest.Tensors(t, "w:F32[2]")}}},
	}})
	m := mustOpen(t, root)
	if _, err := m.LoadTensor(context.Background(), "w"); !errors.Is(err, ErrOption) || !strings.Contains(err.Error(), "ambiguous: in components unet, vae") {
		t.Errorf("ambiguous: %v", err)
	}
	if _, err := m.LoadTensor(context.Background(), "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing: %v", err)
	}
	if tt, err := m.LoadTensor(context.Background(), "vae/w"); err != nil || tt.Component != "vae" {
		t.Errorf("vae/w: %v", err)
	}
	if tt, err := m.LoadTensor(context.Background(), "only_unet"); err != nil || tt.Component != "unet" {
		t.Errorf("only_unet: %v", err)
	}
	if _, err := Open(root, WithComponentDType("text_encoder", To(dtype.F32))); !errors.Is(err, ErrOption) {
		t.Errorf("unknown component target: %v", err)
	}
}

// Variants resolve through package variant and are never mixed.
func TestOpenVariantNeverMixes(t *testing.T) {
	dir := ckpttest.Dir(t,
		ckpttest.Weights{Prefix: "diffusion_pytorch_model", Shards: 2, Tensors: ckpttest.Tensors(t, "a:F32[8] b:F32[8]")},
		ckpttest.Weights{Prefix: "diffusion_pytorch_model", Variant: "bf16", Tensors: ckpttest.Tensors(t, "a:BF16[8] b:BF16[8]")},
	)
	for v, dt := range map[string]dtype.DType{"": dtype.F32, "bf16": dtype.BF16} {
		m := mustOpen(t, dir, WithVariant(v))
		w := mustLoad(t, m)
		for name, tt := range w.All() {
			if tt.DType != dt {
				t.Errorf("variant %q: %s is %s", v, name, tt.DType)
			}
		}
		p, _ := m.Plan()
		if len(p.Components[0].Ignored) == 0 {
			t.Errorf("variant %q: the plan does not list the ignored files", v)
		}
	}
	if _, err := Open(dir, WithVariant("fp16")); !errors.Is(err, ErrResolve) || !errors.Is(err, variant.ErrVariantNotFound) {
		t.Errorf("missing variant: %v", err)
	}
}

func TestLoadIntoCallerBuffer(t *testing.T) {
	path := ckpttest.File(t, ckpttest.Tensors(t, "a:BF16[100,3] b:F32[5]")...)
	m := mustOpen(t, path, WithDType(To(dtype.F32)))
	buf := make([]byte, 1200)
	tt, err := m.loadInto(context.Background(), "a", buf)
	if err != nil {
		t.Fatal(err)
	}
	if &tt.Bytes()[0] != &buf[0] || !bytes.Equal(buf, want(t, "a", dtype.BF16, []int64{100, 3}, dtype.F32)) {
		t.Fatal("not loaded into the caller's buffer")
	}
	// A tensor that would be a view is copied into the caller's buffer.
	buf2 := make([]byte, 20)
	if _, err := m.loadInto(context.Background(), "b", buf2); err != nil || !bytes.Equal(buf2, want(t, "b", dtype.F32, []int64{5}, dtype.F32)) {
		t.Fatalf("b: %v", err)
	}
	_, err = m.loadInto(context.Background(), "a", make([]byte, 600))
	var e *Error
	if !errors.Is(err, ErrOption) || !strings.Contains(err.Error(), ": buffer: 600 bytes") || !errors.As(err, &e) || e.Tensor != "a" {
		t.Fatalf("wrong size: %v", err)
	}
}

func TestBudgetRefusalAllocatesNothing(t *testing.T) {
	// 32 MiB as BF16 (64 MiB as F32).
	root := ckpttest.NewPipeline(t, ckpttest.Pipeline{Components: []ckpttest.Component{
		{Name: "transformer", Weights: []ckpttest.Weights{
			{Prefix: "diffusion_pytorch_model", Variant: "fp8", Tensors: []ckpttest.Tensor{ckpttest.T("w", dtype.F8_E4M3, 4096, 4096)}},
			{Prefix: "diffusion_pytorch_model", Tensors: []ckpttest.Tensor{ckpttest.T("w", dtype.BF16, 4096, 4096)}},
		}},
	}})
	m := mustOpen(t, root, WithBudget(24<<20), WithDType(To(dtype.BF16)))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := m.Load(context.Background())
	runtime.ReadMemStats(&after)
	var be *BudgetError
	if !errors.Is(err, ErrBudget) || !errors.As(err, &be) {
		t.Fatalf("Load = %v, want a budget refusal", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 256<<10 {
		t.Errorf("the refusal allocated %d bytes", got)
	}
	for _, s := range []string{"transformer needs 32.0 MiB as BF16", "16.0 MiB as F8_E4M3", "budget 24.0 MiB", "would fit: transformer as F8_E4M3"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("message lacks %q:\n%s", s, err)
		}
	}
	if be.Plan.Fits || be.Plan.Shortfall <= 0 {
		t.Errorf("plan: fits %v shortfall %d", be.Plan.Fits, be.Plan.Shortfall)
	}
	// The FP8 variant as stored fits.
	m8 := mustOpen(t, root, WithBudget(24<<20), WithVariant("fp8"))
	w := mustLoad(t, m8)
	if tt, _ := w.Tensor("w"); tt.DType != dtype.F8_E4M3 {
		t.Fatalf("fp8 variant loaded as %s", tt.DType)
	}
}

func TestCancelMidLoad(t *testing.T) {
	var ts []ckpttest.Tensor
	for i := range 12 {
		ts = append(ts, ckpttest.T("w"+string(rune('a'+i)), dtype.BF16, 1024, 1024))
	}
	path := ckpttest.File(t, ts...)
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	m := mustOpen(t, path, WithDType(To(dtype.F32)), WithWorkers(2), WithProgress(func(p Progress) {
		calls++
		if calls == 3 {
			cancel()
		}
	}))
	w, err := m.Load(ctx)
	if !errors.Is(err, context.Canceled) || w != nil {
		t.Fatalf("Load = %v, %v; want context.Canceled", w, err)
	}
	if calls > 3+2 {
		t.Errorf("%d pieces finished after cancellation", calls-3)
	}
}

func TestProgressReachesTotal(t *testing.T) {
	path := ckpttest.File(t, ckpttest.Tensors(t, "a:BF16[3000,1000] b:F16[10] c:F32[4]")...)
	var last Progress
	var prev int64
	m := mustOpen(t, path, WithDType(To(dtype.F32)), WithProgress(func(p Progress) {
		if p.Done < prev {
			t.Errorf("progress went back: %d after %d", p.Done, prev)
		}
		prev, last = p.Done, p
	}))
	mustLoad(t, m)
	if last.Done != last.Total || last.Total != 3000*1000*4+10*4 {
		t.Errorf("last progress %+v", last)
	}
}

func TestArenaReuse(t *testing.T) {
	path := ckpttest.File(t, ckpttest.Tensors(t, "a:BF16[512,512] b:BF16[100]")...)
	m := mustOpen(t, path, WithDType(To(dtype.F32)))
	a := NewArena()
	defer a.Free()
	w1, err := m.Load(context.Background(), IntoArena(a))
	if err != nil {
		t.Fatal(err)
	}
	first := &w1.tensors[0].Bytes()[0]
	w1.Close() // leaves the caller's arena alone
	w2, err := m.Load(context.Background(), IntoArena(a))
	if err != nil {
		t.Fatal(err)
	}
	if &w2.tensors[0].Bytes()[0] != first {
		t.Error("the second load did not reuse the arena")
	}
	if !bytes.Equal(w2.tensors[0].Bytes(), want(t, "a", dtype.BF16, []int64{512, 512}, dtype.F32)) {
		t.Error("wrong bytes")
	}
}

func TestOpenIndexAndComponentFolder(t *testing.T) {
	dir := ckpttest.Dir(t, ckpttest.Weights{Shards: 3, Tensors: ckpttest.Tensors(t, "a:F32[4] b:BF16[4] c:F16[4]")})
	idx := filepath.Join(dir, "model.safetensors.index.json")
	for _, p := range []string{idx, dir} {
		m := mustOpen(t, p, WithDType(To(dtype.F32)))
		if got := m.Components(); len(got) != 1 || got[0] != filepath.Base(dir) {
			t.Errorf("%s: components %v", p, got)
		}
		w := mustLoad(t, m)
		if w.Len() != 3 {
			t.Errorf("%s: %d tensors", p, w.Len())
		}
	}
}

func TestTargetErrors(t *testing.T) {
	path := ckpttest.File(t, ckpttest.Tensors(t, "z:C64[4]")...)
	if _, err := Open(path, WithRules(Rule{Pattern: MustParsePattern("z"), Target: To(dtype.F32)})); !errors.Is(err, ErrTarget) {
		t.Errorf("C64 to F32: %v", err)
	}
	// The default never casts complex tensors.
	m := mustOpen(t, path, WithDType(To(dtype.F32)))
	w := mustLoad(t, m)
	if tt, _ := w.Tensor("z"); tt.DType != dtype.C64 {
		t.Errorf("z: %s", tt.DType)
	}
	for _, s := range []string{"F32", "bf16", "stored", "quantized", "as-stored"} {
		if _, err := ParseTarget(s); err != nil {
			t.Errorf("ParseTarget(%q): %v", s, err)
		}
	}
	if _, err := ParseTarget("F33"); !errors.Is(err, ErrTarget) {
		t.Errorf("ParseTarget(F33): %v", err)
	}
	r, err := ParseRule("text_encoder/**.norm=F32")
	if err != nil || r.Component != "text_encoder" || r.Pattern.String() != "**.norm" {
		t.Errorf("ParseRule: %+v %v", r, err)
	}
	// A "/" with no component before it is refused, not read as a rule
	// for every component (found by FuzzParseRule: "//=F32").
	for _, s := range []string{"/norm=F32", "//=F32"} {
		if r, err := ParseRule(s); !errors.Is(err, ErrOption) {
			t.Errorf("ParseRule(%q): %+v, %v", s, r, err)
		}
	}
	if s, err := ParseSplit("/q_proj=0"); !errors.Is(err, ErrOption) {
		t.Errorf("ParseSplit(/q_proj=0): %+v, %v", s, err)
	}
}

func TestModelContents(t *testing.T) {
	dir := ckpttest.Dir(t, ckpttest.Weights{Tensors: ckpttest.Tensors(t, "w.weight:F8_E4M3[4,4] w.weight_scale_inv:F32[1,1] n:F32[4] e:F32[0]")})
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"quantization_config":{"quant_method":"fp8","weight_block_size":[128,128]}}`), 0o644)
	checksummed(t, dir)
	m, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	name := m.Components()[0]
	c, err := m.Contents(name)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for i, p := range c.Tensors {
		names = append(names, p.Tensor)
		if i > 0 && p.Range.Offset < c.Tensors[i-1].Range.Offset {
			t.Errorf("%s at %d before %s at %d: not in file order", p.Tensor, p.Range.Offset, c.Tensors[i-1].Tensor, c.Tensors[i-1].Range.Offset)
		}
	}
	// Every stored tensor, the consumed scale included.
	slices.Sort(names)
	if want := []string{"e", "n", "w.weight", "w.weight_scale_inv"}; !slices.Equal(names, want) {
		t.Errorf("Tensors = %v, want %v", names, want)
	}
	if c.Scheme.Weight("w.weight") == nil || !c.Scheme.Consumed("w.weight_scale_inv") {
		t.Errorf("Scheme: %+v", c.Scheme)
	}
	if len(c.Files) != 1 || c.Index != "" || c.Component != name {
		t.Errorf("Files %v, Index %q, Component %q", c.Files, c.Index, c.Component)
	}
	// The files carry checksums: every whole part
	// names its checksum, the file has a digest, and reading a part
	// verifies it.
	if _, ok := c.Digests[c.Files[0]]; !ok {
		t.Errorf("Digests = %v", c.Digests)
	}
	for i := range c.Tensors {
		p := &c.Tensors[i]
		want, ok := p.Checksum()
		if !ok {
			t.Errorf("%s: no checksum", p.Tensor)
		}
		b := make([]byte, p.Size())
		if _, err := p.ReadAt(b, 0); err != nil {
			t.Errorf("%s: %v", p.Tensor, err)
		}
		if got := safetensors.Checksum(b); got != want {
			t.Errorf("%s: read bytes sum to %08x, checksum %08x", p.Tensor, got, want)
		}
	}
	if _, err := m.Contents("nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown component: %v", err)
	}
	m.Close()
	if _, err := m.Contents(name); !errors.Is(err, ErrClosed) {
		t.Errorf("closed: %v", err)
	}
}

// A flipped bit in a tensor's bytes fails the ReadAt of its Contents part
// that completes it, and an empty tensor's empty read checks it (and
// passes: its checksum is the empty one's; the writers refuse a wrong one,
// and a header edited to name one is a damaged header, refused as such).
func TestModelContentsVerifies(t *testing.T) {
	dir := ckpttest.Dir(t, ckpttest.Weights{Tensors: ckpttest.Tensors(t, "a:F32[64] e:F32[0]")})
	checksummed(t, dir)
	path := filepath.Join(dir, "model.safetensors")
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	h := f.Header()
	f.Close()
	raw, _ := os.ReadFile(path)
	raw[h.DataOffset+7] ^= 0x10
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	c, err := m.Contents(m.Components()[0])
	if err != nil {
		t.Fatal(err)
	}
	p := &c.Tensors[0]
	b := make([]byte, p.Size())
	_, err1 := p.ReadAt(b[:128], 0)
	_, err2 := p.ReadAt(b[128:], 128)
	var ce *safetensors.ChecksumError
	if err1 != nil || !errors.As(err2, &ce) || ce.Tensor != "a" {
		t.Errorf("reads of a flipped tensor: %v, %v", err1, err2)
	}
	if _, err := c.Tensors[1].ReadAt(nil, 0); err != nil {
		t.Errorf("empty tensor with its checksum: %v", err)
	}
}
