package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/torch"
)

const (
	tIndex  = "pytorch_model.bin.index.json"
	tShard1 = "pytorch_model-00001-of-00002.bin"
	tShard2 = "pytorch_model-00002-of-00002.bin"
)

// torchSet writes the tensors of verifySet as a two-shard set of PyTorch
// weights and returns its folder.
func torchSet(t *testing.T) string {
	t.Helper()
	return ckpttest.Dir(t, ckpttest.Weights{PyTorch: true, Shards: 2, Tensors: ckpttest.Tensors(t, "a:F32[4] b:F32[4] c:BF16[2,2]")})
}

// recordOf returns the file offsets of the storage record of a
// contiguous tensor that starts its storage.
func recordOf(t *testing.T, path, name string) (int64, int64) {
	t.Helper()
	c, err := torch.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tn, err := c.Tensor(name)
	if err != nil {
		t.Fatal(err)
	}
	return tn.Offset(), tn.Offset() + tn.ByteLen()
}

// TestVerifyTorchCommand: verify reads PyTorch files (exit 0, their
// tensors verified by the archive's CRC-32), names a damaged record's
// tensor and a truncated file (exit 1), the same in JSON; checksum skips
// them, rewriting nothing.
func TestVerifyTorchCommand(t *testing.T) {
	dir := torchSet(t)
	stdout, stderr, code := cliRun(t, "verify", dir)
	want := "ok  " + dir + ": 3 files, 3 tensors, 0 B verified by checksum (0 tensors), 0 tensors without checksums, 3 PyTorch tensors verified by the archive's CRC-32 ("
	if code != 0 || !strings.HasPrefix(stdout, want) {
		t.Fatalf("verify: exit %d\n%s%s\nwant %s", code, stdout, stderr, want)
	}
	for _, loc := range []string{filepath.Join(dir, tIndex), filepath.Join(dir, tShard2)} {
		if _, stderr, code := cliRun(t, "verify", loc); code != 0 {
			t.Errorf("verify %s: exit %d: %s", loc, code, stderr)
		}
	}
	if _, stderr, code := cliRun(t, "verify", "--require-checksums", dir); code != 1 || !strings.Contains(stderr, "2 problems") {
		t.Errorf("--require-checksums: exit %d: %s", code, stderr)
	}

	before, _ := os.ReadFile(filepath.Join(dir, tShard1))
	stdout, stderr, code = cliRun(t, "checksum", dir)
	if code != 0 || !strings.Contains(stdout, "skipped   "+tShard1+" (a PyTorch checkpoint: safetensors checksums cannot be written into it") ||
		!strings.HasSuffix(stdout, "ok  "+dir+": 0 files written with checksums, 0 verified, 2 PyTorch files skipped\n") {
		t.Errorf("checksum: exit %d\n%s%s", code, stdout, stderr)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, tShard1)); string(after) != string(before) {
		t.Error("checksum rewrote a PyTorch file")
	}

	// A flipped bit in b's record; the first shard cut short.
	p2 := filepath.Join(dir, tShard2)
	b, e := recordOf(t, p2, "b")
	flipByte(t, p2, b+2)
	p1 := filepath.Join(dir, tShard1)
	raw, _ := os.ReadFile(p1)
	if err := os.WriteFile(p1, raw[:len(raw)-40], 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code = cliRun(t, "verify", dir)
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if code != 1 || len(lines) != 2 ||
		!strings.HasPrefix(lines[0], tShard1+": invalid archive: not a readable zip archive") ||
		!strings.HasPrefix(lines[1], tShard2+`: tensor "b": record `) || !strings.Contains(lines[1], "bytes "+itoa64(b)+" to "+itoa64(e)+" (its storage): CRC-32 mismatch") ||
		!strings.Contains(stderr, "2 problems;") {
		t.Fatalf("damaged: exit %d\n%s%s", code, stdout, stderr)
	}

	stdout, _, code = cliRun(t, "verify", "--json", dir)
	var out struct {
		OK       bool `json:"ok"`
		Problems []struct {
			Kind, File, Tensor string
			Range              *struct{ Begin, End int64 }
		} `json:"problems"`
		Files []struct{ Name, Kind string } `json:"files"`
		Arch  int                           `json:"archive_verified_tensors"`
	}
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	if code != 1 || out.OK || len(out.Problems) != 2 || out.Problems[0].Kind != "invalid_archive" || out.Problems[0].File != tShard1 ||
		out.Problems[1].Kind != "checksum_mismatch" || out.Problems[1].Tensor != "b" || out.Problems[1].Range == nil || out.Problems[1].Range.Begin != b ||
		out.Arch != 1 || len(out.Files) != 3 || out.Files[1].Kind != "pytorch" {
		t.Errorf("--json: exit %d: %+v\n%s", code, out, stdout)
	}

	// checksum refuses a damaged set, writing nothing.
	if stdout, _, code := cliRun(t, "checksum", dir); code != 1 || strings.Contains(stdout, "skipped") || !strings.Contains(stdout, "CRC-32 mismatch") {
		t.Errorf("checksum of a damaged set: exit %d\n%s", code, stdout)
	}
}

func itoa64(n int64) string { return strconv.FormatInt(n, 10) }

// TestInspectTorch: inspect lists a PyTorch file's tensors with their
// storages and views, an index's and a folder's with their files, and
// refuses a damaged one with torch's message.
func TestInspectTorch(t *testing.T) {
	views := []ckpttest.TorchTensor{
		{Name: "w", Storage: "0", Shape: []int64{2, 3}, Stride: []int64{3, 1}},
		{Name: "wt", Storage: "0", Shape: []int64{3, 2}, Stride: []int64{1, 3}},
		{Name: "row", Storage: "0", Offset: 3, Shape: []int64{3}, Stride: []int64{1}},
		{Name: "tied", Storage: "0", Shape: []int64{2, 3}, Stride: []int64{3, 1}},
	}
	ts, st, err := ckpttest.TorchOf(ckpttest.Tensors(t, "w:F32[2,3]"))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range views[1:] {
		v.Storage = ts[0].Storage
		ts = append(ts, v)
	}
	p := filepath.Join(t.TempDir(), "model.pt")
	if err := ckpttest.WriteTorch(p, ts, st); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := cliRun(t, "inspect", p)
	want := p + ` (PyTorch file, 1 file(s): model.pt)
TENSOR  DTYPE  SHAPE   BYTES  STORAGE  VIEW
w       F32    [2, 3]  24     data/0   contiguous
wt      F32    [3, 2]  24     data/0   strides [1, 3]
row     F32    [3]     12     data/0   contiguous from element 3
tied (the same view under another name):
  tied = w
totals: 3 tensors, 60 B
  F32             3 tensors           15 elements       60 B
`
	if code != 0 || stdout != want {
		t.Fatalf("inspect: exit %d\n%s%s\nwant\n%s", code, stdout, stderr, want)
	}
	stdout, _, code = cliRun(t, "inspect", "--json", p)
	var rep torchInspectReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil || code != 0 {
		t.Fatalf("--json: exit %d %v\n%s", code, err, stdout)
	}
	if rep.Format != "pytorch" || rep.Kind != "file" || rep.Count != 3 || rep.Tensors[1].Contiguous || rep.Tensors[1].Strides[0] != 1 ||
		rep.Tensors[2].StorageOffset != 3 || rep.Aliases["tied"] != "w" || rep.Tensors[0].File != "model.pt" {
		t.Errorf("--json: %+v", rep)
	}

	dir := torchSet(t)
	for _, loc := range []string{dir, filepath.Join(dir, tIndex)} {
		stdout, stderr, code = cliRun(t, "inspect", loc)
		if code != 0 || !strings.Contains(stdout, "2 file(s): "+tShard1+", "+tShard2) || !strings.Contains(stdout, "c       BF16   [2, 2]  8      data/1   contiguous  "+tShard2) {
			t.Errorf("inspect %s: exit %d\n%s%s", loc, code, stdout, stderr)
		}
	}

	raw, _ := os.ReadFile(p)
	os.WriteFile(p, raw[:len(raw)/2], 0o644)
	if _, stderr, code := cliRun(t, "inspect", p); code != 1 || !strings.Contains(stderr, "invalid archive") {
		t.Errorf("truncated: exit %d: %s", code, stderr)
	}
}

// TestPlanAndGetTorchVerify: plan says the PyTorch tensors are verified
// against their records' CRC-32; get of a tensor whose record has a
// flipped bit fails (exit 1) naming the tensor and the record, in an index
// set as in a shard file; --verify never writes the flipped bytes.
func TestPlanAndGetTorchVerify(t *testing.T) {
	dir := torchSet(t)
	stdout, stderr, code := cliRun(t, "plan", dir)
	if code != 0 || !strings.Contains(stdout, "verify (present): 3 tensors (40 B) by checksum\n") {
		t.Errorf("plan: exit %d\n%s%s", code, stdout, stderr)
	}
	p2 := filepath.Join(dir, tShard2)
	b, _ := recordOf(t, p2, "b")
	flipByte(t, p2, b+2)
	for _, loc := range []string{dir, filepath.Join(dir, tIndex), p2} {
		if _, stderr, code := cliRun(t, "get", loc, "b", "--dtype", "BF16"); code != 1 || !strings.Contains(stderr, `tensor "b": checksum mismatch in its storage record`) {
			t.Errorf("get %s b: exit %d, %s", loc, code, stderr)
		}
		if stdout, _, code := cliRun(t, "get", loc, "b", "--verify", "never"); code != 0 || len(stdout) != 16 {
			t.Errorf("get %s b --verify never: exit %d, %d bytes", loc, code, len(stdout))
		}
	}
	if stdout, stderr, code := cliRun(t, "get", dir, "a", "--verify", "always"); code != 0 || len(stdout) != 16 {
		t.Errorf("get a --verify always: exit %d, %s", code, stderr)
	}
}
