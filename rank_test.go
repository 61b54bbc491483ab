package ckpt

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/testutil"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/shard"
	"github.com/ckpt-go/ckpt/source"
)

func mustEncode(t *testing.T, ts ...ckpttest.Tensor) []byte {
	t.Helper()
	b, err := ckpttest.Encode(ts, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseSplit(t *testing.T) {
	s, err := ParseSplit("transformer/**.q_proj.weight=0")
	if err != nil || s.Component != "transformer" || s.Dim != 0 || s.Pattern.String() != "**.q_proj.weight" || s.String() != "transformer/**.q_proj.weight=0" {
		t.Fatalf("%+v %v", s, err)
	}
	for _, bad := range []string{"o_proj", "o_proj=-1", "o_proj=x", "a..b=1"} {
		if _, err := ParseSplit(bad); err == nil {
			t.Errorf("ParseSplit(%q) accepted", bad)
		}
	}
}

// rankFixture is a sharded checkpoint of tensors with sizes that 2, 3 and
// 4 do not divide, split along dimension 0, 1 and 2, 3-D ones included,
// and replicated tensors.
var rankFixture = []struct {
	name  string
	dt    dtype.DType
	shape []int64
}{
	{"l.0.q_proj.weight", dtype.BF16, []int64{7, 5}},   // split 0
	{"l.0.o_proj.weight", dtype.F32, []int64{6, 11}},   // split 1
	{"l.0.norm.weight", dtype.F32, []int64{5}},         // replicated
	{"l.0.experts.up", dtype.F16, []int64{3, 5, 4}},    // split 1 (3-D)
	{"l.0.experts.down", dtype.BF16, []int64{2, 3, 9}}, // split 2 (3-D)
	{"l.0.ids", dtype.I32, []int64{4, 3}},              // split 1, integers stay as stored
	{"l.0.bias", dtype.F32, []int64{10}},               // split 0, 1-D
	{"l.0.tiny", dtype.F32, []int64{2, 2}},             // split 0 with world > 2: empty parts
}

var rankSplits = []Split{
	{Pattern: MustParsePattern("**.q_proj.weight"), Dim: 0},
	{Pattern: MustParsePattern("**.o_proj.weight"), Dim: 1},
	{Pattern: MustParsePattern("**.experts.up"), Dim: 1},
	{Pattern: MustParsePattern("**.experts.down"), Dim: 2},
	{Pattern: MustParsePattern("**.ids"), Dim: 1},
	{Pattern: MustParsePattern("**.bias"), Dim: 0},
	{Pattern: MustParsePattern("**.tiny"), Dim: 0},
}

func writeRankFixture(t *testing.T) string {
	var ts []ckpttest.Tensor
	for _, f := range rankFixture {
		ts = append(ts, ckpttest.T(f.name, f.dt, f.shape...))
	}
	return ckpttest.Dir(t, ckpttest.Weights{Shards: 2, Tensors: ts})
}

// withShardOptions adds options to those every file is opened with.
func withShardOptions(opts ...shard.Option) Option {
	return func(c *config) error { c.shardOptions = append(c.shardOptions, opts...); return nil }
}

// readModes are the ways a rank reads: the mmap and pread strategies of
// the loader, and files without a mapping (every read a ReadAt of the
// file, as for object storage).
var readModes = []struct {
	name string
	opts []Option
}{
	{"mmap", []Option{WithReadStrategy("mmap")}},
	{"pread", []Option{WithReadStrategy("pread")}},
	{"readat", []Option{WithReadStrategy("mmap"), withShardOptions(shard.WithOpenOptions(safetensors.WithReadAt()))}},
}

// concat joins the ranks' parts along dim, for elements of es bytes.
func concat(parts [][]byte, shapes [][]int64, dim int, es int64) []byte {
	outer := numElements(shapes[0][:dim])
	var out []byte
	for o := int64(0); o < outer; o++ {
		for r, p := range parts {
			inner := numElements(shapes[r][dim:]) * es
			out = append(out, p[o*inner:(o+1)*inner]...)
		}
	}
	return out
}

// Every rank's parts, concatenated along the split dimension, equal the
// tensors loaded whole, for every world up to 5 (uneven sizes, empty
// parts), every read mode, as stored and converted; replicated tensors
// are whole on every rank; a dimension-0 part loaded as stored from a
// mapping is a zero-copy view.
func TestRankPartsConcatenateToWhole(t *testing.T) {
	dir := writeRankFixture(t)
	for _, target := range []Target{AsStored, To(dtype.F32)} {
		for _, mode := range readModes {
			whole := mustOpen(t, dir, append(slices.Clone(mode.opts), WithDType(target))...)
			ww := mustLoad(t, whole)
			for world := 1; world <= 5; world++ {
				parts := map[string][][]byte{}
				shapes := map[string][][]int64{}
				for rank := range world {
					m := mustOpen(t, dir, append(slices.Clone(mode.opts), WithDType(target), WithRank(rank, world, rankSplits...))...)
					w := mustLoad(t, m)
					for name, tt := range w.All() {
						parts[name] = append(parts[name], slices.Clone(tt.Bytes()))
						shapes[name] = append(shapes[name], tt.Shape)
						if tt.Split != nil && tt.Split.Dim == 0 && world > 1 && mode.name == "mmap" && target == AsStored && tt.Location.Owned {
							t.Errorf("%s rank %d: a dimension-0 part as stored is not a view", name, rank)
						}
					}
					w.Close()
					m.Close()
				}
				for _, f := range rankFixture {
					full, _ := ww.Tensor(f.name)
					got := parts[f.name]
					dim := -1
					for _, s := range rankSplits {
						if s.Pattern.Match(f.name) {
							dim = s.Dim
						}
					}
					if dim < 0 {
						for r, p := range got {
							if !bytes.Equal(p, full.Bytes()) || !slices.Equal(shapes[f.name][r], f.shape) {
								t.Errorf("%s %s world %d: replicated %s differs on rank %d", mode.name, target, world, f.name, r)
							}
						}
						continue
					}
					for r, s := range shapes[f.name] {
						start, stop := safetensors.SplitBounds(f.shape[dim], r, world)
						want := slices.Clone(f.shape)
						want[dim] = stop - start
						if !slices.Equal(s, want) {
							t.Errorf("%s world %d rank %d: shape %v, want %v", f.name, world, r, s, want)
						}
					}
					es := int64(full.DType.Bits() / 8)
					if c := concat(got, shapes[f.name], dim, es); !bytes.Equal(c, full.Bytes()) {
						t.Errorf("%s %s world %d: %s's parts concatenated differ from the whole", mode.name, target, world, f.name)
					}
				}
			}
			ww.Close()
			whole.Close()
		}
	}
}

// readCounter records the ranges a model's split reads ask for.
type readCounter struct {
	mu    sync.Mutex
	bytes map[string]int64
	marks map[string][]byte // per stored tensor, how often each byte was read
}

func countReads(m *Model) *readCounter {
	rc := &readCounter{bytes: map[string]int64{}, marks: map[string][]byte{}}
	m.cfg.onRead = func(st storedTensor, off, n int64) {
		rc.mu.Lock()
		defer rc.mu.Unlock()
		rc.bytes[st.Name()] += n
		mk := rc.marks[st.Name()]
		if mk == nil {
			mk = make([]byte, st.ByteLen())
			rc.marks[st.Name()] = mk
		}
		for i := off; i < off+n; i++ {
			mk[i]++
		}
	}
	return rc
}

// The bytes each rank asks its files for are exactly its parts' ranges:
// about 1/N of every split tensor (at most one index more than an even
// share), the ranks together read every byte of a split tensor exactly
// once, and the plan's read bytes say so in advance.
func TestRankReadsItsRangesOnly(t *testing.T) {
	dir := writeRankFixture(t)
	for _, mode := range readModes {
		for _, world := range []int{2, 3, 4} {
			times := map[string][]byte{}
			for rank := range world {
				m := mustOpen(t, dir, append(slices.Clone(mode.opts), WithDType(To(dtype.F32)), WithRank(rank, world, rankSplits...))...)
				rc := countReads(m)
				p, err := m.Plan()
				if err != nil {
					t.Fatal(err)
				}
				planned := map[string]int64{}
				for _, tp := range p.Components[0].Tensors {
					if tp.Split != nil {
						planned[tp.Name] = tp.ReadBytes
						var sum int64
						for _, r := range tp.Ranges {
							sum += r.Bytes()
						}
						if sum != tp.ReadBytes {
							t.Errorf("%s: ranges hold %d bytes, read_bytes %d", tp.Name, sum, tp.ReadBytes)
						}
					}
				}
				w := mustLoad(t, m)
				for _, f := range rankFixture {
					if _, ok := planned[f.name]; !ok {
						continue
					}
					got := rc.bytes[f.name]
					if got != planned[f.name] {
						t.Errorf("%s world %d rank %d: %s read %d bytes, planned %d", mode.name, world, rank, f.name, got, planned[f.name])
					}
					total, _ := f.dt.ByteLen(numElements(f.shape))
					var dim int
					for _, s := range rankSplits {
						if s.Pattern.Match(f.name) {
							dim = s.Dim
						}
					}
					share := total / f.shape[dim] * ceilDiv(f.shape[dim], int64(world))
					if got > share {
						t.Errorf("%s world %d rank %d: %s read %d of %d bytes, more than ⌈1/N⌉ (%d)", mode.name, world, rank, f.name, got, total, share)
					}
					if times[f.name] == nil {
						times[f.name] = make([]byte, total)
					}
					for i, c := range rc.marks[f.name] {
						times[f.name][i] += c
					}
				}
				w.Close()
				m.Close()
			}
			for name, mk := range times {
				for i, c := range mk {
					if c != 1 {
						t.Fatalf("%s world %d: byte %d of %s read %d times by all ranks together", mode.name, world, i, name, c)
					}
				}
			}
		}
	}
}

// procReadBytes returns this process's rchar (bytes read by read
// syscalls, pread included) from /proc/self/io.
func procReadBytes(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		t.Skipf("no /proc/self/io: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "rchar: "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err == nil {
				return n
			}
		}
	}
	t.Skip("no rchar in /proc/self/io")
	return 0
}

// runtimeReadSlack bounds the bytes the Go runtime reads beside a load
// measured with /proc/self/io's rchar (its poller's eventfd: 8 bytes a
// wakeup).
const runtimeReadSlack = 64

// Measured by the kernel: with files read through ReadAt (no mapping, as
// object storage is read), a rank's load reads from disk exactly the plan's
// read bytes, about 1/N of a model whose weights are all split.
func TestRankDiskBytesMeasured(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/self/io")
	}
	testutil.SkipUnderRace(t)
	var ts []ckpttest.Tensor
	for i := range 6 {
		ts = append(ts, ckpttest.T(fmt.Sprintf("l.%d.up.weight", i), dtype.BF16, 301, 64), ckpttest.T(fmt.Sprintf("l.%d.down.weight", i), dtype.BF16, 64, 301))
	}
	ts = append(ts, ckpttest.T("norm.weight", dtype.BF16, 64))
	dir := ckpttest.Dir(t, ckpttest.Weights{Shards: 3, Tensors: ts})
	splits := []Split{{Pattern: MustParsePattern("**.up.weight"), Dim: 0}, {Pattern: MustParsePattern("**.down.weight"), Dim: 1}}
	const world = 4
	var sum int64
	for rank := range world {
		// No budget: the default one reads /proc/meminfo and cgroup files.
		m := mustOpen(t, dir, WithDType(To(dtype.F32)), WithRank(rank, world, splits...), WithWorkers(2), WithBudget(-1),
			withShardOptions(shard.WithOpenOptions(safetensors.WithReadAt())))
		p, err := m.Plan()
		if err != nil {
			t.Fatal(err)
		}
		self := -procReadBytes(t) // what reading /proc/self/io itself costs
		before := procReadBytes(t)
		self += before
		w := mustLoad(t, m)
		read := procReadBytes(t) - before - self
		// rchar counts every read of the process, the Go runtime's too:
		// its poller reads 8 bytes from an eventfd when it is woken.
		// Those are the only reads beside the load's, a few at most.
		if read < p.TotalReadBytes || read-p.TotalReadBytes > runtimeReadSlack {
			t.Errorf("rank %d: the kernel counted %d bytes read, the plan says %d", rank, read, p.TotalReadBytes)
		}
		frac := float64(read) / float64(p.TotalStoredBytes)
		if frac > 0.26 {
			t.Errorf("rank %d read %.3f of the checkpoint", rank, frac)
		}
		t.Logf("rank %d of %d: %d of %d bytes read from disk (%.3f)", rank, world, read, p.TotalStoredBytes, frac)
		sum += read
		w.Close()
		m.Close()
	}
	// The ranks together read the split tensors once and the norm world
	// times.
	norm := int64(64 * 2)
	var stored int64
	for _, x := range ts {
		n, _ := x.DType.ByteLen(numElements(x.Shape))
		stored += n
	}
	if want := stored + norm*(world-1); sum < want || sum-want > world*runtimeReadSlack {
		t.Errorf("ranks read %d bytes together, want %d", sum, want)
	}
}

// The plan counts the parts: resident, owned and peak bytes shrink with
// the world, and a budget that the whole model does not fit fits a rank.
func TestRankPlanCountsParts(t *testing.T) {
	ts := []ckpttest.Tensor{ckpttest.T("a.weight", dtype.BF16, 1024, 256), ckpttest.T("b.weight", dtype.BF16, 256, 1024)}
	path := ckpttest.File(t, ts...)
	splits := []Split{{Pattern: MustParsePattern("a.weight"), Dim: 0}, {Pattern: MustParsePattern("b.weight"), Dim: 1}}
	whole := mustOpen(t, path, WithDType(To(dtype.F32)), WithStaging(1<<20), WithWorkers(1))
	pw, _ := whole.Plan()
	m := mustOpen(t, path, WithDType(To(dtype.F32)), WithStaging(1<<20), WithWorkers(1), WithRank(1, 4, splits...))
	p, err := m.Plan()
	if err != nil {
		t.Fatal(err)
	}
	if p.TotalOwnedBytes*4 != pw.TotalOwnedBytes || p.TotalReadBytes*4 != p.TotalStoredBytes || p.TotalStoredBytes != pw.TotalStoredBytes {
		t.Errorf("owned %d of %d, read %d of %d", p.TotalOwnedBytes, pw.TotalOwnedBytes, p.TotalReadBytes, p.TotalStoredBytes)
	}
	if p.Rank == nil || p.Rank.Rank != 1 || p.Rank.World != 4 || len(p.Rank.Splits) != 2 {
		t.Errorf("rank %+v", p.Rank)
	}
	tp := p.Components[0].Tensors[1]
	if tp.Name != "b.weight" || !slices.Equal(tp.Shape, []int64{256, 256}) || tp.Split == nil || tp.Split.Start != 256 || tp.Split.Stop != 512 ||
		len(tp.Ranges) != 1 || tp.Ranges[0].Count != 256 || tp.Ranges[0].Length != 512 || tp.Ranges[0].Stride != 2048 {
		t.Errorf("b.weight plan %+v ranges %+v", tp, tp.Ranges)
	}
	budget := pw.PeakBytes - 1
	if _, err := mustOpen(t, path, WithDType(To(dtype.F32)), WithStaging(1<<20), WithWorkers(1), WithBudget(budget)).Load(context.Background()); !errors.Is(err, ErrBudget) {
		t.Fatalf("whole model under %d: %v", budget, err)
	}
	w, err := mustOpen(t, path, WithDType(To(dtype.F32)), WithStaging(1<<20), WithWorkers(1), WithBudget(budget), WithRank(1, 4, splits...)).Load(context.Background())
	if err != nil {
		t.Fatalf("a rank under %d: %v", budget, err)
	}
	w.Close()
	if !strings.Contains(p.String(), "rank 1 of 4 reads") {
		t.Errorf("String lacks the rank's bytes:\n%s", p)
	}
}

// LoadTensor and loadInto return the rank's part.
func TestRankLoadTensorAndInto(t *testing.T) {
	path := ckpttest.File(t, ckpttest.T("w", dtype.BF16, 6, 10))
	full := mustLoad(t, mustOpen(t, path))
	fw, _ := full.Tensor("w")
	m := mustOpen(t, path, WithRank(2, 3, Split{Pattern: MustParsePattern("w"), Dim: 1}))
	tt, err := m.LoadTensor(context.Background(), "w")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(tt.Shape, []int64{6, 3}) || tt.Split == nil || tt.Split.Start != 7 || !tt.Location.Owned {
		t.Fatalf("%v %+v", tt.Shape, tt.Split)
	}
	for r := range 6 {
		if !bytes.Equal(tt.Bytes()[r*6:r*6+6], fw.Bytes()[r*20+14:r*20+20]) {
			t.Fatalf("row %d differs", r)
		}
	}
	buf := make([]byte, 36)
	if _, err := m.loadInto(context.Background(), "w", buf); err != nil || !bytes.Equal(buf, tt.Bytes()) {
		t.Fatalf("loadInto: %v", err)
	}
	if _, err := m.loadInto(context.Background(), "w", make([]byte, 120)); !errors.Is(err, ErrOption) || !strings.Contains(err.Error(), "buffer: 120 bytes") {
		t.Errorf("a whole tensor's buffer: %v", err)
	}
}

func TestRankOptionErrors(t *testing.T) {
	path := ckpttest.File(t, ckpttest.T("a.weight", dtype.F32, 4, 4), ckpttest.T("a.bias", dtype.F32, 4), ckpttest.T("p", dtype.F4, 4, 6))
	for _, c := range []struct {
		opt    Option
		kind   error
		tensor string
		msg    string // the case the message names
	}{
		{WithRank(0, 0), ErrOption, "", "world 0 < 1"},
		{WithRank(2, 2), ErrOption, "", "rank 2 is not in [0, 2)"},
		{WithRank(-1, 2), ErrOption, "", "rank -1 is not in [0, 2)"},
		{WithRank(0, 2, Split{Pattern: MustParsePattern("**.bias"), Dim: 1}), ErrOption, "a.bias", "split dimension 1 is beyond"},
		{WithRank(0, 2, Split{Pattern: MustParsePattern("x"), Dim: -1}), ErrOption, "", "split dimension -1 < 0"},
		{WithRank(0, 2, Split{Component: "nope", Pattern: MustParsePattern("x"), Dim: 0}), ErrOption, "", "split names no component"},
		{WithRank(2, 4, Split{Pattern: MustParsePattern("p"), Dim: 1}), ErrOption, "p", "split: rank 2's part"}, // columns [4:5) of F4: half a byte
	} {
		_, err := Open(path, c.opt)
		var le *Error
		if !errors.Is(err, c.kind) || !strings.Contains(err.Error(), c.msg) || !errors.As(err, &le) || le.Tensor != c.tensor {
			t.Errorf("Open = %v, want %v naming tensor %q and %q", err, c.kind, c.tensor, c.msg)
		}
	}
	// An F4 split on whole bytes is fine.
	m := mustOpen(t, path, WithRank(1, 3, Split{Pattern: MustParsePattern("p"), Dim: 1}))
	w := mustLoad(t, m)
	if tt, _ := w.Tensor("p"); !slices.Equal(tt.Shape, []int64{4, 2}) || len(tt.Bytes()) != 4 {
		t.Errorf("F4 part %v, %d bytes", tt.Shape, len(tt.Bytes()))
	}
}

// deepseekAligned writes a DeepSeek block-FP8 weight [out, in] (blocks of
// 128) with its scale_inv, and config.json; it returns the folder.
func deepseekAligned(t *testing.T, out, in int64) string {
	t.Helper()
	codes := make([]byte, out*in)
	for i := range codes {
		codes[i] = byte(i*13) & 0xf7
	}
	gr, gc := ceilDiv(out, 128), ceilDiv(in, 128)
	sb := make([]byte, 4*gr*gc)
	for i := 0; i < len(sb); i += 4 {
		binary.LittleEndian.PutUint32(sb[i:], math.Float32bits(float32(i+3)/16))
	}
	dir := filepath.Join(t.TempDir(), "m")
	os.Mkdir(dir, 0o755)
	if err := ckpttest.WriteFile(filepath.Join(dir, "model.safetensors"), []ckpttest.Tensor{
		{Name: "w.weight", DType: dtype.F8_E4M3, Shape: []int64{out, in}, Data: codes},
		{Name: "w.weight_scale_inv", DType: dtype.F32, Shape: []int64{gr, gc}, Data: sb},
	}, nil); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"quantization_config":{"quant_method":"fp8","weight_block_size":[128,128]}}`), 0o644)
	return dir
}

// rankParts loads name, split along dim, on every rank of world.
func rankParts(t *testing.T, path, name string, dim, world int, opts ...Option) []*Tensor {
	t.Helper()
	var out []*Tensor
	for rank := range world {
		m := mustOpen(t, path, append(slices.Clone(opts), WithRank(rank, world, Split{Pattern: MustParsePattern(name), Dim: dim}))...)
		w := mustLoad(t, m)
		tt, err := w.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tt)
	}
	return out
}

// A dequantized quantized weight split along dimension 0 equals the rows
// of the whole dequantization, also where the parts start inside a scale
// block (130 rows in 2 or 3 parts, blocks of 128); kept quantized it needs
// block boundaries (ErrOption, "split: ...", otherwise) and then its data and scales, as
// returned, dequantize to the same rows. Along dimension 1 (columns) on
// block boundaries the same holds.
func TestRankQuantizedParts(t *testing.T) {
	for _, c := range []struct {
		out, in       int64
		dim, world    int
		deqOK, keepOK bool
	}{
		{130, 260, 0, 2, true, false}, // rank 1 starts at row 65, inside the first block
		{130, 260, 0, 3, true, false},
		{300, 260, 0, 5, true, false},
		{256, 384, 0, 2, true, true},
		{256, 384, 1, 3, true, true},
		{300, 256, 1, 2, true, true},   // a partial last row block
		{300, 260, 1, 2, false, false}, // columns [0:130) end inside a block
	} {
		name := fmt.Sprintf("[%d,%d] dim %d world %d", c.out, c.in, c.dim, c.world)
		dir := deepseekAligned(t, c.out, c.in)
		split := Split{Pattern: MustParsePattern("w.weight"), Dim: c.dim}
		if !c.deqOK {
			for _, tg := range []Target{To(dtype.F32), AsStored} {
				if _, err := Open(dir, WithDType(tg), WithRank(0, c.world, split)); !errors.Is(err, ErrOption) || !strings.Contains(err.Error(), "split: ") || !strings.Contains(err.Error(), "w.weight") {
					t.Errorf("%s %s: %v", name, tg, err)
				}
			}
			continue
		}
		if !c.keepOK {
			if _, err := Open(dir, WithRank(1, c.world, split)); !errors.Is(err, ErrOption) || !strings.Contains(err.Error(), "split: ") || !strings.Contains(err.Error(), "block") {
				t.Errorf("%s kept quantized: %v", name, err)
			}
		}
		whole := mustLoad(t, mustOpen(t, dir, WithDType(To(dtype.F32))))
		wt, _ := whole.Tensor("w.weight")
		for _, mode := range readModes {
			parts := rankParts(t, dir, "w.weight", c.dim, c.world, append(slices.Clone(mode.opts), WithDType(To(dtype.F32)))...)
			var bs [][]byte
			var shapes [][]int64
			for _, p := range parts {
				if p.Action() != ActionDequantize {
					t.Fatalf("%s: %s", name, p.Action())
				}
				bs, shapes = append(bs, p.Bytes()), append(shapes, p.Shape)
			}
			if !bytes.Equal(concat(bs, shapes, c.dim, 4), wt.Bytes()) {
				t.Errorf("%s %s: dequantized parts differ from the whole's rows", name, mode.name)
			}
			if !c.keepOK {
				continue
			}
			kept := rankParts(t, dir, "w.weight", c.dim, c.world, mode.opts...)
			bs = bs[:0]
			for _, p := range kept {
				q := p.QuantWeight()
				if p.Action() != ActionQuantized || q == nil || len(p.Scales) != 1 || !slices.Equal(q.Shape, p.Shape) {
					t.Fatalf("%s: kept %s %v", name, p.Action(), q)
				}
				if !slices.Equal(p.Scales[0].Shape, q.Scales[0].Shape) {
					t.Fatalf("scale shape %v, layout says %v", p.Scales[0].Shape, q.Scales[0].Shape)
				}
				dst := make([]byte, 4*p.NumElements())
				if _, err := q.Dequantize(dst, dtype.F32, p.Bytes(), [][]byte{p.Scales[0].Bytes()}, dtype.Options{}); err != nil {
					t.Fatalf("%s %s: the kept part does not dequantize: %v", name, mode.name, err)
				}
				bs = append(bs, dst)
			}
			if !bytes.Equal(concat(bs, shapes, c.dim, 4), wt.Bytes()) {
				t.Errorf("%s %s: kept parts dequantized differ from the whole's rows", name, mode.name)
			}
		}
	}
}

// A dequantized part reads its data rows and the scale rows they use,
// nothing more: each exactly once (the ranks of world 2 over 300 rows in
// blocks of 128 both read scale row 1).
func TestRankQuantizedReadBytes(t *testing.T) {
	dir := deepseekAligned(t, 300, 260)
	for _, mode := range readModes {
		for rank := range 2 {
			m := mustOpen(t, dir, append(slices.Clone(mode.opts), WithDType(To(dtype.BF16)), WithWorkers(2),
				WithRank(rank, 2, Split{Pattern: MustParsePattern("w.weight"), Dim: 0}))...)
			rc := countReads(m)
			p, _ := m.Plan()
			mustLoad(t, m)
			data := rc.bytes["w.weight"]
			scale := rc.bytes["w.weight_scale_inv"]
			if data != 150*260 || scale != 2*3*4 || data+scale != p.TotalReadBytes {
				t.Errorf("%s rank %d: read %d data and %d scale bytes, plan %d", mode.name, rank, data, scale, p.TotalReadBytes)
			}
			for name, mk := range rc.marks {
				for i, n := range mk {
					if n > 1 {
						t.Fatalf("%s: byte %d of %s read %d times", mode.name, i, name, n)
					}
				}
			}
		}
	}
}

// MXFP4 experts [E, out, G·32] split by expert (dimension 0), by output
// row (dimension 1) and by column block (dimension 2): dequantized and
// kept-quantized parts agree with the whole.
func TestRankMXFP4Parts(t *testing.T) {
	const e, out, g = 3, 5, 4
	blocks := make([]byte, e*out*g*16)
	for i := range blocks {
		blocks[i] = byte(i * 37)
	}
	sc := make([]byte, e*out*g)
	for i := range sc {
		sc[i] = byte(120 + i%14)
	}
	path := ckpttest.File(t,
		ckpttest.Tensor{Name: "experts.down_proj_blocks", DType: dtype.U8, Shape: []int64{e, out, g, 16}, Data: blocks},
		ckpttest.Tensor{Name: "experts.down_proj_scales", DType: dtype.U8, Shape: []int64{e, out, g}, Data: sc},
	)
	whole := mustLoad(t, mustOpen(t, path, WithDType(To(dtype.F32))))
	wt, _ := whole.Tensor("experts.down_proj")
	for _, dim := range []int{0, 1, 2} {
		for _, world := range []int{2, 3, 4} {
			if dim == 2 && world == 3 {
				continue // 43 columns: not whole bytes of F4 nor whole blocks (refused below)
			}
			for _, mode := range readModes {
				parts := rankParts(t, path, "experts.down_proj", dim, world, append(slices.Clone(mode.opts), WithDType(To(dtype.F32)))...)
				kept := rankParts(t, path, "experts.down_proj", dim, world, append(slices.Clone(mode.opts), WithDType(Quantized))...)
				var deq, fromKept [][]byte
				var shapes [][]int64
				for i, p := range parts {
					deq, shapes = append(deq, p.Bytes()), append(shapes, p.Shape)
					k := kept[i]
					q := k.QuantWeight()
					dst := make([]byte, 4*k.NumElements())
					if _, err := q.Dequantize(dst, dtype.F32, k.Bytes(), [][]byte{k.Scales[0].Bytes()}, dtype.Options{}); err != nil {
						t.Fatalf("dim %d world %d: %v (data shape %v scale %v)", dim, world, err, q.Data.Shape, q.Scales[0].Shape)
					}
					if dim < 2 && (q.Data.Shape[dim] != k.Shape[dim] || q.Scales[0].Shape[dim] != k.Shape[dim]) {
						t.Errorf("dim %d: data shape %v, scale shape %v for part %v", dim, q.Data.Shape, q.Scales[0].Shape, k.Shape)
					}
					fromKept = append(fromKept, dst)
				}
				if !bytes.Equal(concat(deq, shapes, dim, 4), wt.Bytes()) || !bytes.Equal(concat(fromKept, shapes, dim, 4), wt.Bytes()) {
					t.Errorf("%s dim %d world %d: parts differ from the whole", mode.name, dim, world)
				}
			}
		}
	}
	// Half a column block is refused, and so is half a byte.
	if _, err := Open(path, WithDType(To(dtype.F32)), WithRank(0, 3, Split{Pattern: MustParsePattern("experts.down_proj"), Dim: 2})); !errors.Is(err, ErrOption) || !strings.Contains(err.Error(), "split: ") {
		t.Errorf("43-column parts: %v", err)
	}
	if _, err := Open(path, WithDType(To(dtype.F32)), WithRank(0, 8, Split{Pattern: MustParsePattern("experts.down_proj"), Dim: 2})); !errors.Is(err, ErrOption) || !strings.Contains(err.Error(), "split: ") {
		t.Errorf("16-column parts of 32-column blocks: %v", err)
	}
}

// BenchmarkRankLoad loads rank 0 of 4 of a model whose weights are all
// split (BF16 to F32, pread), and the whole model as the baseline, and
// reports the fraction of the checkpoint's bytes each read.
func BenchmarkRankLoad(b *testing.B) {
	var ts []ckpttest.Tensor
	for i := range 4 {
		ts = append(ts, ckpttest.T(fmt.Sprintf("l.%d.up.weight", i), dtype.BF16, 2048, 1024), ckpttest.T(fmt.Sprintf("l.%d.down.weight", i), dtype.BF16, 1024, 2048))
	}
	dir := ckpttest.Dir(b, ckpttest.Weights{Shards: 2, Tensors: ts})
	splits := []Split{{Pattern: MustParsePattern("**.up.weight"), Dim: 0}, {Pattern: MustParsePattern("**.down.weight"), Dim: 1}}
	for _, c := range []struct {
		name string
		opts []Option
	}{
		{"mmap/whole", []Option{WithReadStrategy("mmap")}},
		{"mmap/rank0of4", []Option{WithReadStrategy("mmap"), WithRank(0, 4, splits...)}},
		{"pread/whole", []Option{WithReadStrategy("pread")}},
		{"pread/rank0of4", []Option{WithReadStrategy("pread"), WithRank(0, 4, splits...)}},
	} {
		b.Run(c.name, func(b *testing.B) {
			m, err := Open(dir, append([]Option{WithDType(To(dtype.F32)), WithBudget(-1), WithWorkers(1)}, c.opts...)...)
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			p, _ := m.Plan()
			a := NewArena()
			defer a.Free()
			b.SetBytes(p.TotalReadBytes)
			b.ResetTimer()
			for range b.N {
				w, err := m.Load(context.Background(), IntoArena(a))
				if err != nil {
					b.Fatal(err)
				}
				w.Close()
			}
			b.ReportMetric(float64(p.TotalReadBytes)/float64(p.TotalStoredBytes), "read/stored")
		})
	}
}

// Parts larger than one piece of work are spread over the workers, with
// piece boundaries inside rows, and still concatenate to the whole: a
// converted plain tensor split by columns, a dequantized weight split by
// rows inside a scale block, and one split by columns (scale rows read
// piece by piece).
func TestRankLargePartsInPieces(t *testing.T) {
	plain := ckpttest.File(t, ckpttest.T("w", dtype.BF16, 2048, 1536))
	rows := deepseekAligned(t, 4500, 600)
	cols := deepseekAligned(t, 9000, 256)
	for _, c := range []struct {
		path, name string
		dim, world int
	}{
		{plain, "w", 1, 2},
		{rows, "w.weight", 0, 2},
		{cols, "w.weight", 1, 2},
	} {
		whole := mustLoad(t, mustOpen(t, c.path, WithDType(To(dtype.F32))))
		wt, _ := whole.Tensor(c.name)
		for _, mode := range readModes {
			var bs [][]byte
			var shapes [][]int64
			for rank := range c.world {
				m := mustOpen(t, c.path, append(slices.Clone(mode.opts), WithDType(To(dtype.F32)), WithWorkers(2),
					WithRank(rank, c.world, Split{Pattern: MustParsePattern(c.name), Dim: c.dim}))...)
				pieces := 0
				m.cfg.progress = func(Progress) { pieces++ }
				w := mustLoad(t, m)
				if pieces < 2 {
					t.Errorf("%s rank %d: %d pieces", c.name, rank, pieces)
				}
				tt, _ := w.Tensor(c.name)
				bs, shapes = append(bs, tt.Bytes()), append(shapes, tt.Shape)
			}
			if !bytes.Equal(concat(bs, shapes, c.dim, 4), wt.Bytes()) {
				t.Errorf("%s %s dim %d: parts differ from the whole", mode.name, c.name, c.dim)
			}
		}
	}
}

// A checkpoint read through an fs.FS (os.DirFS, a RangeFS) gives every
// rank the parts a local load gives, quantized weights included.
func TestRankThroughFS(t *testing.T) {
	plain := writeRankFixture(t)
	quant := deepseekAligned(t, 300, 256)
	for _, c := range []struct {
		dir    string
		splits []Split
	}{
		{plain, rankSplits},
		{quant, []Split{{Pattern: MustParsePattern("w.weight"), Dim: 1}}},
		{quant, []Split{{Pattern: MustParsePattern("w.weight"), Dim: 0}}},
	} {
		parent, base := filepath.Dir(c.dir), filepath.Base(c.dir)
		for _, target := range []Target{AsStored, To(dtype.F32)} {
			if c.dir == quant && c.splits[0].Dim == 0 && target == AsStored {
				continue // 150 rows of blocks of 128: dequantized only
			}
			for rank := range 2 {
				opts := []Option{WithDType(target), WithRank(rank, 2, c.splits...)}
				want := loadBytes(t, mustOpen(t, c.dir, opts...))
				for name, fsys := range map[string]fs.FS{
					"dirfs": os.DirFS(parent),
					"range": &fakeRangeFS{FS: os.DirFS(parent), t: t, cfg: source.RangeConfig{Concurrency: 3, Chunk: 1 << 20, MaxGap: 64}},
				} {
					m := mustOpen(t, base, append(slices.Clone(opts), WithFS(fsys))...)
					sameBytes(t, fmt.Sprintf("%s %s %s rank %d", name, base, target, rank), loadBytes(t, m), want)
				}
				if c.dir != plain {
					continue
				}
				// Without gaps allowed, the ranged requests cover exactly the
				// rank's bytes.
				fsys := &fakeRangeFS{FS: os.DirFS(parent), t: t, cfg: source.RangeConfig{Concurrency: 2, Chunk: 1 << 20}}
				m := mustOpen(t, base, append(slices.Clone(opts), WithFS(fsys))...)
				p, _ := m.Plan()
				loadBytes(t, m)
				if fsys.bytes.Load() != p.TotalReadBytes {
					t.Errorf("%s rank %d: requests covered %d bytes, the plan reads %d", target, rank, fsys.bytes.Load(), p.TotalReadBytes)
				}
			}
		}
	}
}
