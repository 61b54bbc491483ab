package shard

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/testutil"
	"github.com/ckpt-go/ckpt/safetensors"
)

var sample = ckpttest.MustParseTensors("embed:BF16[8,4] l0.w:F32[4,4] l0.b:F16[4] l1.w:F8_E4M3[4,4] l1.s:F32[] l2.w:F4[4,4] l2.b:I64[3] head:F32[4,8]")

// wantBytes checks a tensor against ckpttest's deterministic contents.
func wantBytes(t *testing.T, tt *safetensors.Tensor) {
	t.Helper()
	want, err := ckpttest.Fill(tt.Name(), tt.DType(), tt.Shape())
	if err != nil {
		t.Fatal(err)
	}
	got, err := tt.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s: contents differ", tt.Name())
	}
}

func TestOpenSharded(t *testing.T) {
	dir := ckpttest.Dir(t, ckpttest.Weights{Shards: 3, Tensors: sample, Metadata: map[string]string{"format": "pt"}})
	c := mustOpen(t, filepath.Join(dir, "model.safetensors.index.json"))
	defer c.Close()
	if c.Len() != len(sample) || len(c.Files()) != 3 {
		t.Fatalf("Len %d Files %v", c.Len(), c.Files())
	}
	if len(c.Warnings()) != 0 {
		t.Errorf("warnings: %v", c.Warnings())
	}
	if c.Metadata()["format"] != "pt" {
		t.Errorf("metadata %v", c.Metadata())
	}
	// Names: shard by shard, data order; ckpttest keeps the given order.
	for i, n := range c.Names() {
		if n != sample[i].Name {
			t.Fatalf("Names() = %v", c.Names())
		}
	}
	n := 0
	for name, tt := range c.Tensors() {
		if name != tt.Name() {
			t.Errorf("name %s vs %s", name, tt.Name())
		}
		wantBytes(t, tt)
		n++
	}
	if n != len(sample) || c.Err() != nil {
		t.Errorf("iterated %d, err %v", n, c.Err())
	}
	if _, err := c.Tensor("nope"); !errors.Is(err, ErrTensorNotFound) || !errors.Is(err, safetensors.ErrTensorNotFound) {
		t.Errorf("missing tensor: %v", err)
	}
	info, file, ok := c.Info("head")
	if !ok || info.DType != dtype.F32 || filepath.Base(file) != "model-00003-of-00003.safetensors" {
		t.Errorf("Info(head) = %+v %s %v", info, file, ok)
	}
}

func TestOpenSingleFile(t *testing.T) {
	p := ckpttest.File(t, sample...)
	c := mustOpen(t, p)
	defer c.Close()
	if c.Index() != nil || c.Len() != len(sample) || len(c.Files()) != 1 {
		t.Fatalf("got %d tensors, files %v", c.Len(), c.Files())
	}
	for tt, err := range c.All() {
		if err != nil {
			t.Fatal(err)
		}
		wantBytes(t, tt)
	}
	if _, err := Open(filepath.Dir(p)); !unsupportedPath.Matches(err) {
		t.Errorf("folder: %v", err)
	}
	if _, err := Open(filepath.Join(filepath.Dir(p), "absent.safetensors")); !errors.Is(err, ErrMissingShard) {
		t.Errorf("absent: %v", err)
	}
}

// mustOpen opens the checkpoint at path, failing the test if it cannot.
func mustOpen(t *testing.T, path string, opts ...Option) *Checkpoint {
	t.Helper()
	c, err := Open(path, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// readEvery reads every tensor of c.
func readEvery(c *Checkpoint) error {
	for _, name := range c.Names() {
		t, err := c.Tensor(name)
		if err != nil {
			return err
		}
		if _, err := t.Bytes(); err != nil {
			return err
		}
	}
	return nil
}

func writeSharded(t *testing.T) (dir, index string) {
	dir = ckpttest.Dir(t, ckpttest.Weights{Shards: 2, Tensors: sample})
	return dir, filepath.Join(dir, "model.safetensors.index.json")
}

func TestOpenMissingShard(t *testing.T) {
	dir, index := writeSharded(t)
	os.Remove(filepath.Join(dir, "model-00002-of-00002.safetensors"))
	_, err := Open(index)
	var e *Error
	if !errors.As(err, &e) || e.Kind != ErrMissingShard || e.Shard != "model-00002-of-00002.safetensors" || e.Path != index {
		t.Fatalf("got %v", err)
	}
}

func TestOpenWrongShard(t *testing.T) {
	_, index := writeSharded(t)
	wm := map[string]string{}
	for i, tt := range sample {
		wm[tt.Name] = fmt.Sprintf("model-%05d-of-00002.safetensors", 1+i*2/len(sample))
	}
	wm["head"] = "model-00001-of-00002.safetensors" // it is in shard 2
	if err := ckpttest.WriteIndex(index, wm, nil); err != nil {
		t.Fatal(err)
	}
	_, err := Open(index)
	var e *Error
	if !errors.As(err, &e) || !tensorMissingFromShard.Matches(err) || e.Tensor != "head" || e.Shard != "model-00001-of-00002.safetensors" {
		t.Fatalf("got %v", err)
	}
	if !strings.Contains(err.Error(), "model-00002-of-00002.safetensors") {
		t.Errorf("message does not say where the tensor is: %v", err)
	}
}

func TestOpenDuplicateAndUnmapped(t *testing.T) {
	dir := t.TempDir()
	a := ckpttest.MustParseTensors("x:F32[2] y:F32[2] stray:F32[1]")
	b := ckpttest.MustParseTensors("z:F32[2] x:F32[2]")
	b[1].Data = make([]byte, 8) // a different x
	if err := ckpttest.WriteFile(filepath.Join(dir, "a.safetensors"), a, map[string]string{"k": "1", "only_a": "a"}); err != nil {
		t.Fatal(err)
	}
	if err := ckpttest.WriteFile(filepath.Join(dir, "b.safetensors"), b, map[string]string{"k": "2"}); err != nil {
		t.Fatal(err)
	}
	index := filepath.Join(dir, "i.safetensors.index.json")
	ckpttest.WriteIndex(index, map[string]string{"x": "a.safetensors", "y": "a.safetensors", "z": "b.safetensors"}, map[string]any{"total_size": 999})
	c := mustOpen(t, index)
	defer c.Close()
	w := strings.Join(c.Warnings(), "\n")
	for _, want := range []string{`tensor "x" is in b.safetensors and a.safetensors; taking it from a.safetensors`,
		"a.safetensors has 1 tensor(s) the index does not map, not loaded: stray",
		`metadata "k" is "1" in a.safetensors but "2" in b.safetensors; keeping "1"`,
		"metadata.total_size is 999 but the mapped tensors hold 24 bytes"} {
		if !strings.Contains(w, want) {
			t.Errorf("warnings lack %q:\n%s", want, w)
		}
	}
	if u := c.Unmapped(); len(u) != 1 || u[0] != "stray" {
		t.Errorf("Unmapped %v", u)
	}
	if c.Has("stray") || c.Len() != 3 {
		t.Errorf("stray is part of the checkpoint")
	}
	x, err := c.Tensor("x")
	if err != nil {
		t.Fatal(err)
	}
	wantBytes(t, x) // from a, not the zeros in b
	if m := c.Metadata(); m["k"] != "1" || m["only_a"] != "a" {
		t.Errorf("metadata %v", m)
	}
}

func TestOpenInvalidShard(t *testing.T) {
	dir, index := writeSharded(t)
	os.WriteFile(filepath.Join(dir, "model-00001-of-00002.safetensors"), []byte("garbage"), 0o644)
	if _, err := Open(index); !errors.Is(err, ErrInvalidShard) {
		t.Fatalf("got %v", err)
	}
}

func TestOpenSymlinks(t *testing.T) {
	outside := t.TempDir()
	dir, index := writeSharded(t)
	s2 := "model-00002-of-00002.safetensors"
	// A symlink leaving the folder.
	os.Rename(filepath.Join(dir, s2), filepath.Join(outside, s2))
	if err := os.Symlink(filepath.Join(outside, s2), filepath.Join(dir, s2)); err != nil {
		t.Skip("symlinks unsupported:", err)
	}
	_, err := Open(index)
	var e *Error
	if !errors.As(err, &e) || e.Kind != ErrInsecurePath || e.Shard != s2 {
		t.Fatalf("escaping symlink: %v", err)
	}
	if !strings.Contains(err.Error(), "WithFollowSymlinks") {
		t.Errorf("the error does not name the opt-in: %v", err)
	}
	// Allowed with the opt-in (the Hugging Face cache case).
	c, err := Open(index, WithFollowSymlinks())
	if err != nil {
		t.Fatal(err)
	}
	if err := readEvery(c); err != nil {
		t.Fatalf("lazy open of a followed link: %v", err)
	}
	c.Close()
	// A relative symlink inside the folder is fine.
	os.Remove(filepath.Join(dir, s2))
	os.Rename(filepath.Join(outside, s2), filepath.Join(dir, "blob"))
	os.Symlink("blob", filepath.Join(dir, s2))
	c, err = Open(index)
	if err != nil {
		t.Fatalf("inside symlink: %v", err)
	}
	c.Close()
	// A dangling one is a missing shard.
	os.Remove(filepath.Join(dir, "blob"))
	if _, err := Open(index); !errors.Is(err, ErrMissingShard) {
		t.Fatalf("dangling: %v", err)
	}
}

func TestConcurrentLazyOpen(t *testing.T) {
	_, index := writeSharded(t)
	c := mustOpen(t, index)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := range sample {
				name := sample[(i+g)%len(sample)].Name
				tt, err := c.Tensor(name)
				if err != nil {
					t.Error(err)
					return
				}
				wantBytes(t, tt)
			}
		}(g)
	}
	wg.Wait()
	opened := 0
	for _, s := range c.shards {
		if s.f != nil {
			opened++
		}
	}
	if opened != 2 {
		t.Errorf("%d shards open, want 2 (each once)", opened)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
	if _, err := c.Tensor("head"); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
	for range c.Tensors() {
		t.Fatal("iterated a closed checkpoint")
	}
	if !errors.Is(c.Err(), ErrClosed) {
		t.Errorf("Err() = %v", c.Err())
	}
}

func TestOpenLazy(t *testing.T) {
	dir, index := writeSharded(t)
	c := mustOpen(t, index)
	defer c.Close()
	for _, s := range c.shards {
		if s.f != nil {
			t.Fatal("shard opened before use")
		}
	}
	// A shard replaced after Open is detected on first use.
	os.WriteFile(filepath.Join(dir, "model-00002-of-00002.safetensors"), mustEncode(t, ckpttest.MustParseTensors("q:F32[1]")), 0o644)
	if _, err := c.Tensor("head"); !errors.Is(err, ErrInvalidShard) {
		t.Errorf("changed shard: %v", err)
	}
	if _, err := c.Tensor("embed"); err != nil {
		t.Errorf("unchanged shard: %v", err)
	}
}

// Each shard's header is parsed once: the lazy open reuses the header that
// Open parsed (safetensors compares the file with it), for an index and for
// a single file.
func TestLazyOpenReusesHeader(t *testing.T) {
	dir, index := writeSharded(t)
	single := filepath.Join(dir, "model-00001-of-00002.safetensors")
	for _, path := range []string{index, single} {
		c := mustOpen(t, path)
		for _, name := range c.Names() {
			if _, err := c.Tensor(name); err != nil {
				t.Fatal(err)
			}
		}
		for _, s := range c.shards {
			if s.f == nil || s.f.Header() != s.header {
				t.Errorf("%s: shard %s parsed its header again", path, s.name)
			}
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func mustEncode(t *testing.T, ts []ckpttest.Tensor) []byte {
	b, err := ckpttest.Encode(ts, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestOpenRealIndexWithSyntheticShards(t *testing.T) {
	src := filepath.Join(realFixtures, "index", "granite-3.1-1b-a400m-instruct.model.safetensors.index.json")
	ix, err := ReadIndex(src)
	if err != nil {
		t.Skip("real fixtures not present:", err)
	}
	dir := t.TempDir()
	testutil.WriteSyntheticShards(t, dir, ix.Names(), ix.WeightMap)
	data, _ := os.ReadFile(src)
	index := filepath.Join(dir, "model.safetensors.index.json")
	os.WriteFile(index, data, 0o644)
	c := mustOpen(t, index)
	defer c.Close()
	if c.Len() != 218 || len(c.Files()) != 2 {
		t.Fatalf("Len %d files %d", c.Len(), len(c.Files()))
	}
	// The synthetic shards are tiny, so total_size disagrees, with a warning.
	if w := c.Warnings(); len(w) != 1 || !strings.Contains(w[0], "5338513408") {
		t.Errorf("warnings %v", w)
	}
}

// Names lists shard by shard, in data order, and tensors at the same offset
// (empty ones next to the tensor that starts there) by name, whatever
// their order in the header or the index.
func TestNamesOrderTies(t *testing.T) {
	dir := t.TempDir()
	shards := map[string][]ckpttest.Tensor{
		"s-1.safetensors": {ckpttest.T("z", dtype.U8, 0), ckpttest.T("y", dtype.U8, 2), ckpttest.T("b", dtype.U8, 0), ckpttest.T("c", dtype.U8, 3), ckpttest.T("a", dtype.U8, 0)},
		"s-2.safetensors": {ckpttest.T("q", dtype.U8, 1), ckpttest.T("p", dtype.U8, 0)},
	}
	wm := map[string]string{}
	for file, ts := range shards {
		if err := ckpttest.WriteFile(filepath.Join(dir, file), ts, nil); err != nil {
			t.Fatal(err)
		}
		for _, tt := range ts {
			wm[tt.Name] = file
		}
	}
	index := filepath.Join(dir, "model.safetensors.index.json")
	if err := ckpttest.WriteIndex(index, wm, nil); err != nil {
		t.Fatal(err)
	}
	c := mustOpen(t, index)
	defer c.Close()
	// Brute force: sort by (shard file, begin, name).
	want := c.Names()
	slices.SortFunc(want, func(a, b string) int {
		ia, fa, _ := c.Info(a)
		ib, fb, _ := c.Info(b)
		return cmp.Or(strings.Compare(fa, fb), cmp.Compare(ia.Begin, ib.Begin), strings.Compare(a, b))
	})
	if got := c.Names(); !slices.Equal(got, want) {
		t.Errorf("Names() = %v, want %v", got, want)
	}
	if got := strings.Join(c.Names(), ","); got != "y,z,b,c,a,q,p" {
		t.Errorf("Names() = %s, want y,z,b,c,a,q,p", got)
	}
}

// At walks the tensors in Names order without lookups by name, and agrees
// with Info: also for tensors at one offset (empty ones, ordered by name)
// and for a single file.
func TestAtAgreesWithInfo(t *testing.T) {
	ts := append(slices.Clone(sample), ckpttest.MustParseTensors("z.empty:F32[0] a.empty:F32[0] m.empty:BF16[0,3]")...)
	for _, shards := range []int{1, 3} {
		dir := ckpttest.Dir(t, ckpttest.Weights{Shards: shards, Tensors: ts})
		path := filepath.Join(dir, "model.safetensors")
		if shards > 1 {
			path = filepath.Join(dir, "model.safetensors.index.json")
		}
		c := mustOpen(t, path)
		files := c.Files()
		for i, name := range c.Names() {
			info, fi := c.At(i)
			want, file, ok := c.Info(name)
			if !ok || info.Name != name || !reflect.DeepEqual(info, want) || files[fi] != file {
				t.Errorf("%d shards: At(%d) = %s in %s, Info(%s) = %s in %s", shards, i, info.Name, files[fi], name, want.Name, file)
			}
		}
		c.Close()
	}
}
