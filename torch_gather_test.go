package ckpt

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/sysmem"
	"github.com/ckpt-go/ckpt/internal/testutil"
)

// gatherFixture writes a PyTorch file (big-endian with big) holding a transposed view [256,
// 16384] of a 16 MiB F32 storage (each piece of a few rows of it spans
// the whole storage) and a contiguous 4 MiB BF16 weight; it returns the
// folder, the views and their stored bytes.
func gatherFixture(t *testing.T, big bool) (string, []ptView, map[string][]byte) {
	const r, c = 256, 16384
	views := []ptView{
		{Name: "w_t", Storage: "0", Shape: []int64{r, c}, Stride: []int64{1, r}},
		{Name: "h.weight", Storage: "1", Shape: []int64{1024, 2048}, Stride: []int64{2048, 1}},
	}
	storages := map[string]ptStorage{
		"0": {DType: dtype.F32, Data: f32s(ramp(r * c)...)},
		"1": {DType: dtype.BF16, Data: bf16s(t, ramp(1024*2048))},
	}
	dir := t.TempDir()
	writePT(t, dir, "model.pt", torchArchive(t, views, storages, big))
	return dir, views, ptWant(views, storages)
}

// TestTorchGatherReadsOnce loads a transposed PyTorch view through an
// fs.FS that counts the bytes read: as stored, converted (of either byte
// order), one tensor,
// each rank's part of a split along either dimension, and the Items'
// Parts read in pieces by several goroutines each read the file's
// storages about once (≤ 1.1×; piece by piece, each piece read the whole
// storage again: 16× for this view), and give the right bytes.
func TestTorchGatherReadsOnce(t *testing.T) {
	dir, views, want := gatherFixture(t, false)
	bigDir, _, _ := gatherFixture(t, true)
	var stored int64
	for _, b := range want {
		stored += int64(len(b))
	}
	var n atomic.Int64
	fsys := testutil.CountingFS{FS: os.DirFS(dir), N: &n}
	open := func(opts ...Option) *Model {
		m := mustOpen(t, "model.pt", append([]Option{WithFS(fsys), WithWorkers(4)}, opts...)...)
		n.Store(0)
		return m
	}
	bigFS := testutil.CountingFS{FS: os.DirFS(bigDir), N: &n}
	check := func(what string, limit int64) {
		t.Helper()
		if got := n.Load(); got > limit*11/10 {
			t.Errorf("%s: read %d bytes of %d stored (%.1f×)", what, got, limit, float64(got)/float64(limit))
		}
	}
	for _, c := range []struct {
		name string
		to   dtype.DType
		big  bool
	}{{"as stored", 0, false}, {"BF16", dtype.BF16, false}, {"big-endian, as stored", 0, true}, {"big-endian, BF16", dtype.BF16, true}} {
		var opts []Option
		if c.to != 0 {
			opts = append(opts, WithDType(To(c.to)))
		}
		if c.big {
			opts = append(opts, WithFS(bigFS))
		}
		m := open(opts...)
		w := mustLoad(t, m)
		check(c.name, stored)
		for _, v := range views {
			tt, _ := w.Tensor(v.Name)
			wb, _ := convertTo(t, want[v.Name], tt.Stored, tt.DType)
			if !bytes.Equal(tt.Bytes(), wb) {
				t.Errorf("%s: %s differs", c.name, v.Name)
			}
		}
		n.Store(0)
		one, err := m.LoadTensor(context.Background(), "w_t")
		if err != nil {
			t.Fatal(err)
		}
		check(c.name+", LoadTensor", int64(len(want["w_t"])))
		if tt, _ := w.Tensor("w_t"); !bytes.Equal(one.Bytes(), tt.Bytes()) {
			t.Errorf("%s: LoadTensor differs from Load", c.name)
		}
	}
	full := want["w_t"]
	for dim := range 2 {
		var bs [][]byte
		var shapes [][]int64
		for rank := range 2 {
			m := open(WithRank(rank, 2, Split{Pattern: MustParsePattern("w_t"), Dim: dim}))
			w := mustLoad(t, m)
			check("rank part", stored)
			tt, _ := w.Tensor("w_t")
			bs, shapes = append(bs, tt.Bytes()), append(shapes, tt.Shape)
		}
		if !bytes.Equal(concat(bs, shapes, dim, 4), full) {
			t.Errorf("dim %d: the ranks' parts differ from the whole", dim)
		}
	}
	// Parts, read in 1 MiB pieces from the end by four goroutines.
	m := open()
	items, err := m.Items()
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		p := &it.Data
		b := make([]byte, p.Size())
		var wg sync.WaitGroup
		var next atomic.Int64
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					k := next.Add(1) - 1
					end := p.Size() - k<<20
					if end <= 0 {
						return
					}
					lo := max(end-1<<20, 0)
					if _, err := p.ReadAt(b[lo:end], lo); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		if !bytes.Equal(b, want[it.Name]) {
			t.Errorf("Part %s read in pieces differs", it.Name)
		}
		// Every byte read: the gathered storage is gone.
		if tg, ok := p.st.(*torchGather); ok != (it.Name == "w_t") || ok && tg.g != nil {
			t.Errorf("Part %s: gathered %v, still held %v", it.Name, ok, ok && tg.g != nil)
		}
	}
	check("Parts", stored)
}

// TestTorchGatherPlan: the plan counts the storage of a transposed view
// that the load gathers, beyond the staging allowance, once per worker
// at most; under a tie too.
func TestTorchGatherPlan(t *testing.T) {
	dir, _, want := gatherFixture(t, false)
	path := filepath.Join(dir, "model.pt")
	// A staging allowance smaller than the storage: what the plan adds
	// beyond it is the gather's.
	base := mustOpen(t, path, WithWorkers(4), WithDType(To(dtype.BF16)), WithStaging(1<<20))
	p, err := base.Plan()
	if err != nil {
		t.Fatal(err)
	}
	if g := int64(len(want["w_t"])); p.StagingBytes < g {
		t.Errorf("staging %d bytes: less than the %d gathered", p.StagingBytes, g)
	}

	// The same with a tie to the view: the component's stored tensors
	// are then under their tied names, and still a PyTorch checkpoint's.
	views := []ptView{
		{Name: "w_t", Storage: "0", Shape: []int64{256, 16384}, Stride: []int64{1, 256}},
		{Name: "w_t_tied", Storage: "0", Shape: []int64{256, 16384}, Stride: []int64{1, 256}},
	}
	storages := map[string]ptStorage{"0": {DType: dtype.F32, Data: f32s(ramp(256 * 16384)...)}}
	tdir := t.TempDir()
	writePT(t, tdir, "tied.pt", torchArchive(t, views, storages, false))
	tied := mustOpen(t, filepath.Join(tdir, "tied.pt"), WithWorkers(4), WithDType(To(dtype.BF16)), WithStaging(1<<20))
	tp, err := tied.Plan()
	if err != nil {
		t.Fatal(err)
	}
	if len(tied.Names()) != 2 || tp.Components[0].Format != "pytorch" {
		t.Errorf("tied checkpoint: names %v, format %q", tied.Names(), tp.Components[0].Format)
	}
	if g := int64(len(storages["0"].Data)); tp.StagingBytes < g {
		t.Errorf("tied checkpoint: staging %d bytes, less than the %d gathered", tp.StagingBytes, g)
	}
}

// runtimeSlack is what the Go runtime's bookkeeping of a load's heap may
// add to the resident set beyond what the plan counts.
const runtimeSlack = 2 << 20

// gatherRSS is what the child process of TestTorchGatherPeakRSS measures.
type gatherRSS struct {
	Before, Peak, PlanPeak int64
}

// TestTorchGatherPeakRSS measures, in a child process, the peak resident
// memory of loading a 64 MiB transposed view ([256, 65536] F32, strides
// [1, 256]) with four workers, as stored and to BF16: the resident set
// grows by at most the plan's PeakBytes (and the runtime's bookkeeping),
// which counts the storage the
// load gathers once for the view's pieces. (Read piece by piece, each of
// its 16 pieces read and held the whole storage: 1 GiB read, and a peak
// of several times the plan's.)
func TestTorchGatherPeakRSS(t *testing.T) {
	if path := os.Getenv("CKPT_GATHER_CHILD"); path != "" {
		gatherChild(t, path, os.Getenv("CKPT_GATHER_DTYPE"))
		return
	}
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/self/status")
	}
	testutil.SkipUnderRace(t)
	if err := testutil.ResetPeakRSS(); err != nil {
		t.Skipf("cannot reset the peak RSS (/proc/self/clear_refs): %v", err)
	}
	const r, c = 256, 65536
	views := []ptView{{Name: "w_t", Storage: "0", Shape: []int64{r, c}, Stride: []int64{1, r}}}
	storages := map[string]ptStorage{"0": {DType: dtype.F32, Data: f32s(ramp(r * c)...)}}
	path := writePT(t, t.TempDir(), "model.pt", torchArchive(t, views, storages, false))
	for _, to := range []string{"F32", "BF16"} {
		var g gatherRSS
		testutil.RunChild(t, "TestTorchGatherPeakRSS", []string{"CKPT_GATHER_CHILD=" + path, "CKPT_GATHER_DTYPE=" + to}, &g)
		growth := g.Peak - g.Before
		t.Logf("%s: peak RSS grew %s; the plan's peak %s", to, sysmem.FormatSize(growth), sysmem.FormatSize(g.PlanPeak))
		// The runtime's own bookkeeping of a heap grown by 100 MiB (about
		// half a MiB) is not the load's.
		if growth > g.PlanPeak+runtimeSlack {
			t.Errorf("%s: peak RSS grew by %s, more than the plan's peak %s", to, sysmem.FormatSize(growth), sysmem.FormatSize(g.PlanPeak))
		}
	}
}

func gatherChild(t *testing.T, path, to string) {
	d, err := dtype.Parse(to)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Open(path, WithDType(To(d)), WithWorkers(4))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	p, err := m.Plan()
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	if err := testutil.ResetPeakRSS(); err != nil {
		t.Fatal(err)
	}
	g := gatherRSS{Before: testutil.ProcStatus("VmRSS"), PlanPeak: p.PeakBytes}
	w, err := m.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	g.Peak = testutil.PeakRSS()
	w.Close()
	testutil.PrintReport(g)
}

// TestTorchGatherPart: a rank's part of a split transposed view gathers
// only the range of the tensor it lies in, and there its own lines where
// they are few ([2048, 2048] F32 with strides [1, 2048], split along
// dimension 0 in four: 2048 lines of 2 KiB each, a quarter of the
// storage), as the plan counts; split along dimension 1 its range is the
// whole tensor. The parts equal the whole's.
func TestTorchGatherPart(t *testing.T) {
	const r = 2048
	views := []ptView{{Name: "sq_t", Storage: "0", Shape: []int64{r, r}, Stride: []int64{1, r}}}
	storages := map[string]ptStorage{"0": {DType: dtype.F32, Data: f32s(ramp(r * r)...)}}
	path := writePT(t, t.TempDir(), "model.pt", torchArchive(t, views, storages, false))
	full := ptWant(views, storages)["sq_t"]
	for dim, want := range map[int]int64{0: 4 * r * r / 4, 1: 4 * r * r} {
		var bs [][]byte
		var shapes [][]int64
		for rank := range 4 {
			m := mustOpen(t, path, WithRank(rank, 4, Split{Pattern: MustParsePattern("sq_t"), Dim: dim}))
			c := m.comps[0]
			if got := c.gatherBytes(c.entries[0]); got != want {
				t.Errorf("dim %d, rank %d: the plan gathers %d bytes, want %d", dim, rank, got, want)
			}
			tt, err := mustLoad(t, m).Tensor("sq_t")
			if err != nil {
				t.Fatal(err)
			}
			bs, shapes = append(bs, tt.Bytes()), append(shapes, tt.Shape)
		}
		if !bytes.Equal(concat(bs, shapes, dim, 4), full) {
			t.Errorf("dim %d: the ranks' parts differ from the whole", dim)
		}
	}
}
