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
	first := convert.Options{DType: ckpt.To(dtype.BF16), MaxShardSize: 100 << 10, Overwrite: true}
	second := convert.Options{DType: ckpt.To(dtype.F16), MaxShardSize: 100 << 10, Overwrite: true}
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
