package remote_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/remote"
)

// cacheFiles lists the cache folder's entries and temporary files.
func cacheFiles(t *testing.T, dir string) (entries, temps []string, total int64) {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range des {
		switch {
		case strings.Contains(de.Name(), ".tmp-"):
			temps = append(temps, de.Name())
		case strings.HasSuffix(de.Name(), ".obj"):
			entries = append(entries, de.Name())
			info, _ := de.Info()
			total += info.Size()
		}
	}
	return entries, temps, total
}

// A second load of the same objects reads the cache, not the server; a
// replaced object is fetched anew; partial loads store nothing.
func TestCacheReadThrough(t *testing.T) {
	bucket, dir := upload(t, 3, tensorSpec(30), "m")
	s := needS3(t)
	want := load(t, open(t, dir))
	cdir := t.TempDir()
	cache, err := remote.NewCache(cdir, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	first := remote.NewS3FS(s.Client(), bucket, remote.WithCache(cache))
	sameTensors(t, "first", load(t, open(t, "m", ckpt.WithFS(first))), want)
	// Three shards, the index and config.json were read whole.
	if st := cache.Stats(); st.Stored != 5 || st.Errors != 0 {
		t.Fatalf("after the first load: %+v", st)
	}
	entries, temps, _ := cacheFiles(t, cdir)
	if len(entries) != 5 || len(temps) != 0 {
		t.Errorf("entries %v temps %v", entries, temps)
	}
	opened := first.Stats().GETs - 3 // the data requests of the first load are not made again

	second := remote.NewS3FS(s.Client(), bucket, remote.WithCache(cache))
	sameTensors(t, "second", load(t, open(t, "m", ckpt.WithFS(second))), want)
	if st := second.Stats(); st.GETs > opened {
		t.Errorf("second load made %d GETs, opening alone makes %d", st.GETs, opened)
	}
	if st := cache.Stats(); st.Hits < 3 {
		t.Errorf("hits: %+v", st)
	}

	// A replaced shard: its new version is read from the server.
	other := ckpttest.Dir(t, ckpttest.Weights{Shards: 3, Tensors: ckpttest.Tensors(t, strings.ReplaceAll(tensorSpec(30), "BF16", "F16"))})
	data, _ := os.ReadFile(filepath.Join(other, "model-00001-of-00003.safetensors"))
	s.Put(t, bucket, "m/model-00001-of-00003.safetensors", data)
	idx, _ := os.ReadFile(filepath.Join(other, "model.safetensors.index.json"))
	s.Put(t, bucket, "m/model.safetensors.index.json", idx)
	mixed := load(t, open(t, "m", ckpt.WithFS(remote.NewS3FS(s.Client(), bucket, remote.WithCache(cache)))))
	ref := remote.NewS3FS(s.Client(), bucket)
	sameTensors(t, "after replacing a shard", mixed, load(t, open(t, "m", ckpt.WithFS(ref))))

	// One tensor of a new bucket: nothing complete, nothing stored.
	bucket2, _ := upload(t, 1, "big:F32[512,1024] small:F32[4]", "p")
	before := cache.Stats().Stored
	partial := remote.NewS3FS(s.Client(), bucket2, remote.WithCache(cache))
	m := open(t, "p", ckpt.WithFS(partial))
	if _, err := m.LoadTensor(context.Background(), "small"); err != nil {
		t.Fatal(err)
	}
	m.Close()
	partial.Close()                                 // the caller's FS: its partly filled entries go
	if st := cache.Stats(); st.Stored != before+1 { // config.json only
		t.Errorf("a partial load stored %d entries", st.Stored-before)
	}
	if _, temps, _ := cacheFiles(t, cdir); len(temps) != 0 {
		t.Errorf("temporary files left: %v", temps)
	}
}

// The cache stays within its bound, oldest entries first, and removes the
// temporary files of dead processes.
func TestCacheBounded(t *testing.T) {
	bucket, dir := upload(t, 4, tensorSpec(40), "m")
	s := needS3(t)
	st, _ := os.Stat(filepath.Join(dir, "model-00001-of-00004.safetensors"))
	bound := 2*st.Size() + st.Size()/2
	cdir := t.TempDir()
	stale := filepath.Join(cdir, ".0123.obj.tmp-42")
	os.WriteFile(stale, []byte("left by a dead process"), 0o644)
	old := time.Now().Add(-2 * time.Hour)
	os.Chtimes(stale, old, old)
	cache, err := remote.NewCache(cdir, bound)
	if err != nil {
		t.Fatal(err)
	}
	load(t, open(t, "m", ckpt.WithFS(remote.NewS3FS(s.Client(), bucket, remote.WithCache(cache)))))
	_, temps, total := cacheFiles(t, cdir)
	if total > bound || cache.Stats().Evicted == 0 || len(temps) != 0 {
		t.Errorf("total %d bound %d, %+v, temps %v", total, bound, cache.Stats(), temps)
	}
	if _, err := remote.NewCache(cdir, 0); !errors.Is(err, remote.ErrInvalid) || !strings.Contains(err.Error(), "cache size bound 0: must be positive") {
		t.Errorf("zero bound: %v", err)
	}
}

// Several processes (here: independent caches and file systems on one
// folder) fill and read the same cache at once; every load is right and the
// folder ends with one entry per object.
func TestCacheShared(t *testing.T) {
	bucket, dir := upload(t, 3, tensorSpec(30), "m")
	s := needS3(t)
	want := load(t, open(t, dir))
	cdir := t.TempDir()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 2 {
				cache, err := remote.NewCache(cdir, 1<<30)
				if err != nil {
					t.Error(err)
					return
				}
				m, err := ckpt.Open("m", ckpt.WithFS(remote.NewS3FS(s.Client(), bucket, remote.WithCache(cache), remote.WithConcurrency(1+i))))
				if err != nil {
					t.Error(err)
					return
				}
				got, err := tryLoad(context.Background(), m)
				m.Close()
				if err != nil {
					t.Error(err)
					return
				}
				for name, w := range want {
					if string(got[name]) != string(w) {
						t.Errorf("tensor %s differs", name)
					}
				}
			}
		}()
	}
	wg.Wait()
	entries, temps, _ := cacheFiles(t, cdir)
	if len(entries) != 5 || len(temps) != 0 {
		t.Errorf("entries %v temps %v", entries, temps)
	}
}

// A cache that cannot write does not fail the load: the error is counted.
func TestCacheFailureIsNotFatal(t *testing.T) {
	bucket, dir := upload(t, 2, tensorSpec(10), "m")
	s := needS3(t)
	cdir := filepath.Join(t.TempDir(), "cache")
	cache, err := remote.NewCache(cdir, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(cdir)
	os.WriteFile(cdir, []byte("not a folder"), 0o644)
	sameTensors(t, "broken cache", load(t, open(t, "m", ckpt.WithFS(remote.NewS3FS(s.Client(), bucket, remote.WithCache(cache))))), load(t, open(t, dir)))
	if st := cache.Stats(); st.Errors == 0 || !errors.Is(st.Last, remote.ErrUnavailable) || !strings.Contains(st.Last.Error(), "the cache cannot be used") {
		t.Errorf("%+v", st)
	}
}

// TestCacheHelperProcess is a child of TestCacheProcesses: it loads the
// checkpoint named by the environment through the shared cache folder and
// prints a checksum of its tensors.
func TestCacheHelperProcess(t *testing.T) {
	if os.Getenv("CKPT_CACHE_CHILD") != "1" {
		t.Skip("run by TestCacheProcesses")
	}
	s := needS3(t)
	cache, err := remote.NewCache(os.Getenv("CKPT_CACHE_DIR"), 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	fsys := remote.NewS3FS(s.Client(), os.Getenv("CKPT_CACHE_BUCKET"), remote.WithCache(cache))
	defer fsys.Close()
	got := load(t, open(t, "m", ckpt.WithFS(fsys)))
	fmt.Printf("SUM %s\n", checksum(got))
	if st := cache.Stats(); st.Errors != 0 {
		t.Fatalf("cache errors: %+v", st)
	}
}

func checksum(ts map[string][]byte) string {
	names := slices.Sorted(maps.Keys(ts))
	h := sha256.New()
	for _, n := range names {
		h.Write([]byte(n))
		h.Write(ts[n])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Processes sharing one cache folder fill and read it at once: each loads
// the right bytes, and the folder ends with one entry per object and no
// temporary files.
func TestCacheProcesses(t *testing.T) {
	bucket, dir := upload(t, 3, tensorSpec(30), "m")
	s := needS3(t)
	want := checksum(load(t, open(t, dir)))
	cdir := t.TempDir()
	env := append(os.Environ(), "CKPT_CACHE_CHILD=1", "CKPT_CACHE_DIR="+cdir, "CKPT_CACHE_BUCKET="+bucket,
		"CKPT_S3_ENDPOINT="+s.Endpoint, "AWS_ACCESS_KEY_ID="+s.AccessKey, "AWS_SECRET_ACCESS_KEY="+s.SecretKey, "AWS_REGION="+s.Region)
	for round := range 2 { // the first round fills the cache, the second reads it
		var cmds []*exec.Cmd
		var outs []*bytes.Buffer
		for range 3 {
			cmd := exec.Command(os.Args[0], "-test.run=^TestCacheHelperProcess$", "-test.count=1", "-test.v")
			cmd.Env = env
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			cmds, outs = append(cmds, cmd), append(outs, &out)
		}
		for i, cmd := range cmds {
			if err := cmd.Wait(); err != nil {
				t.Fatalf("round %d child %d: %v\n%s", round, i, err, outs[i])
			}
			if !strings.Contains(outs[i].String(), "SUM "+want) {
				t.Errorf("round %d child %d loaded other bytes:\n%s", round, i, outs[i])
			}
		}
	}
	entries, temps, _ := cacheFiles(t, cdir)
	if len(entries) != 5 || len(temps) != 0 {
		t.Errorf("entries %v temps %v", entries, temps)
	}
}
