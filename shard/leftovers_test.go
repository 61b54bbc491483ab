package shard

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/internal/atomicfile"
)

func TestLeftovers(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	if _, err := Write(ctx, dir, "model", "", gen(1, 4), nil, WithMaxShardSize(128)); err != nil {
		t.Fatal(err)
	}
	if got, err := Leftovers(dir); err != nil || len(got) != 0 {
		t.Fatalf("after a save: %v, %v", got, err)
	}
	tensors := ckpttest.MustParseTensors("a:F16[4] b:F16[4]")
	ckpttest.WriteWeights(dir, ckpttest.Weights{Variant: "fp16", Shards: 2, Tensors: tensors})
	ckpttest.WriteWeights(dir, ckpttest.Weights{Variant: "fp16", Tensors: tensors})
	ckpttest.WriteWeights(dir, ckpttest.Weights{Prefix: "other", Shards: 2, Tensors: tensors})
	os.Remove(filepath.Join(dir, "other.safetensors.index.json"))
	for _, n := range []string{
		".model-00001-of-00002.safetensors.tmp-12", ".model.safetensors.index.json.old-0123456789ab", ".model.safetensors.lock",
		"model-00001-of-00003.safetensors", "model-00002-of-00002.swap-0123456789ab.safetensors",
		".my weights.safetensors.tmp-5", ".notes.txt.tmp-5", "README.md",
		".diffusion_pytorch_model.safetensors.tmp-7", // a live save's: its lock is held below
	} {
		os.WriteFile(filepath.Join(dir, n), []byte("x"), 0o644)
	}
	lock, err := atomicfile.LockTarget(ctx, dir, "diffusion_pytorch_model.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Unlock()
	if !lock.Exclusive() {
		t.Skip("no file locks here: a live save's files would be reported")
	}

	got, err := Leftovers(dir)
	if err != nil {
		t.Fatal(err)
	}
	type lk struct{ name, set, kind string }
	var have []lk
	for _, l := range got {
		have = append(have, lk{l.Name, l.Set, l.Kind})
		if l.Reason == "" {
			t.Errorf("%s: no reason", l.Name)
		}
		if swap := strings.Contains(l.Name, ".swap-"); swap != strings.Contains(l.Reason, "swap-named") {
			t.Errorf("%s: reason %q", l.Name, l.Reason)
		}
	}
	want := []lk{
		{".model-00001-of-00002.safetensors.tmp-12", "model.safetensors", LeftoverTemporary},
		{".model.safetensors.index.json.old-0123456789ab", "model.safetensors", LeftoverBackup},
		{".model.safetensors.lock", "model.safetensors", LeftoverLock},
		{".my weights.safetensors.tmp-5", "my weights.safetensors", LeftoverTemporary},
		{"model-00001-of-00003.safetensors", "model.safetensors", LeftoverUnreferenced},
		{"model-00002-of-00002.swap-0123456789ab.safetensors", "model.safetensors", LeftoverUnreferenced},
		{"model.safetensors.index.fp16.json", "model.fp16.safetensors", LeftoverShadowed},
		{"other-00001-of-00002.safetensors", "other.safetensors", LeftoverUnreferenced},
		{"other-00002-of-00002.safetensors", "other.safetensors", LeftoverUnreferenced},
	}
	if !slices.Equal(have, want) {
		t.Errorf("leftovers\n%v\nwant\n%v", have, want)
	}
	// A file's leftovers are those of its set.
	got, err = Leftovers(filepath.Join(dir, "other-00001-of-00002.safetensors"))
	if err != nil || len(got) != 2 || got[0].Set != "other.safetensors" {
		t.Errorf("for a shard of other: %v, %v", got, err)
	}
	// The next save of a set removes its leftovers, and only those.
	res, err := Write(ctx, dir, "model", "", gen(2, 4), nil, WithMaxShardSize(128))
	if err != nil {
		t.Fatal(err)
	}
	got, _ = Leftovers(dir)
	for _, l := range got {
		if l.Set == "model.safetensors" {
			t.Errorf("after a save of its set: %+v (save: %+v)", l, res)
		}
	}
	if len(got) != 4 {
		t.Errorf("after a save of model: %v", got)
	}
	if _, err := Leftovers(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing path")
	}
}
