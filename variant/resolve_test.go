package variant_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/testutil"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/shard"
	"github.com/ckpt-go/ckpt/variant"
)

// weights returns 4 tensors of dtype dt; different dtypes tell variants
// apart when a plan is opened.
func weights(dt dtype.DType) []ckpttest.Tensor {
	return []ckpttest.Tensor{
		ckpttest.T("a.weight", dt, 4, 4), ckpttest.T("a.bias", dt, 4),
		ckpttest.T("b.weight", dt, 4, 4), ckpttest.T("b.bias", dt, 4),
	}
}

var (
	f32  = weights(dtype.F32)
	f16  = weights(dtype.F16)
	bf16 = weights(dtype.BF16)
)

// mustResolve resolves and fails the test on error.
func mustResolve(t *testing.T, dir, v string) *variant.Plan {
	t.Helper()
	p, err := variant.ResolveComponent(dir, v)
	if err != nil {
		t.Fatalf("ResolveComponent(%q): %v", v, err)
	}
	if p.Error != nil {
		t.Fatalf("plan has an error without err: %+v", p.Error)
	}
	return p
}

// wantErr resolves and checks the error kind, that the plan carries the
// same kind, and that the message names want.
func wantErr(t *testing.T, dir, v string, kind variant.ErrorKind, names ...string) *variant.Plan {
	t.Helper()
	p, err := variant.ResolveComponent(dir, v)
	if !errors.Is(err, kind) {
		t.Fatalf("ResolveComponent(%q) = %v, want %s", v, err, kind)
	}
	if p == nil || p.Error == nil || p.Error.Kind != kind.String() || len(p.Files) != 0 {
		t.Fatalf("plan %+v", p)
	}
	for _, n := range names {
		q := strconv.Quote(n)
		if !strings.Contains(err.Error(), n) && !strings.Contains(err.Error(), q[1:len(q)-1]) {
			t.Errorf("error %q does not mention %q", err, n)
		}
	}
	return p
}

// loadsOnly opens the plan and checks every tensor has dtype dt.
func loadsOnly(t *testing.T, p *variant.Plan, dt dtype.DType) {
	t.Helper()
	c, err := p.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Len() != 4 {
		t.Errorf("%d tensors", c.Len())
	}
	for name, tt := range c.Tensors() {
		if tt.DType() != dt {
			t.Errorf("%s is %s, want %s: variants mixed", name, tt.DType(), dt)
		}
	}
}

func ignored(p *variant.Plan) map[string]string {
	m := map[string]string{}
	for _, ig := range p.Ignored {
		m[ig.File] = ig.Reason
	}
	return m
}

func hasWarning(p *variant.Plan, parts ...string) bool {
	for _, w := range p.Warnings {
		ok := true
		for _, s := range parts {
			ok = ok && strings.Contains(w, s)
		}
		if ok {
			return true
		}
	}
	return false
}

func TestSingleFiles(t *testing.T) {
	dir := ckpttest.Dir(t,
		ckpttest.Weights{Tensors: f32},
		ckpttest.Weights{Variant: "fp16", Tensors: f16},
	)
	p := mustResolve(t, dir, "fp16")
	if p.Layout != variant.LayoutSingle || !slices.Equal(p.Files, []string{"model.fp16.safetensors"}) || len(p.Warnings) != 0 {
		t.Fatalf("plan %+v", p)
	}
	if r := ignored(p)["model.safetensors"]; !strings.Contains(r, "untagged") {
		t.Errorf("untagged file ignored for %q", r)
	}
	loadsOnly(t, p, dtype.F16)

	p = mustResolve(t, dir, "")
	if !slices.Equal(p.Files, []string{"model.safetensors"}) {
		t.Fatalf("plan %+v", p)
	}
	if r := ignored(p)["model.fp16.safetensors"]; !strings.Contains(r, "variant-tagged") {
		t.Errorf("fp16 file ignored for %q", r)
	}
	loadsOnly(t, p, dtype.F32)
}

func TestVariantNames(t *testing.T) {
	dir := ckpttest.Dir(t, ckpttest.Weights{Variant: "FP16", Tensors: f16})
	for _, bad := range []string{"fp-16", "fp16.x", "a/b", "..", " fp16", "fp16\n"} {
		wantErr(t, dir, bad, variant.ErrInvalidArgument, ": invalid variant")
	}
	// Case-sensitive.
	p := wantErr(t, dir, "fp16", variant.ErrVariantNotFound, "fp16", "FP16")
	if r := ignored(p)["model.FP16.safetensors"]; !strings.Contains(r, "variant FP16") {
		t.Errorf("ignored for %q", r)
	}
	mustResolve(t, dir, "FP16")
}

func TestStrayFilesNeverCount(t *testing.T) {
	strays := []string{
		"model.safetensors.bak", "pytorch_model.pt", "model.bin", "adapter_model.safetensors",
		"model.fp16x.safetensors", "model.fp16.safetensors.tmp", "README.md", "model-1-of-2.fp16.safetensors",
		"model.fp16-00001-of-00002.safetensors.part", "Model.fp16.safetensors", "model.fp-16.safetensors",
	}
	dir := t.TempDir()
	for _, s := range strays {
		os.WriteFile(filepath.Join(dir, s), []byte("not weights"), 0o644)
	}
	p := wantErr(t, dir, "fp16", variant.ErrVariantNotFound)
	if r := ignored(p)["model.fp16x.safetensors"]; !strings.Contains(r, "fp16x") {
		t.Errorf("fp16x ignored for %q", r)
	}
	if _, ok := ignored(p)["README.md"]; ok {
		t.Error("README listed as ignored weights")
	}
	if r := ignored(p)["pytorch_model.pt"]; r == "" {
		t.Error("pytorch_model.pt not listed")
	}
	wantErr(t, dir, "", variant.ErrVariantNotFound, "fp16x", ": untagged not found")

	// With real weights beside them, the strays are still never loaded.
	if _, err := ckpttest.WriteWeights(dir, ckpttest.Weights{Variant: "fp16", Tensors: f16}); err != nil {
		t.Fatal(err)
	}
	p = mustResolve(t, dir, "fp16")
	if !slices.Equal(p.Files, []string{"model.fp16.safetensors"}) {
		t.Fatalf("files %v", p.Files)
	}
	loadsOnly(t, p, dtype.F16)

	empty := t.TempDir()
	os.WriteFile(filepath.Join(empty, "config.json"), []byte("{}"), 0o644)
	wantErr(t, empty, "", variant.ErrNoWeights, "no safetensors weights under the recognized names")
	wantErr(t, empty, "fp16", variant.ErrVariantNotFound, "no safetensors weights at all")
	wantErr(t, filepath.Join(empty, "absent"), "", variant.ErrNoWeights, ": read dir")
	file := filepath.Join(empty, "model.safetensors")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	wantErr(t, file, "", variant.ErrInvalidArgument, "a file, not a folder")
}

func TestShardedLayouts(t *testing.T) {
	for _, tc := range []struct {
		name     string
		w        ckpttest.Weights
		layout   string
		index    string
		warnings []string
	}{
		{"untagged", ckpttest.Weights{Shards: 2, Tensors: f32}, variant.LayoutSharded, "model.safetensors.index.json", nil},
		{"current", ckpttest.Weights{Variant: "fp16", Shards: 2, Tensors: f16}, variant.LayoutSharded, "model.safetensors.index.fp16.json", nil},
		{"legacy", ckpttest.Weights{Variant: "fp16", Shards: 2, Layout: ckpttest.Legacy, Tensors: f16}, variant.LayoutLegacySharded,
			"model.safetensors.index.fp16.json", []string{"legacy variant naming", "model.fp16-00001-of-0000N.safetensors"}},
		{"legacy index name", ckpttest.Weights{Variant: "fp16", Shards: 2, Layout: ckpttest.LegacyIndexName, Tensors: f16}, variant.LayoutLegacySharded,
			"model.safetensors.fp16.index.json", []string{"legacy name", "model.safetensors.index.fp16.json"}},
		{"diffusers", ckpttest.Weights{Prefix: ckpttest.DiffusersPrefix, Variant: "fp16", Shards: 2, Tensors: f16}, variant.LayoutSharded,
			"diffusion_pytorch_model.safetensors.index.fp16.json", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := ckpttest.Dir(t, tc.w)
			p := mustResolve(t, dir, tc.w.Variant)
			if p.Layout != tc.layout || p.Index != tc.index || len(p.Files) != 2 || len(p.Ignored) != 0 {
				t.Fatalf("plan %+v", p)
			}
			for _, w := range tc.warnings {
				if !hasWarning(p, w) {
					t.Errorf("warnings %q lack %q", p.Warnings, w)
				}
			}
			if len(tc.warnings) == 0 && len(p.Warnings) != 0 {
				t.Errorf("warnings %q", p.Warnings)
			}
			dt := dtype.F16
			if tc.w.Variant == "" {
				dt = dtype.F32
			}
			loadsOnly(t, p, dt)
		})
	}
}

func TestCurrentIndexBeatsLegacy(t *testing.T) {
	// Legacy shards with both index names side by side.
	dir := ckpttest.Dir(t,
		ckpttest.Weights{Variant: "fp16", Shards: 2, Layout: ckpttest.LegacyIndexName, Tensors: f16},
		ckpttest.Weights{Variant: "fp16", Shards: 2, Layout: ckpttest.Legacy, Tensors: f16},
	)
	p := mustResolve(t, dir, "fp16")
	if p.Index != "model.safetensors.index.fp16.json" {
		t.Fatalf("plan %+v", p)
	}
	if r := ignored(p)["model.safetensors.fp16.index.json"]; !strings.Contains(r, "superseded") {
		t.Errorf("legacy index ignored for %q", r)
	}
	if !hasWarning(p, "model.safetensors.fp16.index.json") {
		t.Errorf("warnings %q", p.Warnings)
	}
	// If the current-name index is broken, the complete legacy one is used.
	os.WriteFile(filepath.Join(dir, "model.safetensors.index.fp16.json"), []byte(`{"weight_map":{"a.weight":"model-00009-of-00009.fp16.safetensors"}}`), 0o644)
	p = mustResolve(t, dir, "fp16")
	if p.Index != "model.safetensors.fp16.index.json" || !hasWarning(p, "incomplete index model.safetensors.index.fp16.json") {
		t.Fatalf("plan %+v", p)
	}
	loadsOnly(t, p, dtype.F16)
}

func TestSingleVersusIndex(t *testing.T) {
	build := func(t *testing.T) string {
		return ckpttest.Dir(t,
			ckpttest.Weights{Variant: "fp16", Tensors: f16},
			ckpttest.Weights{Variant: "fp16", Shards: 2, Tensors: f16},
		)
	}
	t.Run("both complete", func(t *testing.T) {
		dir := build(t)
		p := mustResolve(t, dir, "fp16")
		if p.Layout != variant.LayoutSingle || !hasWarning(p, "model.safetensors.index.fp16.json", "both complete") {
			t.Fatalf("plan %+v", p)
		}
		ig := ignored(p)
		if ig["model.safetensors.index.fp16.json"] == "" || ig["model.fp16-00001-of-00002.safetensors"] == "" {
			t.Errorf("ignored %v", ig)
		}
	})
	t.Run("only index complete", func(t *testing.T) {
		dir := build(t)
		os.WriteFile(filepath.Join(dir, "model.fp16.safetensors"), []byte("truncated"), 0o644)
		p := mustResolve(t, dir, "fp16")
		if p.Layout != variant.LayoutSharded || !hasWarning(p, "incomplete single file model.fp16.safetensors") {
			t.Fatalf("plan %+v", p)
		}
		loadsOnly(t, p, dtype.F16)
	})
	t.Run("only single complete", func(t *testing.T) {
		dir := build(t)
		os.Remove(filepath.Join(dir, "model.fp16-00002-of-00002.safetensors"))
		p := mustResolve(t, dir, "fp16")
		if p.Layout != variant.LayoutSingle || !hasWarning(p, "incomplete index model.safetensors.index.fp16.json", "model.fp16-00002-of-00002.safetensors") {
			t.Fatalf("plan %+v", p)
		}
	})
	t.Run("neither complete", func(t *testing.T) {
		dir := build(t)
		os.Remove(filepath.Join(dir, "model.fp16-00002-of-00002.safetensors"))
		os.WriteFile(filepath.Join(dir, "model.fp16.safetensors"), []byte("truncated"), 0o644)
		p := wantErr(t, dir, "fp16", variant.ErrInvalidLayout, "model.fp16.safetensors", "model.fp16-00002-of-00002.safetensors", ": invalid weights")
		if len(p.Ignored) < 3 {
			t.Errorf("ignored %v", p.Ignored)
		}
	})
}

func TestNeverMix(t *testing.T) {
	t.Run("variant index with untagged shards", func(t *testing.T) {
		dir := ckpttest.Dir(t, ckpttest.Weights{Shards: 2, Tensors: f32})
		data, _ := os.ReadFile(filepath.Join(dir, "model.safetensors.index.json"))
		os.WriteFile(filepath.Join(dir, "model.safetensors.index.fp16.json"), data, 0o644)
		wantErr(t, dir, "fp16", variant.ErrInvalidLayout, "model.safetensors.index.fp16.json", "model-00001-of-00002.safetensors", "untagged", ": variant mismatch")
		mustResolve(t, dir, "") // the untagged set itself is fine
	})
	t.Run("untagged index with variant shards", func(t *testing.T) {
		dir := ckpttest.Dir(t, ckpttest.Weights{Variant: "fp16", Shards: 2, Layout: ckpttest.Legacy, Tensors: f16})
		data, _ := os.ReadFile(filepath.Join(dir, "model.safetensors.index.fp16.json"))
		os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), data, 0o644)
		wantErr(t, dir, "", variant.ErrInvalidLayout, "model-00001-of-00002.fp16.safetensors", `variant "fp16"`, ": variant mismatch")
	})
	t.Run("index naming another variant", func(t *testing.T) {
		dir := ckpttest.Dir(t, ckpttest.Weights{Variant: "bf16", Shards: 2, Tensors: bf16})
		data, _ := os.ReadFile(filepath.Join(dir, "model.safetensors.index.bf16.json"))
		os.WriteFile(filepath.Join(dir, "model.safetensors.index.fp16.json"), data, 0o644)
		wantErr(t, dir, "fp16", variant.ErrInvalidLayout, "bf16", ": variant mismatch")
	})
	t.Run("index naming a foreign file", func(t *testing.T) {
		dir := ckpttest.Dir(t, ckpttest.Weights{Tensors: f32})
		ckpttest.WriteFile(filepath.Join(dir, "weights.safetensors"), f32, nil)
		ckpttest.WriteIndex(filepath.Join(dir, "model.safetensors.index.json"), map[string]string{"a.weight": "weights.safetensors"}, nil)
		wantErr(t, dir, "", variant.ErrInvalidLayout, "weights.safetensors", ": foreign shard")
	})
	t.Run("hugging face transformer folder", func(t *testing.T) {
		// diffusion_pytorch_model.bf16.safetensors beside F32 shards and a
		// non-variant index: each plan takes exactly one of them.
		dir := ckpttest.Dir(t,
			ckpttest.Weights{Prefix: ckpttest.DiffusersPrefix, Shards: 2, Tensors: f32},
			ckpttest.Weights{Prefix: ckpttest.DiffusersPrefix, Variant: "bf16", Tensors: bf16},
		)
		p := mustResolve(t, dir, "bf16")
		if !slices.Equal(p.Files, []string{"diffusion_pytorch_model.bf16.safetensors"}) || len(p.Ignored) != 3 {
			t.Fatalf("plan %+v", p)
		}
		loadsOnly(t, p, dtype.BF16)
		p = mustResolve(t, dir, "")
		if p.Index != "diffusion_pytorch_model.safetensors.index.json" || len(p.Files) != 2 {
			t.Fatalf("plan %+v", p)
		}
		loadsOnly(t, p, dtype.F32)
	})
}

func TestVariantNotFoundSaysWhatExists(t *testing.T) {
	dir := ckpttest.Dir(t, ckpttest.Weights{Tensors: f32}, ckpttest.Weights{Variant: "bf16", Tensors: bf16})
	wantErr(t, dir, "fp16", variant.ErrVariantNotFound, "untagged weights exist", "bf16")
	dir = ckpttest.Dir(t, ckpttest.Weights{Variant: "bf16", Tensors: bf16})
	wantErr(t, dir, "fp16", variant.ErrVariantNotFound, "no untagged weights", "bf16")
	dir = ckpttest.Dir(t, ckpttest.Weights{Tensors: f32})
	wantErr(t, dir, "fp16", variant.ErrVariantNotFound, "untagged weights exist")
}

func TestFailureKinds(t *testing.T) {
	sharded := func(t *testing.T) string { return ckpttest.Dir(t, ckpttest.Weights{Shards: 2, Tensors: f32}) }
	index := "model.safetensors.index.json"
	t.Run("missing shard", func(t *testing.T) {
		dir := sharded(t)
		os.Remove(filepath.Join(dir, "model-00001-of-00002.safetensors"))
		p := wantErr(t, dir, "", variant.ErrMissingShard, index, "model-00001-of-00002.safetensors")
		_, err := p.Open()
		if !errors.Is(err, variant.ErrMissingShard) || !errors.Is(err, shard.ErrMissingShard) {
			t.Errorf("Open of a failed plan: %v", err)
		}
	})
	t.Run("wrong shard", func(t *testing.T) {
		dir := sharded(t)
		ckpttest.WriteIndex(filepath.Join(dir, index), map[string]string{
			"a.weight": "model-00002-of-00002.safetensors", "a.bias": "model-00001-of-00002.safetensors",
			"b.weight": "model-00002-of-00002.safetensors", "b.bias": "model-00002-of-00002.safetensors",
		}, nil)
		p := wantErr(t, dir, "", variant.ErrInvalidLayout, "a.weight", "model-00002-of-00002.safetensors", ": tensor missing from shard: ")
		var e *variant.Error
		if perr := p.Err(); !errors.As(perr, &e) || e.Tensor != "a.weight" || e.File != index {
			t.Errorf("error %+v", e)
		}
	})
	t.Run("path traversal", func(t *testing.T) {
		for _, evil := range []string{"../model-00001-of-00002.safetensors", "/tmp/model-00001-of-00002.safetensors", `..\model-00001-of-00002.safetensors`, "C:model-00001-of-00002.safetensors", "sub/model-00001-of-00002.safetensors"} {
			dir := sharded(t)
			ckpttest.WriteIndex(filepath.Join(dir, index), map[string]string{"a.weight": evil}, nil)
			wantErr(t, dir, "", variant.ErrInsecurePath, evil)
			p, _ := variant.ResolveComponent(dir, "")
			if !errors.Is(p.Err(), shard.ErrInsecurePath) {
				t.Errorf("%s: %v", evil, p.Err())
			}
		}
	})
	t.Run("symlink out of the folder", func(t *testing.T) {
		dir := sharded(t)
		outside := filepath.Join(t.TempDir(), "x.safetensors")
		s1 := filepath.Join(dir, "model-00001-of-00002.safetensors")
		os.Rename(s1, outside)
		if err := os.Symlink(outside, s1); err != nil {
			t.Skip(err)
		}
		wantErr(t, dir, "", variant.ErrInsecurePath, "model-00001-of-00002.safetensors")
	})
	t.Run("invalid index", func(t *testing.T) {
		dir := sharded(t)
		os.WriteFile(filepath.Join(dir, index), []byte(`{"weight_map": []}`), 0o644)
		wantErr(t, dir, "", variant.ErrInvalidLayout, index, "invalid_index: invalid weight_map")
	})
	t.Run("shards without index", func(t *testing.T) {
		dir := sharded(t)
		os.Remove(filepath.Join(dir, index))
		p := wantErr(t, dir, "", variant.ErrInvalidLayout, index, ": missing index")
		if len(p.Ignored) != 2 {
			t.Errorf("ignored %v", p.Ignored)
		}
	})
	t.Run("ambiguous prefix", func(t *testing.T) {
		dir := ckpttest.Dir(t, ckpttest.Weights{Tensors: f32}, ckpttest.Weights{Prefix: ckpttest.DiffusersPrefix, Tensors: f32},
			ckpttest.Weights{Prefix: ckpttest.DiffusersPrefix, Variant: "fp16", Tensors: f16})
		wantErr(t, dir, "", variant.ErrInvalidLayout, "model", "diffusion_pytorch_model", ": ambiguous prefix")
		// Only one prefix has fp16: no ambiguity.
		p := mustResolve(t, dir, "fp16")
		if !slices.Equal(p.Files, []string{"diffusion_pytorch_model.fp16.safetensors"}) {
			t.Errorf("files %v", p.Files)
		}
	})
}

func TestPlanOpenDetectsChange(t *testing.T) {
	dir := ckpttest.Dir(t, ckpttest.Weights{Shards: 2, Tensors: f32})
	p := mustResolve(t, dir, "")
	// Re-shard after resolution: the index now names other files.
	for _, f := range p.Files {
		os.Remove(filepath.Join(dir, f))
	}
	if _, err := ckpttest.WriteWeights(dir, ckpttest.Weights{Shards: 4, Tensors: f32}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Open(); !errors.Is(err, variant.ErrInvalidLayout) || !strings.Contains(err.Error(), ": plan changed") {
		t.Fatalf("got %v", err)
	}
}

func TestPlanJSON(t *testing.T) {
	dir := ckpttest.Dir(t, ckpttest.Weights{Tensors: f32}, ckpttest.Weights{Variant: "bf16", Tensors: bf16})
	p := mustResolve(t, dir, "bf16")
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	json.Unmarshal(b, &m)
	for _, k := range []string{"component", "dir", "variant", "layout", "files", "ignored", "warnings"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks %q: %s", k, b)
		}
	}
	if _, ok := m["error"]; ok {
		t.Errorf("JSON has an error: %s", b)
	}
	p, _ = variant.ResolveComponent(dir, "fp16")
	b, _ = json.Marshal(p)
	if !strings.Contains(string(b), `"error":{"kind":"variant_not_found","message":"variant: variant_not_found: `) {
		t.Errorf("failed plan JSON: %s", b)
	}
}

// TestHuggingFaceCacheSymlinks resolves a folder laid out like the Hugging
// Face cache: snapshot files are symlinks into ../../blobs.
func TestHuggingFaceCacheSymlinks(t *testing.T) {
	repo := t.TempDir()
	blobs := filepath.Join(repo, "blobs")
	snap := filepath.Join(repo, "snapshots", "abc123")
	os.MkdirAll(blobs, 0o755)
	os.MkdirAll(snap, 0o755)
	src := ckpttest.Dir(t, ckpttest.Weights{Shards: 2, Tensors: f32})
	es, _ := os.ReadDir(src)
	for i, e := range es {
		blob := filepath.Join(blobs, "sha"+strconv.Itoa(i))
		os.Rename(filepath.Join(src, e.Name()), blob)
		if err := os.Symlink(filepath.Join("..", "..", "blobs", "sha"+strconv.Itoa(i)), filepath.Join(snap, e.Name())); err != nil {
			t.Skip(err)
		}
	}
	wantErr(t, snap, "", variant.ErrInsecurePath)
	p, err := variant.ResolveComponent(snap, "", variant.WithShardOptions(shard.WithFollowSymlinks()))
	if err != nil {
		t.Fatal(err)
	}
	loadsOnly(t, p, dtype.F32)
}

// TestRealIndex resolves a folder holding the real transformers index from
// the shared fixtures, with tiny synthetic shards in place of the real ones.
func TestRealIndex(t *testing.T) {
	src := filepath.Join(testutil.Fixtures(t, "real", "MANIFEST.tsv"), "index", "granite-3.1-1b-a400m-instruct.model.safetensors.index.json")
	ix, err := shard.ReadIndex(src)
	if err != nil {
		t.Skip("real fixtures not present:", err)
	}
	dir := t.TempDir()
	testutil.WriteSyntheticShards(t, dir, ix.Names(), ix.WeightMap)
	data, _ := os.ReadFile(src)
	os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), data, 0o644)
	os.WriteFile(filepath.Join(dir, "config.json"), []byte("{}"), 0o644)
	p := mustResolve(t, dir, "")
	if p.Layout != variant.LayoutSharded || len(p.Files) != 2 || len(p.Ignored) != 0 {
		t.Fatalf("plan %+v", p)
	}
	// The synthetic shards are smaller than total_size says: a warning.
	if !hasWarning(p, "5338513408") {
		t.Errorf("warnings %q", p.Warnings)
	}
	c, err := p.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Len() != 218 {
		t.Errorf("%d tensors", c.Len())
	}
	wantErr(t, dir, "bf16", variant.ErrVariantNotFound, "untagged weights exist")
}

// A folder that shard.Write committed into twice (every transition between
// layouts, untagged and fp16) resolves to exactly the last set, with
// standard names, no warnings and nothing ignored: the second save's swap
// names and the first save's files are gone.
func TestResolveCommittedTwice(t *testing.T) {
	ctx := context.Background()
	tensors := func(dt dtype.DType) []safetensors.TensorData {
		var out []safetensors.TensorData
		for _, tt := range weights(dt) {
			b, err := tt.Contents()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, safetensors.TensorData{Name: tt.Name, DType: tt.DType, Shape: tt.Shape, Data: b})
		}
		return out
	}
	// Layouts: a single file, or 2 shards (of 64+16 bytes in F32, 32+8 in F16).
	const one, two = 1, 2
	for _, v := range []string{"", "fp16"} {
		for _, tr := range [][2]int64{{two, two}, {two, one}, {one, two}, {one, one}} {
			dir := t.TempDir()
			for i, layout := range tr {
				dt := []dtype.DType{dtype.F32, dtype.F16}[i]
				max := int64(1 << 20)
				if layout == two {
					max = 20 * int64(dt.Bits()/8)
				}
				if _, err := shard.Write(ctx, dir, "model", v, tensors(dt), nil, shard.WithMaxShardSize(max)); err != nil {
					t.Fatal(err)
				}
			}
			p := mustResolve(t, dir, v)
			if len(p.Warnings) != 0 || len(p.Ignored) != 0 {
				t.Errorf("%q %v: warnings %v, ignored %v", v, tr, p.Warnings, p.Ignored)
			}
			var want []string
			if tr[1] == two {
				want = []string{shardFile(v, 1, 2), shardFile(v, 2, 2)}
			} else {
				want = []string{strings.TrimSuffix("model."+v, ".") + ".safetensors"}
			}
			if !slices.Equal(p.Files, want) {
				t.Errorf("%q %v: files %v, want %v", v, tr, p.Files, want)
			}
			loadsOnly(t, p, dtype.F16)
		}
	}
}

func shardFile(v string, i, n int) string {
	if v != "" {
		v = "." + v
	}
	return fmt.Sprintf("model%s-%05d-of-%05d.safetensors", v, i, n)
}

// A save killed between its two switches leaves an index naming swap-named
// shards and the previous set's shards under the standard names, no longer
// referenced; one killed before its switch leaves unreferenced swap-named
// shards. Both folders resolve to the complete set the index names, the
// other shards ignored without a warning.
func TestResolveSwapNames(t *testing.T) {
	dir := t.TempDir()
	ckpttest.WriteWeights(dir, ckpttest.Weights{Shards: 2, Tensors: f32}) // the previous set, unreferenced below
	tmp := t.TempDir()
	files, err := ckpttest.WriteWeights(tmp, ckpttest.Weights{Shards: 2, Tensors: f16})
	if err != nil {
		t.Fatal(err)
	}
	wm := map[string]string{}
	ix, err := shard.ReadIndex(filepath.Join(tmp, "model.safetensors.index.json"))
	if err != nil {
		t.Fatal(err)
	}
	swapped := func(f string) string { return strings.TrimSuffix(f, ".safetensors") + ".swap-0123456789ab.safetensors" }
	for tensor, f := range ix.WeightMap {
		wm[tensor] = swapped(f)
	}
	for _, f := range files {
		if strings.HasSuffix(f, ".json") {
			continue
		}
		if err := os.Rename(filepath.Join(tmp, f), filepath.Join(dir, swapped(f))); err != nil {
			t.Fatal(err)
		}
	}
	if err := ckpttest.WriteIndex(filepath.Join(dir, "model.safetensors.index.json"), wm, nil); err != nil {
		t.Fatal(err)
	}
	p := mustResolve(t, dir, "")
	if len(p.Warnings) != 0 || p.Layout != variant.LayoutSharded || len(p.Files) != 2 || !strings.Contains(p.Files[0], ".swap-") {
		t.Fatalf("plan %+v", p)
	}
	ig := ignored(p)
	if len(ig) != 2 || !strings.Contains(ig["model-00001-of-00002.safetensors"], "not referenced by the index used") {
		t.Errorf("ignored %v", ig)
	}
	loadsOnly(t, p, dtype.F16)

	// Killed before the switch: the index names the standard names.
	ckpttest.WriteWeights(dir, ckpttest.Weights{Shards: 2, Tensors: f32})
	p = mustResolve(t, dir, "")
	ig = ignored(p)
	if len(p.Warnings) != 0 || len(ig) != 2 || !strings.Contains(ig["model-00001-of-00002.swap-0123456789ab.safetensors"], "interrupted save") {
		t.Errorf("warnings %v, ignored %v", p.Warnings, ig)
	}
	loadsOnly(t, p, dtype.F32)
}
