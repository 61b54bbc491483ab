package hostile_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/hostile"
	"github.com/ckpt-go/ckpt/internal/testutil"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/shard"
	"github.com/ckpt-go/ckpt/variant"
)

// kindNamed returns the error kinds of the three packages whose name is
// name (nil where a package has none).
func kindNamed(name string) (st, sh, va error) {
	for _, k := range kindsOf[safetensors.ErrorKind]() {
		if k.String() == name {
			st = k
		}
	}
	for _, k := range kindsOf[shard.ErrorKind]() {
		if k.String() == name {
			sh = k
		}
	}
	for _, k := range kindsOf[variant.ErrorKind]() {
		if k.String() == name {
			va = k
		}
	}
	return st, sh, va
}

// kindsOf returns the kinds of a package's ErrorKind type: 1, 2, ... up to
// the first that has no name (whose String is "unknown" or, in package
// safetensors, "unknown_error_N").
func kindsOf[K interface {
	~int
	error
	String() string
}]() []K {
	var ks []K
	for k := K(1); k.String() != "unknown" && k.String() != fmt.Sprintf("unknown_error_%d", k); k++ {
		ks = append(ks, k)
	}
	return ks
}

// check holds err, returned by an entry point of package pkg ("safetensors",
// "shard" or "variant"), to the verdict want: nil for OK; otherwise a typed
// error that names the culprit and, for a named kind, is that kind of pkg's
// (or, where pkg has no such kind, wraps an error of that kind).
func check(t *testing.T, what, pkg string, err error, want, culprit string) {
	t.Helper()
	if want == hostile.OK {
		if err != nil {
			t.Errorf("%s: refused: %v", what, err)
		}
		return
	}
	if err == nil {
		t.Errorf("%s: accepted, want %s", what, want)
		return
	}
	if !strings.Contains(err.Error(), culprit) {
		t.Errorf("%s: the error does not name %q: %v", what, culprit, err)
	}
	var se *safetensors.Error
	var he *shard.Error
	var ve *variant.Error
	typed := errors.As(err, &se) || errors.As(err, &he) || errors.As(err, &ve)
	if !typed {
		t.Errorf("%s: not a typed error: %T %v", what, err, err)
		return
	}
	if want == hostile.Any {
		return
	}
	want, says := hostile.Kind(want)
	if !strings.Contains(err.Error(), says) {
		t.Errorf("%s: the error does not say %q: %v", what, says, err)
	}
	st, sh, va := kindNamed(want)
	own := map[string]error{"safetensors": st, "shard": sh, "variant": va}[pkg]
	switch {
	case own != nil:
		if !errors.Is(err, own) {
			t.Errorf("%s: got %v, want %s.%s", what, err, pkg, want)
		}
	case st == nil && sh == nil && va == nil:
		t.Fatalf("%s: no package has a kind %q", what, want)
	default:
		if !(st != nil && errors.Is(err, st) || sh != nil && errors.Is(err, sh) || va != nil && errors.Is(err, va)) {
			t.Errorf("%s: got %v, want an error of kind %s", what, err, want)
		}
	}
}

// readAll reads every tensor of c (opening its shards), under the deadline.
func readAll(c *shard.Checkpoint) error {
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

// TestFiles runs safetensors.Open, ReadHeaderFile and OpenFS on every
// hostile case that names a .safetensors file.
func TestFiles(t *testing.T) {
	for _, c := range hostile.Cases(t) {
		if c.File == "" || c.IsIndex() {
			continue
		}
		t.Run(c.Name, func(t *testing.T) {
			path := c.Path()
			for _, ep := range []struct {
				name string
				fn   func() error
			}{
				{"safetensors.Open", func() error {
					f, err := safetensors.Open(path)
					if err == nil {
						for _, tn := range f.Tensors() {
							if _, err := tn.Bytes(); err != nil {
								f.Close()
								return err
							}
						}
						return f.Close()
					}
					return err
				}},
				{"safetensors.Open(WithReadAt)", func() error {
					f, err := safetensors.Open(path, safetensors.WithReadAt())
					if err == nil {
						return f.Close()
					}
					return err
				}},
				{"safetensors.ReadHeaderFile", func() error {
					_, err := safetensors.ReadHeaderFile(path)
					return err
				}},
				{"safetensors.OpenFS(os.DirFS)", func() error {
					f, err := safetensors.OpenFS(os.DirFS(c.Dir), c.File)
					if err == nil {
						return f.Close()
					}
					return err
				}},
			} {
				err := testutil.Within(t, ep.name+" "+path, ep.fn)
				check(t, ep.name, "safetensors", err, c.FileWant, c.Culprit)
			}
		})
	}
}

// TestShard runs shard.ReadIndex and shard.Open (with and without
// WithFollowSymlinks, reading every tensor when it opens) on every hostile
// case that names a file.
func TestShard(t *testing.T) {
	for _, c := range hostile.Cases(t) {
		if c.File == "" {
			continue
		}
		t.Run(c.Name, func(t *testing.T) {
			path := c.Path()
			if c.IsIndex() {
				want := hostile.OK
				if c.Culprit == c.File {
					want = c.ShardWant
				}
				err := testutil.Within(t, "shard.ReadIndex "+path, func() error {
					_, err := shard.ReadIndex(path)
					return err
				})
				check(t, "shard.ReadIndex", "shard", err, want, c.Culprit)
			}
			for _, ep := range []struct {
				name string
				want string
				opts []shard.Option
			}{
				{"shard.Open", c.ShardWant, nil},
				{"shard.Open(WithFollowSymlinks)", c.ShardFollow, []shard.Option{shard.WithFollowSymlinks()}},
			} {
				err := testutil.Within(t, ep.name+" "+path, func() error {
					ck, err := shard.Open(path, ep.opts...)
					if err != nil {
						return err
					}
					defer ck.Close()
					return readAll(ck)
				})
				check(t, ep.name, "shard", err, ep.want, c.Culprit)
			}
		})
	}
}

// TestFolders runs package variant's resolvers on every hostile folder,
// with and without the opt-in to follow symbolic links, and opens and reads
// what they plan.
func TestFolders(t *testing.T) {
	for _, c := range hostile.Cases(t) {
		t.Run(c.Name, func(t *testing.T) {
			for _, follow := range []bool{false, true} {
				want := c.Folder
				var opts []variant.Option
				name := ""
				if follow {
					want = c.FolderFollow
					opts = []variant.Option{variant.WithShardOptions(shard.WithFollowSymlinks())}
					name = " (following symlinks)"
				}
				resolvers := []struct {
					name string
					fn   func() (*variant.PipelinePlan, error)
				}{
					{"variant.Resolve", func() (*variant.PipelinePlan, error) { return variant.Resolve(c.Dir, "", opts...) }},
				}
				if c.Pipeline {
					resolvers = append(resolvers, struct {
						name string
						fn   func() (*variant.PipelinePlan, error)
					}{"variant.ResolvePipeline", func() (*variant.PipelinePlan, error) { return variant.ResolvePipeline(c.Dir, "", opts...) }})
				} else {
					resolvers = append(resolvers, struct {
						name string
						fn   func() (*variant.PipelinePlan, error)
					}{"variant.ResolveComponent", func() (*variant.PipelinePlan, error) {
						p, err := variant.ResolveComponent(c.Dir, "", opts...)
						return &variant.PipelinePlan{Components: []*variant.Plan{p}}, err
					}})
				}
				for _, r := range resolvers {
					err := testutil.Within(t, r.name+name+" "+c.Dir, func() error {
						pp, err := r.fn()
						if err != nil {
							return err
						}
						if pp.Failed() {
							return fmt.Errorf("the plan failed without an error: %+v", pp)
						}
						for _, p := range pp.Components {
							ck, err := p.Open()
							if err != nil {
								return err
							}
							err = readAll(ck)
							ck.Close()
							if err != nil {
								return err
							}
						}
						return nil
					})
					check(t, r.name+name, "variant", err, want, c.Culprit)
				}
			}
		})
	}
}

// TestLeftovers runs shard.Leftovers, which reads the indexes and probes
// the lock files of a folder, on every hostile folder and file: it must
// answer (its verdict on leftovers is not the point here).
func TestLeftovers(t *testing.T) {
	for _, c := range hostile.Cases(t) {
		t.Run(c.Name, func(t *testing.T) {
			paths := []string{c.Dir}
			if c.File != "" {
				paths = append(paths, c.Path())
			}
			for _, p := range paths {
				testutil.Within(t, "shard.Leftovers "+p, func() error {
					_, err := shard.Leftovers(p)
					return err
				})
			}
		})
	}
}

// TestLoader runs the loader (ckpt.Open, Plan and a full Load) on every
// hostile folder and named file, with and without WithFollowSymlinks: it
// must give the verdicts of package variant (folders) and shard (files),
// never hang, and wrap the lower packages' typed errors.
func TestLoader(t *testing.T) {
	for _, c := range hostile.Cases(t) {
		t.Run(c.Name, func(t *testing.T) {
			type target struct {
				what, path, want, pkg string
				opts                  []ckpt.Option
			}
			targets := []target{
				{"ckpt.Open(dir)", c.Dir, c.Folder, "variant", nil},
				{"ckpt.Open(dir, WithFollowSymlinks)", c.Dir, c.FolderFollow, "variant", []ckpt.Option{ckpt.WithFollowSymlinks()}},
			}
			if c.File != "" {
				targets = append(targets,
					target{"ckpt.Open(file)", c.Path(), c.ShardWant, "shard", nil},
					target{"ckpt.Open(file, WithFollowSymlinks)", c.Path(), c.ShardFollow, "shard", []ckpt.Option{ckpt.WithFollowSymlinks()}})
			}
			for _, tg := range targets {
				err := testutil.Within(t, tg.what+" "+tg.path, func() error {
					m, err := ckpt.Open(tg.path, append(tg.opts, ckpt.WithBudget(-1), ckpt.WithDType(ckpt.To(dtype.F32)))...)
					if err != nil {
						return err
					}
					defer m.Close()
					if _, err := m.Plan(); err != nil {
						return err
					}
					w, err := m.Load(context.Background())
					if err != nil {
						return err
					}
					return w.Close()
				})
				check(t, tg.what, tg.pkg, err, tg.want, c.Culprit)
			}
		})
	}
}

// TestDevZeroIsNotRead: /dev/zero as an index (named directly, or through
// a folder with the opt-in) is refused before a byte is read; it used to be
// read up to the 64 MiB limit.
func TestDevZeroIsNotRead(t *testing.T) {
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skip("no /dev/zero")
	}
	dir := t.TempDir()
	link := filepath.Join(dir, "model.safetensors.index.json")
	if err := os.Symlink("/dev/zero", link); err != nil {
		t.Skip(err)
	}
	for _, ep := range []struct {
		name string
		fn   func() error
	}{
		{"shard.ReadIndex", func() error { _, err := shard.ReadIndex(link); return err }},
		{"shard.Open", func() error { _, err := shard.Open(link); return err }},
		{"variant.ResolveComponent", func() error {
			_, err := variant.ResolveComponent(dir, "", variant.WithShardOptions(shard.WithFollowSymlinks()))
			return err
		}},
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		err := testutil.Within(t, ep.name, ep.fn)
		runtime.ReadMemStats(&after)
		if err == nil {
			t.Fatalf("%s: /dev/zero accepted as an index", ep.name)
		}
		if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
			t.Errorf("%s: allocated %d bytes refusing /dev/zero: it read it", ep.name, n)
		}
	}
}
