package ckpttest_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/shard"
)

// A fixture named as it is read is found in its compressed form.
func TestOpenFixtureImplicitZst(t *testing.T) {
	p := ckpttest.OpenFixture(t, filepath.Join("testdata", "tiny.safetensors"))
	if filepath.Base(p) != "tiny.safetensors" || filepath.Dir(p) == "testdata" {
		t.Fatalf("path %s", p)
	}
	want, _ := ckpttest.Encode(ckpttest.MustParseTensors("w:BF16[4,4] b:F8_E4M3[4]"), map[string]string{"format": "pt"})
	if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("decompressed fixture differs (%v)", err)
	}
}

// A folder fixture with compressed shards is copied with its shards
// decompressed and opens as a sharded checkpoint; a folder without any .zst
// file is used in place.
func TestOpenFixtureFolder(t *testing.T) {
	ts := ckpttest.MustParseTensors("a:F32[4] b:BF16[4] c:F8_E4M3[8]")
	src := ckpttest.Dir(t, ckpttest.Weights{Shards: 2, Tensors: ts})
	if got := ckpttest.OpenFixture(t, src); got != src {
		t.Errorf("plain folder copied to %s", got)
	}
	for _, n := range []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"} {
		p := filepath.Join(src, n)
		if err := ckpttest.Compress(p, p+".zst"); err != nil {
			t.Fatal(err)
		}
		os.Remove(p)
	}
	got := ckpttest.OpenFixture(t, src)
	if got == src {
		t.Fatal("folder with .zst files used in place")
	}
	c, err := shard.Open(filepath.Join(got, "model.safetensors.index.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Len() != len(ts) {
		t.Fatalf("%d tensors", c.Len())
	}
	for name, tt := range c.Tensors() {
		b, err := tt.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		var spec ckpttest.Tensor
		for _, s := range ts {
			if s.Name == name {
				spec = s
			}
		}
		want, _ := ckpttest.Fill(name, spec.DType, spec.Shape)
		if !bytes.Equal(b, want) {
			t.Errorf("tensor %s differs", name)
		}
	}
	if err := c.Err(); err != nil {
		t.Fatal(err)
	}
}
