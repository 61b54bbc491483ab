package ckpt

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/source"
)

// rangeSpec is a component of many small and a few large tensors.
const rangeSpec = "embed:BF16[512,256] l0.norm:F32[256] l0.w:BF16[256,256] l0.b:F16[256] l1.norm:F32[256] l1.w:BF16[1024,1024] l1.b:F16[1024] q:F8_E4M3[64,64] ids:I64[7] empty:F32[0]"

// fakeRangeFS serves a folder as a RangeFS, counting its calls and
// checking that spans are sorted, inside the file and within a chunk.
type fakeRangeFS struct {
	fs.FS
	cfg   source.RangeConfig
	t     *testing.T
	calls atomic.Int64
	spans atomic.Int64
	bytes atomic.Int64 // bytes covered, gaps included

	failAfter int64 // the call after this many fails (0: never)
	failErr   error
	block     chan struct{} // when not nil, calls wait on it or ctx
}

func (f *fakeRangeFS) RangeConfig() source.RangeConfig { return f.cfg }

func (f *fakeRangeFS) ReadRanges(ctx context.Context, name string, spans []source.Span) error {
	n := f.calls.Add(1)
	if f.failAfter > 0 && n > f.failAfter {
		return f.failErr
	}
	if f.block != nil {
		select {
		case <-f.block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	fh, err := f.FS.Open(name)
	if err != nil {
		return err
	}
	defer fh.Close()
	ra := fh.(io.ReaderAt)
	st, _ := fh.Stat()
	first := spans[0].Off
	last := spans[len(spans)-1].Off + int64(len(spans[len(spans)-1].Dst))
	if len(spans) > 1 && last-first > f.cfg.Chunk {
		f.t.Errorf("request of %d bytes, chunk %d", last-first, f.cfg.Chunk)
	}
	for i, s := range spans {
		if i > 0 {
			prev := spans[i-1].Off + int64(len(spans[i-1].Dst))
			if s.Off < prev || s.Off-prev > f.cfg.MaxGap {
				f.t.Errorf("span %d at %d after %d (gap %d)", i, s.Off, prev, f.cfg.MaxGap)
			}
		}
		if s.Off+int64(len(s.Dst)) > st.Size() {
			f.t.Errorf("span past the end")
		}
		if _, err := ra.ReadAt(s.Dst, s.Off); err != nil && !(err == io.EOF && len(s.Dst) == 0) {
			return err
		}
	}
	f.spans.Add(int64(len(spans)))
	f.bytes.Add(last - first)
	return nil
}

// loadBytes loads every tensor of m, keyed by name.
func loadBytes(t *testing.T, m *Model, opts ...LoadOption) map[string][]byte {
	t.Helper()
	w, err := m.Load(context.Background(), opts...)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	defer w.Close()
	out := map[string][]byte{}
	for name, tt := range w.All() {
		out[name] = bytes.Clone(tt.Bytes())
	}
	return out
}

func sameBytes(t *testing.T, what string, got, want map[string][]byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d tensors, want %d", what, len(got), len(want))
	}
	for n, w := range want {
		if !bytes.Equal(got[n], w) {
			t.Errorf("%s: tensor %s differs", what, n)
		}
	}
}

// A checkpoint read through WithFS (os.DirFS, a MapFS without ReadAt, a
// RangeFS) loads the bytes a local load gives, under conversions too, in
// owned memory.
func TestLoadThroughFS(t *testing.T) {
	dir := ckpttest.Dir(t, ckpttest.Weights{Shards: 3, Tensors: ckpttest.Tensors(t, rangeSpec)})
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"model_type":"x"}`), 0o644)
	parent, base := filepath.Dir(dir), filepath.Base(dir)
	mapfs := fstest.MapFS{}
	es, _ := os.ReadDir(dir)
	for _, e := range es {
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		mapfs[base+"/"+e.Name()] = &fstest.MapFile{Data: b}
	}
	for _, target := range []Target{{}, To(dtype.F32), To(dtype.F16)} {
		want := loadBytes(t, mustOpen(t, dir, WithDType(target)))
		for name, fsys := range map[string]fs.FS{
			"dirfs": os.DirFS(parent),
			"mapfs": mapfs,
			"range": &fakeRangeFS{FS: os.DirFS(parent), t: t, cfg: source.RangeConfig{Concurrency: 4, Chunk: 1 << 20, MaxGap: 4096}},
		} {
			for _, loc := range []string{base, base + "/model.safetensors.index.json"} {
				m := mustOpen(t, loc, WithFS(fsys), WithDType(target))
				p, err := m.Plan()
				if err != nil {
					t.Fatal(err)
				}
				if p.Components[0].ReadStrategy != "pread" {
					t.Errorf("%s: strategy %s (%s)", name, p.Components[0].ReadStrategy, p.Components[0].ReadStrategyReason)
				}
				sameBytes(t, name+" "+loc+" "+target.String(), loadBytes(t, m), want)
			}
		}
	}
	if _, err := Open("/abs", WithFS(os.DirFS(parent))); !errors.Is(err, ErrOption) {
		t.Errorf("rooted name: %v", err)
	}
	if _, err := Open("missing", WithFS(os.DirFS(parent))); !errors.Is(err, ErrResolve) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing: %v", err)
	}
}

// Loads from a RangeFS coalesce neighbouring tensors into requests of up to
// the chunk, report progress as local loads do, and serve LoadTensor and
// loadInto.
func TestLoadRangedCoalesces(t *testing.T) {
	tensors := ckpttest.Tensors(t, rangeSpec)
	dir := ckpttest.Dir(t, ckpttest.Weights{Tensors: tensors})
	fsys := &fakeRangeFS{FS: os.DirFS(dir), t: t, cfg: source.RangeConfig{Concurrency: 3, Chunk: 1 << 20, MaxGap: 0}}
	for _, target := range []Target{{}, To(dtype.F32)} {
		fsys.calls.Store(0)
		fsys.spans.Store(0)
		var mu sync.Mutex
		var last Progress
		var calls int
		m := mustOpen(t, ".", WithFS(fsys), WithDType(target), WithProgress(func(p Progress) {
			mu.Lock()
			defer mu.Unlock()
			if p.Done < last.Done || p.Done > p.Total {
				t.Errorf("progress %+v after %+v", p, last)
			}
			last = p
			calls++
		}))
		want := loadBytes(t, mustOpen(t, dir, WithDType(target)))
		sameBytes(t, "ranged "+target.String(), loadBytes(t, m), want)
		mu.Lock()
		if last.Done != last.Total || last.Total == 0 || calls == 0 {
			t.Errorf("final progress %+v after %d calls", last, calls)
		}
		last = Progress{} // each load counts from 0
		mu.Unlock()
		var total int64
		for _, tt := range tensors {
			total += int64(len(tt.Data))
		}
		// 4 MiB of tensor data in 1 MiB requests: the 2 MiB weight takes
		// 2 pieces... and the small tensors share requests.
		if c := fsys.calls.Load(); c >= fsys.spans.Load() || c > 8 {
			t.Errorf("%s: %d requests for %d spans", target, c, fsys.spans.Load())
		}
		// LoadTensor and loadInto read through the same path.
		tt, err := m.LoadTensor(context.Background(), "l1.w")
		if err != nil || !bytes.Equal(tt.Bytes(), want["l1.w"]) {
			t.Errorf("LoadTensor: %v", err)
		}
		mu.Lock()
		last = Progress{}
		mu.Unlock()
		dst := make([]byte, len(want["embed"]))
		if _, err := m.loadInto(context.Background(), "embed", dst); err != nil || !bytes.Equal(dst, want["embed"]) {
			t.Errorf("loadInto: %v", err)
		}
	}
}

// A failed ranged read is an ErrRead naming the component and a tensor,
// wrapping the source's error; cancelling the context stops a load whose
// requests hang.
func TestLoadRangedErrorsAndCancel(t *testing.T) {
	dir := ckpttest.Dir(t, ckpttest.Weights{Tensors: ckpttest.Tensors(t, rangeSpec)})
	boom := errors.New("boom")
	fsys := &fakeRangeFS{FS: os.DirFS(dir), t: t, cfg: source.RangeConfig{Concurrency: 2, Chunk: 256 << 10}, failAfter: 2, failErr: boom}
	m := mustOpen(t, ".", WithFS(fsys))
	_, err := m.Load(context.Background())
	var le *Error
	if !errors.Is(err, ErrRead) || !errors.Is(err, boom) || !errors.As(err, &le) || le.Tensor == "" || le.Component == "" {
		t.Fatalf("err %v", err)
	}

	block := &fakeRangeFS{FS: os.DirFS(dir), t: t, cfg: source.RangeConfig{Concurrency: 2, Chunk: 256 << 10}, block: make(chan struct{})}
	m = mustOpen(t, ".", WithFS(block))
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	_, err = m.Load(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("cancel took %v", d)
	}
}

// A dequantized weight from a RangeFS is read through the file's ReadAt
// and gives what a local load gives.
func TestLoadRangedDequantize(t *testing.T) {
	dir, _, _ := deepseekFolder(t, []int64{2, 3})
	fsys := &fakeRangeFS{FS: os.DirFS(filepath.Dir(dir)), t: t, cfg: source.RangeConfig{Concurrency: 2, Chunk: 1 << 20}}
	for _, to := range []dtype.DType{dtype.BF16, dtype.F8_E4M3} {
		want := loadBytes(t, mustOpen(t, dir, WithDType(To(to))))
		got := loadBytes(t, mustOpen(t, "transformer", WithFS(fsys), WithDType(To(to))))
		sameBytes(t, to.String(), got, want)
		// The same weight read with pread from a local file (a quantized
		// weight's data and scales each take an aligned arena buffer).
		sameBytes(t, to.String()+" pread", loadBytes(t, mustOpen(t, dir, WithDType(To(to)), WithReadStrategy("pread"))), want)
	}
}

// Open reads a location of a registered scheme through its source; a
// source's error, and a scheme with no source (the message says what to
// import), are ErrResolve naming the location once, with the cause.
func TestOpenRegisteredSource(t *testing.T) {
	dir := ckpttest.Dir(t, ckpttest.Weights{Shards: 2, Tensors: ckpttest.Tensors(t, "a:F32[4] b:BF16[8,8]")})
	var gotLoc string
	boom := errors.New("no such store")
	source.Register("memtest", func(_ context.Context, location string) (fs.FS, string, error) {
		gotLoc = location
		if strings.TrimPrefix(location, "memtest://") == "fail" {
			return nil, "", boom
		}
		return os.DirFS(filepath.Dir(dir)), filepath.Base(dir), nil
	})
	want := loadBytes(t, mustOpen(t, dir))
	sameBytes(t, "memtest", loadBytes(t, mustOpen(t, "memtest://x/y")), want)
	if gotLoc != "memtest://x/y" {
		t.Errorf("location %q", gotLoc)
	}
	_, err := Open("memtest://fail")
	if !errors.Is(err, ErrResolve) || !errors.Is(err, boom) || err.Error() != "ckpt: resolve: memtest://fail: no such store" {
		t.Errorf("failing source: %v", err)
	}
	_, err = Open("s3://bucket/model")
	if !errors.Is(err, ErrResolve) || !errors.Is(err, source.ErrNoSource) || !strings.Contains(err.Error(), "github.com/ckpt-go/ckpt/remote") || strings.Count(err.Error(), "s3://bucket/model") != 1 {
		t.Errorf("unregistered s3: %v", err)
	}
}
