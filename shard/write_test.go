package shard

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/atomicfile"
	"github.com/ckpt-go/ckpt/internal/testutil"
	"github.com/ckpt-go/ckpt/safetensors"
)

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"123", 123}, {"0", 0}, {"5GB", 5_000_000_000}, {"5gb", 5_000_000_000}, {"5 GB", 5_000_000_000},
		{"4GiB", 4 << 30}, {"4gib", 4 << 30}, {"1.5GB", 1_500_000_000}, {"10KB", 10_000}, {"10KiB", 10240},
		{"2MB", 2_000_000}, {"2MiB", 2 << 20}, {"1TB", 1e12}, {"1TiB", 1 << 40}, {"100B", 100}, {" 7 ", 7},
		{"0.5KiB", 512}, {"8PiB", 8 << 50},
	} {
		got, err := ParseSize(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"", "GB", "-5GB", "5XB", "5 G B", "1.2.3MB", "0.1B", "1.0000001KB", "99999999999999999999", "10000PB", "abc", ".", "5e3"} {
		if got, err := ParseSize(in); !invalidSize.Matches(err) {
			t.Errorf("ParseSize(%q) = %d, %v; want an invalid size", in, got, err)
		}
	}
}

func td(name string, dt dtype.DType, shape ...int64) safetensors.TensorData {
	b, err := ckpttest.Fill(name, dt, shape)
	if err != nil {
		panic(err)
	}
	return safetensors.TensorData{Name: name, DType: dt, Shape: shape, Data: b}
}

func TestWritePacking(t *testing.T) {
	dir := t.TempDir()
	// Sizes 40, 40, 40, 200, 40 bytes with a 100-byte limit.
	ts := []safetensors.TensorData{td("a", dtype.F32, 10), td("b", dtype.F32, 10), td("c", dtype.F32, 10), td("big", dtype.F32, 50), td("d", dtype.F32, 10)}
	res, err := Write(context.Background(), dir, "model", "", ts, map[string]string{"format": "pt"}, WithMaxShardSize(100))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"a": "model-00001-of-00004.safetensors", "b": "model-00001-of-00004.safetensors",
		"c": "model-00002-of-00004.safetensors", "big": "model-00003-of-00004.safetensors",
		"d": "model-00004-of-00004.safetensors",
	}
	for k, v := range want {
		if res.WeightMap[k] != v {
			t.Errorf("%s in %s, want %s", k, res.WeightMap[k], v)
		}
	}
	if res.Index != "model.safetensors.index.json" || len(res.Files) != 4 || res.TotalSize != 360 {
		t.Errorf("result %+v", res)
	}
	ix, err := ReadIndex(filepath.Join(dir, res.Index))
	if err != nil {
		t.Fatal(err)
	}
	if ix.TotalSize != 360 || len(ix.WeightMap) != 5 {
		t.Errorf("index %+v", ix)
	}
	c := mustOpen(t, filepath.Join(dir, res.Index))
	defer c.Close()
	if len(c.Warnings()) != 0 || c.Metadata()["format"] != "pt" {
		t.Errorf("warnings %v metadata %v", c.Warnings(), c.Metadata())
	}
	for _, tt := range c.Tensors() {
		wantBytes(t, tt)
	}
	if names := testutil.Entries(t, dir); len(names) != 5 {
		t.Errorf("folder holds %v", names)
	}
}

func TestWriteShards(t *testing.T) {
	dir := t.TempDir()
	ts := []safetensors.TensorData{td("a", dtype.F32, 10), td("b", dtype.F32, 10), td("big", dtype.F32, 50), td("c", dtype.F32, 10)}
	// Shard numbers 0, 2 and 7 with nothing in 1: three shards, each
	// tensor where it was put, whatever the size limit says.
	place := map[string]int{"a": 2, "b": 0, "big": 2, "c": 7}
	res, err := Write(context.Background(), dir, "model", "fp16", ts, nil,
		WithShards(func(name string) int { return place[name] }), WithMaxShardSize(8))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"b": "model.fp16-00001-of-00003.safetensors", "a": "model.fp16-00002-of-00003.safetensors",
		"big": "model.fp16-00002-of-00003.safetensors", "c": "model.fp16-00003-of-00003.safetensors",
	}
	if !maps.Equal(res.WeightMap, want) || res.Index != "model.safetensors.index.fp16.json" || len(res.Files) != 3 {
		t.Errorf("result %+v, want weight map %v", res, want)
	}
	ix, err := ReadIndex(filepath.Join(dir, res.Index))
	if err != nil {
		t.Fatal(err)
	}
	if ix.TotalSize != 320 || !maps.Equal(ix.WeightMap, want) {
		t.Errorf("index %+v", ix)
	}
	c := mustOpen(t, filepath.Join(dir, res.Index))
	defer c.Close()
	for _, tt := range c.Tensors() {
		wantBytes(t, tt)
	}

	// One shard number: one file, no index.
	res, err = Write(context.Background(), dir, "one", "", ts, nil, WithShards(func(string) int { return 3 }))
	if err != nil {
		t.Fatal(err)
	}
	if res.Index != "" || !slices.Equal(res.Files, []string{"one.safetensors"}) {
		t.Errorf("one shard: %+v", res)
	}
}

func TestWriteNames(t *testing.T) {
	ts := []safetensors.TensorData{td("a", dtype.BF16, 8), td("b", dtype.BF16, 8)}
	for _, tc := range []struct {
		prefix, variant string
		max             int64
		want            []string
	}{
		{"model", "", 1000, []string{"model.safetensors"}},
		{"model", "fp16", 1000, []string{"model.fp16.safetensors"}},
		{"diffusion_pytorch_model", "bf16", 16, []string{"diffusion_pytorch_model.bf16-00001-of-00002.safetensors", "diffusion_pytorch_model.bf16-00002-of-00002.safetensors", "diffusion_pytorch_model.safetensors.index.bf16.json"}},
		{"model", "", 16, []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "model.safetensors.index.json"}},
	} {
		dir := t.TempDir()
		if _, err := Write(context.Background(), dir, tc.prefix, tc.variant, ts, nil, WithMaxShardSize(tc.max)); err != nil {
			t.Fatal(err)
		}
		if got := testutil.Entries(t, dir); !slices.Equal(got, tc.want) {
			t.Errorf("%s %s: wrote %v, want %v", tc.prefix, tc.variant, got, tc.want)
		}
	}
}

func TestWriteInvalid(t *testing.T) {
	ctx := context.Background()
	ok := []safetensors.TensorData{td("a", dtype.F32, 2)}
	bad := td("a", dtype.F32, 2)
	bad.Data = bad.Data[:7]
	for _, tc := range []struct {
		name, prefix, variant string
		ts                    []safetensors.TensorData
		opts                  []WriteOption
		kind                  failure
	}{
		{"path prefix", "a/b", "", ok, nil, failure{Kind: ErrInvalidPrefix, What: ""}},
		{"dotted prefix", "model.x", "", ok, nil, failure{Kind: ErrInvalidPrefix, What: ""}},
		{"empty prefix", "", "", ok, nil, failure{Kind: ErrInvalidPrefix, What: ""}},
		{"dotdot prefix", "..", "", ok, nil, failure{Kind: ErrInvalidPrefix, What: ""}},
		{"variant dash", "model", "fp-16", ok, nil, invalidVariant},
		{"variant dot", "model", "a.b", ok, nil, invalidVariant},
		{"no tensors", "model", "", nil, nil, invalidTensor},
		{"duplicate", "model", "", []safetensors.TensorData{td("a", dtype.F32, 2), td("a", dtype.F32, 2)}, nil, duplicateTensor},
		{"short data", "model", "", []safetensors.TensorData{bad}, nil, invalidTensor},
		{"negative dim", "model", "", []safetensors.TensorData{{Name: "a", DType: dtype.F32, Shape: []int64{-1}}}, nil, invalidTensor},
		{"reserved name", "model", "", []safetensors.TensorData{{Name: "__metadata__", DType: dtype.F32, Shape: []int64{0}}}, nil, invalidTensor},
		{"zero max", "model", "", ok, []WriteOption{WithMaxShardSize(0)}, invalidSize},
	} {
		dir := t.TempDir()
		_, err := Write(ctx, dir, tc.prefix, tc.variant, tc.ts, nil, tc.opts...)
		if !tc.kind.Matches(err) {
			t.Errorf("%s: got %v, want %s", tc.name, err, tc.kind)
		}
		if names := testutil.Entries(t, dir); len(names) != 0 {
			t.Errorf("%s: left %v", tc.name, names)
		}
	}
}

// gen returns tensors whose names carry a generation tag, so a reader can
// tell sets apart.
func gen(g, n int) []safetensors.TensorData {
	var ts []safetensors.TensorData
	for i := range n {
		ts = append(ts, td(fmt.Sprintf("g%d.t%d", g, i), dtype.F32, 16)) // 64 bytes each
	}
	return ts
}

type snapshot map[string][32]byte

func snap(t *testing.T, dir string) snapshot {
	t.Helper()
	s := snapshot{}
	for _, n := range testutil.Entries(t, dir) {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		s[n] = sha256.Sum256(b)
	}
	return s
}

// loadGen opens one entry point and returns the generation it loads ("" if
// the file does not exist). It fails the test if the entry point loads a
// mix of generations or an index points at missing or foreign shards.
func loadGen(t *testing.T, dir, entry, when string) string {
	t.Helper()
	p := filepath.Join(dir, entry)
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	c, err := Open(p)
	if err != nil {
		t.Fatalf("%s: reader sees a broken %s: %v", when, entry, err)
	}
	defer c.Close()
	g := ""
	for _, n := range c.Names() {
		ng, _, _ := strings.Cut(n, ".")
		if g != "" && ng != g {
			t.Fatalf("%s: %s mixes %s and %s", when, entry, g, ng)
		}
		g = ng
	}
	return g
}

// views are the generations that the two kinds of reader load: one that
// prefers the index to the single file (diffusers), one that prefers the
// single file (package variant, transformers).
type views struct{ indexFirst, singleFirst string }

func readerViews(t *testing.T, dir, when string) views {
	t.Helper()
	ix := loadGen(t, dir, "model.safetensors.index.json", when)
	single := loadGen(t, dir, "model.safetensors", when)
	v := views{cmp.Or(ix, single), cmp.Or(single, ix)}
	if v.indexFirst == "" {
		t.Fatalf("%s: no set at all", when)
	}
	return v
}

// monotonic checks that each reader moves from old to new at most once:
// it loads old, then new, and never old again.
type monotonic struct {
	old, new string
	seen     views
}

func (m *monotonic) check(t *testing.T, v views, when string) {
	t.Helper()
	for _, p := range []struct {
		got  string
		seen *string
		who  string
	}{{v.indexFirst, &m.seen.indexFirst, "index-first"}, {v.singleFirst, &m.seen.singleFirst, "single-first"}} {
		switch {
		case p.got != m.old && p.got != m.new:
			t.Fatalf("%s: a %s reader loads %s, neither %s nor %s", when, p.who, p.got, m.old, m.new)
		case *p.seen == m.new && p.got == m.old:
			t.Fatalf("%s: a %s reader went back from %s to %s", when, p.who, m.new, m.old)
		}
		*p.seen = p.got
	}
}

var errInjected = errors.New("injected failure")

var transitions = []struct {
	name          string
	oldN, oldMax  int
	newN, newMax  int
	newSingleName bool
}{
	{"3 shards to 2", 6, 128, 4, 128, false},
	{"2 shards to 2 (same names)", 4, 128, 4, 128, false},
	{"single to 3 shards", 2, 1000, 6, 128, false},
	{"3 shards to single", 6, 128, 2, 1000, true},
	{"single to single", 2, 1000, 3, 1000, true},
}

func TestWriteReplacesSetAtomically(t *testing.T) {
	ctx := context.Background()
	for _, tr := range transitions {
		t.Run(tr.name, func(t *testing.T) {
			dir := t.TempDir()
			if _, err := Write(ctx, dir, "model", "", gen(1, tr.oldN), nil, WithMaxShardSize(int64(tr.oldMax))); err != nil {
				t.Fatal(err)
			}
			// An unrelated variant set and a stray file must survive.
			if _, err := Write(ctx, dir, "model", "fp16", gen(9, 2), nil); err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(dir, "README.md"), []byte("hi"), 0o644)
			ops := &testOps{}
			m := &monotonic{old: "g1", new: "g2"}
			ops.after = func(op string) { m.check(t, readerViews(t, dir, "after "+op), "after "+op) }
			res, err := Write(ctx, dir, "model", "", gen(2, tr.newN), nil, WithMaxShardSize(int64(tr.newMax)), withOps(ops))
			if err != nil {
				t.Fatal(err)
			}
			if v := readerViews(t, dir, "at the end"); v != (views{"g2", "g2"}) {
				t.Fatalf("after the write readers see %v", v)
			}
			want := append(slices.Clone(res.Files), "README.md", "model.fp16.safetensors")
			if res.Index != "" {
				want = append(want, res.Index)
			}
			slices.Sort(want)
			if got := testutil.Entries(t, dir); !slices.Equal(got, want) {
				t.Errorf("folder holds %v, want %v", got, want)
			}
			if len(res.Replaced) == 0 || len(res.Warnings) != 0 || len(res.Leftovers) != 0 {
				t.Errorf("replaced %v leftovers %v warnings %v", res.Replaced, res.Leftovers, res.Warnings)
			}
			t.Logf("%d operations", ops.n)
		})
	}
}

func TestWriteFailureRestoresPreviousSet(t *testing.T) {
	ctx := context.Background()
	for _, tr := range transitions {
		t.Run(tr.name, func(t *testing.T) {
			// Count the operations of a successful run and find the switch:
			// the new index or single file put in place.
			count := &testOps{}
			switchAt := 0
			count.after = func(op string) {
				if switchAt == 0 && (op == "close model.safetensors.index.json" || op == "close model.safetensors") {
					switchAt = count.n
				}
			}
			{
				dir := t.TempDir()
				Write(ctx, dir, "model", "", gen(1, tr.oldN), nil, WithMaxShardSize(int64(tr.oldMax)))
				if _, err := Write(ctx, dir, "model", "", gen(2, tr.newN), nil, WithMaxShardSize(int64(tr.newMax)), withOps(count)); err != nil {
					t.Fatal(err)
				}
			}
			if switchAt == 0 {
				t.Fatal("no switch among the operations")
			}
			for k := 1; k <= count.n; k++ {
				dir := t.TempDir()
				if _, err := Write(ctx, dir, "model", "", gen(1, tr.oldN), nil, WithMaxShardSize(int64(tr.oldMax))); err != nil {
					t.Fatal(err)
				}
				before := snap(t, dir)
				ops := &testOps{failAt: k}
				// Readers load g1 or g2 at every step; a failed write may
				// roll readers that saw g2 back to g1, so no order is
				// checked here.
				m := &monotonic{old: "g1", new: "g2"}
				ops.after = func(op string) {
					when := fmt.Sprintf("failure at op %d, after %s", k, op)
					m.seen = views{}
					m.check(t, readerViews(t, dir, when), when)
				}
				res, err := Write(ctx, dir, "model", "", gen(2, tr.newN), nil, WithMaxShardSize(int64(tr.newMax)), withOps(ops))
				if err == nil && k <= switchAt {
					t.Fatalf("op %d, at or before the switch (op %d), failed but the write succeeded", k, switchAt)
				}
				if err != nil {
					if !errors.Is(err, ErrCommit) || !errors.Is(err, errInjected) {
						t.Fatalf("op %d: %v", k, err)
					}
					if strings.Contains(err.Error(), "the new set is in place") {
						// After the switch: the folder sync failed, or the
						// previous entry point could not be removed.
						if k <= switchAt {
							t.Fatalf("op %d, before the switch (op %d): %v", k, switchAt, err)
						}
						m.seen = views{}
						m.check(t, readerViews(t, dir, "end"), "end")
						continue
					}
					after := snap(t, dir)
					if len(after) != len(before) {
						t.Fatalf("op %d: folder %v, before %v (%v)", k, testutil.Entries(t, dir), before, err)
					}
					for n, h := range before {
						if after[n] != h {
							t.Fatalf("op %d: %s changed (%v)", k, n, err)
						}
					}
					continue
				}
				// Failures of cleanup after the switch (or of the move from
				// swap names to standard names) do not fail the write.
				if v := readerViews(t, dir, "end"); v != (views{"g2", "g2"}) {
					t.Fatalf("op %d: succeeded but readers see %v", k, v)
				}
				if len(res.Warnings) > 0 && !slices.ContainsFunc(res.Warnings, func(w string) bool { return strings.Contains(w, "injected") }) {
					t.Errorf("op %d: warnings %q", k, res.Warnings)
				}
			}
		})
	}
}

func TestWriteCanceledOrFailingSource(t *testing.T) {
	dir := t.TempDir()
	if _, err := Write(context.Background(), dir, "model", "", gen(1, 4), nil, WithMaxShardSize(128)); err != nil {
		t.Fatal(err)
	}
	before := snap(t, dir)
	check := func(what string) {
		t.Helper()
		after := snap(t, dir)
		if len(after) != len(before) {
			t.Fatalf("%s: folder %v", what, testutil.Entries(t, dir))
		}
		for n, h := range before {
			if after[n] != h {
				t.Fatalf("%s: %s changed", what, n)
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Write(ctx, dir, "model", "", gen(2, 4), nil, WithMaxShardSize(128))
	if !errors.Is(err, ErrWrite) || !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled: %v", err)
	}
	check("canceled")

	specs := []safetensors.TensorSpec{}
	for _, d := range gen(2, 4) {
		specs = append(specs, safetensors.TensorSpec{Name: d.Name, DType: d.DType, Shape: d.Shape})
	}
	calls := 0
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	src := func(name string) ([]byte, error) {
		calls++
		if calls == 3 {
			return nil, errors.New("disk on fire")
		}
		return make([]byte, 64), nil
	}
	_, err = WriteFrom(ctx2, dir, "model", "", specs, src, nil, WithMaxShardSize(128))
	var e *Error
	if !errors.As(err, &e) || e.Kind != ErrWrite || e.Tensor == "" || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("failing source: %v", err)
	}
	check("failing source")

	calls = 0
	src2 := func(name string) ([]byte, error) {
		calls++
		if calls == 2 {
			cancel2()
		}
		return make([]byte, 64), nil
	}
	if _, err = WriteFrom(ctx2, dir, "model", "", specs, src2, nil, WithMaxShardSize(128)); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled mid-way: %v", err)
	}
	check("canceled mid-way")
}

// TestWriteReplacesLegacySet: writing a variant set removes the same
// variant's legacy-named files (which a resolver could otherwise pick up)
// and leaves other variants, prefixes and strays alone.
func TestWriteReplacesLegacySet(t *testing.T) {
	dir := t.TempDir()
	old := ckpttest.MustParseTensors("a:F16[4] b:F16[4]")
	for _, w := range []ckpttest.Weights{
		{Variant: "fp16", Shards: 2, Layout: ckpttest.Legacy, Tensors: old},
		{Variant: "fp16", Shards: 2, Layout: ckpttest.LegacyIndexName, Tensors: old},
		{Variant: "fp16", Tensors: old},
		{Variant: "bf16", Tensors: old},
		{Tensors: old},
		{Prefix: "diffusion_pytorch_model", Variant: "fp16", Tensors: old},
	} {
		if _, err := ckpttest.WriteWeights(dir, w); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(dir, "model.fp16.safetensors.bak"), []byte("x"), 0o644)
	res, err := Write(context.Background(), dir, "model", "fp16", []safetensors.TensorData{td("a", dtype.F16, 4), td("b", dtype.F16, 4)}, nil, WithMaxShardSize(8))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"diffusion_pytorch_model.fp16.safetensors", "model.bf16.safetensors",
		"model.fp16-00001-of-00002.safetensors", "model.fp16-00002-of-00002.safetensors",
		"model.fp16.safetensors.bak", "model.safetensors", "model.safetensors.index.fp16.json",
	}
	if got := testutil.Entries(t, dir); !slices.Equal(got, want) {
		t.Errorf("folder %v\nwant %v", got, want)
	}
	if len(res.Replaced) != 5 {
		t.Errorf("replaced %v", res.Replaced)
	}
}

func TestWriteCreatesFolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	if _, err := Write(context.Background(), dir, "model", "", gen(1, 2), nil); err != nil {
		t.Fatal(err)
	}
	if got := testutil.Entries(t, dir); !slices.Equal(got, []string{"model.safetensors"}) {
		t.Errorf("folder %v", got)
	}
	file := filepath.Join(t.TempDir(), "f")
	os.WriteFile(file, nil, 0o644)
	if _, err := Write(context.Background(), file, "model", "", gen(1, 2), nil); !errors.Is(err, ErrWrite) {
		t.Errorf("folder is a file: %v", err)
	}
}

// Rewriting a set whose shard names are taken goes through swap names and
// ends under the standard names, with nothing else left; where hard links
// fail, the set keeps its swap names (with a warning) and the next save
// returns to the standard names.
func TestWriteSwapNames(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	std := []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "model.safetensors.index.json"}
	for g := 1; g <= 2; g++ {
		ops := &testOps{}
		var log []string
		ops.after = func(op string) { log = append(log, op) }
		res, err := Write(ctx, dir, "model", "", gen(g, 4), nil, WithMaxShardSize(128), withOps(ops))
		if err != nil {
			t.Fatal(err)
		}
		if got := testutil.Entries(t, dir); !slices.Equal(got, std) || !slices.Equal(res.Files, std[:2]) || len(res.Warnings) != 0 {
			t.Fatalf("save %d: folder %v, files %v, warnings %v", g, got, res.Files, res.Warnings)
		}
		linked := slices.ContainsFunc(log, func(op string) bool { return strings.HasPrefix(op, "link ") })
		if linked != (g == 2) {
			t.Errorf("save %d: operations %v", g, log)
		}
		if v := readerViews(t, dir, "end"); v.indexFirst != fmt.Sprintf("g%d", g) {
			t.Fatalf("save %d: readers %v", g, v)
		}
	}

	res, err := Write(ctx, dir, "model", "", gen(3, 4), nil, WithMaxShardSize(128), withOps(&testOps{noLinks: true}))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Files) != 2 || !strings.Contains(res.Files[0], ".swap-") || len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "swap names") {
		t.Fatalf("without hard links: files %v, warnings %v", res.Files, res.Warnings)
	}
	for tensor, f := range res.WeightMap {
		if !slices.Contains(res.Files, f) {
			t.Errorf("weight map sends %s to %s", tensor, f)
		}
	}
	if v := readerViews(t, dir, "swap names"); v != (views{"g3", "g3"}) {
		t.Fatalf("readers %v", v)
	}
	res, err = Write(ctx, dir, "model", "", gen(4, 4), nil, WithMaxShardSize(128))
	if err != nil {
		t.Fatal(err)
	}
	if got := testutil.Entries(t, dir); !slices.Equal(got, std) || len(res.Replaced) != 3 {
		t.Fatalf("after the swap-named set: folder %v, replaced %v", got, res.Replaced)
	}
}

var errLinks = errors.New("links not supported")

// A save removes the leftovers of earlier saves of its own set (hidden
// temporaries and backups, unreferenced shards, the lock file of a killed
// save) and nothing of other sets.
func TestWriteRemovesLeftovers(t *testing.T) {
	dir := t.TempDir()
	own := []string{
		".model-00001-of-00002.safetensors.tmp-123", ".model.safetensors.index.json.tmp-9", ".model.safetensors.tmp-77",
		".model.safetensors.index.json.old-0123456789ab", ".model-00001-of-00003.safetensors.old-0123456789ab",
		"model-00001-of-00009.safetensors", "model-00002-of-00002.swap-0123456789ab.safetensors",
	}
	others := []string{
		".model.fp16.safetensors.tmp-5", ".model.fp16-00001-of-00002.safetensors.tmp-6", ".other.tmp-1",
		".model.safetensors.tmp-1x", "model.safetensors.tmp-3", ".diffusion_pytorch_model.safetensors.tmp-8",
		"model.safetensors.lock.tmp-4",
	}
	for _, n := range append(slices.Clone(own), others...) {
		os.WriteFile(filepath.Join(dir, n), []byte("junk"), 0o644)
	}
	os.WriteFile(filepath.Join(dir, ".model.safetensors.lock"), nil, 0o644) // a killed save's lock
	res, err := Write(context.Background(), dir, "model", "", gen(1, 4), nil, WithMaxShardSize(128))
	if err != nil {
		t.Fatal(err)
	}
	want := append(slices.Clone(res.Files), res.Index)
	want = append(want, others...)
	slices.Sort(want)
	want = slices.Compact(want)
	if got := testutil.Entries(t, dir); !slices.Equal(got, want) {
		t.Errorf("folder %v\nwant %v", got, want)
	}
	wantLeft := []string{".model-00001-of-00002.safetensors.tmp-123", ".model-00001-of-00003.safetensors.old-0123456789ab",
		".model.safetensors.index.json.old-0123456789ab", ".model.safetensors.index.json.tmp-9", ".model.safetensors.tmp-77"}
	wantRepl := []string{"model-00001-of-00009.safetensors", "model-00002-of-00002.swap-0123456789ab.safetensors"}
	got := slices.Sorted(slices.Values(res.Leftovers))
	if !slices.Equal(got, wantLeft) || !slices.Equal(slices.Sorted(slices.Values(res.Replaced)), wantRepl) {
		t.Errorf("leftovers %v\nwant %v\nreplaced %v\nwant %v", got, wantLeft, res.Replaced, wantRepl)
	}
}

// Two writers of one set: the second waits for the first (here: a save in
// progress, holding the lock while its temporary file exists) and never
// removes the live save's files; saves of another variant go on meanwhile.
func TestWriteTwoWriters(t *testing.T) {
	dir := t.TempDir()
	live := filepath.Join(dir, ".model-00001-of-00002.safetensors.tmp-4242")
	lock, err := atomicfile.LockTarget(context.Background(), dir, "model.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	if !lock.Exclusive() {
		t.Skip("no file locks on this platform")
	}
	os.WriteFile(live, []byte("a live save's shard"), 0o644)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := Write(ctx, dir, "model", "", gen(1, 4), nil, WithMaxShardSize(128)); !errors.Is(err, ErrWrite) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("while another save holds the lock: %v", err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Fatal("the live save's temporary file was removed")
	}
	if _, err := Write(context.Background(), dir, "model", "fp16", gen(9, 2), nil); err != nil {
		t.Fatal("another variant's save:", err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Fatal("another variant's save removed the live temporary file")
	}
	// Once the first save ends (here: dies, leaving its file), the second
	// one runs and removes it.
	done := make(chan error, 1)
	go func() {
		_, err := Write(context.Background(), dir, "model", "", gen(1, 4), nil, WithMaxShardSize(128))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("the second save did not wait: %v", err)
	default:
	}
	lock.Unlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(live); err == nil {
		t.Error("the dead save's temporary file is still there")
	}

	// Concurrent saves of one set serialize: each ends with a complete set.
	errs := make(chan error, 2)
	for w := range 2 {
		go func() {
			for i := range 10 {
				g := 10 + 10*w + i
				if _, err := Write(context.Background(), dir, "model", "", gen(g, 2+2*(i%3)), nil, WithMaxShardSize(128)); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	readerViews(t, dir, "after concurrent saves")
	for _, n := range testutil.Entries(t, dir) {
		if strings.HasPrefix(n, ".") || strings.Contains(n, ".swap-") {
			t.Errorf("left %s", n)
		}
	}
}
