package convert_test

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/convert"
	"github.com/ckpt-go/ckpt/dtype"
)

// Through a sink too, a sharded source keeps its shards: the same files
// as a conversion into a folder, nothing listed as left out.
func TestRunToS3KeepsShards(t *testing.T) {
	s := needS3(t)
	bucket := s.NewBucket(t)
	src := ckpttest.Dir(t, ckpttest.Weights{Shards: 3, Tensors: ckpttest.Tensors(t,
		"a.weight:BF16[64,64] b.weight:BF16[64,64] c.weight:BF16[64,64] d.bias:BF16[64] e.weight:BF16[32,64] f.weight:BF16[64,64]")})
	opts := convert.Options{Policy: ckpt.Policy{Default: ckpt.To(dtype.F32)}}
	local := filepath.Join(t.TempDir(), "out")
	lrep, err := convert.Run(context.Background(), src, local, opts)
	if err != nil {
		t.Fatal(err)
	}
	loc := "s3://" + bucket + "/out"
	rep, err := convert.Run(context.Background(), src, loc, opts)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"}
	if !slices.Equal(rep.Components[0].Files, want) || !slices.Equal(lrep.Components[0].Files, want) || len(rep.Skipped)+len(lrep.Skipped) != 0 {
		t.Fatalf("files %v and %v, skipped %v and %v", rep.Components[0].Files, lrep.Components[0].Files, rep.Skipped, lrep.Skipped)
	}
	keys, _ := objects(t, s, bucket, "out")
	if !slices.Equal(keys, append(want, "model.safetensors.index.json")) {
		t.Errorf("objects %v", keys)
	}
	for _, f := range append(want, "model.safetensors.index.json") {
		lb, _ := os.ReadFile(filepath.Join(local, f))
		if got := getS3(t, s, bucket, "out/"+f); !reflect.DeepEqual(got, lb) {
			t.Errorf("%s differs from the folder's", f)
		}
	}
}
