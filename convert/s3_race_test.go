package convert_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/convert"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/remote"
)

// Two Runs replacing the same s3:// checkpoint at once: the one whose
// index lands first wins; the other's index write (If-Match on the ETag
// it saw before writing its shards) is refused, ErrConflict, and its new
// shards are removed: the winner's checkpoint is what readers load, and
// nothing else is left.
func TestRunToS3OverwriteRace(t *testing.T) {
	s := needS3(t)
	bucket := s.NewBucket(t)
	src := ckpttest.Dir(t, ckpttest.Weights{Shards: 2, Tensors: ckpttest.Tensors(t,
		"a.weight:F32[256,256] b.weight:F32[256,256] c.weight:F32[256,256] n.weight:F32[256]")})
	os.WriteFile(filepath.Join(src, "config.json"), []byte(`{"model_type": "llama", "torch_dtype": "float32"}`), 0o644)
	loc := "s3://" + bucket + "/m"
	ctx := context.Background()
	if _, err := convert.Run(ctx, src, loc, convert.Options{MaxShardSize: 300 << 10}); err != nil {
		t.Fatal(err)
	}
	first := convert.Options{Policy: ckpt.Policy{Default: ckpt.To(dtype.BF16)}, MaxShardSize: 100 << 10, Overwrite: true}
	second := convert.Options{Policy: ckpt.Policy{Default: ckpt.To(dtype.F16)}, MaxShardSize: 100 << 10, Overwrite: true}
	local := filepath.Join(t.TempDir(), "want")
	if _, err := convert.Run(ctx, src, local, second); err != nil {
		t.Fatal(err)
	}
	want := loadAll(t, local)

	// The first writer has written a shard when the second runs to the
	// end.
	var fired atomic.Bool
	var inner *convert.Report
	var innerErr error
	restore := convert.SetHook(func(step string) {
		if step == "sink-shard" && fired.CompareAndSwap(false, true) {
			inner, innerErr = convert.Run(ctx, src, loc, second)
		}
	})
	_, err := convert.Run(ctx, src, loc, first)
	restore()
	if !fired.Load() || innerErr != nil {
		t.Fatalf("the second writer: fired %v, %v", fired.Load(), innerErr)
	}
	var ce *convert.Error
	if !errors.As(err, &ce) || ce.Kind != convert.ErrConflict || !errors.Is(err, remote.ErrExists) || !strings.Contains(err.Error(), "index") {
		t.Fatalf("the first writer, whose index was replaced meanwhile: %v", err)
	}
	if got := loadAll(t, loc); !reflect.DeepEqual(got, want) {
		t.Fatal("readers do not load the winner's checkpoint")
	}
	keys, uploads := objects(t, s, bucket, "m")
	c := inner.Components[0]
	wantKeys := sorted(append(append([]string{"config.json"}, c.Files...), c.Index))
	if !slices.Equal(keys, wantKeys) || len(uploads) > 0 {
		t.Errorf("objects %v (uploads %v), want %v", keys, uploads, wantKeys)
	}
}

// convert.Run reads s3:// sources (through the source package remote
// registers) into a folder and into s3://, the same tensors as from the
// local copy; the non-weight files come along.
func TestRunFromS3(t *testing.T) {
	s := needS3(t)
	remote.SetSinkOptions(remote.WithPartSize(remote.MinPartSize))
	bucket := s.NewBucket(t)
	src := ckpttest.Dir(t, ckpttest.Weights{Shards: 2, Tensors: ckpttest.Tensors(t,
		"model.layers.0.mlp.up_proj.weight:F32[256,128] model.layers.0.mlp.down_proj.weight:F32[128,256] model.norm.weight:F32[128] model.embed_tokens.weight:BF16[64,128]")})
	os.WriteFile(filepath.Join(src, "config.json"), []byte(`{"model_type": "llama", "torch_dtype": "float32"}`), 0o644)
	os.WriteFile(filepath.Join(src, "tokenizer.json"), []byte(`{"version": "1.0"}`), 0o644)
	s.PutDir(t, bucket, "src/m", src)
	ctx := context.Background()
	for _, opts := range []convert.Options{
		{Policy: ckpt.Policy{Default: ckpt.To(dtype.BF16)}, MaxShardSize: 64 << 10, Verify: true},
		{Verify: true},
	} {
		local := filepath.Join(t.TempDir(), "local")
		if _, err := convert.Run(ctx, src, local, opts); err != nil {
			t.Fatal(err)
		}
		want := loadAll(t, local)

		out := filepath.Join(t.TempDir(), "out")
		rep, err := convert.Run(ctx, "s3://"+bucket+"/src/m", out, opts)
		if err != nil {
			t.Fatalf("s3 to a folder: %v", err)
		}
		if !rep.Verified {
			t.Error("s3 to a folder: not verified")
		}
		if got := loadAll(t, out); !reflect.DeepEqual(got, want) {
			t.Error("s3 to a folder: tensors differ from the local conversion")
		}
		for _, f := range []string{"config.json", "tokenizer.json"} {
			w, _ := os.ReadFile(filepath.Join(local, f))
			if g, err := os.ReadFile(filepath.Join(out, f)); err != nil || string(g) != string(w) {
				t.Errorf("s3 to a folder: %s: %q, %v; want %q", f, g, err, w)
			}
		}

		dst := "s3://" + bucket + "/dst/m"
		rep, err = convert.Run(ctx, "s3://"+bucket+"/src/m", dst, convert.Options{Policy: opts.Policy, MaxShardSize: opts.MaxShardSize, Verify: true, Overwrite: true})
		if err != nil {
			t.Fatalf("s3 to s3: %v", err)
		}
		if got := loadAll(t, dst); !reflect.DeepEqual(got, want) {
			t.Error("s3 to s3: tensors differ from the local conversion")
		}
		keys, uploads := objects(t, s, bucket, "dst/m")
		c := rep.Components[0]
		wantKeys := append([]string{"config.json", "tokenizer.json"}, c.Files...)
		if c.Index != "" {
			wantKeys = append(wantKeys, c.Index)
		}
		if !slices.Equal(keys, sorted(wantKeys)) || len(uploads) > 0 {
			t.Errorf("s3 to s3: objects %v (uploads %v), want %v", keys, uploads, sorted(wantKeys))
		}
	}
	// One file of the bucket, and a missing source.
	file := ckpttest.File(t, ckpttest.Tensors(t, "w:F32[32,16] b:F32[16]")...)
	data, _ := os.ReadFile(file)
	s.Put(t, bucket, "one/w.safetensors", data)
	out := filepath.Join(t.TempDir(), "w.bf16.safetensors")
	if _, err := convert.Run(ctx, "s3://"+bucket+"/one/w.safetensors", out, convert.Options{Policy: ckpt.Policy{Default: ckpt.To(dtype.BF16)}, Verify: true}); err != nil {
		t.Fatalf("an s3 file to a file: %v", err)
	}
	if _, err := convert.Run(ctx, "s3://"+bucket+"/nothing", filepath.Join(t.TempDir(), "x"), convert.Options{}); !errors.Is(err, remote.ErrNotFound) {
		t.Errorf("a missing s3 source: %v", err)
	}
}
