package remote_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/remote"
	"github.com/ckpt-go/ckpt/shard"
)

// tensorSpec returns n tensors of mixed sizes and dtypes.
func tensorSpec(n int) string {
	var b strings.Builder
	for i := range n {
		switch i % 3 {
		case 0:
			fmt.Fprintf(&b, "layers.%d.w:BF16[256,128] ", i)
		case 1:
			fmt.Fprintf(&b, "layers.%d.norm:F32[128] ", i)
		default:
			fmt.Fprintf(&b, "layers.%d.b:F16[64,33] ", i)
		}
	}
	return b.String()
}

// open opens path (a location, or a name of the FS in opts), failing the
// test on error.
func open(t *testing.T, path string, opts ...ckpt.Option) *ckpt.Model {
	t.Helper()
	m, err := ckpt.Open(path, opts...)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// load loads every tensor of m, keyed by name.
func load(t *testing.T, m *ckpt.Model) map[string][]byte {
	t.Helper()
	got, err := tryLoad(context.Background(), m)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return got
}

func tryLoad(ctx context.Context, m *ckpt.Model) (map[string][]byte, error) {
	w, err := m.Load(ctx)
	if err != nil {
		return nil, err
	}
	defer w.Close()
	out := map[string][]byte{}
	for name, tt := range w.All() {
		out[name] = bytes.Clone(tt.Bytes())
	}
	return out, nil
}

func sameTensors(t *testing.T, what string, got, want map[string][]byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d tensors, want %d", what, len(got), len(want))
	}
	for name, w := range want {
		if !bytes.Equal(got[name], w) {
			t.Errorf("%s: tensor %s differs (%d bytes, want %d)", what, name, len(got[name]), len(w))
		}
	}
}

// upload writes a sharded checkpoint of spec to a new bucket under prefix
// and returns the bucket and the local folder.
func upload(t *testing.T, shards int, spec, prefix string) (bucket, dir string) {
	t.Helper()
	s := needS3(t)
	dir = ckpttest.Dir(t, ckpttest.Weights{Shards: shards, Tensors: ckpttest.Tensors(t, spec)})
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"model_type":"llama"}`), 0o644)
	bucket = s.NewBucket(t)
	s.PutDir(t, bucket, prefix, dir)
	return bucket, dir
}

// useClient registers the test server's client for s3:// locations.
func useClient(t *testing.T) {
	remote.SetS3Client(needS3(t).Client())
	t.Cleanup(func() { remote.SetS3Client(nil); remote.SetOptions() })
}

// s3:// folders, indexes and single files load the bytes of a local load,
// as stored and converted.
func TestS3LoadsLikeLocal(t *testing.T) {
	bucket, dir := upload(t, 4, tensorSpec(30), "org/model")
	useClient(t)
	for _, target := range []ckpt.Target{{}, ckpt.To(dtype.F32)} {
		want := load(t, open(t, dir, ckpt.WithDType(target)))
		for _, loc := range []string{"org/model", "org/model/", "org/model/model.safetensors.index.json"} {
			m := open(t, "s3://"+bucket+"/"+loc, ckpt.WithDType(target))
			p, err := m.Plan()
			if err != nil {
				t.Fatal(err)
			}
			if c := p.Components[0]; c.ReadStrategy != "pread" || !strings.Contains(c.ReadStrategyReason, "remote") {
				t.Errorf("strategy %s: %s", c.ReadStrategy, c.ReadStrategyReason)
			}
			sameTensors(t, loc+" "+target.String(), load(t, m), want)
		}
	}
	single := needS3(t).NewBucket(t)
	file := ckpttest.File(t, ckpttest.Tensors(t, tensorSpec(7))...)
	data, _ := os.ReadFile(file)
	needS3(t).Put(t, single, "model.safetensors", data)
	sameTensors(t, "single file", load(t, open(t, "s3://"+single+"/model.safetensors")), load(t, open(t, file)))
	// The whole bucket is a folder too.
	sameTensors(t, "bucket root", load(t, open(t, "s3://"+single)), load(t, open(t, file)))
}

// A pipeline (model_index.json and component folders) resolves and loads
// from S3 as from local files, variants included.
func TestS3Pipeline(t *testing.T) {
	s := needS3(t)
	f32 := ckpttest.Tensors(t, "a.weight:F32[16,16] a.bias:F32[16]")
	f16 := ckpttest.Tensors(t, "a.weight:F16[16,16] a.bias:F16[16]")
	root := ckpttest.NewPipeline(t, ckpttest.Pipeline{Components: []ckpttest.Component{
		{Name: "unet", Weights: []ckpttest.Weights{{Prefix: ckpttest.DiffusersPrefix, Tensors: f32}, {Prefix: ckpttest.DiffusersPrefix, Variant: "fp16", Shards: 2, Tensors: f16}}},
		{Name: "text_encoder", Library: "transformers", Weights: []ckpttest.Weights{{Tensors: f32, Shards: 2}}},
		{Name: "tokenizer", Files: map[string]string{"vocab.json": "{}"}},
	}})
	bucket := s.NewBucket(t)
	s.PutDir(t, bucket, "pipe", root)
	useClient(t)
	for _, v := range []string{"", "fp16"} {
		want := load(t, open(t, root, ckpt.WithVariant(v)))
		m := open(t, "s3://"+bucket+"/pipe", ckpt.WithVariant(v))
		if got := strings.Join(m.Components(), ","); got != "text_encoder,unet" {
			t.Errorf("components %s", got)
		}
		sameTensors(t, "pipeline "+v, load(t, m), want)
	}
}

// Planning a many-shard checkpoint reads the listing, the index, the
// configs and one ranged GET per shard (its header): a few hundred KB,
// not the weights. A header larger than the first read costs a second
// request for that shard only.
func TestS3PlanReadsOnlyHeaders(t *testing.T) {
	const shards = 24
	var spec strings.Builder
	for i := range shards {
		fmt.Fprintf(&spec, "l%d.w:BF16[1024,1024] l%d.n:F32[1024] ", i, i) // 2 MiB per shard
	}
	bucket, _ := upload(t, shards, spec.String(), "big")
	s := needS3(t)
	fsys := remote.NewS3FS(s.Client(), bucket)
	m := open(t, "big", ckpt.WithFS(fsys))
	if _, err := m.Plan(); err != nil {
		t.Fatal(err)
	}
	st := fsys.Stats()
	// GET "big" (not an object), LIST big/, the index, a GET per shard;
	// config.json is found missing in the listing.
	if st.GETs > shards+3 || st.LISTs != 1 || st.HEADs != 0 || st.Retries != 0 {
		t.Errorf("planning made %+v", st)
	}
	// The first shard's first MiB, then 64 KiB a shard (twice its header,
	// at least 64 KiB).
	if st.Bytes > 1<<20+shards*(64<<10)+(64<<10) {
		t.Errorf("planning read %d bytes", st.Bytes)
	}
	t.Logf("plan of %d shards (%d MiB): %d requests, %d KiB", shards, shards*2, st.Requests, st.Bytes>>10)
	// Loading reads the weights in chunk-sized requests.
	before := fsys.Stats()
	load(t, m)
	after := fsys.Stats()
	if gets := after.GETs - before.GETs; gets < shards || gets > 2*shards+2 {
		t.Errorf("load made %d GETs", gets)
	}

	// A 4 KiB first read: headers larger than that take a second GET.
	small := remote.NewS3FS(s.Client(), bucket, remote.WithHeadSize(4<<10))
	h, err := shard.Open("big/model-00001-of-00024.safetensors", shard.WithFS(small))
	if err != nil {
		t.Fatal(err)
	}
	h.Close()
	if st := small.Stats(); st.GETs != 1 {
		t.Errorf("small header: %+v", st)
	}
	var many strings.Builder
	for i := range 200 {
		fmt.Fprintf(&many, "a.long.tensor.name.%03d.weight:F32[2] ", i)
	}
	f := ckpttest.File(t, ckpttest.Tensors(t, many.String())...)
	data, _ := os.ReadFile(f)
	s.Put(t, bucket, "many.safetensors", data)
	h, err = shard.Open("many.safetensors", shard.WithFS(small))
	if err != nil {
		t.Fatal(err)
	}
	h.Close()
	if st := small.Stats(); st.GETs != 3 {
		t.Errorf("large header: %+v (want 1 + 2 GETs)", st)
	}
}

// Missing locations, shards and clients fail with typed errors.
func TestS3Errors(t *testing.T) {
	bucket, _ := upload(t, 2, tensorSpec(4), "m")
	s := needS3(t)
	remote.SetS3Client(nil)
	if _, err := ckpt.Open("s3://" + bucket + "/m"); !errors.Is(err, remote.ErrInvalid) || !strings.Contains(err.Error(), "no S3 client: call remote.SetS3Client") || !errors.Is(err, ckpt.ErrResolve) {
		t.Errorf("no client: %v", err)
	}
	useClient(t)
	_, err := ckpt.Open("s3://" + bucket + "/nothing")
	if !errors.Is(err, ckpt.ErrResolve) || !errors.Is(err, fs.ErrNotExist) || !errors.Is(err, remote.ErrNotFound) {
		t.Errorf("missing: %v", err)
	}
	if !strings.Contains(fmt.Sprint(err), "s3://"+bucket+"/nothing") {
		t.Errorf("error does not name the location: %v", err)
	}
	s.Delete(t, bucket, "m/model-00002-of-00002.safetensors")
	if _, err := ckpt.Open("s3://" + bucket + "/m/model.safetensors.index.json"); !errors.Is(err, shard.ErrMissingShard) {
		t.Errorf("missing shard: %v", err)
	}
	if _, err := ckpt.Open("s3://no_such_bucket_here/x"); err == nil {
		t.Error("missing bucket opened")
	}
	if _, err := ckpt.Open("s3://b/../x"); !errors.Is(err, remote.ErrInvalid) || !strings.Contains(err.Error(), "s3://b/../x") {
		t.Errorf("bad location: %v", err)
	}
	// An empty object is not a safetensors file (and opening it does not
	// fail on its empty range).
	s.Put(t, bucket, "empty.safetensors", nil)
	if _, err := ckpt.Open("s3://" + bucket + "/empty.safetensors"); err == nil || !strings.Contains(err.Error(), "header") {
		t.Errorf("empty object: %v", err)
	}
}

// An object replaced after Open (before or during the load) fails the load
// with ErrChanged; no byte of the new version is loaded.
func TestS3ObjectReplaced(t *testing.T) {
	bucket, dir := upload(t, 3, tensorSpec(12), "m")
	s := needS3(t)
	useClient(t)
	other := ckpttest.Dir(t, ckpttest.Weights{Shards: 3, Tensors: ckpttest.Tensors(t, strings.ReplaceAll(tensorSpec(12), "BF16", "F16"))})
	replace := func(name string) {
		data, err := os.ReadFile(filepath.Join(other, name))
		if err != nil {
			t.Fatal(err)
		}
		s.Put(t, bucket, "m/"+name, data)
	}
	restore := func(name string) {
		data, _ := os.ReadFile(filepath.Join(dir, name))
		s.Put(t, bucket, "m/"+name, data)
	}
	const shard3 = "model-00003-of-00003.safetensors"

	// Replaced between Open and Load.
	m := open(t, "s3://"+bucket+"/m")
	replace(shard3)
	_, err := tryLoad(context.Background(), m)
	if !errors.Is(err, remote.ErrChanged) || !errors.Is(err, ckpt.ErrRead) {
		t.Fatalf("replaced before the load: %v", err)
	}
	restore(shard3)

	// Replaced while the load runs: one request at a time, the last shard
	// replaced when the first bytes arrive.
	remote.SetOptions(remote.WithConcurrency(1), remote.WithChunkSize(64<<10))
	m = open(t, "s3://"+bucket+"/m")
	var once sync.Once
	m2 := open(t, "s3://"+bucket+"/m", ckpt.WithProgress(func(ckpt.Progress) { once.Do(func() { replace(shard3) }) }))
	_ = m
	_, err = tryLoad(context.Background(), m2)
	if !errors.Is(err, remote.ErrChanged) {
		t.Fatalf("replaced during the load: %v", err)
	}
	var re *remote.Error
	if !errors.As(err, &re) || !strings.Contains(re.Location, shard3) {
		t.Errorf("error does not name the object: %v", err)
	}

	// A truncated replacement is a change too.
	restore(shard3)
	m = open(t, "s3://"+bucket+"/m")
	data, _ := os.ReadFile(filepath.Join(dir, shard3))
	s.Put(t, bucket, "m/"+shard3, data[:len(data)/2])
	if _, err := tryLoad(context.Background(), m); !errors.Is(err, remote.ErrChanged) {
		t.Fatalf("truncated: %v", err)
	}
	// Opened after the truncation: the header no longer matches the size.
	if _, err := ckpt.Open("s3://" + bucket + "/m"); err == nil {
		t.Error("a truncated shard opened")
	}
}

// Throttling, connections reset mid-body, short bodies and stalled bodies
// injected by a proxy are retried (resuming where the body stopped) and
// the load gives exactly the local bytes; with retries exhausted the error
// says why.
func TestS3InjectedFaults(t *testing.T) {
	bucket, dir := upload(t, 3, tensorSpec(45), "m")
	s := needS3(t)
	want := load(t, open(t, dir, ckpt.WithDType(ckpt.To(dtype.F32))))
	p := newFaultProxy(t, s.Endpoint)
	client := s.ClientAt(p.URL())
	opts := []remote.Option{remote.WithChunkSize(64 << 10), remote.WithConcurrency(4), remote.WithBackoff(time.Millisecond, 20*time.Millisecond),
		remote.WithRequestTimeout(time.Second), remote.WithRetries(6)}
	for name, f := range map[string]func(n int64) fault{
		"throttle": func(n int64) fault { return map[bool]fault{true: throttle}[n%3 == 0] },
		"reset":    func(n int64) fault { return map[bool]fault{true: reset}[n%4 == 1] },
		"cut":      func(n int64) fault { return map[bool]fault{true: cut}[n%4 == 2] },
		"stall":    func(n int64) fault { return map[bool]fault{true: stall}[n%7 == 3] },
		"mixed":    func(n int64) fault { return []fault{pass, throttle, reset, stall, cut, pass}[n%6] },
	} {
		t.Run(name, func(t *testing.T) {
			p.setFault(f, true)
			fsys := remote.NewS3FS(client, bucket, opts...)
			m := open(t, "m", ckpt.WithFS(fsys), ckpt.WithDType(ckpt.To(dtype.F32)))
			sameTensors(t, name, load(t, m), want)
			if st := fsys.Stats(); st.Retries == 0 {
				t.Errorf("no retries: %+v", st)
			}
		})
	}
	// Every data request throttled: ErrUnavailable after the retries.
	p.setFault(func(n int64) fault { return throttle }, false)
	fsys := remote.NewS3FS(client, bucket, append(opts, remote.WithRetries(2))...)
	_, err := ckpt.Open("m", ckpt.WithFS(fsys))
	var re *remote.Error
	if !errors.Is(err, remote.ErrUnavailable) || !errors.As(err, &re) || re.Attempts != 3 || re.Status != 503 {
		t.Fatalf("always throttled: %v", err)
	}
	// Every body cut short: ErrUnavailable after the retries, saying so.
	p.setFault(func(n int64) fault { return map[bool]fault{true: cut}[n > 8] }, false)
	fsys = remote.NewS3FS(client, bucket, append(opts, remote.WithRetries(1))...)
	m := open(t, "m", ckpt.WithFS(fsys))
	if _, err := tryLoad(context.Background(), m); !errors.Is(err, remote.ErrUnavailable) || !strings.Contains(err.Error(), "the response ended early") {
		t.Fatalf("always cut: %v", err)
	}
	// Every body stalled: the request deadline ends each attempt.
	p.setFault(func(n int64) fault { return map[bool]fault{true: stall}[n > 8] }, false)
	fsys = remote.NewS3FS(client, bucket, append(opts, remote.WithRetries(1), remote.WithRequestTimeout(200*time.Millisecond))...)
	m = open(t, "m", ckpt.WithFS(fsys))
	start := time.Now()
	_, err = tryLoad(context.Background(), m)
	if !errors.Is(err, remote.ErrUnavailable) || !strings.Contains(err.Error(), "timed out") {
		t.Fatalf("always stalled: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("stalled load failed after %v", d)
	}
	p.setFault(nil, false)
}

// Cancelling the context stops a load whose requests hang, promptly.
func TestS3Cancel(t *testing.T) {
	bucket, _ := upload(t, 2, tensorSpec(12), "m")
	s := needS3(t)
	p := newFaultProxy(t, s.Endpoint)
	fsys := remote.NewS3FS(s.ClientAt(p.URL()), bucket, remote.WithChunkSize(64<<10))
	m := open(t, "m", ckpt.WithFS(fsys))
	p.setFault(func(int64) fault { return stall }, false)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	_, err := tryLoad(ctx, m)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("cancel took %v", d)
	}
}

// The server killed in the middle of a load and started again: the load
// retries and completes with the right bytes. Killed for good: the load
// fails with ErrUnavailable once its retries are spent.
func TestS3ServerKilled(t *testing.T) {
	s := needLocalS3(t)
	bucket, dir := upload(t, 3, tensorSpec(45), "m")
	want := load(t, open(t, dir))
	t.Cleanup(func() {
		if err := s.Restart(); err != nil {
			t.Log(err)
		}
	})
	opts := []remote.Option{remote.WithChunkSize(64 << 10), remote.WithConcurrency(2), remote.WithBackoff(50*time.Millisecond, 400*time.Millisecond),
		remote.WithRequestTimeout(2 * time.Second), remote.WithRetries(10)}
	fsys := remote.NewS3FS(s.Client(), bucket, opts...)
	var once sync.Once
	restarted := make(chan error, 1)
	m := open(t, "m", ckpt.WithFS(fsys), ckpt.WithProgress(func(ckpt.Progress) {
		once.Do(func() {
			s.Kill()
			go func() {
				time.Sleep(300 * time.Millisecond)
				restarted <- s.Restart()
			}()
		})
	}))
	sameTensors(t, "killed and restarted", load(t, m), want)
	if err := <-restarted; err != nil {
		t.Fatal(err)
	}
	if st := fsys.Stats(); st.Retries == 0 {
		t.Errorf("no retries: %+v", st)
	}

	fsys = remote.NewS3FS(s.Client(), bucket, append(opts, remote.WithRetries(2), remote.WithBackoff(10*time.Millisecond, 50*time.Millisecond))...)
	m = open(t, "m", ckpt.WithFS(fsys))
	s.Kill()
	start := time.Now()
	_, err := tryLoad(context.Background(), m)
	if !errors.Is(err, remote.ErrUnavailable) {
		t.Fatalf("killed: %v", err)
	}
	var re *remote.Error
	if !errors.As(err, &re) || re.Attempts != 3 {
		t.Errorf("attempts: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("failed after %v", d)
	}
}

// A folder of more keys than one listing page holds is listed whole
// (ListObjectsV2 continuation), files and subfolders.
func TestS3ListingPages(t *testing.T) {
	s := needLocalS3(t)
	bucket := s.NewBucket(t)
	dir := filepath.Join(s.Dir(), bucket, "many")
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "sub", "x"), []byte("x"), 0o644)
	const n = 250
	remote.SetListPageSize(100)
	defer remote.SetListPageSize(0)
	for i := range n {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%04d", i)), []byte{byte(i)}, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fsys := remote.NewS3FS(s.Client(), bucket)
	es, err := fs.ReadDir(fsys, "many")
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != n+1 || !es[n].IsDir() || es[n].Name() != "sub" || es[0].Name() != "f0000" || es[0].IsDir() {
		t.Fatalf("%d entries, last %v", len(es), es[len(es)-1])
	}
	if st := fsys.Stats(); st.LISTs != 3 {
		t.Errorf("one page: %+v", st)
	}
	if st, err := fs.Stat(fsys, "many/f0199"); err != nil || st.Size() != 1 {
		t.Errorf("stat from the listing: %v %v", st, err)
	}
	if _, err := fs.Stat(fsys, "many/nope"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing: %v", err)
	}
}
