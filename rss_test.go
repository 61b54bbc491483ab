package ckpt

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"testing"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/sysmem"
	"github.com/ckpt-go/ckpt/internal/testutil"
)

// rssReport is what the child process of TestLoadPeakRSS measures.
type rssReport struct {
	Before, Peak, Output, Touched int64
}

// TestLoadPeakRSS measures the peak resident memory of a load in a child
// process: a zero-copy load costs what the caller touches plus at most the
// staging allowance; a converting load costs its output plus at most the
// staging allowance (the source pages it converted leave the resident set).
func TestLoadPeakRSS(t *testing.T) {
	if path := os.Getenv("CKPT_RSS_CHILD"); path != "" {
		rssChild(t, path, os.Getenv("CKPT_RSS_DTYPE"))
		return
	}
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/self/status")
	}
	if err := testutil.ResetPeakRSS(); err != nil {
		t.Skipf("cannot reset the peak RSS (/proc/self/clear_refs): %v", err)
	}
	var ts []ckpttest.Tensor
	for i := range 16 {
		ts = append(ts, ckpttest.T(fmt.Sprintf("layers.%d.weight", i), dtype.BF16, 2048, 2048)) // 8 MiB each
	}
	ts = append(ts, ckpttest.T("big", dtype.BF16, 8192, 4096)) // 64 MiB in one tensor
	path := ckpttest.File(t, ts...)
	for _, c := range []struct {
		to      string
		extra   int64
		byTouch bool
	}{
		{"BF16", 64 << 20, true},
		{"F32", 64 << 20, false},
	} {
		var r rssReport
		testutil.RunChild(t, "TestLoadPeakRSS", []string{"CKPT_RSS_CHILD=" + path, "CKPT_RSS_DTYPE=" + c.to}, &r)
		growth := r.Peak - r.Before
		limit := r.Output + c.extra
		if c.byTouch {
			limit = r.Touched + c.extra
		}
		t.Logf("%s: peak RSS grew %s (output %s, touched %s; limit %s)", c.to, sysmem.FormatSize(growth), sysmem.FormatSize(r.Output), sysmem.FormatSize(r.Touched), sysmem.FormatSize(limit))
		if growth > limit {
			t.Errorf("%s: peak RSS grew by %s, more than %s", c.to, sysmem.FormatSize(growth), sysmem.FormatSize(limit))
		}
	}
}

func rssChild(t *testing.T, path, to string) {
	d, err := dtype.Parse(to)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Open(path, WithDType(To(d)))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	runtime.GC()
	if err := testutil.ResetPeakRSS(); err != nil {
		t.Fatal(err)
	}
	r := rssReport{Before: testutil.ProcStatus("VmRSS")}
	w, err := m.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var sum byte
	for _, tt := range w.All() {
		b := tt.Bytes()
		for i := 0; i < len(b); i += 4096 {
			sum += b[i]
		}
		r.Touched += int64(len(b))
		if tt.Location.Owned {
			r.Output += int64(len(b))
		}
	}
	r.Peak = testutil.PeakRSS()
	w.Close()
	testutil.PrintReport(r)
	fmt.Printf("sum %d\n", sum)
}
