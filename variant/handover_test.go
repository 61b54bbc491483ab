package variant

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/shard"
)

var handoverTensors = []ckpttest.Tensor{
	ckpttest.T("a.weight", dtype.F32, 4, 4), ckpttest.T("a.bias", dtype.F32, 4),
	ckpttest.T("b.weight", dtype.F32, 4, 4), ckpttest.T("b.bias", dtype.F32, 4),
}

// resolveKept resolves dir and returns the plan with the checkpoint its
// resolution kept.
func resolveKept(t *testing.T, dir string, opts ...Option) (*Plan, *shard.Checkpoint) {
	t.Helper()
	p, err := ResolveComponent(dir, "", opts...)
	if err != nil {
		t.Fatal(err)
	}
	if p.kept == nil || p.kept.ck == nil {
		t.Fatalf("resolution of %+v kept no checkpoint", p)
	}
	return p, p.kept.ck
}

// readAll reads every tensor of c.
func readAll(t *testing.T, c *shard.Checkpoint) {
	t.Helper()
	n := 0
	for _, err := range c.All() {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != len(handoverTensors) {
		t.Fatalf("%d tensors", n)
	}
}

// Plan.Open hands over the checkpoint resolution opened, once: a second
// Open opens the files anew.
func TestPlanOpenHandsOver(t *testing.T) {
	for name, w := range map[string]ckpttest.Weights{
		"sharded": {Shards: 2, Tensors: handoverTensors},
		"single":  {Tensors: handoverTensors},
	} {
		t.Run(name, func(t *testing.T) {
			dir := ckpttest.Dir(t, w)
			p, kept := resolveKept(t, dir)
			c, err := p.Open()
			if err != nil {
				t.Fatal(err)
			}
			if c != kept {
				t.Error("Open opened the files again")
			}
			readAll(t, c)
			c.Close()
			c2, err := p.Open()
			if err != nil {
				t.Fatal(err)
			}
			if c2 == kept {
				t.Error("the checkpoint was handed over twice")
			}
			readAll(t, c2)
			c2.Close()
		})
	}
}

// With options, or with a file changed since resolution, Open opens the
// files anew, with the errors that gives.
func TestPlanOpenOpensAnew(t *testing.T) {
	index := "model.safetensors.index.json"
	shard1 := "model-00001-of-00002.safetensors"
	sharded := func(t *testing.T) string {
		return ckpttest.Dir(t, ckpttest.Weights{Shards: 2, Tensors: handoverTensors})
	}
	// touch sets a file's modification time a second later.
	touch := func(t *testing.T, path string) {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		later := st.ModTime().Add(time.Second)
		if err := os.Chtimes(path, later, later); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, dir string)
		opts   []shard.Option
		want   error // nil: opens
	}{
		{name: "options", opts: []shard.Option{shard.WithOpenOptions(safetensors.WithReadAt())}},
		{name: "index touched", change: func(t *testing.T, dir string) { touch(t, filepath.Join(dir, index)) }},
		{name: "shard touched", change: func(t *testing.T, dir string) { touch(t, filepath.Join(dir, shard1)) }},
		{name: "index rewritten, same time", change: func(t *testing.T, dir string) {
			// Same size and modification time, other content: the
			// SHA-256 tells.
			path := filepath.Join(dir, index)
			st, _ := os.Stat(path)
			data, _ := os.ReadFile(path)
			i := len(data) - 2
			for data[i] != ' ' && data[i] != '\n' {
				i--
			}
			data[i] = '\t'
			os.WriteFile(path, data, 0o644)
			os.Chtimes(path, st.ModTime(), st.ModTime())
		}},
		{name: "shard replaced", change: func(t *testing.T, dir string) {
			// A copy renamed over it: another file (the copy is made
			// while the shard exists, so it cannot reuse its inode).
			path := filepath.Join(dir, shard1)
			st, _ := os.Stat(path)
			data, _ := os.ReadFile(path)
			os.WriteFile(path+".tmp", data, 0o644)
			os.Chtimes(path+".tmp", st.ModTime(), st.ModTime())
			if err := os.Rename(path+".tmp", path); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "shard missing", want: shard.ErrMissingShard, change: func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, shard1))
		}},
		{name: "shard now a symlink out", want: shard.ErrInsecurePath, change: func(t *testing.T, dir string) {
			path := filepath.Join(dir, shard1)
			outside := filepath.Join(t.TempDir(), shard1)
			os.Rename(path, outside)
			if err := os.Symlink(outside, path); err != nil {
				t.Skip(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := sharded(t)
			p, kept := resolveKept(t, dir)
			if tc.change != nil {
				tc.change(t, dir)
			}
			c, err := p.Open(tc.opts...)
			if tc.want != nil {
				if !errors.Is(err, tc.want) {
					t.Fatalf("got %v, want %v", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if c == kept {
				t.Fatal("the checkpoint of resolution was handed over")
			}
			readAll(t, c)
		})
	}
}

// A plan that keeps the files of a folder following symlinks out of it
// hands its checkpoint over only with the same option.
func TestPlanOpenHandsOverFollowing(t *testing.T) {
	dir := ckpttest.Dir(t, ckpttest.Weights{Shards: 2, Tensors: handoverTensors})
	shard1 := filepath.Join(dir, "model-00001-of-00002.safetensors")
	outside := filepath.Join(t.TempDir(), "blob")
	os.Rename(shard1, outside)
	if err := os.Symlink(outside, shard1); err != nil {
		t.Skip(err)
	}
	p, kept := resolveKept(t, dir, WithShardOptions(shard.WithFollowSymlinks()))
	c, err := p.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c != kept {
		t.Error("Open opened the files again")
	}
	readAll(t, c)
}

// Candidates the plan does not use keep nothing: the plan holds only the
// checkpoint of its own files.
func TestPlanKeepsOnlyItsCandidate(t *testing.T) {
	dir := ckpttest.Dir(t, ckpttest.Weights{Tensors: handoverTensors}, ckpttest.Weights{Shards: 2, Tensors: handoverTensors})
	p, kept := resolveKept(t, dir)
	if p.Layout != LayoutSingle || len(kept.Files()) != 1 || filepath.Base(kept.Files()[0]) != "model.safetensors" {
		t.Fatalf("plan %+v keeps %v", p, kept.Files())
	}
	// A failed resolution keeps nothing.
	os.Remove(filepath.Join(dir, "model.safetensors"))
	os.Remove(filepath.Join(dir, "model-00002-of-00002.safetensors"))
	p, err := ResolveComponent(dir, "")
	if err == nil || p.kept != nil {
		t.Fatalf("got %v, kept %v", err, p.kept)
	}
}
