package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/executor/mlp"
)

func TestDevices(t *testing.T) {
	stdout, stderr, code := runCLI(t, "devices")
	if code != 0 || !strings.Contains(stdout, "cpu") || !regexp.MustCompile(`(?m)^cpu\s+available`).MatchString(stdout) {
		t.Fatalf("code %d\n%s%s", code, stdout, stderr)
	}
	// CUDA is listed either way: available, or with the reason.
	if !regexp.MustCompile(`(?m)^cuda\s+(available|unavailable\s+\S)`).MatchString(stdout) {
		t.Errorf("no cuda line:\n%s", stdout)
	}
	stdout, _, code = runCLI(t, "devices", "--json")
	var rows []deviceRow
	if code != 0 || json.Unmarshal([]byte(stdout), &rows) != nil || len(rows) < 2 {
		t.Fatalf("--json: code %d %q", code, stdout)
	}
	for _, r := range rows {
		if r.Available == (r.Reason != "") || (r.Available && r.Device == "") {
			t.Errorf("row %+v", r)
		}
	}
	if _, _, code := runCLI(t, "devices", "x"); code != 2 {
		t.Errorf("an argument: code %d", code)
	}
}

var maxDiffRe = regexp.MustCompile(`max \|FP8 − BF16\| = (\S+) \(outputs up to (\S+):`)

func TestRunMLPSample(t *testing.T) {
	for _, args := range [][]string{{"run-mlp"}, {"run-mlp", "--act", "bf16", "--check-finite", "--executor", "cpu", "--rows", "3"}} {
		stdout, stderr, code := runCLI(t, args...)
		if code != 0 {
			t.Fatalf("%v: code %d\n%s%s", args, code, stdout, stderr)
		}
		m := maxDiffRe.FindStringSubmatch(stdout)
		if !strings.Contains(stdout, "executor: ") || !strings.Contains(stdout, "[deepseek-fp8-block]") || m == nil {
			t.Fatalf("%v:\n%s", args, stdout)
		}
		diff, _ := strconv.ParseFloat(m[1], 64)
		scale, _ := strconv.ParseFloat(m[2], 64)
		if !(diff > 0 && diff < 0.2*scale) {
			t.Errorf("%v: FP8 vs BF16 differ by %g of %g", args, diff, scale)
		}
	}
}

func TestRunMLPFolders(t *testing.T) {
	s := mlp.Shape{Blocks: 1, Hidden: 32, FFN: 64, Out: 3, FP8Block: 16}
	bf, f8, err := mlp.Build(context.Background(), t.TempDir(), s, 5)
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := runCLI(t, "run-mlp", "--executor", "cpu", bf, f8)
	if code != 0 || maxDiffRe.FindStringSubmatch(stdout) == nil || !strings.Contains(stdout, "executor: cpu") {
		t.Fatalf("code %d\n%s%s", code, stdout, stderr)
	}
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"run-mlp", bf}, 2, "two folders"},
		{[]string{"run-mlp", "--act", "i8"}, 2, "--act"},
		{[]string{"run-mlp", "--rows", "0"}, 2, "--rows"},
		{[]string{"run-mlp", "--executor", "tpu"}, 2, "not built into"},
		{[]string{"run-mlp", filepath.Join(bf, "nope"), f8}, 1, "nope"},
	} {
		_, stderr, code := runCLI(t, c.args...)
		if code != c.code || !strings.Contains(stderr, c.msg) {
			t.Errorf("%v: code %d, stderr %q", c.args, code, stderr)
		}
	}
}
