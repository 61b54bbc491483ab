package ckpt

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/sysmem"
)

// withMemRoots points the default budget at fake /proc and cgroup folders.
func withMemRoots(proc, cgroup string) Option {
	return func(c *config) error { c.memRoots = &[2]string{proc, cgroup}; return nil }
}

func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// With no budget option the budget is what the process can get: a
// container's cgroup limit wins over a large MemAvailable.
func TestDefaultBudgetHonoursCgroupLimit(t *testing.T) {
	path := ckpttest.File(t, ckpttest.T("w", dtype.BF16, 2048, 2048)) // 8 MiB, 16 MiB as F32
	proc, cg := t.TempDir(), t.TempDir()
	writeFiles(t, proc, map[string]string{
		"meminfo":     "MemTotal: 67108864 kB\nMemAvailable: 33554432 kB\n",
		"self/cgroup": "0::/\n",
	})
	writeFiles(t, cg, map[string]string{
		"cgroup.controllers": "cpu memory\n",
		"memory.max":         "20971520\n", // 20 MiB
		"memory.current":     "8388608\n",  // 8 MiB used: 12 MiB left
	})
	m := mustOpen(t, path, WithDType(To(dtype.F32)), withMemRoots(proc, cg))
	p, err := m.Plan()
	if err != nil {
		t.Fatal(err)
	}
	if p.BudgetBytes != 12<<20 || !strings.Contains(p.BudgetSource, "cgroup") {
		t.Errorf("budget %d from %q, want 12 MiB from the cgroup", p.BudgetBytes, p.BudgetSource)
	}
	if _, err := m.Load(context.Background()); !errors.Is(err, ErrBudget) {
		t.Fatalf("Load = %v, want a refusal", err)
	}
	// As stored (8 MiB mapped) it fits.
	m2 := mustOpen(t, path, withMemRoots(proc, cg))
	mustLoad(t, m2)
	// Raising the limit lets the F32 load through.
	writeFiles(t, cg, map[string]string{"memory.max": "max\n"})
	m3 := mustOpen(t, path, WithDType(To(dtype.F32)), withMemRoots(proc, cg))
	mustLoad(t, m3)
	// A negative budget disables the check.
	writeFiles(t, cg, map[string]string{"memory.max": "1\n"})
	m4 := mustOpen(t, path, WithDType(To(dtype.F32)), withMemRoots(proc, cg), WithBudget(-1))
	mustLoad(t, m4)
}

func TestReadStrategyForFilesystems(t *testing.T) {
	for _, c := range []struct {
		fs   sysmem.FS
		err  error
		want readStrategy
	}{
		{sysmem.FS{Type: "ext4"}, nil, readMmap},
		{sysmem.FS{Type: "nfs", Network: true}, nil, readPread},
		{sysmem.FS{Type: "fuse", Network: true}, nil, readPread},
		{sysmem.FS{Type: "lustre", Network: true}, nil, readPread},
		{sysmem.FS{}, errors.New("statfs failed"), readMmap},
	} {
		got, why := strategyFor(c.fs, c.err)
		if got != c.want || why == "" {
			t.Errorf("%+v: %s (%q), want %s", c.fs, got.string(), why, c.want.string())
		}
		if c.fs.Network && !strings.Contains(why, c.fs.Type) {
			t.Errorf("%+v: reason %q does not name the filesystem", c.fs, why)
		}
	}
	// The plan says which strategy was chosen and why.
	path := ckpttest.File(t, ckpttest.T("w", dtype.F32, 4))
	for s, want := range map[readStrategy]string{readAuto: "local", readPread: "asked for", readMmap: "asked for"} {
		m := mustOpen(t, path, WithReadStrategy(s.string()))
		p, _ := m.Plan()
		if !strings.Contains(p.Components[0].ReadStrategyReason, want) {
			t.Errorf("%s: reason %q", s.string(), p.Components[0].ReadStrategyReason)
		}
	}
}
