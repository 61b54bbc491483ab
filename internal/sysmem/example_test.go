package sysmem_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/ckpt-go/ckpt/internal/sysmem"
)

// A container limited to 8 GiB by cgroup v2, on a host with 60 GiB
// available: the budget is the container's headroom.
func ExampleDetectFrom() {
	dir, err := os.MkdirTemp("", "sysmem-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	files := map[string]string{
		"proc/meminfo":          "MemAvailable:   62914560 kB\n",
		"proc/self/cgroup":      "0::/\n",
		"cgroup/memory.max":     "8589934592\n",
		"cgroup/memory.current": "1288490189\n",
	}
	for name, content := range files {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(content), 0o644)
	}

	a, err := sysmem.DetectFrom(filepath.Join(dir, "proc"), filepath.Join(dir, "cgroup"))
	if err != nil {
		panic(err)
	}
	fmt.Println(sysmem.FormatSize(a.Bytes))
	fmt.Println(a.Source)
	// Output:
	// 6.8 GiB
	// cgroup v2 / memory.max 8.0 GiB − memory.current 1.2 GiB = 6.8 GiB (MemAvailable 60.0 GiB)
}

// The loader picks its read strategy from the file system holding a
// checkpoint, and says why.
func ExampleFileSystem() {
	fsys, err := sysmem.FileSystem(os.TempDir())
	if err != nil {
		panic(err)
	}
	strategy, why := "mmap", "local file system "+fsys.Type
	if fsys.Network {
		strategy, why = "pread", "mmap page faults are slow on "+fsys.Type
	}
	fmt.Printf("read strategy %s: %s\n", strategy, why)
}
