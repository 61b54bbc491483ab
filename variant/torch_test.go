package variant_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/variant"
)

// pt returns w as PyTorch weights.
func pt(w ckpttest.Weights) ckpttest.Weights { w.PyTorch = true; return w }

func TestFormatOf(t *testing.T) {
	for name, want := range map[string]string{
		"pytorch_model.bin":                           variant.FormatPyTorch,
		"pytorch_model.fp16.bin":                      variant.FormatPyTorch,
		"pytorch_model.bin.index.json":                variant.FormatPyTorch,
		"pytorch_model.bin.index.fp16.json":           variant.FormatPyTorch,
		"pytorch_model.bin.fp16.index.json":           variant.FormatPyTorch,
		"pytorch_model-00001-of-00002.bin":            variant.FormatPyTorch,
		"pytorch_model.fp16-00001-of-00002.bin":       variant.FormatPyTorch,
		"pytorch_model-00001-of-00002.fp16.bin":       variant.FormatPyTorch,
		"diffusion_pytorch_model.bin":                 variant.FormatPyTorch,
		"diffusion_pytorch_model.fp16.bin":            variant.FormatPyTorch,
		"diffusion_pytorch_model.bin.index.bf16.json": variant.FormatPyTorch,
		"model.safetensors":                           variant.FormatSafetensors,
		"diffusion_pytorch_model.fp16.safetensors":    variant.FormatSafetensors,
		"model.bin":                                          "",
		"pytorch_model.pt":                                   "",
		"pytorch_model.safetensors":                          "",
		"diffusion_pytorch_model.ckpt":                       "",
		"pytorch_model.fp-16.bin":                            "",
		"pytorch_model-00001-of-00002.swap-0123456789ab.bin": "", // package shard writes no PyTorch sets
	} {
		if got := variant.FormatOf(name); got != want {
			t.Errorf("FormatOf(%s) = %q, want %q", name, got, want)
		}
	}
}

// TestResolveTorch: PyTorch weights resolve by the naming rules of
// safetensors weights, with ".bin": single files and sharded sets, each
// variant naming, with the same warnings; the plan names them for the
// caller to open.
func TestResolveTorch(t *testing.T) {
	for _, tc := range []struct {
		name     string
		w        ckpttest.Weights
		layout   string
		index    string
		files    []string
		warnings []string
	}{
		{"single", ckpttest.Weights{Tensors: f32}, variant.LayoutSingle, "", []string{"pytorch_model.bin"}, nil},
		{"single fp16", ckpttest.Weights{Variant: "fp16", Tensors: f16}, variant.LayoutSingle, "", []string{"pytorch_model.fp16.bin"}, nil},
		{"diffusers fp16", ckpttest.Weights{Prefix: dpm, Variant: "fp16", Tensors: f16}, variant.LayoutSingle, "", []string{"diffusion_pytorch_model.fp16.bin"}, nil},
		{"sharded", ckpttest.Weights{Shards: 2, Tensors: f32}, variant.LayoutSharded, "pytorch_model.bin.index.json",
			[]string{"pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin"}, nil},
		{"sharded fp16", ckpttest.Weights{Variant: "fp16", Shards: 2, Tensors: f16}, variant.LayoutSharded, "pytorch_model.bin.index.fp16.json",
			[]string{"pytorch_model.fp16-00001-of-00002.bin", "pytorch_model.fp16-00002-of-00002.bin"}, nil},
		{"legacy fp16", ckpttest.Weights{Variant: "fp16", Shards: 2, Layout: ckpttest.Legacy, Tensors: f16}, variant.LayoutLegacySharded, "pytorch_model.bin.index.fp16.json",
			[]string{"pytorch_model-00001-of-00002.fp16.bin", "pytorch_model-00002-of-00002.fp16.bin"},
			[]string{"legacy variant naming", "pytorch_model.fp16-00001-of-0000N.bin"}},
		{"legacy index name", ckpttest.Weights{Prefix: dpm, Variant: "fp16", Shards: 2, Layout: ckpttest.LegacyIndexName, Tensors: f16}, variant.LayoutLegacySharded,
			"diffusion_pytorch_model.bin.fp16.index.json",
			[]string{"diffusion_pytorch_model-00001-of-00002.fp16.bin", "diffusion_pytorch_model-00002-of-00002.fp16.bin"},
			[]string{"legacy name", "diffusion_pytorch_model.bin.index.fp16.json"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := ckpttest.Dir(t, pt(tc.w))
			p := mustResolve(t, dir, tc.w.Variant)
			if p.Format != variant.FormatPyTorch || p.Layout != tc.layout || p.Index != tc.index || !slices.Equal(p.Files, tc.files) || len(p.Ignored) != 0 {
				t.Fatalf("plan %+v", p)
			}
			for _, w := range tc.warnings {
				if !hasWarning(p, w) {
					t.Errorf("no warning %q in %v", w, p.Warnings)
				}
			}
			if want := filepath.Join(dir, cmpOr(tc.index, tc.files[0])); p.Entry() != want {
				t.Errorf("entry %s, want %s", p.Entry(), want)
			}
			if _, err := p.Open(); !errors.Is(err, variant.ErrInvalidArgument) || !strings.Contains(err.Error(), "package torch") {
				t.Errorf("Open of a PyTorch plan: %v", err)
			}
			paths := p.Paths()
			slices.Reverse(paths)
			if err := p.CheckFiles(paths); err != nil {
				t.Errorf("CheckFiles(its own files): %v", err)
			}
			if err := p.CheckFiles(append(paths, "pytorch_model-00003-of-00003.bin")); !errors.Is(err, variant.ErrInvalidLayout) || !strings.Contains(err.Error(), "plan changed") {
				t.Errorf("CheckFiles(other files): %v", err)
			}
			b, _ := json.Marshal(p)
			if !strings.Contains(string(b), `"format":"pytorch"`) {
				t.Errorf("JSON %s", b)
			}
		})
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// TestTorchSafetensorsWin: in one folder, safetensors weights of the
// variant win over PyTorch ones, which are listed as ignored, and the two
// are never mixed; the variant is chosen first, so PyTorch weights of the
// requested variant win over safetensors weights of another.
func TestTorchSafetensorsWin(t *testing.T) {
	dir := ckpttest.Dir(t,
		ckpttest.Weights{Tensors: f32},
		pt(ckpttest.Weights{Tensors: f32}),
		pt(ckpttest.Weights{Shards: 2, Tensors: f32}),
		pt(ckpttest.Weights{Variant: "fp16", Tensors: f16}))
	p := mustResolve(t, dir, "")
	if p.Format != variant.FormatSafetensors || !slices.Equal(p.Files, []string{"model.safetensors"}) {
		t.Fatalf("plan %+v", p)
	}
	ig := ignored(p)
	for _, f := range []string{"pytorch_model.bin", "pytorch_model.bin.index.json", "pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin"} {
		if !strings.Contains(ig[f], "PyTorch weights; the component's safetensors weights win") {
			t.Errorf("%s ignored for %q", f, ig[f])
		}
	}
	if !strings.Contains(ig["pytorch_model.fp16.bin"], "variant-tagged (fp16)") {
		t.Errorf("fp16 ignored for %q", ig["pytorch_model.fp16.bin"])
	}
	loadsOnly(t, p, f32[0].DType)

	p = mustResolve(t, dir, "fp16")
	if p.Format != variant.FormatPyTorch || !slices.Equal(p.Files, []string{"pytorch_model.fp16.bin"}) {
		t.Fatalf("fp16 plan %+v", p)
	}
	if r := ignored(p)["model.safetensors"]; !strings.Contains(r, "untagged; the plan loads variant fp16") {
		t.Errorf("model.safetensors ignored for %q", r)
	}

	// An incomplete safetensors set is not replaced by PyTorch weights:
	// its error is the component's.
	broken := ckpttest.Dir(t, pt(ckpttest.Weights{Tensors: f32}))
	os.WriteFile(filepath.Join(broken, "model.safetensors"), []byte("not a header"), 0o644)
	wantErr(t, broken, "", variant.ErrInvalidLayout, "model.safetensors")
}

// TestTorchRefusals: PyTorch indexes are refused by the rules of
// safetensors ones (tags, foreign shards, missing shards), and a missing
// variant, ambiguous prefixes and complete single files beside indexes
// are handled alike.
func TestTorchRefusals(t *testing.T) {
	t.Run("variant not found", func(t *testing.T) {
		dir := ckpttest.Dir(t, pt(ckpttest.Weights{Tensors: f32}))
		p := wantErr(t, dir, "fp16", variant.ErrVariantNotFound, "no weights for variant fp16; untagged weights exist")
		if r := ignored(p)["pytorch_model.bin"]; !strings.Contains(r, "untagged") {
			t.Errorf("ignored for %q", r)
		}
		dir = ckpttest.Dir(t, pt(ckpttest.Weights{Variant: "bf16", Tensors: bf16}))
		wantErr(t, dir, "", variant.ErrVariantNotFound, "untagged not found", "bf16")
	})
	t.Run("variant mismatch", func(t *testing.T) {
		dir := ckpttest.Dir(t, pt(ckpttest.Weights{Variant: "fp16", Shards: 2, Tensors: f16}), pt(ckpttest.Weights{Shards: 2, Tensors: f32}))
		wm := map[string]string{"a.weight": "pytorch_model.fp16-00001-of-00002.bin", "b.weight": "pytorch_model-00002-of-00002.bin"}
		if err := ckpttest.WriteIndex(filepath.Join(dir, "pytorch_model.bin.index.fp16.json"), wm, nil); err != nil {
			t.Fatal(err)
		}
		wantErr(t, dir, "fp16", variant.ErrInvalidLayout, "variant mismatch", "pytorch_model-00002-of-00002.bin", "refusing to mix")
	})
	t.Run("foreign shard", func(t *testing.T) {
		for _, shard := range []string{"model-00001-of-00002.safetensors", "../pytorch_model-00001-of-00002.bin", "diffusion_pytorch_model-00001-of-00002.bin"} {
			dir := ckpttest.Dir(t, pt(ckpttest.Weights{Shards: 2, Tensors: f32}))
			if err := ckpttest.WriteIndex(filepath.Join(dir, "pytorch_model.bin.index.json"), map[string]string{"a.weight": shard}, nil); err != nil {
				t.Fatal(err)
			}
			wantErr(t, dir, "", variant.ErrInvalidLayout, "foreign shard", shard)
		}
	})
	t.Run("missing shard", func(t *testing.T) {
		dir := ckpttest.Dir(t, pt(ckpttest.Weights{Shards: 2, Tensors: f32}))
		os.Remove(filepath.Join(dir, "pytorch_model-00002-of-00002.bin"))
		p := wantErr(t, dir, "", variant.ErrMissingShard, "pytorch_model-00002-of-00002.bin")
		if r := ignored(p)["pytorch_model.bin.index.json"]; !strings.Contains(r, "incomplete") {
			t.Errorf("index ignored for %q", r)
		}
	})
	t.Run("invalid index", func(t *testing.T) {
		dir := ckpttest.Dir(t, pt(ckpttest.Weights{Shards: 2, Tensors: f32}))
		os.WriteFile(filepath.Join(dir, "pytorch_model.bin.index.json"), []byte(`{"weight_map": {}}`), 0o644)
		wantErr(t, dir, "", variant.ErrInvalidLayout, "invalid index", "empty")
	})
	t.Run("not regular", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Mkdir(filepath.Join(dir, "pytorch_model.bin"), 0o755); err != nil {
			t.Fatal(err)
		}
		wantErr(t, dir, "", variant.ErrNotRegular, "pytorch_model.bin")
	})
	t.Run("single beside index", func(t *testing.T) {
		dir := ckpttest.Dir(t, pt(ckpttest.Weights{Tensors: f32}), pt(ckpttest.Weights{Shards: 2, Tensors: f32}))
		p := mustResolve(t, dir, "")
		if p.Layout != variant.LayoutSingle || !slices.Equal(p.Files, []string{"pytorch_model.bin"}) ||
			!hasWarning(p, "both complete", "pytorch_model.bin.index.json") {
			t.Fatalf("plan %+v", p)
		}
	})
	t.Run("ambiguous prefix", func(t *testing.T) {
		dir := ckpttest.Dir(t, pt(ckpttest.Weights{Tensors: f32}), pt(ckpttest.Weights{Prefix: dpm, Tensors: f32}))
		wantErr(t, dir, "", variant.ErrInvalidLayout, "ambiguous prefix", "pytorch_model", dpm)
	})
}

// TestPipelineTorch: a pipeline whose components hold safetensors weights,
// PyTorch weights, or both resolves every component, each to one format;
// a component without the requested variant falls back to its untagged
// weights, whatever their format, as for safetensors.
func TestPipelineTorch(t *testing.T) {
	root := ckpttest.NewPipeline(t, ckpttest.Pipeline{Components: []ckpttest.Component{
		{Name: "unet", Weights: []ckpttest.Weights{{Prefix: dpm, Tensors: f32}, {Prefix: dpm, Variant: "fp16", Tensors: f16}, pt(ckpttest.Weights{Prefix: dpm, Variant: "fp16", Tensors: f16})}},
		{Name: "text_encoder", Library: "transformers", Class: "CLIPTextModel", Weights: []ckpttest.Weights{
			pt(ckpttest.Weights{Tensors: f32}), pt(ckpttest.Weights{Variant: "fp16", Shards: 2, Layout: ckpttest.Legacy, Tensors: f16}),
			pt(ckpttest.Weights{Prefix: dpm, Variant: "fp16", Tensors: f16})}},
		{Name: "vae", Weights: []ckpttest.Weights{pt(ckpttest.Weights{Prefix: dpm, Tensors: f32})}},
		{Name: "tokenizer", Files: map[string]string{"vocab.json": "{}"}},
	}})
	pp, err := variant.ResolvePipeline(root, "fp16")
	if err != nil {
		t.Fatal(err)
	}
	unet, te, vae := pp.Component("unet"), pp.Component("text_encoder"), pp.Component("vae")
	if len(pp.Components) != 3 || unet == nil || te == nil || vae == nil {
		t.Fatalf("plan %+v", pp)
	}
	if unet.Format != variant.FormatSafetensors || !slices.Equal(unet.Files, []string{"diffusion_pytorch_model.fp16.safetensors"}) ||
		!strings.Contains(ignored(unet)["diffusion_pytorch_model.fp16.bin"], "safetensors weights win") {
		t.Errorf("unet %+v", unet)
	}
	if te.Format != variant.FormatPyTorch || te.Layout != variant.LayoutLegacySharded || te.Index != "pytorch_model.bin.index.fp16.json" ||
		!slices.Equal(te.Files, []string{"pytorch_model-00001-of-00002.fp16.bin", "pytorch_model-00002-of-00002.fp16.bin"}) ||
		!hasWarning(te, "prefix of the component's library transformers") {
		t.Errorf("text_encoder %+v", te)
	}
	if vae.Format != variant.FormatPyTorch || !vae.Fallback || vae.Variant != "" || !slices.Equal(vae.Files, []string{"diffusion_pytorch_model.bin"}) ||
		!slices.ContainsFunc(pp.Warnings, func(w string) bool { return strings.Contains(w, "component vae has no fp16 weights") }) {
		t.Errorf("vae %+v, warnings %v", vae, pp.Warnings)
	}
	if _, err := pp.Open("vae"); !errors.Is(err, variant.ErrInvalidArgument) {
		t.Errorf("Open(vae): %v", err)
	}
	b, _ := json.Marshal(pp)
	if strings.Count(string(b), `"format":"pytorch"`) != 2 || strings.Count(string(b), `"format":"safetensors"`) != 1 {
		t.Errorf("JSON %s", b)
	}

	// No component has bf16: refused, listing each one's variants.
	_, err = variant.ResolvePipeline(root, "bf16")
	if !errors.Is(err, variant.ErrVariantNotFound) || !strings.Contains(err.Error(), "text_encoder: fp16") || !strings.Contains(err.Error(), "vae: none") {
		t.Errorf("bf16: %v", err)
	}
}

func TestSafetensorsName(t *testing.T) {
	for in, want := range map[string]string{
		"pytorch_model.bin":                               "model.safetensors",
		"pytorch_model.bin.index.fp16.json":               "model.safetensors.index.fp16.json",
		"pytorch_model.bin.bin.index.json":                "model.safetensors.bin.index.json", // the variant "bin"
		"pytorch_model.bin.bin":                           "model.bin.safetensors",
		"diffusion_pytorch_model-00001-of-00002.fp16.bin": "diffusion_pytorch_model-00001-of-00002.fp16.safetensors",
		"diffusion_pytorch_model.fp16-00001-of-00002.bin": "diffusion_pytorch_model.fp16-00001-of-00002.safetensors",
		"model.safetensors":                               "",
		"model.bin":                                       "",
	} {
		got, ok := variant.SafetensorsName(in)
		if got != want || ok != (want != "") {
			t.Errorf("SafetensorsName(%s) = %s, %v; want %s", in, got, ok, want)
		}
		if ok && variant.FormatOf(got) != variant.FormatSafetensors {
			t.Errorf("%s: %s is not a safetensors weights name", in, got)
		}
	}
}

// FuzzTorchIndex: whatever a PyTorch index holds, resolution returns a
// plan naming only shards of the index's set that are in the folder, or a
// typed error; it never panics.
func FuzzTorchIndex(f *testing.F) {
	for _, s := range []string{`{"weight_map": {"a": "pytorch_model-00001-of-00002.bin", "b": "pytorch_model-00002-of-00002.bin"}}`,
		`{"weight_map": {"a": "../pytorch_model-00001-of-00002.bin"}}`, `{"weight_map": {"a": "pytorch_model.fp16-00001-of-00002.bin"}}`,
		`{"weight_map": {}}`, `[]`, `{"weight_map": {"a": 1}}`, `{"weight_map": {"a": "pytorch_model-00003-of-00002.bin"}}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, index string) {
		fsys := fstest.MapFS{
			"m/pytorch_model.bin.index.json":          {Data: []byte(index)},
			"m/pytorch_model-00001-of-00002.bin":      {Data: []byte("x")},
			"m/pytorch_model-00002-of-00002.bin":      {Data: []byte("x")},
			"m/pytorch_model.fp16-00001-of-00002.bin": {Data: []byte("x")},
		}
		p, err := variant.ResolveComponent("m", "", variant.WithFS(fsys))
		if err != nil {
			var e *variant.Error
			if !errors.As(err, &e) || p.Error == nil {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		for _, f := range p.Files {
			if _, ok := fsys["m/"+f]; !ok || variant.FormatOf(f) != variant.FormatPyTorch || strings.Contains(f, "fp16") {
				t.Fatalf("plan names %s: %+v", f, p)
			}
		}
	})
}
