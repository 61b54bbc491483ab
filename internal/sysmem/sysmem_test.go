package sysmem

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

const (
	kib = int64(1) << 10
	mib = int64(1) << 20
	gib = int64(1) << 30
)

// n writes a byte count as a cgroup file does.
func n(v int64) string { return strconv.FormatInt(v, 10) + "\n" }

// meminfo is a /proc/meminfo with the given MemAvailable in bytes.
func meminfo(avail int64) string {
	return "MemTotal:       65536000 kB\nMemFree:         1000000 kB\nMemAvailable:   " +
		strconv.FormatInt(avail/kib, 10) + " kB\nBuffers:          100000 kB\n"
}

// fakeRoots writes files (paths relative to a temporary folder, the first
// element "proc/" or "cgroup/") and returns the proc and cgroup roots.
func fakeRoots(t testing.TB, files map[string]string) (proc, cgroup string) {
	t.Helper()
	dir := t.TempDir()
	proc, cgroup = filepath.Join(dir, "proc"), filepath.Join(dir, "cgroup")
	for _, d := range []string{proc, cgroup} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return proc, cgroup
}

func TestDetectFrom(t *testing.T) {
	const v1Max = "9223372036854771712\n"
	tests := []struct {
		name      string
		files     map[string]string
		bytes     int64
		memAvail  int64
		cgroup    int64
		source    string   // exact Source when not ""
		sourceHas []string // substrings of Source
	}{
		{
			name:     "meminfo only",
			files:    map[string]string{"proc/meminfo": meminfo(20 * gib)},
			bytes:    20 * gib,
			memAvail: 20 * gib,
			cgroup:   -1,
			source:   "MemAvailable 20.0 GiB",
		},
		{
			name:      "nothing known",
			files:     map[string]string{},
			bytes:     -1,
			memAvail:  -1,
			cgroup:    -1,
			sourceHas: []string{"unknown: no MemAvailable"},
		},
		{
			name: "v2 no limits anywhere",
			files: map[string]string{
				"proc/meminfo":                                     meminfo(20 * gib),
				"proc/self/cgroup":                                 "0::/user.slice/session-1.scope\n",
				"cgroup/cgroup.controllers":                        "cpu memory\n",
				"cgroup/user.slice/memory.max":                     "max\n",
				"cgroup/user.slice/memory.high":                    "max\n",
				"cgroup/user.slice/session-1.scope/memory.max":     "max\n",
				"cgroup/user.slice/session-1.scope/memory.current": n(gib),
			},
			bytes: 20 * gib, memAvail: 20 * gib, cgroup: -1,
			source: "MemAvailable 20.0 GiB",
		},
		{
			name: "v2 nested, innermost tightest, max in between",
			files: map[string]string{
				"proc/meminfo":                meminfo(20 * gib),
				"proc/self/cgroup":            "0::/a/b/c\n",
				"cgroup/a/memory.max":         n(8 * gib),
				"cgroup/a/memory.current":     n(2 * gib),
				"cgroup/a/b/memory.max":       "max\n",
				"cgroup/a/b/memory.current":   n(2 * gib),
				"cgroup/a/b/c/memory.max":     n(4 * gib),
				"cgroup/a/b/c/memory.current": n(gib),
			},
			bytes: 3 * gib, memAvail: 20 * gib, cgroup: 3 * gib,
			source: "cgroup v2 /a/b/c memory.max 4.0 GiB − memory.current 1.0 GiB = 3.0 GiB (MemAvailable 20.0 GiB)",
		},
		{
			name: "v2 nested, parent tightest (siblings use it)",
			files: map[string]string{
				"proc/meminfo":                meminfo(20 * gib),
				"proc/self/cgroup":            "0::/a/b/c\n",
				"cgroup/a/memory.max":         n(8 * gib),
				"cgroup/a/memory.current":     n(7 * gib),
				"cgroup/a/b/memory.max":       "max\n",
				"cgroup/a/b/c/memory.max":     n(4 * gib),
				"cgroup/a/b/c/memory.current": n(gib),
			},
			bytes: gib, memAvail: 20 * gib, cgroup: gib,
			sourceHas: []string{"cgroup v2 /a memory.max 8.0 GiB − memory.current 7.0 GiB = 1.0 GiB"},
		},
		{
			name: "v2 memory.high below memory.max",
			files: map[string]string{
				"proc/meminfo":              meminfo(20 * gib),
				"proc/self/cgroup":          "0::/job\n",
				"cgroup/job/memory.max":     n(8 * gib),
				"cgroup/job/memory.high":    n(6 * gib),
				"cgroup/job/memory.current": n(gib),
			},
			bytes: 5 * gib, memAvail: 20 * gib, cgroup: 5 * gib,
			sourceHas: []string{"memory.high 6.0 GiB"},
		},
		{
			name: "v2 inactive page cache is reclaimable",
			files: map[string]string{
				"proc/meminfo":              meminfo(20 * gib),
				"proc/self/cgroup":          "0::/job\n",
				"cgroup/job/memory.max":     n(8 * gib),
				"cgroup/job/memory.current": n(6 * gib),
				"cgroup/job/memory.stat":    "anon 1073741824\nfile 5368709120\nactive_file 1073741824\ninactive_file 4294967296\n",
			},
			bytes: 6 * gib, memAvail: 20 * gib, cgroup: 6 * gib,
			sourceHas: []string{"− memory.current 6.0 GiB + inactive_file 4.0 GiB = 6.0 GiB"},
		},
		{
			name: "v2 inactive_file larger than usage is ignored",
			files: map[string]string{
				"proc/self/cgroup":          "0::/job\n",
				"cgroup/job/memory.max":     n(8 * gib),
				"cgroup/job/memory.current": n(2 * gib),
				"cgroup/job/memory.stat":    "inactive_file 4294967296\n",
			},
			bytes: 6 * gib, memAvail: -1, cgroup: 6 * gib,
			source: "cgroup v2 /job memory.max 8.0 GiB − memory.current 2.0 GiB = 6.0 GiB",
		},
		{
			name: "v2 over the limit gives 0",
			files: map[string]string{
				"proc/meminfo":              meminfo(20 * gib),
				"proc/self/cgroup":          "0::/job\n",
				"cgroup/job/memory.max":     n(gib),
				"cgroup/job/memory.current": n(gib + mib),
			},
			bytes: 0, memAvail: 20 * gib, cgroup: 0,
		},
		{
			name: "v2 usage unknown counts the whole limit",
			files: map[string]string{
				"proc/meminfo":          meminfo(20 * gib),
				"proc/self/cgroup":      "0::/job\n",
				"cgroup/job/memory.max": n(2 * gib),
			},
			bytes: 2 * gib, memAvail: 20 * gib, cgroup: 2 * gib,
			sourceHas: []string{"(usage unknown)"},
		},
		{
			name: "MemAvailable tighter than the cgroup",
			files: map[string]string{
				"proc/meminfo":              meminfo(3 * gib),
				"proc/self/cgroup":          "0::/job\n",
				"cgroup/job/memory.max":     n(8 * gib),
				"cgroup/job/memory.current": n(gib),
			},
			bytes: 3 * gib, memAvail: 3 * gib, cgroup: 7 * gib,
			source: "MemAvailable 3.0 GiB (cgroup v2 /job memory.max 8.0 GiB − memory.current 1.0 GiB = 7.0 GiB)",
		},
		{
			name: "container 0::/ with its limits at the mount root",
			files: map[string]string{
				"proc/meminfo":          meminfo(60 * gib),
				"proc/self/cgroup":      "0::/\n",
				"cgroup/memory.max":     n(16 * gib),
				"cgroup/memory.current": n(4 * gib),
			},
			bytes: 12 * gib, memAvail: 60 * gib, cgroup: 12 * gib,
			sourceHas: []string{"cgroup v2 / memory.max 16.0 GiB"},
		},
		{
			name: "container without cgroup namespace: host path absent under the mount",
			files: map[string]string{
				"proc/meminfo":          meminfo(60 * gib),
				"proc/self/cgroup":      "0::/kubepods/burstable/pod1/ctr\n",
				"cgroup/memory.max":     n(16 * gib),
				"cgroup/memory.current": n(4 * gib),
			},
			bytes: 12 * gib, memAvail: 60 * gib, cgroup: 12 * gib,
		},
		{
			name: "no self/cgroup: the mount root is read",
			files: map[string]string{
				"proc/meminfo":          meminfo(60 * gib),
				"cgroup/memory.max":     n(16 * gib),
				"cgroup/memory.current": n(4 * gib),
			},
			bytes: 12 * gib, memAvail: 60 * gib, cgroup: 12 * gib,
		},
		{
			name: "no self/cgroup, v2 root with a child cgroup named memory",
			files: map[string]string{
				"proc/meminfo":                 meminfo(60 * gib),
				"cgroup/cgroup.controllers":    "memory\n",
				"cgroup/memory.max":            n(16 * gib),
				"cgroup/memory.current":        n(4 * gib),
				"cgroup/memory/memory.max":     n(gib),
				"cgroup/memory/memory.current": n(0),
			},
			bytes: 12 * gib, memAvail: 60 * gib, cgroup: 12 * gib,
			sourceHas: []string{"cgroup v2 / memory.max"},
		},
		{
			name: "cgroup path cannot climb above the mount",
			files: map[string]string{
				"proc/meminfo":       meminfo(20 * gib),
				"proc/self/cgroup":   "0::/../../outside\n",
				"outside/memory.max": n(gib),
				"cgroup/memory.max":  n(4 * gib),
			},
			bytes: 4 * gib, memAvail: 20 * gib, cgroup: 4 * gib,
		},
		{
			name: "v1 hybrid, nested, unlimited root",
			files: map[string]string{
				"proc/meminfo":                                   meminfo(20 * gib),
				"proc/self/cgroup":                               "9:name=systemd:/\n5:devices:/\n4:memory:/docker/abc\n1:cpu:/\n0::/\n",
				"cgroup/memory/memory.limit_in_bytes":            v1Max,
				"cgroup/memory/memory.usage_in_bytes":            n(10 * gib),
				"cgroup/memory/docker/memory.limit_in_bytes":     n(16 * gib),
				"cgroup/memory/docker/memory.usage_in_bytes":     n(3 * gib),
				"cgroup/memory/docker/abc/memory.limit_in_bytes": n(4 * gib),
				"cgroup/memory/docker/abc/memory.usage_in_bytes": n(2 * gib),
				"cgroup/memory/docker/abc/memory.stat":           "cache 1073741824\ninactive_file 1\ntotal_inactive_file 536870912\n",
				"cgroup/unified/cgroup.controllers":              "\n",
			},
			bytes: 2*gib + 512*mib, memAvail: 20 * gib, cgroup: 2*gib + 512*mib,
			source: "cgroup v1 /docker/abc memory.limit_in_bytes 4.0 GiB − memory.usage_in_bytes 2.0 GiB + inactive_file 512.0 MiB = 2.5 GiB (MemAvailable 20.0 GiB)",
		},
		{
			name: "v1 memory among other controllers",
			files: map[string]string{
				"proc/self/cgroup":                        "3:cpu,memory:/job\n",
				"cgroup/memory/job/memory.limit_in_bytes": n(4 * gib),
				"cgroup/memory/job/memory.usage_in_bytes": n(gib),
			},
			bytes: 3 * gib, memAvail: -1, cgroup: 3 * gib,
		},
		{
			name: "v1 unlimited everywhere",
			files: map[string]string{
				"proc/meminfo":                            meminfo(20 * gib),
				"proc/self/cgroup":                        "4:memory:/job\n",
				"cgroup/memory/memory.limit_in_bytes":     v1Max,
				"cgroup/memory/job/memory.limit_in_bytes": "9223372036854775807\n",
				"cgroup/memory/job/memory.usage_in_bytes": n(gib),
			},
			bytes: 20 * gib, memAvail: 20 * gib, cgroup: -1,
			source: "MemAvailable 20.0 GiB",
		},
		{
			name: "v1 line but no memory folder, no v2 line",
			files: map[string]string{
				"proc/meminfo":      meminfo(20 * gib),
				"proc/self/cgroup":  "4:memory:/job\n",
				"cgroup/memory.max": n(gib),
			},
			bytes: 20 * gib, memAvail: 20 * gib, cgroup: -1,
		},
		{
			name: "self/cgroup names no memory cgroup",
			files: map[string]string{
				"proc/meminfo":      meminfo(20 * gib),
				"proc/self/cgroup":  "garbage\n1:cpu:/x\n",
				"cgroup/memory.max": n(gib),
			},
			bytes: 20 * gib, memAvail: 20 * gib, cgroup: -1,
		},
		{
			name: "garbage values are ignored and named",
			files: map[string]string{
				"proc/meminfo":              "MemAvailable: lots kB\n",
				"proc/self/cgroup":          "0::/a/b\n",
				"cgroup/a/memory.max":       n(8 * gib),
				"cgroup/a/memory.current":   n(gib),
				"cgroup/a/b/memory.max":     "12x\n",
				"cgroup/a/b/memory.high":    "-5\n",
				"cgroup/a/b/memory.current": "\n",
				"cgroup/memory.max":         "99999999999999999999999\n",
			},
			bytes: 7 * gib, memAvail: -1, cgroup: 7 * gib,
			sourceHas: []string{"cgroup v2 /a memory.max 8.0 GiB", "ignored", `memory.max "12x"`, `memory.high "-5"`, `MemAvailable "lots kB"`, `memory.max "99999999999999999999999"`},
		},
		{
			name: "garbage usage and stat",
			files: map[string]string{
				"proc/self/cgroup":        "0::/a\n",
				"cgroup/a/memory.max":     n(8 * gib),
				"cgroup/a/memory.current": "NaN\n",
				"cgroup/a/memory.stat":    "inactive_file x\n",
			},
			bytes: 8 * gib, memAvail: -1, cgroup: 8 * gib,
			sourceHas: []string{"(usage unknown)", `memory.current "NaN"`},
		},
		{
			name: "garbage stat",
			files: map[string]string{
				"proc/self/cgroup":        "0::/a\n",
				"cgroup/a/memory.max":     n(8 * gib),
				"cgroup/a/memory.current": n(2 * gib),
				"cgroup/a/memory.stat":    "inactive_file 1e9\n",
			},
			bytes: 6 * gib, memAvail: -1, cgroup: 6 * gib,
			sourceHas: []string{`inactive_file "1e9"`},
		},
		{
			name:  "meminfo with an odd unit",
			files: map[string]string{"proc/meminfo": "MemAvailable: 5 MB\n"},
			bytes: -1, memAvail: -1, cgroup: -1,
			sourceHas: []string{`MemAvailable "5 MB"`},
		},
		{
			name:  "meminfo overflow",
			files: map[string]string{"proc/meminfo": "MemAvailable: 9223372036854775807 kB\n"},
			bytes: -1, memAvail: -1, cgroup: -1,
		},
		{
			name:  "meminfo without MemAvailable (kernel before 3.14)",
			files: map[string]string{"proc/meminfo": "MemTotal: 100 kB\nMemFree: 50 kB\n"},
			bytes: -1, memAvail: -1, cgroup: -1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			proc, cg := fakeRoots(t, tc.files)
			a, err := DetectFrom(proc, cg)
			if err != nil {
				t.Fatalf("DetectFrom: %v", err)
			}
			if a.Bytes != tc.bytes || a.MemAvailable != tc.memAvail || a.CgroupLimit != tc.cgroup {
				t.Errorf("got Bytes %d MemAvailable %d CgroupLimit %d, want %d %d %d (Source %q)",
					a.Bytes, a.MemAvailable, a.CgroupLimit, tc.bytes, tc.memAvail, tc.cgroup, a.Source)
			}
			if tc.source != "" && a.Source != tc.source {
				t.Errorf("Source %q, want %q", a.Source, tc.source)
			}
			for _, s := range tc.sourceHas {
				if !strings.Contains(a.Source, s) {
					t.Errorf("Source %q lacks %q", a.Source, s)
				}
			}
		})
	}
}

// A file that exists but cannot be read is an *Error naming it, and the
// figure from the other files still comes back.
func TestDetectFromUnreadable(t *testing.T) {
	proc, cg := fakeRoots(t, map[string]string{
		"proc/meminfo":            meminfo(20 * gib),
		"proc/self/cgroup":        "0::/job\n",
		"cgroup/job/memory.max/x": "a folder where a file should be\n",
		"cgroup/memory.max":       n(4 * gib),
		"cgroup/memory.current":   n(gib),
	})
	a, err := DetectFrom(proc, cg)
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("err = %v, want *Error", err)
	}
	if want := filepath.Join(cg, "job", "memory.max"); e.Path != want {
		t.Errorf("Error.Path %q, want %q", e.Path, want)
	}
	if !strings.Contains(err.Error(), e.Path) {
		t.Errorf("message %q does not name the file", err)
	}
	if a.Bytes != 3*gib || a.CgroupLimit != 3*gib || a.MemAvailable != 20*gib {
		t.Errorf("got %+v, want the root's 3 GiB headroom", a)
	}
}

func TestDetectFromPermission(t *testing.T) {
	if runtime.GOOS == "windows" || os.Geteuid() == 0 {
		t.Skip("needs a user that file modes apply to")
	}
	proc, cg := fakeRoots(t, map[string]string{"proc/meminfo": meminfo(gib)})
	p := filepath.Join(proc, "meminfo")
	if err := os.Chmod(p, 0); err != nil {
		t.Fatal(err)
	}
	a, err := DetectFrom(proc, cg)
	if !errors.Is(err, fs.ErrPermission) {
		t.Fatalf("err = %v, want fs.ErrPermission", err)
	}
	if a.Bytes != -1 {
		t.Errorf("Bytes %d, want -1", a.Bytes)
	}
}

// Detect on this machine finds some memory.
func TestDetect(t *testing.T) {
	a, err := Detect()
	if runtime.GOOS != "linux" {
		if err != nil || a.Bytes != -1 || a.MemAvailable != -1 || a.CgroupLimit != -1 || a.Source == "" {
			t.Fatalf("Detect() = %+v, %v; want the unknown fallback", a, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("Detect: %v", err)
	}
	if a.Bytes <= 0 || a.MemAvailable <= 0 {
		t.Fatalf("Detect() = %+v, want Bytes and MemAvailable > 0", a)
	}
	if a.Bytes > a.MemAvailable || (a.CgroupLimit >= 0 && a.Bytes > a.CgroupLimit) {
		t.Errorf("Bytes %d is not the smaller of %d and %d", a.Bytes, a.MemAvailable, a.CgroupLimit)
	}
	t.Logf("%+v", a)
}

func TestFormatSize(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{
		{-1, "unknown"},
		{0, "0 B"},
		{1023, "1023 B"},
		{1024, "1.0 KiB"},
		{1536, "1.5 KiB"},
		{1024*1024 - 1, "1.0 MiB"},
		{21*gib + 3*gib/10 + 1, "21.3 GiB"},
		{8 << 40, "8.0 TiB"},
		{1<<63 - 1, "8.0 EiB"},
	} {
		if got := FormatSize(tc.n); got != tc.want {
			t.Errorf("FormatSize(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}

// FuzzDetectFrom feeds arbitrary file contents: no panic, and Bytes is
// always the smaller of the known figures.
func FuzzDetectFrom(f *testing.F) {
	f.Add("MemAvailable: 100 kB\n", "0::/a\n", "1000\n", "10\n", "inactive_file 5\n")
	f.Add("MemAvailable:\n", "4:memory:/a\n0::/\n", "max\n", "\n", "")
	f.Add("", "0::/../a\n", "-1", "9223372036854775807", "inactive_file 99999999999999999999")
	f.Fuzz(func(t *testing.T, mem, self, max, cur, stat string) {
		proc, cg := fakeRoots(t, map[string]string{
			"proc/meminfo":                          mem,
			"proc/self/cgroup":                      self,
			"cgroup/a/memory.max":                   max,
			"cgroup/a/memory.current":               cur,
			"cgroup/a/memory.stat":                  stat,
			"cgroup/memory/a/memory.limit_in_bytes": max,
			"cgroup/memory/a/memory.usage_in_bytes": cur,
			"cgroup/memory/a/memory.stat":           stat,
		})
		a, err := DetectFrom(proc, cg)
		if err != nil {
			t.Fatal(err)
		}
		if a.Source == "" || a.MemAvailable < -1 || a.CgroupLimit < -1 {
			t.Fatalf("%+v", a)
		}
		want := a.MemAvailable
		if a.CgroupLimit >= 0 && (want < 0 || a.CgroupLimit < want) {
			want = a.CgroupLimit
		}
		if a.Bytes != want {
			t.Fatalf("Bytes %d, want %d: %+v", a.Bytes, want, a)
		}
	})
}

// MemTotal is read from the same meminfo pass as MemAvailable.
func TestMemTotal(t *testing.T) {
	proc, cg := fakeRoots(t, map[string]string{
		"proc/meminfo": "MemTotal:       16000 kB\nMemFree: 1 kB\nMemAvailable:    8000 kB\nbad\nX: y\n",
	})
	a, err := DetectFrom(proc, cg)
	if err != nil || a.MemTotal != 16000*1024 || a.MemAvailable != 8000*1024 || a.Bytes != 8000*1024 {
		t.Fatalf("%+v %v", a, err)
	}
}
