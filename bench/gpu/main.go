// Command gpu measures the CUDA executor on a GPU machine, in one run, with
// its baselines and peers measured in the same run (issue 12):
//
//   - upload of a generated 4-shard BF16 checkpoint (UploadModel, stored
//     dtype and BF16 → F32 on the device), page cache warm and cold, against
//     (i) a parallel pread of the same bytes into pinned memory with no GPU
//     copy (16 readers), (ii) dd of the same files (cold), (iii)
//     safetensors.torch.load_file(device="cuda:0") (peers.py);
//   - dequantization F8_E4M3 → BF16 (per-tensor and 128×128 block scales):
//     bytes read + written per second against a device-to-device copy;
//   - Linear TFLOP/s, 4096×4096 BF16 and FP8 weights at batch 4096, against
//     torch.matmul (peers.py).
//
// Cold runs drop the page cache (sync; echo 3 > /proc/sys/vm/drop_caches),
// which needs root; without it they are skipped with a note. Every figure is
// the median of -runs runs. Build it here and run it there:
//
//	cd bench && go build -o /tmp/ckpt-gpu ./gpu && scp /tmp/ckpt-gpu bench/gpu/peers.py gpuhost:
//	gpuhost$ ./ckpt-gpu -dir /scratch/ckpt-gpu -peers ./peers.py
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/executor"
	"github.com/ckpt-go/ckpt/executor/cuda"
	"github.com/ckpt-go/ckpt/internal/sysmem"
	"github.com/ckpt-go/ckpt/quant"
	"github.com/ckpt-go/ckpt/shard"
)

type config struct {
	dir     string
	size    int64
	shards  int
	readers int
	runs    int
	peers   string
	python  string
	cold    bool
	dim     int
}

func parse(args []string, stderr io.Writer) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("gpu", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.dir, "dir", "", "folder for the generated checkpoint (kept between runs; default: a temporary folder)")
	size := fs.String("size", "8GiB", "checkpoint size")
	fs.IntVar(&c.shards, "shards", 4, "shards")
	fs.IntVar(&c.readers, "readers", 16, "parallel readers (upload and the pread baseline)")
	fs.IntVar(&c.runs, "runs", 3, "runs per figure (median)")
	fs.StringVar(&c.peers, "peers", "", "path of peers.py (PyTorch, safetensors); empty: no peers")
	fs.StringVar(&c.python, "python", "python3", "Python for peers.py")
	fs.BoolVar(&c.cold, "cold", true, "also measure with the page cache dropped (needs root)")
	fs.IntVar(&c.dim, "dim", 4096, "Linear: M = N = K")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() != 0 {
		return nil, fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	var err error
	if c.size, err = shard.ParseSize(*size); err != nil || c.size < 1<<20 {
		return nil, fmt.Errorf("-size %q: want at least 1MiB (%v)", *size, err)
	}
	switch {
	case c.shards < 1 || c.shards > 64:
		return nil, fmt.Errorf("-shards %d: want 1 to 64", c.shards)
	case c.readers < 1 || c.readers > 256:
		return nil, fmt.Errorf("-readers %d: want 1 to 256", c.readers)
	case c.runs < 1:
		return nil, fmt.Errorf("-runs %d: want at least 1", c.runs)
	case c.dim < 16 || c.dim%16 != 0:
		return nil, fmt.Errorf("-dim %d: want a multiple of 16", c.dim)
	}
	return c, nil
}

func main() {
	c, err := parse(os.Args[1:], os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpu:", err)
		os.Exit(2)
	}
	if err := run(context.Background(), c, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "gpu:", err)
		os.Exit(1)
	}
}

// generate writes the checkpoint (BF16 [4096, cols] tensors, shards of
// equal size) unless it is there, and returns its shard files.
func generate(c *config) ([]string, error) {
	if c.dir == "" {
		d, err := os.MkdirTemp("", "ckpt-gpu")
		if err != nil {
			return nil, err
		}
		c.dir = d
	}
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return nil, err
	}
	per := c.size / int64(c.shards)
	const rows, tensor = 4096, 64 << 20
	var files []string
	weightMap := map[string]string{}
	for s := range c.shards {
		base := fmt.Sprintf("model-%05d-of-%05d.safetensors", s+1, c.shards)
		name := filepath.Join(c.dir, base)
		files = append(files, name)
		for left, i := per, 0; left > 0; i++ {
			n := min(int64(tensor), left)
			weightMap[fmt.Sprintf("layers.%d.%d.weight", s, i)] = base
			left -= rows * max(1, n/2/rows) * 2
		}
		if st, err := os.Stat(name); err == nil && st.Size() >= per {
			continue
		}
		var ts []ckpttest.Tensor
		rng := rand.New(rand.NewPCG(uint64(s), 1))
		for left, i := per, 0; left > 0; i++ {
			n := min(int64(tensor), left)
			cols := max(1, n/2/rows)
			data := make([]byte, rows*cols*2)
			for j := 0; j < len(data); j += 2 {
				data[j], data[j+1] = byte(rng.IntN(256)), byte(0x3C+rng.IntN(4))
			}
			ts = append(ts, ckpttest.Tensor{Name: fmt.Sprintf("layers.%d.%d.weight", s, i), DType: dtype.BF16, Shape: []int64{rows, cols}, Data: data})
			left -= int64(len(data))
		}
		if err := ckpttest.WriteFile(name, ts, nil); err != nil {
			return nil, err
		}
	}
	index, err := json.Marshal(map[string]any{"metadata": map[string]any{}, "weight_map": weightMap})
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(c.dir, "model.safetensors.index.json"), index, 0o644); err != nil {
		return nil, err
	}
	return files, nil
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// dropCaches empties the page cache (root only).
func dropCaches() error {
	exec.Command("sync").Run()
	return os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0)
}

func gbps(bytes int64, d time.Duration) float64 { return float64(bytes) / d.Seconds() / 1e9 }

func run(ctx context.Context, c *config, out io.Writer) error {
	e, err := cuda.New()
	if err != nil {
		return fmt.Errorf("the CUDA executor cannot start here: %w", err)
	}
	defer e.Close()
	info := e.Info()
	fmt.Fprintf(out, "# GPU: %s (compute capability %s, %s, %s free of %s)\n\n", info.Name, info.ComputeCapability, info.Driver,
		sysmem.FormatSize(info.FreeBytes), sysmem.FormatSize(info.TotalBytes))
	files, err := generate(c)
	if err != nil {
		return err
	}
	var total int64
	for _, f := range files {
		st, _ := os.Stat(f)
		total += st.Size()
	}
	fmt.Fprintf(out, "checkpoint: %d shards, %s, in %s; %d readers, median of %d runs\n\n", len(files), sysmem.FormatSize(total), c.dir, c.readers, c.runs)
	cold := c.cold
	if cold && dropCaches() != nil {
		fmt.Fprintln(out, "(cold runs skipped: dropping the page cache needs root)")
		cold = false
	}
	peers := map[string]float64{}
	if c.peers != "" {
		if peers, err = runPeers(c, files, cold); err != nil {
			fmt.Fprintf(out, "(peers failed: %v)\n", err)
		}
	}
	fmt.Fprintln(out, "| figure | cache | ckpt | baseline | ratio |")
	fmt.Fprintln(out, "| --- | --- | --- | --- | --- |")
	row := func(name, cache string, v float64, unit string, base float64, bname string) {
		r := "—"
		if base > 0 {
			r = fmt.Sprintf("%.2f× %s", v/base, bname)
		}
		fmt.Fprintf(out, "| %s | %s | %.2f %s | %.2f %s (%s) | %s |\n", name, cache, v, unit, base, unit, bname, r)
	}
	caches := []string{"warm"}
	if cold {
		caches = append(caches, "cold")
	}
	// The baseline's pinned buffers, allocated once like the upload's
	// staging ring: pinning is not part of either measurement.
	var bufs []*cuda.Pinned
	for range c.readers {
		p, err := e.AllocPinned(preadPiece)
		if err != nil {
			return err
		}
		defer p.Free()
		bufs = append(bufs, p)
	}
	for _, cache := range caches {
		measure := func(f func() error) (time.Duration, error) {
			var ds []time.Duration
			for range c.runs {
				if cache == "cold" {
					dropCaches()
				} else if len(ds) == 0 {
					f() // warm the cache
				}
				t0 := time.Now()
				if err := f(); err != nil {
					return 0, err
				}
				ds = append(ds, time.Since(t0))
			}
			return median(ds), nil
		}
		pread, err := measure(func() error { return preadPinned(bufs, files) })
		if err != nil {
			return err
		}
		base := gbps(total, pread)
		for _, to := range []string{"stored", "F32"} {
			d, err := measure(func() error { return upload(ctx, e, c, to) })
			if err != nil {
				return err
			}
			v := gbps(total, d)
			row("upload BF16 ("+to+")", cache, v, "GB/s", base, "pread→pinned")
			if p := peers["load_file_"+cache]; p > 0 && to == "stored" {
				row("upload BF16 (stored)", cache, v, "GB/s", p, "safetensors.torch.load_file")
			}
			if p := peers["dd_cold"]; p > 0 && cache == "cold" && to == "stored" {
				row("upload BF16 (stored)", cache, v, "GB/s", p, "dd")
			}
		}
	}
	for _, block := range []bool{false, true} {
		v, base, err := dequant(ctx, e, c, block)
		if err != nil {
			return err
		}
		name := "dequant F8_E4M3→BF16 per-tensor"
		if block {
			name = "dequant F8_E4M3→BF16 128×128 block"
		}
		row(name, "device", v, "GB/s", base, "D2D copy")
	}
	for _, w := range []string{"BF16", "F8_E4M3"} {
		v, err := linear(ctx, e, c, w)
		if err != nil {
			return err
		}
		row(fmt.Sprintf("Linear %d³ %s weights", c.dim, w), "device", v, "TFLOP/s", peers["matmul_"+w], "torch")
	}
	return nil
}

// preadPiece is the size of one pread of the baseline.
const preadPiece = 16 << 20

// preadPinned reads every file with one reader per buffer, in parallel
// preads of preadPiece bytes into those pinned buffers, no GPU copy: the
// host's limit.
func preadPinned(bufs []*cuda.Pinned, files []string) error {
	const piece = preadPiece
	type job struct {
		f   *os.File
		off int64
	}
	jobs := make(chan job)
	var wg sync.WaitGroup
	errs := make(chan error, len(bufs))
	for _, p := range bufs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				if _, err := j.f.ReadAt(p.Bytes(), j.off); err != nil && !errors.Is(err, io.EOF) {
					errs <- err
				}
			}
		}()
	}
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		defer f.Close()
		st, _ := f.Stat()
		for off := int64(0); off < st.Size(); off += piece {
			jobs <- job{f, off}
		}
	}
	close(jobs)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

func upload(ctx context.Context, e *cuda.Executor, c *config, to string) error {
	var opts []ckpt.Option
	if to == "F32" {
		opts = append(opts, ckpt.WithDType(ckpt.To(dtype.F32)))
	}
	m, err := ckpt.Open(c.dir, opts...)
	if err != nil {
		return err
	}
	defer m.Close()
	um, err := e.UploadModel(ctx, m, executor.WithReaders(c.readers))
	if err != nil {
		return err
	}
	return um.Close()
}

// timeOp returns the median duration of f.
func timeOp(runs int, f func() (executor.Buffer, error), free func(executor.Buffer) error) (time.Duration, error) {
	var ds []time.Duration
	for i := range runs + 1 {
		t0 := time.Now()
		b, err := f()
		if err != nil {
			return 0, err
		}
		if i > 0 { // the first run warms up
			ds = append(ds, time.Since(t0))
		}
		free(b)
	}
	return median(ds), nil
}

func dequant(ctx context.Context, e *cuda.Executor, c *config, block bool) (v, base float64, err error) {
	const rows, cols = 8192, 8192
	codes := make([]byte, rows*cols)
	for i := range codes {
		codes[i] = byte(i*31) & 0x7E
	}
	q := &quant.Weight{Name: "w", Shape: []int64{rows, cols}, Elem: dtype.F8_E4M3, Layout: quant.FP8Scaled,
		Data: quant.Stored{Name: "w", DType: dtype.F8_E4M3, Shape: []int64{rows, cols}}}
	sshape, sblock := []int64{1}, [2]int64{rows, cols}
	if block {
		q.Layout, sshape, sblock = quant.DeepSeekFP8Block, []int64{rows / 128, cols / 128}, [2]int64{128, 128}
	}
	q.Scales = []quant.Scale{{Role: quant.RoleScale, Stored: quant.Stored{Name: "s", DType: dtype.F32, Shape: sshape}, Block: sblock}}
	ns := int64(1)
	for _, d := range sshape {
		ns *= d
	}
	sc := make([]float32, ns)
	for i := range sc {
		sc[i] = 0.01 + float32(i%7)/1000
	}
	d, err := e.FromHost(ctx, codes, dtype.F8_E4M3, []int64{rows, cols}, "w")
	if err != nil {
		return 0, 0, err
	}
	defer e.Free(d)
	s, err := e.FromHost(ctx, dtype.Float32Bytes(sc), dtype.F32, sshape, "s")
	if err != nil {
		return 0, 0, err
	}
	defer e.Free(s)
	w := &executor.Weight{Data: d, Scales: []executor.Buffer{s}, Quant: q}
	td, err := timeOp(c.runs, func() (executor.Buffer, error) { return e.Dequantize(ctx, w, dtype.BF16) }, e.Free)
	if err != nil {
		return 0, 0, err
	}
	src, err := e.FromHost(ctx, make([]byte, rows*cols*3/2), dtype.U8, []int64{rows * cols * 3 / 2}, "copy")
	if err != nil {
		return 0, 0, err
	}
	defer e.Free(src)
	tc, err := timeOp(c.runs, func() (executor.Buffer, error) { return e.Copy(ctx, src) }, e.Free)
	if err != nil {
		return 0, 0, err
	}
	moved := int64(rows * cols * 3) // 1 byte read + 2 written per element; the copy moves as many
	return gbps(moved, td), gbps(moved, tc), nil
}

func linear(ctx context.Context, e *cuda.Executor, c *config, wdt string) (float64, error) {
	n := int64(c.dim)
	rng := rand.New(rand.NewPCG(1, 2))
	x := make([]byte, n*n*2)
	for i := range x {
		x[i] = byte(rng.IntN(256))
		if i%2 == 1 {
			x[i] = 0x3C + byte(rng.IntN(2))
		}
	}
	xb, err := e.FromHost(ctx, x, dtype.BF16, []int64{n, n}, "x")
	if err != nil {
		return 0, err
	}
	defer e.Free(xb)
	w := &executor.Weight{}
	if wdt == "BF16" {
		w.Data, err = e.FromHost(ctx, x, dtype.BF16, []int64{n, n}, "w")
	} else {
		codes := make([]byte, n*n)
		for i := range codes {
			codes[i] = byte(rng.IntN(256)) & 0xBE
		}
		w.Data, err = e.FromHost(ctx, codes, dtype.F8_E4M3, []int64{n, n}, "w")
		if err == nil {
			g := (n + 127) / 128
			sc := make([]float32, g*g)
			for i := range sc {
				sc[i] = 0.01
			}
			var s executor.Buffer
			s, err = e.FromHost(ctx, dtype.Float32Bytes(sc), dtype.F32, []int64{g, g}, "s")
			w.Scales = []executor.Buffer{s}
			w.Quant = &quant.Weight{Name: "w", Shape: []int64{n, n}, Elem: dtype.F8_E4M3, Layout: quant.DeepSeekFP8Block,
				Data:   quant.Stored{Name: "w", DType: dtype.F8_E4M3, Shape: []int64{n, n}},
				Scales: []quant.Scale{{Role: quant.RoleScaleInv, Stored: quant.Stored{Name: "s", DType: dtype.F32, Shape: []int64{g, g}}, Block: [2]int64{128, 128}}}}
		}
	}
	if err != nil {
		return 0, err
	}
	defer executor.FreeWeight(e, w)
	t, err := timeOp(c.runs, func() (executor.Buffer, error) { return e.Linear(ctx, xb, w, nil, dtype.BF16) }, e.Free)
	if err != nil {
		return 0, err
	}
	return 2 * float64(n*n*n) / t.Seconds() / 1e12, nil
}

// runPeers runs peers.py and returns its figures.
func runPeers(c *config, files []string, cold bool) (map[string]float64, error) {
	args := []string{c.peers, "--runs", fmt.Sprint(c.runs), "--dim", fmt.Sprint(c.dim)}
	if cold {
		args = append(args, "--cold")
	}
	args = append(args, files...)
	out, err := exec.Command(c.python, args...).Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %v", c.python, strings.Join(args, " "), err)
	}
	var r map[string]float64
	return r, json.Unmarshal(out, &r)
}
