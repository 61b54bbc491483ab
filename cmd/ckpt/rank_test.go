package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
)

// rankModel writes a sharded model with a column-parallel and a
// row-parallel weight of sizes 3 does not divide, and a norm.
func rankModel(t *testing.T) string {
	t.Helper()
	return ckpttest.Dir(t, ckpttest.Weights{Shards: 2, Tensors: []ckpttest.Tensor{
		ckpttest.T("layers.0.q_proj.weight", dtype.BF16, 10, 8),
		ckpttest.T("layers.0.o_proj.weight", dtype.BF16, 8, 10),
		ckpttest.T("layers.0.norm.weight", dtype.BF16, 8),
	}})
}

var rankFlags = []string{"--split", "**.q_proj.weight=0", "--split", "**.o_proj.weight=1"}

// plan --rank reports the rank's bytes and ranges, in JSON and in text.
func TestPlanRank(t *testing.T) {
	dir := rankModel(t)
	out := planJSON(t, 0, append([]string{dir, "--rank", "1", "--world", "3", "--budget", "none"}, rankFlags...)...)
	rank := out["rank"].(map[string]any)
	if rank["rank"] != 1.0 || rank["world"] != 3.0 || len(rank["splits"].([]any)) != 2 {
		t.Errorf("rank %v", rank)
	}
	// Rank 1 of 3 gets rows [4:7) of q_proj and columns [4:7) of o_proj:
	// 48 bytes each, and the 16-byte norm whole.
	if num(t, out, "total_read_bytes") != 48+48+16 || num(t, out, "total_stored_bytes") != 160+160+16 {
		t.Errorf("read %v of %v", out["total_read_bytes"], out["total_stored_bytes"])
	}
	tensors := out["components"].([]any)[0].(map[string]any)["tensors"].([]any)
	for _, x := range tensors {
		tp := x.(map[string]any)
		ranges := tp["ranges"].([]any)
		r := ranges[0].(map[string]any)
		switch tp["name"] {
		case "layers.0.o_proj.weight":
			sp := tp["split"].(map[string]any)
			if sp["dim"] != 1.0 || sp["start"] != 4.0 || sp["stop"] != 7.0 || r["count"] != 8.0 || r["length"] != 6.0 || r["stride"] != 20.0 ||
				!strings.HasSuffix(r["file"].(string), ".safetensors") || r["tensor"] != "layers.0.o_proj.weight" {
				t.Errorf("o_proj %v", tp)
			}
		case "layers.0.q_proj.weight":
			if r["count"] != 1.0 || r["length"] != 48.0 || num(t, tp, "read_bytes") != 48 {
				t.Errorf("q_proj %v", tp)
			}
		case "layers.0.norm.weight":
			if tp["split"] != nil || r["length"] != 16.0 {
				t.Errorf("norm %v", tp)
			}
		}
	}
	stdout, stderr, code := runCLI(t, append([]string{"plan", dir, "--rank", "1", "--world", "3", "--budget", "none", "--tensors"}, rankFlags...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"rank     1 of 3 reads 112 B of 336 B stored", "split 2 **.o_proj.weight=1: 1 tensor, reads 48 B of 160 B",
		"dim 1 [4:7) of [8, 10]", "@", "+6×8/20", "replicated", "read: rank 1 of 3 reads"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("plan lacks %q:\n%s", want, stdout)
		}
	}
	// Without --rank nothing of it shows.
	stdout, _, _ = runCLI(t, "plan", dir, "--budget", "none", "--tensors")
	if strings.Contains(stdout, "rank") || strings.Contains(stdout, "RANGES") {
		t.Errorf("a plan without --rank mentions ranks:\n%s", stdout)
	}
}

// get --rank writes the rank's part; the parts concatenate to the whole.
func TestGetRankParts(t *testing.T) {
	dir := rankModel(t)
	tmp := t.TempDir()
	get := func(name string, args ...string) []byte {
		t.Helper()
		o := filepath.Join(tmp, "out.bin")
		_, stderr, code := runCLI(t, append([]string{"get", dir, name, "-o", o, "--dtype", "F32"}, args...)...)
		if code != 0 {
			t.Fatalf("get %s %v: exit %d: %s", name, args, code, stderr)
		}
		b, err := os.ReadFile(o)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	whole := get("layers.0.o_proj.weight")
	var parts [][]byte
	for r := range 3 {
		parts = append(parts, get("layers.0.o_proj.weight", append([]string{"--rank", strconv.Itoa(r), "--world", "3"}, rankFlags...)...))
	}
	// Columns [0:4), [4:7), [7:10) of 8 rows of F32.
	var joined []byte
	for row := range 8 {
		for r, w := range []int{4, 3, 3} {
			joined = append(joined, parts[r][row*w*4:(row+1)*w*4]...)
		}
	}
	if !bytes.Equal(joined, whole) {
		t.Error("the ranks' parts do not concatenate to the whole tensor")
	}
	_, stderr, _ := runCLI(t, append([]string{"get", dir, "layers.0.o_proj.weight", "-o", filepath.Join(tmp, "p.npy"), "--rank", "2", "--world", "3"}, rankFlags...)...)
	if !strings.Contains(stderr, "[8, 3] (part dim 1 [7:10) of [8, 10], split 2 **.o_proj.weight=1)") {
		t.Errorf("stderr %q", stderr)
	}
}

func TestRankFlagErrors(t *testing.T) {
	dir := rankModel(t)
	for _, args := range [][]string{
		{"--rank", "1"},
		{"--split", "**.q_proj.weight=0"},
		{"--world", "2"},
		{"--rank", "2", "--world", "2"},
		{"--rank", "0", "--world", "-1"},
		{"--rank", "0", "--world", "2", "--split", "q_proj"},
		{"--rank", "0", "--world", "2", "--split", "**.norm.weight=1"}, // beyond its one dimension
	} {
		_, stderr, code := runCLI(t, append([]string{"plan", dir}, args...)...)
		if code != 2 {
			t.Errorf("plan %v: exit %d, want 2: %s", args, code, stderr)
		}
	}
}
