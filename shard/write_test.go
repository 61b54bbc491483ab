package shard

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
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
		if got, err := ParseSize(in); !errors.Is(err, ErrInvalidSize) {
			t.Errorf("ParseSize(%q) = %d, %v; want ErrInvalidSize", in, got, err)
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
		kind                  ErrorKind
	}{
		{"path prefix", "a/b", "", ok, nil, ErrInvalidPrefix},
		{"dotted prefix", "model.x", "", ok, nil, ErrInvalidPrefix},
		{"empty prefix", "", "", ok, nil, ErrInvalidPrefix},
		{"dotdot prefix", "..", "", ok, nil, ErrInvalidPrefix},
		{"variant dash", "model", "fp-16", ok, nil, ErrInvalidVariant},
		{"variant dot", "model", "a.b", ok, nil, ErrInvalidVariant},
		{"no tensors", "model", "", nil, nil, ErrInvalidTensor},
		{"duplicate", "model", "", []safetensors.TensorData{td("a", dtype.F32, 2), td("a", dtype.F32, 2)}, nil, ErrDuplicateTensor},
		{"short data", "model", "", []safetensors.TensorData{bad}, nil, ErrInvalidTensor},
		{"negative dim", "model", "", []safetensors.TensorData{{Name: "a", DType: dtype.F32, Shape: []int64{-1}}}, nil, ErrInvalidTensor},
		{"reserved name", "model", "", []safetensors.TensorData{{Name: "__metadata__", DType: dtype.F32, Shape: []int64{0}}}, nil, ErrInvalidTensor},
		{"zero max", "model", "", ok, []WriteOption{WithMaxShardSize(0)}, ErrInvalidSize},
	} {
		dir := t.TempDir()
		_, err := Write(ctx, dir, tc.prefix, tc.variant, tc.ts, nil, tc.opts...)
		if !errors.Is(err, tc.kind) {
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

// visibleGens opens every entry point a reader could find (index and single
// file names for prefix "model") and returns the generation each one loads.
// It fails the test if an entry point loads a mix of generations or an
// index points at missing or foreign shards.
func visibleGens(t *testing.T, dir, when string) []string {
	t.Helper()
	var gens []string
	for _, entry := range []string{"model.safetensors.index.json", "model.safetensors"} {
		p := filepath.Join(dir, entry)
		if _, err := os.Stat(p); err != nil {
			continue
		}
		c, err := Open(p)
		if err != nil {
			t.Fatalf("%s: reader sees a broken %s: %v", when, entry, err)
		}
		g := ""
		for _, n := range c.Names() {
			ng, _, _ := strings.Cut(n, ".")
			if g != "" && ng != g {
				t.Fatalf("%s: %s mixes %s and %s", when, entry, g, ng)
			}
			g = ng
		}
		c.Close()
		gens = append(gens, g)
	}
	if len(gens) == 2 && gens[0] != gens[1] {
		t.Fatalf("%s: index loads %s but the single file %s", when, gens[0], gens[1])
	}
	return gens
}

var errInjected = errors.New("injected failure")

// testOps counts operations, can fail one, and runs a check after each.
type testOps struct {
	osOps
	n, failAt int
	after     func(op string)
}

func (o *testOps) do(op string, f func() error) error {
	o.n++
	if o.n == o.failAt {
		return fmt.Errorf("%s: %w", op, errInjected)
	}
	err := f()
	if o.after != nil {
		o.after(op)
	}
	return err
}
func (o *testOps) rename(a, b string) error {
	return o.do("rename "+filepath.Base(a)+" "+filepath.Base(b), func() error { return o.osOps.rename(a, b) })
}
func (o *testOps) link(a, b string) error {
	return o.do("link "+filepath.Base(a)+" "+filepath.Base(b), func() error { return o.osOps.link(a, b) })
}
func (o *testOps) remove(a string) error {
	return o.do("remove "+filepath.Base(a), func() error { return o.osOps.remove(a) })
}
func (o *testOps) syncDir(d string) error {
	return o.do("sync", func() error { return o.osOps.syncDir(d) })
}

func withOps(o fileOps) WriteOption { return func(c *writeConfig) { c.ops = o } }

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
			sawNone := false
			ops.after = func(op string) {
				gens := visibleGens(t, dir, "after "+op)
				if len(gens) == 0 {
					sawNone = true
				}
			}
			res, err := Write(ctx, dir, "model", "", gen(2, tr.newN), nil, WithMaxShardSize(int64(tr.newMax)), withOps(ops))
			if err != nil {
				t.Fatal(err)
			}
			if gens := visibleGens(t, dir, "at the end"); len(gens) != 1 || gens[0] != "g2" {
				t.Fatalf("after the write readers see %v", gens)
			}
			want := append(slices.Clone(res.Files), "README.md", "model.fp16.safetensors")
			if res.Index != "" {
				want = append(want, res.Index)
			}
			slices.Sort(want)
			if got := testutil.Entries(t, dir); !slices.Equal(got, want) {
				t.Errorf("folder holds %v, want %v", got, want)
			}
			if len(res.Replaced) == 0 || len(res.Warnings) != 0 {
				t.Errorf("replaced %v warnings %v", res.Replaced, res.Warnings)
			}
			t.Logf("%d operations; a reader could briefly find no set: %v", ops.n, sawNone)
		})
	}
}

func TestWriteFailureRestoresPreviousSet(t *testing.T) {
	ctx := context.Background()
	for _, tr := range transitions {
		t.Run(tr.name, func(t *testing.T) {
			// Count the operations of a successful run.
			count := &testOps{}
			{
				dir := t.TempDir()
				Write(ctx, dir, "model", "", gen(1, tr.oldN), nil, WithMaxShardSize(int64(tr.oldMax)))
				if _, err := Write(ctx, dir, "model", "", gen(2, tr.newN), nil, WithMaxShardSize(int64(tr.newMax)), withOps(count)); err != nil {
					t.Fatal(err)
				}
			}
			failed := 0
			for k := 1; k <= count.n; k++ {
				dir := t.TempDir()
				if _, err := Write(ctx, dir, "model", "", gen(1, tr.oldN), nil, WithMaxShardSize(int64(tr.oldMax))); err != nil {
					t.Fatal(err)
				}
				before := snap(t, dir)
				ops := &testOps{failAt: k}
				ops.after = func(op string) {
					visibleGens(t, dir, fmt.Sprintf("failure at op %d, after %s", k, op))
				}
				res, err := Write(ctx, dir, "model", "", gen(2, tr.newN), nil, WithMaxShardSize(int64(tr.newMax)), withOps(ops))
				if err != nil {
					if !errors.Is(err, ErrCommit) || !errors.Is(err, errInjected) {
						t.Fatalf("op %d: %v", k, err)
					}
					failed++
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
				// Failures after the commit point (or of a hard link,
				// which falls back to a rename) do not fail the write.
				if gens := visibleGens(t, dir, "end"); len(gens) != 1 || gens[0] != "g2" {
					t.Fatalf("op %d: succeeded but readers see %v", k, gens)
				}
				for _, w := range res.Warnings {
					if !strings.Contains(w, "injected") {
						t.Errorf("op %d: warning %q", k, w)
					}
				}
			}
			// Every step before the commit point that is not a hard link
			// must have failed the write.
			if failed < count.n/2 {
				t.Errorf("only %d of %d injected failures failed the write", failed, count.n)
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
	if !errors.Is(err, ErrCanceled) || !errors.Is(err, context.Canceled) {
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
