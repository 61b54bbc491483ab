package ckpt

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
)

// rssReport is what the child process of TestLoadPeakRSS measures.
type rssReport struct {
	Before, Peak, Output, Touched int64
}

// procStatus reads a "VmXXX:  N kB" line of /proc/self/status.
func procStatus(key string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, key+":"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n << 10
			}
		}
	}
	return -1
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
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
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
		cmd := exec.Command(os.Args[0], "-test.run=^TestLoadPeakRSS$", "-test.v")
		cmd.Env = append(os.Environ(), "CKPT_RSS_CHILD="+path, "CKPT_RSS_DTYPE="+c.to)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		var r rssReport
		i := strings.Index(string(out), "RSS ")
		if i < 0 {
			t.Fatalf("no report:\n%s", out)
		}
		if err := json.Unmarshal([]byte(strings.SplitN(string(out[i+4:]), "\n", 2)[0]), &r); err != nil {
			t.Fatal(err)
		}
		growth := r.Peak - r.Before
		limit := r.Output + c.extra
		if c.byTouch {
			limit = r.Touched + c.extra
		}
		t.Logf("%s: peak RSS grew %s (output %s, touched %s; limit %s)", c.to, FormatSize(growth), FormatSize(r.Output), FormatSize(r.Touched), FormatSize(limit))
		if growth > limit {
			t.Errorf("%s: peak RSS grew by %s, more than %s", c.to, FormatSize(growth), FormatSize(limit))
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
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Fatal(err)
	}
	r := rssReport{Before: procStatus("VmRSS")}
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
	r.Peak = max(procStatus("VmHWM"), procStatus("VmRSS"))
	w.Close()
	j, _ := json.Marshal(r)
	fmt.Printf("RSS %s\nsum %d\n", j, sum)
	_ = sum
}
