package integrity_test

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/integrity"
)

// readChars returns the bytes this process has read so far (rchar of
// /proc/self/io: read system calls, pread included).
func readChars(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		t.Skipf("no /proc/self/io: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "rchar: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Skip("no rchar in /proc/self/io")
	return 0
}

// TestHubTorchBlobReadOnce: verifying a hub snapshot of PyTorch weights
// reads each blob once: the pass that hashes it also sums its records,
// which are then checked from those sums (before, every record was read a
// second time).
func TestHubTorchBlobReadOnce(t *testing.T) {
	set := ckpttest.Dir(t, ckpttest.Weights{PyTorch: true, Shards: 2, Tensors: []ckpttest.Tensor{
		ckpttest.T("a.weight", dtype.F32, 1024, 1024),
		ckpttest.T("b.weight", dtype.F32, 1024, 1024),
		ckpttest.T("c.weight", dtype.F32, 512, 1024),
	}})
	snap, blobs := hubSnapshot(t, set)
	var size int64
	for _, p := range blobs {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		size += fi.Size()
	}
	before := readChars(t)
	rep := verify(t, snap, integrity.FollowSymlinks())
	read := readChars(t) - before
	wantOK(t, rep)
	if rep.Blobs != 3 || rep.ArchiveTensors != 3 {
		t.Errorf("report %+v", rep)
	}
	// The blobs once, and the headers, directories and small files
	// (a few hundred KiB at most); twice would be 2× the blobs.
	if read < size || read > size+size/4 {
		t.Errorf("verify read %d bytes; the blobs hold %d (want them read once)", read, size)
	}
	t.Logf("read %d bytes for %d bytes of blobs", read, size)
}
