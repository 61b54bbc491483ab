// Command remotebench measures loads from an S3-compatible server (issue
// 11): the loader reading a multi-shard checkpoint from versitygw on
// 127.0.0.1 against a plain parallel ranged download of the same objects
// with the same client in the same run, and against the loader on the
// local files; and planning a 100-shard checkpoint from S3 (requests,
// bytes, time).
//
//	bash .ci/install-versitygw.sh     # from the repository root, once
//	cd bench && go run ./cmd/remotebench -size 2GiB -runs 5
//
// It prints Markdown tables of medians. The machine is shared and noisy:
// implementations take turns in every round.
package main

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"log"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/s3test"
	"github.com/ckpt-go/ckpt/remote"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/shard"
)

func main() {
	sizeFlag := flag.String("size", "2GiB", "size of the checkpoint loaded")
	shards := flag.Int("shards", 8, "its shards")
	runs := flag.Int("runs", 5, "rounds (each implementation once per round)")
	planShards := flag.Int("plan-shards", 100, "shards of the checkpoint planned")
	conc := flag.Int("concurrency", remote.DefaultConcurrency, "requests in flight (loader and download)")
	chunkFlag := flag.String("chunk", "8MiB", "bytes per ranged request (loader and download)")
	flag.Parse()
	size, err := shard.ParseSize(*sizeFlag)
	check(err)
	chunk, err := shard.ParseSize(*chunkFlag)
	check(err)

	srv, reason, err := s3test.Start()
	check(err)
	if srv == nil {
		log.Fatal(reason)
	}
	defer srv.Stop()
	client := srv.Client()
	ctx := context.Background()
	bucket := "ckpt-bench"
	_, err = client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)})
	check(err)

	tmp, err := os.MkdirTemp("", "remotebench-")
	check(err)
	defer os.RemoveAll(tmp)
	dir := filepath.Join(tmp, "model")
	log.Printf("writing a %s checkpoint in %d shards", *sizeFlag, *shards)
	files, data := writeCheckpoint(dir, size, *shards, 4096, 2048)
	log.Printf("uploading %d files to %s", len(files), srv.Endpoint)
	objects := upload(ctx, client, bucket, "model", dir, files)

	fmt.Printf("# Remote load: %s (%d bytes of tensors) in %d shards, versitygw on 127.0.0.1, %d CPUs, %d × %s requests\n\n",
		*sizeFlag, data, *shards, runtime.NumCPU(), *conc, *chunkFlag)
	// Every implementation's bytes agree (checksums) before anything is timed.
	want := downloadSum(ctx, client, bucket, objects, *conc, chunk)
	if got := loaderSum(ckptRemote(client, bucket, *conc, chunk)); got != want {
		log.Fatalf("the loader's bytes differ from the download's: %08x vs %08x", got, want)
	}

	cache, err := remote.NewCache(filepath.Join(tmp, "cache"), 2*data+(64<<20))
	check(err)
	warm := remote.NewS3FS(client, bucket, remote.WithCache(cache))
	loadFS(warm, "model")
	warm.Close()
	if st := cache.Stats(); st.Stored < int64(len(objects)) || st.Errors != 0 {
		log.Fatalf("cache not filled: %+v", st)
	}

	impls := []struct {
		name string
		run  func() (stats string)
	}{
		{"download (plain ranged GETs, same client)", func() string {
			download(ctx, client, bucket, objects, *conc, chunk)
			return ""
		}},
		{"ckpt.Open + Load from S3 (as stored)", func() string {
			fsys := remote.NewS3FS(client, bucket, remote.WithConcurrency(*conc), remote.WithChunkSize(chunk))
			loadFS(fsys, "model")
			st := fsys.Stats()
			return fmt.Sprintf("%d GETs, %d LISTs", st.GETs, st.LISTs)
		}},
		{"ckpt.Open + Load from S3, BF16 → F32", func() string {
			fsys := remote.NewS3FS(client, bucket, remote.WithConcurrency(*conc), remote.WithChunkSize(chunk))
			m, err := ckpt.Open("model", ckpt.WithFS(fsys), ckpt.WithDType(ckpt.To(dtype.F32)))
			check(err)
			load(m)
			st := fsys.Stats()
			return fmt.Sprintf("%d GETs, %d LISTs", st.GETs, st.LISTs)
		}},
		{"ckpt.Open + Load from S3 through a warm Cache", func() string {
			fsys := remote.NewS3FS(client, bucket, remote.WithConcurrency(*conc), remote.WithChunkSize(chunk), remote.WithCache(cache))
			loadFS(fsys, "model")
			fsys.Close()
			st := fsys.Stats()
			return fmt.Sprintf("%d GETs, %d LISTs", st.GETs, st.LISTs)
		}},
		{"ckpt.Open + Load, local files, pread", func() string {
			m, err := ckpt.Open(dir, ckpt.WithReadStrategy("pread"))
			check(err)
			load(m)
			return ""
		}},
	}
	times := make([][]time.Duration, len(impls))
	notes := make([]string, len(impls))
	for r := 0; r <= *runs; r++ { // round 0 warms up
		for k := range impls {
			i := (k + r) % len(impls)
			runtime.GC()
			debug.FreeOSMemory()
			start := time.Now()
			notes[i] = impls[i].run()
			if r > 0 {
				times[i] = append(times[i], time.Since(start))
			}
		}
	}
	base := median(times[0])
	fmt.Println("| implementation | median | GB/s | vs download | min–max | requests |")
	fmt.Println("| --- | ---: | ---: | ---: | --- | --- |")
	for i, im := range impls {
		m := median(times[i])
		fmt.Printf("| %s | %.3f s | %.2f | %.2f× | %.3f–%.3f s | %s |\n", im.name, m.Seconds(), float64(data)/m.Seconds()/1e9,
			base.Seconds()/m.Seconds(), slices.Min(times[i]).Seconds(), slices.Max(times[i]).Seconds(), notes[i])
	}

	// Planning a many-shard checkpoint: requests, bytes, time.
	pdir := filepath.Join(tmp, "plan")
	log.Printf("writing and uploading a %d-shard checkpoint", *planShards)
	pfiles, pdata := writeCheckpoint(pdir, int64(*planShards)*(4<<20), *planShards, 1024, 1024)
	upload(ctx, client, bucket, "plan", pdir, pfiles)
	var ptimes []time.Duration
	var pst remote.Stats
	for r := 0; r <= *runs; r++ {
		fsys := remote.NewS3FS(client, bucket)
		start := time.Now()
		m, err := ckpt.Open("plan", ckpt.WithFS(fsys))
		check(err)
		_, err = m.Plan()
		check(err)
		d := time.Since(start)
		m.Close()
		if r > 0 {
			ptimes = append(ptimes, d)
		}
		pst = fsys.Stats()
	}
	fmt.Printf("\n# Plan of a %d-shard checkpoint (%.0f MB, 4 tensors a shard) from S3: ckpt.Open + Plan\n\n", *planShards, float64(pdata)/1e6)
	fmt.Println("| median | min–max | requests | GETs | LISTs | HEADs | bytes received |")
	fmt.Println("| ---: | --- | ---: | ---: | ---: | ---: | ---: |")
	fmt.Printf("| %.3f s | %.3f–%.3f s | %d | %d | %d | %d | %.2f MB |\n", median(ptimes).Seconds(), slices.Min(ptimes).Seconds(),
		slices.Max(ptimes).Seconds(), pst.Requests, pst.GETs, pst.LISTs, pst.HEADs, float64(pst.Bytes)/1e6)
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// pattern is the data tensors are cut from: finite BF16 values.
var pattern = sync.OnceValue(func() []byte {
	r := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, 8<<20)
	for i := 0; i < len(b); i += 2 {
		bits := math.Float32bits(float32(r.NormFloat64()))
		binary.LittleEndian.PutUint16(b[i:], uint16(bits>>16))
	}
	return b
})

// writeCheckpoint writes a sharded BF16 checkpoint of about size bytes into
// dir: [rows, cols] matrices, each followed by a norm vector of cols, and
// an index. It returns the file names and the tensor bytes.
func writeCheckpoint(dir string, size int64, shards int, rows, cols int64) ([]string, int64) {
	check(os.MkdirAll(dir, 0o755))
	matrix := rows * cols * 2
	layers := int((size + matrix - 1) / matrix)
	layers = max(layers, shards)
	weightMap := map[string]string{}
	var names []string
	var total int64
	for s := 0; s < shards; s++ {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", s+1, shards)
		var specs []safetensors.TensorSpec
		for l := s * layers / shards; l < (s+1)*layers/shards; l++ {
			specs = append(specs,
				safetensors.TensorSpec{Name: fmt.Sprintf("layers.%d.weight", l), DType: dtype.BF16, Shape: []int64{rows, cols}},
				safetensors.TensorSpec{Name: fmt.Sprintf("layers.%d.norm", l), DType: dtype.BF16, Shape: []int64{cols}})
		}
		total += writeShard(filepath.Join(dir, name), specs)
		for _, sp := range specs {
			weightMap[sp.Name] = name
		}
		names = append(names, name)
	}
	idx, err := json.MarshalIndent(map[string]any{"metadata": map[string]any{"total_size": total}, "weight_map": weightMap}, "", "  ")
	check(err)
	check(os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), idx, 0o644))
	check(os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"model_type":"llama"}`), 0o644))
	return append(names, "model.safetensors.index.json", "config.json"), total
}

func writeShard(path string, specs []safetensors.TensorSpec) int64 {
	f, err := os.Create(path)
	check(err)
	defer f.Close()
	w, err := safetensors.NewWriter(f, specs, map[string]string{"format": "pt"})
	check(err)
	var total int64
	for i := 0; ; i++ {
		ts, tw, err := w.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		check(err)
		n, _ := ts.ByteLen()
		total += n
		pat := pattern()
		off := (i * 4099 * 2) % len(pat)
		for n > 0 {
			k := min(n, int64(len(pat)-off))
			_, err := tw.Write(pat[off : off+int(k)])
			check(err)
			n -= k
			off = 0
		}
	}
	check(w.Close())
	return total
}

type object struct {
	key  string
	size int64
}

// upload puts the files of dir under prefix and returns the safetensors
// objects.
func upload(ctx context.Context, client *s3.Client, bucket, prefix, dir string, files []string) []object {
	var out []object
	for _, name := range files {
		f, err := os.Open(filepath.Join(dir, name))
		check(err)
		st, _ := f.Stat()
		_, err = client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(prefix + "/" + name),
			Body: f, ContentLength: aws.Int64(st.Size())})
		f.Close()
		check(err)
		if filepath.Ext(name) == ".safetensors" {
			out = append(out, object{prefix + "/" + name, st.Size()})
		}
	}
	return out
}

// download reads every object whole into fresh buffers with ranged GETs
// of chunk bytes, conc at a time: the plain transfer a loader competes
// with.
func download(ctx context.Context, client *s3.Client, bucket string, objects []object, conc int, chunk int64) [][]byte {
	type job struct {
		key string
		dst []byte
		off int64
	}
	bufs := make([][]byte, len(objects))
	var jobs []job
	for i, o := range objects {
		bufs[i] = make([]byte, o.size)
		for off := int64(0); off < o.size; off += chunk {
			jobs = append(jobs, job{o.key, bufs[i][off:min(off+chunk, o.size)], off})
		}
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(len(jobs)) {
					return
				}
				j := jobs[i]
				out, err := client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(j.key),
					Range: aws.String(fmt.Sprintf("bytes=%d-%d", j.off, j.off+int64(len(j.dst))-1))})
				check(err)
				_, err = io.ReadFull(out.Body, j.dst)
				out.Body.Close()
				check(err)
			}
		}()
	}
	wg.Wait()
	return bufs
}

// downloadSum is a checksum of the tensor bytes of the downloaded objects,
// in file order.
func downloadSum(ctx context.Context, client *s3.Client, bucket string, objects []object, conc int, chunk int64) uint32 {
	bufs := download(ctx, client, bucket, objects, conc, chunk)
	var sum uint32
	for _, b := range bufs {
		f, err := safetensors.OpenBytes(b)
		check(err)
		for _, t := range f.Tensors() {
			v, err := t.Bytes()
			check(err)
			sum = crc32.Update(sum, crc32.IEEETable, v)
		}
	}
	return sum
}

func ckptRemote(client *s3.Client, bucket string, conc int, chunk int64) *ckpt.Model {
	m, err := ckpt.Open("model", ckpt.WithFS(remote.NewS3FS(client, bucket, remote.WithConcurrency(conc), remote.WithChunkSize(chunk))))
	check(err)
	return m
}

// loaderSum loads m and checksums its tensors in file order.
func loaderSum(m *ckpt.Model) uint32 {
	defer m.Close()
	w, err := m.Load(context.Background())
	check(err)
	defer w.Close()
	type kv struct {
		file string
		off  int64
		b    []byte
	}
	var all []kv
	for _, t := range w.All() {
		all = append(all, kv{t.Location.File, t.Location.Offset, t.Bytes()})
	}
	sort.Slice(all, func(i, j int) bool {
		return cmp.Or(cmp.Compare(all[i].file, all[j].file), cmp.Compare(all[i].off, all[j].off)) < 0
	})
	var sum uint32
	for _, x := range all {
		sum = crc32.Update(sum, crc32.IEEETable, x.b)
	}
	return sum
}

func loadFS(fsys *remote.FS, name string) {
	m, err := ckpt.Open(name, ckpt.WithFS(fsys))
	check(err)
	load(m)
}

func load(m *ckpt.Model) {
	defer m.Close()
	w, err := m.Load(context.Background())
	check(err)
	check(w.Close())
}
