package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/safetensors"
)

const (
	vIndex  = "model.safetensors.index.json"
	vShard1 = "model-00001-of-00002.safetensors"
	vShard2 = "model-00002-of-00002.safetensors"
)

// verifySet writes a two-shard set without checksums (a: 16 bytes in the
// first shard; b: 16, c: 8 in the second) and returns its folder.
func verifySet(t *testing.T) string {
	t.Helper()
	return ckpttest.Dir(t, ckpttest.Weights{Shards: 2, Tensors: ckpttest.Tensors(t, "a:F32[4] b:F32[4] c:BF16[2,2]")})
}

// flipByte flips bit 0 of the byte at off of the file.
func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[off] ^= 1
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestVerifyCommand: exit 0 and a summary when all is well, 1 and one line
// per problem otherwise, the same in JSON; checksum adds what verify
// verifies.
func TestVerifyCommand(t *testing.T) {
	dir := verifySet(t)
	stdout, stderr, code := cliRun(t, "verify", dir)
	if want := "ok  " + dir + ": 3 files, 3 tensors, 0 B verified by checksum (0 tensors), 3 tensors without checksums\n"; code != 0 || stdout != want {
		t.Fatalf("verify: exit %d\n%s%s\nwant %s", code, stdout, stderr, want)
	}
	if _, stderr, code := cliRun(t, "verify", "--require-checksums", dir); code != 1 || !strings.Contains(stderr, "2 problems") {
		t.Errorf("--require-checksums: exit %d: %s", code, stderr)
	}

	stdout, stderr, code = cliRun(t, "checksum", dir)
	want := "wrote     " + vShard1 + " (checksums added)\nwrote     " + vShard2 + " (checksums added)\nok  " + dir + ": 2 files written with checksums, 0 verified\n"
	if code != 0 || stdout != want {
		t.Fatalf("checksum: exit %d\n%s%s\nwant %s", code, stdout, stderr, want)
	}
	stdout, _, code = cliRun(t, "verify", "--require-checksums", dir)
	if want := "ok  " + dir + ": 3 files, 3 tensors, 40 B verified by checksum (3 tensors), 0 tensors without checksums\n"; code != 0 || stdout != want {
		t.Fatalf("verify after checksum: exit %d\n%s\nwant %s", code, stdout, want)
	}

	// One line per problem: a flipped bit in a tensor, a missing shard.
	path := filepath.Join(dir, vShard2)
	h, err := safetensors.ReadHeaderFile(path)
	if err != nil {
		t.Fatal(err)
	}
	info, _ := h.Lookup("b")
	b, e := h.DataOffset+info.Begin, h.DataOffset+info.End
	sums, _ := h.Checksums()
	flipByte(t, path, b+5)
	raw, _ := os.ReadFile(path)
	mismatch := fmt.Sprintf(`%s: tensor "b": checksum mismatch in bytes %d to %d: the header says crc32c %s, the data have %s`,
		vShard2, b, e, safetensors.FormatChecksum(sums["b"]), safetensors.FormatChecksum(safetensors.Checksum(raw[b:e])))
	stdout, stderr, code = cliRun(t, "verify", dir)
	if code != 1 || stdout != mismatch+"\n" || !strings.Contains(stderr, "1 problem;") {
		t.Fatalf("damaged: exit %d\n%s%s\nwant %s", code, stdout, stderr, mismatch)
	}
	stdout, _, code = cliRun(t, "verify", "--json", dir)
	var out struct {
		OK       bool `json:"ok"`
		Problems []struct {
			Kind, File, Tensor, Message string
			Range                       *struct{ Begin, End int64 }
		} `json:"problems"`
		Files           []struct{ Name string }
		VerifiedTensors int   `json:"verified_tensors"`
		VerifiedBytes   int64 `json:"verified_bytes"`
	}
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	if code != 1 || out.OK || len(out.Problems) != 1 || out.VerifiedTensors != 3 || out.VerifiedBytes != 40 || len(out.Files) != 3 {
		t.Fatalf("--json: exit %d: %s", code, stdout)
	}
	if p := out.Problems[0]; p.Kind != "checksum_mismatch" || p.File != vShard2 || p.Tensor != "b" || p.Range == nil ||
		p.Range.Begin != b || p.Range.End != e || p.Message != mismatch {
		t.Errorf("--json problem %+v", p)
	}

	// checksum refuses a damaged set, writes nothing, exit 1.
	stdout, stderr, code = cliRun(t, "checksum", dir)
	if code != 1 || stdout != mismatch+"\n" || !strings.Contains(stderr, "nothing written") {
		t.Errorf("checksum of a damaged set: exit %d\n%s%s", code, stdout, stderr)
	}
	stdout, _, code = cliRun(t, "checksum", "--json", dir)
	var cout struct {
		Written []string
		Error   *errorInfo
	}
	if err := json.Unmarshal([]byte(stdout), &cout); err != nil || code != 1 || cout.Error == nil || cout.Error.Kind != "checksum_mismatch" || len(cout.Written) != 0 {
		t.Errorf("checksum --json of a damaged set: exit %d, %v\n%s", code, err, stdout)
	}

	if err := os.Remove(filepath.Join(dir, vShard1)); err != nil {
		t.Fatal(err)
	}
	stdout, _, code = cliRun(t, "verify", dir)
	// Problems are sorted by file: the shard's name sorts before the index's.
	if want := mismatch + "\n" + vIndex + ": names shard " + vShard1 + ", which is missing\n"; code != 1 || stdout != want {
		t.Errorf("missing shard: exit %d\n%s\nwant %s", code, stdout, want)
	}
}

// TestVerifyCommandErrors: what cannot be read at all, usage mistakes,
// links out of the folder (the line says which flag allows them).
func TestVerifyCommandErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nothing")
	if _, stderr, code := cliRun(t, "verify", missing); code != 1 || !strings.Contains(stderr, "nothing") {
		t.Errorf("missing path: exit %d: %s", code, stderr)
	}
	stdout, _, code := cliRun(t, "verify", "--json", missing)
	var out verifyOutput
	if err := json.Unmarshal([]byte(stdout), &out); err != nil || code != 1 || out.Error == nil || out.Error.Kind != "not_found" {
		t.Errorf("missing path --json: exit %d, %v: %s", code, err, stdout)
	}
	for _, args := range [][]string{{"verify"}, {"verify", "a", "b"}, {"checksum"}, {"verify", "--nope", "x"}} {
		if _, _, code := cliRun(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}

	dir := verifySet(t)
	out2 := filepath.Join(t.TempDir(), vShard2)
	if err := os.Rename(filepath.Join(dir, vShard2), out2); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(out2, filepath.Join(dir, vShard2)); err != nil {
		t.Skip("no symbolic links:", err)
	}
	stdout, _, code = cliRun(t, "verify", dir)
	if want := vShard2 + ": a symbolic link that leads out of its folder: not followed (FollowSymlinks allows it)" + followHint + "\n"; code != 1 || !strings.Contains(stdout, want) {
		t.Errorf("link out: exit %d\n%s\nwant %s", code, stdout, want)
	}
	if stdout, _, code := cliRun(t, "verify", "--follow-symlinks", dir); code != 0 {
		t.Errorf("--follow-symlinks: exit %d: %s", code, stdout)
	}
}
