package ckpt

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/variant"
)

// pipeTensors are a component's tensors, in dtype dt.
func pipeTensors(prefix string, dt dtype.DType) []ckpttest.Tensor {
	return []ckpttest.Tensor{
		ckpttest.T(prefix+".proj.weight", dt, 8, 6), ckpttest.T(prefix+".proj.bias", dt, 8),
		ckpttest.T(prefix+".out.weight", dt, 6, 8), ckpttest.T(prefix+".norm.weight", dt, 6),
	}
}

// torchPipeline writes a pipeline whose components hold PyTorch weights
// where torch is true and the same tensors as safetensors weights
// otherwise: unet safetensors (untagged and fp16; with torch, also
// PyTorch weights of other values, which its safetensors ones win over),
// text_encoder untagged and fp16 in a sharded set (naming layout), vae
// untagged only.
func torchPipeline(t *testing.T, torch bool, layout ckpttest.Layout) string {
	t.Helper()
	pt := func(w ckpttest.Weights) ckpttest.Weights { w.PyTorch = torch; return w }
	dpm := ckpttest.DiffusersPrefix
	unet := []ckpttest.Weights{
		{Prefix: dpm, Tensors: pipeTensors("unet", dtype.F32)},
		{Prefix: dpm, Variant: "fp16", Tensors: pipeTensors("unet", dtype.F16)},
	}
	if torch {
		unet = append(unet,
			ckpttest.Weights{PyTorch: true, Prefix: dpm, Tensors: pipeTensors("unet", dtype.BF16)},
			ckpttest.Weights{PyTorch: true, Prefix: dpm, Variant: "fp16", Tensors: pipeTensors("unet", dtype.BF16)})
	}
	te := ckpttest.TransformersPrefix
	if torch {
		te = ckpttest.TorchPrefix
	}
	return ckpttest.NewPipeline(t, ckpttest.Pipeline{Components: []ckpttest.Component{
		{Name: "unet", Weights: unet},
		{Name: "text_encoder", Library: "transformers", Class: "CLIPTextModel", Weights: []ckpttest.Weights{
			pt(ckpttest.Weights{Prefix: te, Tensors: pipeTensors("te", dtype.F32)}),
			pt(ckpttest.Weights{Prefix: te, Variant: "fp16", Shards: 2, Layout: layout, Tensors: pipeTensors("te", dtype.F16)}),
		}, Files: map[string]string{"config.json": "{}"}},
		{Name: "vae", Weights: []ckpttest.Weights{pt(ckpttest.Weights{Prefix: dpm, Tensors: pipeTensors("vae", dtype.F32)})}},
		{Name: "scheduler", Files: map[string]string{"scheduler_config.json": "{}"}},
	}})
}

// TestTorchPipeline: a pipeline whose components hold PyTorch weights
// loads every component, bit for bit as the pipeline of the same tensors
// in safetensors files does, under a variant with fallbacks and a dtype
// per component; safetensors weights win in a component that has both.
func TestTorchPipeline(t *testing.T) {
	for _, layout := range []ckpttest.Layout{ckpttest.Current, ckpttest.Legacy} {
		pt, st := torchPipeline(t, true, layout), torchPipeline(t, false, layout)
		for _, tc := range []struct {
			name string
			opts []Option
			want map[string]dtype.DType // each component's loaded dtype
		}{
			{"untagged, as stored", nil, map[string]dtype.DType{"unet": dtype.F32, "text_encoder": dtype.F32, "vae": dtype.F32}},
			{"fp16, per component", []Option{WithVariant("fp16"), WithComponentDType("text_encoder", To(dtype.F32)), WithComponentDType("vae", To(dtype.BF16))},
				map[string]dtype.DType{"unet": dtype.F16, "text_encoder": dtype.F32, "vae": dtype.BF16}},
			{"fp16, F32", []Option{WithVariant("fp16"), WithDType(To(dtype.F32)), WithComponentDType("unet", AsStored)},
				map[string]dtype.DType{"unet": dtype.F16, "text_encoder": dtype.F32, "vae": dtype.F32}},
		} {
			m, ref := mustOpen(t, pt, tc.opts...), mustOpen(t, st, tc.opts...)
			if !slices.Equal(m.Components(), []string{"text_encoder", "unet", "vae"}) {
				t.Fatalf("%s: components %v", tc.name, m.Components())
			}
			w, rw := mustLoad(t, m), mustLoad(t, ref)
			if w.Len() != 12 || w.Len() != rw.Len() {
				t.Fatalf("%s: %d tensors, want %d", tc.name, w.Len(), rw.Len())
			}
			for name, rt := range rw.All() {
				got, err := w.Tensor(name)
				if err != nil {
					t.Errorf("%s: %v", tc.name, err)
					continue
				}
				if got.DType != tc.want[got.Component] || got.DType != rt.DType || !slices.Equal(got.Shape, rt.Shape) || !bytes.Equal(got.Bytes(), rt.Bytes()) {
					t.Errorf("%s: %s: %s %v, want %s %v and the safetensors pipeline's bytes", tc.name, name, got.DType, got.Shape, rt.DType, rt.Shape)
				}
			}
			p, err := m.Plan()
			if err != nil {
				t.Fatal(err)
			}
			formats := map[string]string{}
			for _, c := range p.Components {
				formats[c.Name] = c.Format
			}
			if formats["unet"] != variant.FormatSafetensors || formats["text_encoder"] != variant.FormatPyTorch || formats["vae"] != variant.FormatPyTorch {
				t.Errorf("%s: formats %v", tc.name, formats)
			}
			b, _ := json.Marshal(p)
			if !strings.Contains(string(b), `"format":"pytorch"`) || !strings.Contains(string(b), "safetensors weights win over them") {
				t.Errorf("%s: plan JSON says nothing of the PyTorch weights: %s", tc.name, b)
			}
		}
	}

	// The plan explains each component's files.
	m := mustOpen(t, torchPipeline(t, true, ckpttest.Legacy), WithVariant("fp16"))
	p, err := m.Plan()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range p.Components {
		switch c.Name {
		case "text_encoder":
			if c.Layout != variant.LayoutLegacySharded || c.Variant != "fp16" || len(c.Files) != 2 || !strings.HasSuffix(c.Files[0], "pytorch_model-00001-of-00002.fp16.bin") ||
				c.ReadStrategy != "pread" || !strings.Contains(c.ReadStrategyReason, "PyTorch") {
				t.Errorf("text_encoder: %+v", c)
			}
		case "vae":
			if c.Variant != "" || !slices.ContainsFunc(p.Warnings, func(w string) bool { return strings.Contains(w, "vae has no fp16 weights") }) {
				t.Errorf("vae: %+v, warnings %v", c, p.Warnings)
			}
		case "unet":
			ig := map[string]string{}
			for _, i := range c.Ignored {
				ig[i.File] = i.Reason
			}
			if !strings.Contains(ig["diffusion_pytorch_model.fp16.bin"], "safetensors weights win") || !strings.Contains(ig["diffusion_pytorch_model.bin"], "untagged") {
				t.Errorf("unet ignored %v", ig)
			}
		}
	}

	// A variant no component has is refused, as for safetensors.
	if _, err := Open(torchPipeline(t, true, ckpttest.Current), WithVariant("bf16")); !errors.Is(err, ErrResolve) || !errors.Is(err, variant.ErrVariantNotFound) {
		t.Errorf("bf16: %v", err)
	}
}

// TestTorchPipelineHFCache: a pipeline in the Hugging Face cache layout
// (every file of the snapshot a link to a blob named by its hash) loads
// its PyTorch components, sharded ones included, with WithFollowSymlinks,
// and is refused without it.
func TestTorchPipelineHFCache(t *testing.T) {
	src := torchPipeline(t, true, ckpttest.Current)
	repo := t.TempDir()
	snap := filepath.Join(repo, "snapshots", "rev")
	n := 0
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		n++
		blob := filepath.Join(repo, "blobs", fmt.Sprintf("%064x", n))
		if err := os.MkdirAll(filepath.Dir(blob), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(blob, b, 0o644); err != nil {
			return err
		}
		link := filepath.Join(snap, rel)
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			return err
		}
		target, _ := filepath.Rel(filepath.Dir(link), blob)
		return os.Symlink(target, link)
	})
	if err != nil {
		t.Skip("no symlinks:", err)
	}
	want := mustLoad(t, mustOpen(t, src, WithVariant("fp16")))
	got := mustLoad(t, mustOpen(t, snap, WithVariant("fp16"), WithFollowSymlinks()))
	if got.Len() != want.Len() {
		t.Fatalf("%d tensors, want %d", got.Len(), want.Len())
	}
	for name, wt := range want.All() {
		if gt, err := got.Tensor(name); err != nil || !bytes.Equal(gt.Bytes(), wt.Bytes()) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := Open(snap, WithVariant("fp16")); !errors.Is(err, ErrResolve) || !errors.Is(err, variant.ErrInsecurePath) {
		t.Errorf("without WithFollowSymlinks: %v", err)
	}
}

// TestTorchPipelineFS: a pipeline of PyTorch components loads from an
// fs.FS as from its folder.
func TestTorchPipelineFS(t *testing.T) {
	root := torchPipeline(t, true, ckpttest.Legacy)
	want := mustLoad(t, mustOpen(t, root, WithVariant("fp16"), WithComponentDType("vae", To(dtype.F16))))
	m := mustOpen(t, filepath.Base(root), WithFS(os.DirFS(filepath.Dir(root))), WithVariant("fp16"), WithComponentDType("vae", To(dtype.F16)))
	got := mustLoad(t, m)
	if got.Len() != want.Len() {
		t.Fatalf("%d tensors, want %d", got.Len(), want.Len())
	}
	for name, wt := range want.All() {
		if gt, err := got.Tensor(name); err != nil || gt.DType != wt.DType || !bytes.Equal(gt.Bytes(), wt.Bytes()) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
