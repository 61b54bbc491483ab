package variant_test

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/variant"
)

// mapFS copies the files under root into a MapFS (whose files have no
// ReadAt: the sequential paths are tested too).
func mapFS(t *testing.T, root string) fstest.MapFS {
	t.Helper()
	m := fstest.MapFS{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		b, err := os.ReadFile(p)
		m[filepath.ToSlash(rel)] = &fstest.MapFile{Data: b, Mode: 0o644}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// planJSON is a PipelinePlan as JSON with the prefix cut from its paths.
func planJSON(t *testing.T, pp *variant.PipelinePlan, prefix string) string {
	t.Helper()
	b, err := json.Marshal(pp)
	if err != nil {
		t.Fatal(err)
	}
	return strings.ReplaceAll(string(b), prefix, "")
}

// Resolution through WithFS gives the plan a native resolution gives, for
// good and broken folders and pipelines, over os.DirFS and a MapFS, and
// the plans open the same tensors.
func TestResolveThroughFS(t *testing.T) {
	cases := map[string]func(t *testing.T) string{
		"single": func(t *testing.T) string { return ckpttest.Dir(t, ckpttest.Weights{Tensors: f32}) },
		"sharded and variants": func(t *testing.T) string {
			return ckpttest.Dir(t, ckpttest.Weights{Shards: 2, Tensors: f32}, ckpttest.Weights{Variant: "fp16", Shards: 2, Layout: ckpttest.Legacy, Tensors: f16})
		},
		"single and index": func(t *testing.T) string {
			return ckpttest.Dir(t, ckpttest.Weights{Tensors: f32}, ckpttest.Weights{Shards: 2, Tensors: f32})
		},
		"missing shard": func(t *testing.T) string {
			dir := ckpttest.Dir(t, ckpttest.Weights{Shards: 2, Tensors: f32})
			os.Remove(filepath.Join(dir, "model-00001-of-00002.safetensors"))
			return dir
		},
		"pipeline": func(t *testing.T) string { return ckpttest.NewPipeline(t, samplePipeline()) },
	}
	for name, build := range cases {
		t.Run(name, func(t *testing.T) {
			dir := build(t)
			parent, base := filepath.Dir(dir), filepath.Base(dir)
			for _, v := range []string{"", "fp16"} {
				native, nerr := variant.Resolve(dir, v)
				want := planJSON(t, native, parent+string(filepath.Separator))
				for fsName, fsys := range map[string]fs.FS{"DirFS": os.DirFS(parent), "MapFS": mapFS(t, parent)} {
					got, err := variant.Resolve(base, v, variant.WithFS(fsys))
					if (err == nil) != (nerr == nil) || (err != nil && !sameKinds(err, nerr)) {
						t.Fatalf("%s variant %q: error %v, natively %v", fsName, v, err, nerr)
					}
					if g := planJSON(t, got, ""); g != want {
						t.Errorf("%s variant %q:\n got %s\nwant %s", fsName, v, g, want)
					}
					for _, p := range got.Components {
						if p.Err() != nil {
							continue
						}
						c, err := p.Open()
						if err != nil {
							t.Fatalf("%s: open %s: %v", fsName, p.Component, err)
						}
						for tn, tt := range c.Tensors() {
							b, err := tt.Bytes()
							want, _ := ckpttest.Fill(tn, tt.DType(), tt.Shape())
							if err != nil || string(b) != string(want) {
								t.Errorf("%s: %s: %v", fsName, tn, err)
							}
						}
						c.Close()
					}
				}
			}
		})
	}
}

func sameKinds(a, b error) bool {
	var ea, eb *variant.Error
	if errors.As(a, &ea) && errors.As(b, &eb) {
		return ea.Kind == eb.Kind
	}
	return a.Error() != "" && b.Error() != ""
}

// A folder of an fs.FS that cannot be listed fails with ErrReadDir.
func TestResolveFSWithoutFolder(t *testing.T) {
	_, err := variant.ResolveComponent("missing", "", variant.WithFS(fstest.MapFS{}))
	if !errors.Is(err, variant.ErrNoWeights) || !strings.Contains(err.Error(), ": read dir") {
		t.Fatalf("err %v", err)
	}
}
