package convert_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/convert"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/s3test"
	"github.com/ckpt-go/ckpt/remote"
	"github.com/ckpt-go/ckpt/safetensors"
)

// The package's S3 server (versitygw, or CKPT_S3_ENDPOINT's), started on
// first use and stopped by TestMain.
var (
	s3Once   sync.Once
	s3Srv    *s3test.Server
	s3Reason string
	s3Err    error
)

func TestMain(m *testing.M) {
	code := m.Run()
	s3Srv.Stop()
	os.Exit(code)
}

// needS3 returns the server, with its client registered for s3://
// locations (reading and writing) until the test ends.
func needS3(t testing.TB) *s3test.Server {
	t.Helper()
	s3Once.Do(func() { s3Srv, s3Reason, s3Err = s3test.Start() })
	s := s3test.Need(t, s3Srv, s3Reason, s3Err)
	remote.SetS3Client(s.Client())
	t.Cleanup(func() { remote.SetS3Client(nil); remote.SetSinkOptions() })
	return s
}

// objects lists the keys under prefix/ (recursively) and the multipart
// uploads in progress in bucket.
func objects(t *testing.T, s *s3test.Server, bucket, prefix string) (keys, uploads []string) {
	t.Helper()
	ctx := context.Background()
	p := s3.NewListObjectsV2Paginator(s.Client(), &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(prefix + "/")})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page.Contents {
			keys = append(keys, strings.TrimPrefix(aws.ToString(o.Key), prefix+"/"))
		}
	}
	out, err := s.Client().ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String(bucket)})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range out.Uploads {
		uploads = append(uploads, aws.ToString(u.Key))
	}
	slices.Sort(keys)
	return keys, uploads
}

// SaveShard and Commit on S3: the same protocol as on a folder, the
// previous checkpoint loaded until the index is written, nothing left but
// the checkpoint.
func TestSaveShardCommitS3(t *testing.T) {
	s := needS3(t)
	bucket := s.NewBucket(t)
	loc := "s3://" + bucket + "/run/step"
	saveRanks(t, loc, 1, 3)
	if _, err := convert.Commit(context.Background(), loc, convert.CommitOptions{VerifyData: true}); err != nil {
		t.Fatal(err)
	}
	checkLoaded(t, loc, allTensors(t, 1, 3))

	res := saveRanks(t, loc, 2, 4, 0, 1, 3)
	_, err := convert.Commit(context.Background(), loc, convert.CommitOptions{})
	var ce *convert.Error
	if !errors.As(err, &ce) || ce.Kind != convert.ErrIncomplete || !slices.Equal(ce.Ranks, []int{2}) {
		t.Fatalf("Commit with rank 2 missing: %v", err)
	}
	checkLoaded(t, loc, allTensors(t, 1, 3))
	saveRanks(t, loc, 2, 4, 2)
	cr, err := convert.Commit(context.Background(), loc, convert.CommitOptions{VerifyData: true})
	if err != nil {
		t.Fatal(err)
	}
	checkLoaded(t, loc, allTensors(t, 2, 4))
	if !strings.Contains(res[0].File, ".swap-") {
		t.Errorf("rank 0 wrote %s over a committed checkpoint", res[0].File)
	}
	keys, uploads := objects(t, s, bucket, "run/step")
	if want := sorted(append(slices.Clone(cr.Files), cr.Index)); !slices.Equal(keys, want) || len(uploads) > 0 {
		t.Errorf("objects %v (uploads %v), want %v", keys, uploads, want)
	}
}

// An index written by another writer between Commit's checks and its
// write is never replaced (If-None-Match: *).
func TestCommitS3IndexWrittenMeanwhile(t *testing.T) {
	s := needS3(t)
	bucket := s.NewBucket(t)
	loc := "s3://" + bucket + "/ckpt"
	saveRanks(t, loc, 1, 2)
	theirs := []byte(`{"metadata": {}, "weight_map": {}}`)
	restore := convert.SetHook(func(step string) {
		if step == "commit-verified" {
			s.Put(t, bucket, "ckpt/model.safetensors.index.json", theirs)
		}
	})
	_, err := convert.Commit(context.Background(), loc, convert.CommitOptions{})
	restore()
	if !errors.Is(err, convert.ErrConflict) || !errors.Is(err, remote.ErrExists) {
		t.Fatalf("Commit: %v", err)
	}
	if got := getS3(t, s, bucket, "ckpt/model.safetensors.index.json"); string(got) != string(theirs) {
		t.Errorf("the other writer's index was replaced: %s", got)
	}

	// Over a committed checkpoint: the index is replaced only while it is
	// the version Commit saw (If-Match); one replaced meanwhile stays.
	s.Delete(t, bucket, "ckpt/model.safetensors.index.json")
	if _, err := convert.Commit(context.Background(), loc, convert.CommitOptions{}); err != nil {
		t.Fatal(err)
	}
	saveRanks(t, loc, 2, 2)
	committed := getS3(t, s, bucket, "ckpt/model.safetensors.index.json")
	theirs = append(slices.Clone(committed), ' ')
	restore = convert.SetHook(func(step string) {
		if step == "commit-verified" {
			s.Put(t, bucket, "ckpt/model.safetensors.index.json", theirs)
		}
	})
	_, err = convert.Commit(context.Background(), loc, convert.CommitOptions{})
	restore()
	if !errors.Is(err, convert.ErrConflict) || !errors.Is(err, remote.ErrExists) {
		t.Fatalf("Commit over a checkpoint whose index was replaced meanwhile: %v", err)
	}
	if got := getS3(t, s, bucket, "ckpt/model.safetensors.index.json"); string(got) != string(theirs) {
		t.Errorf("the other writer's index was replaced: %s", got)
	}
	checkLoaded(t, loc, allTensors(t, 1, 2))
}

// getS3 reads bucket/key whole; nil when it does not exist.
func getS3(t *testing.T, s *s3test.Server, bucket, key string) []byte {
	t.Helper()
	out, err := s.Client().GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		var sc interface{ HTTPStatusCode() int }
		if errors.As(err, &sc) && sc.HTTPStatusCode() == 404 {
			return nil
		}
		t.Fatalf("get %s: %v", key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// loadAll reads every tensor of path as stored.
func loadAll(t *testing.T, path string) map[string][]byte {
	t.Helper()
	m, err := ckpt.Open(path, ckpt.WithDType(ckpt.AsStored), ckpt.WithScaleTensors())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	out := map[string][]byte{}
	for _, n := range m.Names() {
		tn, err := m.LoadTensor(context.Background(), n)
		if err != nil {
			t.Fatal(err)
		}
		out[n] = slices.Clone(tn.Bytes())
	}
	return out
}

// Run writes to s3:// what it writes to a folder: shards uploaded in
// parts, the index last, configs and other files copied; a location that
// holds weights is refused without Overwrite and replaced with it.
func TestRunToS3(t *testing.T) {
	s := needS3(t)
	remote.SetSinkOptions(remote.WithPartSize(remote.MinPartSize), remote.WithUploadConcurrency(3))
	bucket := s.NewBucket(t)
	src := ckpttest.Dir(t, ckpttest.Weights{Shards: 2, Tensors: ckpttest.Tensors(t,
		"model.layers.0.mlp.up_proj.weight:F32[1536,1024] model.layers.0.mlp.down_proj.weight:F32[1024,1536] model.norm.weight:F32[1024] model.embed_tokens.weight:F32[512,1024]")})
	os.WriteFile(filepath.Join(src, "config.json"), []byte(`{"model_type": "llama", "torch_dtype": "float32"}`), 0o644)
	os.WriteFile(filepath.Join(src, "tokenizer.json"), []byte(`{"version": "1.0"}`), 0o644)
	loc := "s3://" + bucket + "/models/llama"
	opts := convert.Options{Policy: ckpt.Policy{Default: ckpt.To(dtype.BF16)}, MaxShardSize: 4 << 20, Verify: true}

	local := filepath.Join(t.TempDir(), "out")
	if _, err := convert.Run(context.Background(), src, local, opts); err != nil {
		t.Fatal(err)
	}
	rep, err := convert.Run(context.Background(), src, loc, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Verified || len(rep.Components) != 1 || rep.Components[0].Index == "" || rep.Components[0].Dir != loc {
		t.Fatalf("report %+v", rep.Components)
	}
	want := loadAll(t, local)
	if got := loadAll(t, loc); !reflect.DeepEqual(got, want) {
		t.Fatalf("s3 output differs from the local one")
	}
	keys, uploads := objects(t, s, bucket, "models/llama")
	wantKeys := sorted(append(append([]string{}, rep.Components[0].Files...), rep.Components[0].Index, "config.json", "tokenizer.json"))
	if !slices.Equal(keys, wantKeys) || len(uploads) > 0 {
		t.Fatalf("objects %v (uploads %v), want %v", keys, uploads, wantKeys)
	}
	if cfg := getS3(t, s, bucket, "models/llama/config.json"); !strings.Contains(string(cfg), `"bfloat16"`) {
		t.Errorf("config.json: %s", cfg)
	}

	// Refused without Overwrite, before anything is written.
	opts2 := convert.Options{Policy: ckpt.Policy{Default: ckpt.To(dtype.F16)}, MaxShardSize: 64 << 20}
	if _, err := convert.Run(context.Background(), src, loc, opts2); !errors.Is(err, convert.ErrExists) {
		t.Fatalf("Run over weights: %v", err)
	}
	if got := loadAll(t, loc); !reflect.DeepEqual(got, want) {
		t.Fatal("a refused Run changed the output")
	}
	// Replaced with it: a single file now, then shards again (swap names).
	opts2.Overwrite = true
	if _, err := convert.Run(context.Background(), src, loc, opts2); err != nil {
		t.Fatal(err)
	}
	keys, _ = objects(t, s, bucket, "models/llama")
	if !slices.Equal(keys, []string{"config.json", "model.safetensors", "tokenizer.json"}) {
		t.Errorf("after replacing with a single file: %v", keys)
	}
	opts.Overwrite = true
	rep, err = convert.Run(context.Background(), src, loc, opts)
	if err != nil {
		t.Fatal(err)
	}
	if got := loadAll(t, loc); !reflect.DeepEqual(got, want) {
		t.Fatal("output differs after replacing")
	}
	keys, _ = objects(t, s, bucket, "models/llama")
	if !strings.Contains(rep.Components[0].Files[0], ".swap-") || len(keys) != len(wantKeys) {
		t.Errorf("after replacing a single file with shards: %v (files %v)", keys, rep.Components[0].Files)
	}

	// A file source to a file location.
	file := ckpttest.File(t, ckpttest.Tensors(t, "w:F32[64,64] b:F32[64]")...)
	fileLoc := "s3://" + bucket + "/single/model.bf16.safetensors"
	if _, err := convert.Run(context.Background(), file, fileLoc, convert.Options{Policy: ckpt.Policy{Default: ckpt.To(dtype.BF16)}, Verify: true}); err != nil {
		t.Fatal(err)
	}
	if keys, _ := objects(t, s, bucket, "single"); !slices.Equal(keys, []string{"model.bf16.safetensors"}) {
		t.Errorf("file output: %v", keys)
	}
}

// A Run cancelled in the middle of an upload leaves no part and no new
// object: the previous output is what readers load.
func TestRunToS3Canceled(t *testing.T) {
	s := needS3(t)
	remote.SetSinkOptions(remote.WithPartSize(remote.MinPartSize), remote.WithUploadConcurrency(2))
	bucket := s.NewBucket(t)
	src := ckpttest.Dir(t, ckpttest.Weights{Shards: 1, Tensors: ckpttest.Tensors(t,
		"a.weight:F32[2048,1024] b.weight:F32[2048,1024] c.weight:F32[2048,1024]")})
	loc := "s3://" + bucket + "/out"
	if _, err := convert.Run(context.Background(), src, loc, convert.Options{}); err != nil {
		t.Fatal(err)
	}
	before, _ := objects(t, s, bucket, "out")
	want := loadAll(t, loc)
	for _, maxShard := range []int64{0, 10 << 20} {
		ctx, cancel := context.WithCancel(context.Background())
		opts := convert.Options{Policy: ckpt.Policy{Default: ckpt.To(dtype.F16)}, MaxShardSize: maxShard, Overwrite: true, ChunkBytes: 1 << 20,
			Progress: func(p ckpt.Progress) {
				if p.Done > 13<<19 { // past two parts of F16 data
					cancel()
				}
			}}
		_, err := convert.Run(ctx, src, loc, opts)
		cancel()
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("max shard %d: %v", maxShard, err)
		}
		keys, uploads := objects(t, s, bucket, "out")
		if !slices.Equal(keys, before) || len(uploads) > 0 {
			t.Errorf("max shard %d: objects %v (uploads %v), want %v", maxShard, keys, uploads, before)
		}
		if got := loadAll(t, loc); !reflect.DeepEqual(got, want) {
			t.Errorf("max shard %d: the previous output changed", maxShard)
		}
	}
}

// Save to s3://: checkpoints under DIR/NAME/, listed by Checkpoints,
// pruned by KeepLast, a taken name refused unless Overwrite, a cancelled
// save leaving nothing.
func TestSaveS3(t *testing.T) {
	s := needS3(t)
	remote.SetSinkOptions(remote.WithPartSize(remote.MinPartSize), remote.WithUploadConcurrency(2))
	bucket := s.NewBucket(t)
	dir := "s3://" + bucket + "/runs/r1"
	ctx := context.Background()
	save := func(step int64, opts convert.SaveOptions) ([]safetensors.TensorData, *convert.SaveResult, error) {
		ts := allTensors(t, int(step), 3)
		opts.Step, opts.KeepLast = step, 2
		if opts.MaxShardSize == 0 {
			opts.MaxShardSize = 600
		}
		p, err := convert.Save(ctx, dir, ts, opts)
		if err != nil {
			return ts, nil, err
		}
		res, err := p.Wait()
		return ts, res, err
	}
	for step := int64(1); step <= 3; step++ {
		ts, res, err := save(step, convert.SaveOptions{Background: step == 2})
		if err != nil {
			t.Fatal(err)
		}
		if res.Seq != step || res.Path != dir+"/checkpoint-"+strconv.FormatInt(step, 10) || (step == 3) != slices.Equal(res.Removed, []string{"checkpoint-1"}) {
			t.Errorf("save %d: %+v", step, res)
		}
		checkLoaded(t, res.Path, ts)
	}
	cps, err := convert.Checkpoints(dir)
	if err != nil || len(cps) != 2 || cps[0].Step != 2 || cps[1].Step != 3 {
		t.Fatalf("Checkpoints: %+v, %v", cps, err)
	}
	if keys, _ := objects(t, s, bucket, "runs/r1/checkpoint-1"); len(keys) != 0 {
		t.Errorf("pruned checkpoint left %v", keys)
	}
	specs := []safetensors.TensorSpec{{Name: "x", DType: dtype.F32, Shape: []int64{1}}}
	if err := convert.Check(dir, specs, convert.SaveOptions{Step: 3}); !errors.Is(err, convert.ErrExists) {
		t.Errorf("Check of a taken name: %v", err)
	}
	if err := convert.Check(dir, specs, convert.SaveOptions{Step: 4}); err != nil {
		t.Errorf("Check: %v", err)
	}

	// A taken name: refused, then replaced (a single file now).
	if _, _, err := save(3, convert.SaveOptions{}); !errors.Is(err, convert.ErrExists) {
		t.Fatalf("save over checkpoint-3: %v", err)
	}
	big := []safetensors.TensorData{tensor(t, "big", dtype.F32, 3<<20)} // 12 MiB: three parts
	p, err := convert.Save(ctx, dir, big, convert.SaveOptions{Step: 3, Overwrite: true, KeepLast: 2})
	if err != nil {
		t.Fatal(err)
	}
	if res, _ := p.Wait(); !res.Replaced || res.Index != "" {
		t.Errorf("overwrite: %+v", res)
	}
	checkLoaded(t, dir+"/checkpoint-3", big)
	if keys, _ := objects(t, s, bucket, "runs/r1/checkpoint-3"); !slices.Equal(keys, []string{"checkpoint.json", "model.safetensors"}) {
		t.Errorf("after overwrite: %v", keys)
	}
	// Not Save's: refused even with Overwrite.
	s.Put(t, bucket, "runs/r1/mine/model.safetensors", []byte("x"))
	if _, err := convert.Save(ctx, dir, big, convert.SaveOptions{Name: "mine", Overwrite: true}); !errors.Is(err, convert.ErrExists) {
		t.Errorf("overwrite of a folder Save did not write: %v", err)
	}

	// Cancelled after the first shard's upload: nothing of it is left.
	cctx, cancel := context.WithCancel(ctx)
	restore := convert.SetHook(func(step string) {
		if step == "sink-shard" {
			cancel()
		}
	})
	big2 := append(slices.Clone(big), tensor(t, "big2", dtype.F32, 2<<20))
	_, err = convert.Save(cctx, dir, big2, convert.SaveOptions{Step: 4, MaxShardSize: 12 << 20})
	restore()
	cancel()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled save: %v", err)
	}
	if keys, uploads := objects(t, s, bucket, "runs/r1/checkpoint-4"); len(keys) != 0 || len(uploads) != 0 {
		t.Errorf("a cancelled save left %v (uploads %v)", keys, uploads)
	}
}

// A pipeline converts to s3:// with its layout: a set per component folder,
// model_index.json and the tokenizer's files copied.
func TestRunPipelineToS3(t *testing.T) {
	s := needS3(t)
	bucket := s.NewBucket(t)
	f32 := ckpttest.Tensors(t, "a.weight:F32[16,16] a.bias:F32[16] b.weight:F32[16,16]")
	root := ckpttest.NewPipeline(t, ckpttest.Pipeline{Components: []ckpttest.Component{
		{Name: "unet", Weights: []ckpttest.Weights{{Prefix: ckpttest.DiffusersPrefix, Tensors: f32}}},
		{Name: "text_encoder", Library: "transformers", Weights: []ckpttest.Weights{{Tensors: f32, Shards: 2}}},
		{Name: "tokenizer", Files: map[string]string{"vocab.json": "{}"}},
	}})
	opts := convert.Options{Policy: ckpt.Policy{Default: ckpt.To(dtype.BF16)}, MaxShardSize: 1024, Verify: true}
	local := filepath.Join(t.TempDir(), "out")
	if _, err := convert.Run(context.Background(), root, local, opts); err != nil {
		t.Fatal(err)
	}
	loc := "s3://" + bucket + "/pipe"
	if _, err := convert.Run(context.Background(), root, loc, opts); err != nil {
		t.Fatal(err)
	}
	if got, want := loadAll(t, loc), loadAll(t, local); !reflect.DeepEqual(got, want) {
		t.Fatalf("s3 pipeline differs from the local one: %d and %d tensors", len(got), len(want))
	}
	keys, _ := objects(t, s, bucket, "pipe")
	var localKeys []string
	filepath.WalkDir(local, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(local, p)
			localKeys = append(localKeys, filepath.ToSlash(rel))
		}
		return err
	})
	if slices.Sort(localKeys); !slices.Equal(keys, localKeys) {
		t.Errorf("objects %v, local files %v", keys, localKeys)
	}

	// The pipeline read back from s3:// into a folder: the same files and
	// tensors (the configs rewritten, the tokenizer copied).
	s.PutDir(t, bucket, "srcpipe", root)
	back := filepath.Join(t.TempDir(), "back")
	if _, err := convert.Run(context.Background(), "s3://"+bucket+"/srcpipe", back, opts); err != nil {
		t.Fatal(err)
	}
	if got, want := loadAll(t, back), loadAll(t, local); !reflect.DeepEqual(got, want) {
		t.Fatalf("pipeline from s3 differs from the local one: %d and %d tensors", len(got), len(want))
	}
	filepath.WalkDir(local, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(local, p)
			w, _ := os.ReadFile(p)
			if g, err := os.ReadFile(filepath.Join(back, rel)); err != nil || (!strings.HasSuffix(rel, ".safetensors") && string(g) != string(w)) {
				t.Errorf("pipeline from s3: %s: %v %q, want %q", rel, err, g, w)
			}
		}
		return err
	})
}

// What a killed save or removal leaves on S3, made by hand: a name that
// holds files of a save killed there (the marker, no manifest) is saved
// again without Overwrite and holds only the new checkpoint after it; files
// without the marker are refused; a folder that a killed removal left is
// removed by the next save's KeepLast pass, and one that a killed save left
// under another name is named in its warnings.
func TestSaveS3AfterKill(t *testing.T) {
	s := needS3(t)
	bucket := s.NewBucket(t)
	dir := "s3://" + bucket + "/run"
	ctx := context.Background()
	marker := func(state string) []byte {
		return []byte(`{"format":"ckpt.incomplete/v1","state":"` + state + `","seq":1,"at":"2026-11-25T00:00:00Z"}`)
	}
	garbage := []byte("the first shard of a killed save")
	s.Put(t, bucket, "run/checkpoint-1/model-00001-of-00002.safetensors", garbage)
	s.Put(t, bucket, "run/checkpoint-1/"+convert.IncompleteName, marker("saving"))
	s.Put(t, bucket, "run/checkpoint-0/model-00002-of-00002.safetensors", garbage)
	s.Put(t, bucket, "run/checkpoint-0/"+convert.IncompleteName, marker("removing"))
	s.Put(t, bucket, "run/stray/model-00001-of-00002.safetensors", garbage)
	s.Put(t, bucket, "run/stray/"+convert.IncompleteName, marker("saving"))
	s.Put(t, bucket, "run/mine/model-00001-of-00002.safetensors", garbage)
	// The upload a killed save was in the middle of, and one of a save
	// under another name.
	for _, key := range []string{"run/checkpoint-1/model-00002-of-00002.safetensors", "run/stray/model-00002-of-00002.safetensors"} {
		up, err := s.Client().CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String(key)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Client().UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String(bucket), Key: aws.String(key), UploadId: up.UploadId,
			PartNumber: aws.Int32(1), Body: strings.NewReader("a part")}); err != nil {
			t.Fatal(err)
		}
	}

	ts := allTensors(t, 1, 3)
	p, err := convert.Save(ctx, dir, ts, convert.SaveOptions{Step: 1, MaxShardSize: 600, KeepLast: 2})
	if err != nil {
		t.Fatal(err)
	}
	res, _ := p.Wait()
	checkLoaded(t, dir+"/checkpoint-1", ts)
	if res.Replaced || len(res.Files) < 2 {
		t.Errorf("save over a killed one: %+v", res)
	}
	keys, _ := objects(t, s, bucket, "run/checkpoint-1")
	if want := append(slices.Clone(res.Files), "checkpoint.json", "model.safetensors.index.json"); !sameSet(keys, want) {
		t.Errorf("checkpoint-1 holds %v, want %v", keys, want)
	}
	if keys, _ := objects(t, s, bucket, "run/checkpoint-0"); len(keys) != 0 {
		t.Errorf("a killed removal's folder holds %v after a save", keys)
	}
	if len(res.Leftovers) != 2 || !strings.Contains(res.Leftovers[0], "checkpoint-1: 1 unfinished uploads") ||
		!strings.Contains(res.Leftovers[1], "checkpoint-0") {
		t.Errorf("leftovers: %q", res.Leftovers)
	}
	if _, uploads := objects(t, s, bucket, "run"); !slices.Equal(uploads, []string{"run/stray/model-00002-of-00002.safetensors"}) {
		t.Errorf("uploads left: %v", uploads)
	}
	if !slices.ContainsFunc(res.Warnings, func(w string) bool { return strings.Contains(w, "run/stray") }) {
		t.Errorf("warnings name no stray save: %q", res.Warnings)
	}
	if keys, _ := objects(t, s, bucket, "run/stray"); len(keys) != 2 {
		t.Errorf("a killed save's folder under another name: %v", keys)
	}
	// Without the marker the files are not Save's, even with Overwrite.
	for _, overwrite := range []bool{false, true} {
		_, err := convert.Save(ctx, dir, ts, convert.SaveOptions{Name: "mine", Overwrite: overwrite})
		if !errors.Is(err, convert.ErrExists) {
			t.Errorf("save over files without the marker (overwrite %v): %v", overwrite, err)
		}
	}
	if cps, err := convert.Checkpoints(dir); err != nil || len(cps) != 1 || cps[0].Name != "checkpoint-1" {
		t.Errorf("Checkpoints: %+v, %v", cps, err)
	}
}

// sameSet reports whether a and b hold the same strings.
func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// What a Run killed before its index leaves (shards, no index) is refused
// with a message that says so, and replaced with Overwrite: nothing of it
// is left.
func TestRunToS3AfterKill(t *testing.T) {
	s := needS3(t)
	bucket := s.NewBucket(t)
	src := ckpttest.Dir(t, ckpttest.Weights{Shards: 2, Tensors: ckpttest.Tensors(t, "a:F32[64,64] b:F32[64,64]")})
	loc := "s3://" + bucket + "/out"
	s.Put(t, bucket, "out/model-00001-of-00003.safetensors", []byte("the first shard of a killed run"))
	opts := convert.Options{Policy: ckpt.Policy{Default: ckpt.To(dtype.BF16)}, MaxShardSize: 9000}
	_, err := convert.Run(context.Background(), src, loc, opts)
	if !errors.Is(err, convert.ErrExists) || !strings.Contains(err.Error(), "without their index") {
		t.Fatalf("Run over a killed one's shards: %v", err)
	}
	opts.Overwrite = true
	rep, err := convert.Run(context.Background(), src, loc, opts)
	if err != nil {
		t.Fatal(err)
	}
	keys, _ := objects(t, s, bucket, "out")
	if want := append(slices.Clone(rep.Components[0].Files), rep.Components[0].Index); !sameSet(keys, want) {
		t.Errorf("after Overwrite: %v, want %v", keys, want)
	}
	if got, want := loadAll(t, loc), loadAll(t, src); len(got) != len(want) {
		t.Errorf("loads %d tensors, want %d", len(got), len(want))
	}
}

// Two processes saving the same new checkpoint name at once (a trainer
// restarted while its first instance still runs): at most one wins, and
// the checkpoint loads as exactly one writer's tensors, never shards of
// both. (Two location strings of one prefix are not serialized by
// IfRunning, as two processes are not.)
func TestSaveS3SameNameRace(t *testing.T) {
	s := needS3(t)
	bucket := s.NewBucket(t)
	ctx := context.Background()
	bothFailed := 0
	defer func() { t.Logf("12 rounds, %d with no winner", bothFailed) }()
	for round := range 12 {
		name := "checkpoint-" + strconv.Itoa(round)
		writers := [2][]safetensors.TensorData{allTensors(t, 100+2*round, 3), allTensors(t, 101+2*round, 3)}
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for w := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				dir := "s3://" + bucket + "/run" + strings.Repeat("/", w) // "run" and "run/": one prefix
				_, errs[w] = convert.Save(ctx, dir, writers[w], convert.SaveOptions{Name: name, MaxShardSize: 600})
			}()
		}
		wg.Wait()
		if errs[0] == nil && errs[1] == nil {
			t.Fatalf("round %d: both saves of %s succeeded", round, name)
		}
		m, err := ckpt.Open("s3://"+bucket+"/run/"+name, ckpt.WithDType(ckpt.AsStored))
		if err != nil {
			if errs[0] == nil || errs[1] == nil {
				t.Fatalf("round %d: a save succeeded, but the checkpoint does not open: %v (%v)", round, err, errs)
			}
			bothFailed++
			continue // both failed: nothing committed
		}
		names := m.Names()
		m.Close()
		w := 0
		if errs[0] != nil {
			w = 1
		}
		if errs[w] != nil {
			t.Fatalf("round %d: the checkpoint opens, but both saves failed: %v", round, errs)
		}
		if len(names) != len(writers[w]) {
			t.Fatalf("round %d: %d tensors, writer %d saved %d", round, len(names), w, len(writers[w]))
		}
		checkLoaded(t, "s3://"+bucket+"/run/"+name, writers[w])
	}
}
