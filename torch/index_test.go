package torch

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/internal/testutil"
	"github.com/ckpt-go/ckpt/shard"
)

// shardSet writes two shards and an index naming them into a new folder
// and returns the index's path.
func shardSet(t *testing.T, index string) string {
	t.Helper()
	dir := t.TempDir()
	a := stateDict(ts{name: "l0.w", storage: "FloatStorage", key: "0", numel: 4, shape: []int64{2, 2}, stride: []int64{2, 1}},
		ts{name: "l0.b", storage: "FloatStorage", key: "1", numel: 2, shape: []int64{2}, stride: []int64{1}})
	b := stateDict(ts{name: "l1.w", storage: "FloatStorage", key: "0", numel: 4, shape: []int64{2, 2}, stride: []int64{1, 2}},
		ts{name: "l1.tied", storage: "FloatStorage", key: "0", numel: 4, shape: []int64{2, 2}, stride: []int64{1, 2}})
	writeFile(t, dir, "pytorch_model-00001-of-00002.bin", torchZip("pytorch_model-00001-of-00002/", a, "little",
		map[string][]byte{"0": f32(1, 2, 3, 4), "1": f32(5, 6)}))
	writeFile(t, dir, "pytorch_model-00002-of-00002.bin", torchZip("archive/", b, "little",
		map[string][]byte{"0": f32(7, 8, 9, 10)}))
	return writeFile(t, dir, "pytorch_model.bin.index.json", []byte(index))
}

const goodIndex = `{"metadata": {"total_size": 40}, "weight_map": {
	"l1.w": "pytorch_model-00002-of-00002.bin", "l1.tied": "pytorch_model-00002-of-00002.bin",
	"l0.w": "pytorch_model-00001-of-00002.bin", "l0.b": "pytorch_model-00001-of-00002.bin"}}`

func TestOpenIndex(t *testing.T) {
	c, err := Open(shardSet(t, goodIndex))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Shards in the order the index first names them, tensors in pickle order.
	if got := c.Names(); !slices.Equal(got, []string{"l1.w", "l0.w", "l0.b"}) {
		t.Errorf("names %v", got)
	}
	if got := c.Aliases(); len(got) != 1 || got["l1.tied"] != "l1.w" {
		t.Errorf("aliases %v", got)
	}
	tn, _ := c.Tensor("l1.w")
	if b, err := tn.Bytes(); err != nil || string(b) != string(f32(7, 9, 8, 10)) {
		t.Errorf("l1.w: %v %v", b, err)
	}
	tn, _ = c.Tensor("l0.b")
	if b, err := tn.Bytes(); err != nil || string(b) != string(f32(5, 6)) {
		t.Errorf("l0.b: %v %v", b, err)
	}
	// Each tensor's file is its shard, an alias's the tensor's it ties to.
	for name, want := range map[string]string{"l0.w": "pytorch_model-00001-of-00002.bin", "l1.w": "pytorch_model-00002-of-00002.bin", "l1.tied": "pytorch_model-00002-of-00002.bin"} {
		if tn, _ := c.Tensor(name); filepath.Base(tn.File()) != want {
			t.Errorf("%s in %s, want %s", name, tn.File(), want)
		}
	}
}

func TestOpenIndexRefusals(t *testing.T) {
	shard1 := "pytorch_model-00001-of-00002.bin"
	shard2 := "pytorch_model-00002-of-00002.bin"
	wm := func(pairs ...string) string {
		var b strings.Builder
		b.WriteString(`{"weight_map": {`)
		for i := 0; i < len(pairs); i += 2 {
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString(`"` + pairs[i] + `": "` + pairs[i+1] + `"`)
		}
		b.WriteString("}}")
		return b.String()
	}
	all := func(over map[string]string) string {
		m := map[string]string{"l1.w": shard2, "l1.tied": shard2, "l0.w": shard1, "l0.b": shard1}
		for k, v := range over {
			if v == "" {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
		var pairs []string
		for k, v := range m {
			pairs = append(pairs, k, v)
		}
		return wm(pairs...)
	}
	for _, c := range []struct {
		name, index string
		kind        failure
	}{
		{"parent", wm("a", "../x.bin"), failure{Kind: ErrInsecurePath, What: ""}},
		{"absolute", wm("a", "/etc/passwd"), failure{Kind: ErrInsecurePath, What: ""}},
		{"subfolder", wm("a", "sub/x.bin"), failure{Kind: ErrInsecurePath, What: ""}},
		{"backslash", wm("a", `sub\\x.bin`), failure{Kind: ErrInsecurePath, What: ""}},
		{"drive", wm("a", "C:x.bin"), failure{Kind: ErrInsecurePath, What: ""}},
		{"dot-dot", wm("a", ".."), failure{Kind: ErrInsecurePath, What: ""}},
		{"empty shard", wm("a", ""), invalidIndex},
		{"control", wm("a", `x\u0001.bin`), invalidIndex},
		{"missing shard", wm("a", "nope.bin"), failure{Kind: ErrMissingShard, What: ""}},
		{"not JSON", `{"weight_map": `, invalidIndex},
		{"array", `[]`, invalidIndex},
		{"no weight map", `{"metadata": {}}`, invalidIndex},
		{"empty weight map", `{"weight_map": {}}`, invalidIndex},
		{"weight map twice", `{"weight_map": {"a": "x.bin"}, "weight_map": {"a": "x.bin"}}`, invalidIndex},
		{"duplicate tensor", wm("l0.w", shard1, "l0.w", shard1), invalidIndex},
		{"shard not a string", `{"weight_map": {"a": 1}}`, invalidIndex},
		{"empty tensor name", wm("", shard1), invalidIndex},
		{"trailing data", goodIndex + `{}`, invalidIndex},
		{"tensor in the other shard", all(map[string]string{"l0.b": shard2}), indexMismatch},
		{"unlisted tensor", all(map[string]string{"l0.b": ""}), indexMismatch},
		{"listed tensor absent", all(map[string]string{"l2.w": shard1}), indexMismatch},
	} {
		_, err := Open(shardSet(t, c.index))
		var e *Error
		if !c.kind.Matches(err) || !errors.As(err, &e) {
			t.Errorf("%s: got %v, want %s", c.name, err, c.kind)
			continue
		}
		if !strings.Contains(err.Error(), "pytorch_model") {
			t.Errorf("%s: message %q names no file", c.name, err)
		}
	}
}

func TestOpenIndexTooLarge(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big.index.json")
	testutil.SparseFile(t, p, MaxIndexSize+1)
	if _, err := Open(p); !invalidIndex.Matches(err) {
		t.Fatalf("got %v", err)
	}
}

func TestOpenIndexSymlinks(t *testing.T) {
	idx := shardSet(t, goodIndex)
	dir := filepath.Dir(idx)
	outside := t.TempDir()
	name := "pytorch_model-00002-of-00002.bin"
	if err := os.Rename(filepath.Join(dir, name), filepath.Join(outside, name)); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, name), filepath.Join(dir, name)); err != nil {
		t.Skip("no symlinks:", err)
	}
	if _, err := Open(idx); !errors.Is(err, ErrInsecurePath) || !errors.Is(err, shard.ErrInsecurePath) {
		t.Errorf("symlink out of the folder: %v (want torch's and shard's ErrInsecurePath)", err)
	}
	c, err := Open(idx, WithSymlinkRoot(filepath.Dir(outside)))
	if err != nil {
		t.Fatalf("with a symlink root: %v", err)
	}
	c.Close()
	// A dangling symlink is a missing shard.
	os.Remove(filepath.Join(outside, name))
	if _, err := Open(idx, WithSymlinkRoot(filepath.Dir(outside))); !errors.Is(err, ErrMissingShard) || !errors.Is(err, shard.ErrMissingShard) {
		t.Errorf("dangling: %v (want torch's and shard's ErrMissingShard)", err)
	}
}

func TestOpenPaths(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(dir); !errors.Is(err, ErrNotRegular) {
		t.Errorf("folder: %v", err)
	}
	_, err := Open(filepath.Join(dir, "nope.pt"))
	if !errors.Is(err, ErrIO) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing: %v", err)
	}
	p := writeFile(t, dir, "m.pt", tinyZip("m/"))
	c, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	if c.Path() != p || c.Len() != 7 {
		t.Errorf("%s %d", c.Path(), c.Len())
	}
	c.Close()
	// Shards hold exactly what the index maps to them, and repeat no name.
	sh := torchZip("a/", newPK().op(opEMPTY_DICT).str("epoch").int(1).op(opSETITEM).bytes(), "little", nil)
	writeFile(t, dir, "s1.bin", tinyZip("s1/"))
	writeFile(t, dir, "s2.bin", sh)
	idx := writeFile(t, dir, "x.index.json", []byte(`{"weight_map": {"model.w": "s1.bin", "model.w_t": "s1.bin",
		"model.row": "s1.bin", "model.tied": "s1.bin", "model.tied2": "s1.bin", "model.e4m3": "s1.bin",
		"model.s": "s1.bin", "model.empty": "s1.bin", "model.p": "s1.bin", "x": "s2.bin"}}`))
	if _, err := Open(idx); !indexMismatch.Matches(err) {
		t.Errorf("x not in s2: %v", err)
	}
	// Now s2 holds x, but also an "epoch" that s1 has too.
	writeFile(t, dir, "s2.bin", torchZip("a/", append(newPK().op(opEMPTY_DICT, opMARK).str("epoch").int(1).str("x").
		tensor(ts{storage: "FloatStorage", key: "0", numel: 1, shape: []int64{}, stride: []int64{}}).b, opSETITEMS, opSTOP),
		"little", map[string][]byte{"0": f32(1)}))
	if _, err := Open(idx); !duplicateName.Matches(err) {
		t.Errorf("epoch in two shards: %v", err)
	}
}
