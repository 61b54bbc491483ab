package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/ckpttest"
)

// runCLI runs the command line in-process and returns stdout, stderr and
// the exit status.
func runCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(&env{stdout: &out, stderr: &errOut}, args)
	return out.String(), errOut.String(), code
}

func TestUsage(t *testing.T) {
	_, stderr, code := runCLI(t)
	if code != 2 || !strings.Contains(stderr, "Commands:") {
		t.Fatalf("no args: code %d, stderr %q", code, stderr)
	}
	stdout, _, code := runCLI(t, "help")
	if code != 0 || !strings.Contains(stdout, "dtypes") || !strings.Contains(stdout, "demo") {
		t.Fatalf("help: code %d, stdout %q", code, stdout)
	}
	_, stderr, code = runCLI(t, "frobnicate")
	if code != 2 || !strings.Contains(stderr, `unknown command "frobnicate"`) {
		t.Fatalf("unknown command: code %d, stderr %q", code, stderr)
	}
}

func TestCommandHelp(t *testing.T) {
	for _, c := range commands() {
		stdout, _, code := runCLI(t, c.name, "-h")
		if code != 0 {
			t.Errorf("%s -h: exit %d", c.name, code)
		}
		if !strings.Contains(stdout, "Usage: ckpt "+c.name) || !strings.Contains(stdout, "Example") {
			t.Errorf("%s -h: help lacks usage line or examples:\n%s", c.name, stdout)
		}
		if strings.Count(stdout, "Usage:") != 1 {
			t.Errorf("%s -h: help printed more than once:\n%s", c.name, stdout)
		}
	}
}

func TestBadFlag(t *testing.T) {
	_, stderr, code := runCLI(t, "dtypes", "--nope")
	if code != 2 || !strings.Contains(stderr, "flag provided but not defined") || !strings.Contains(stderr, "Usage: ckpt dtypes") {
		t.Fatalf("bad flag: code %d, stderr %q", code, stderr)
	}
}

func TestDTypes(t *testing.T) {
	stdout, _, code := runCLI(t, "dtypes")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"F8_E4M3", "448", "float8_e4m3fn", "F8_E8M0", "F6_E3M2", "BF16", "C64"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("dtypes table lacks %q", want)
		}
	}
	stdout, _, code = runCLI(t, "dtypes", "--json")
	if code != 0 {
		t.Fatalf("--json exit %d", code)
	}
	var rows []dtypeRow
	if err := json.Unmarshal([]byte(stdout), &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 22 {
		t.Fatalf("got %d dtypes, want the 22 of the safetensors format", len(rows))
	}
	for _, r := range rows {
		if r.Name == "F4" && (r.Bits != 4 || r.Max != 6) {
			t.Errorf("F4 row %+v", r)
		}
	}
}

func TestFlagsAfterArguments(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "model.safetensors")
	if err := ckpttest.WriteFile(path, ckpttest.MustParseTensors("a:F16[2]"), nil); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"inspect", path, "--json"},
		{"inspect", "--json", path},
		{"validate", path, "--json"},
		{"resolve", dir, "--json", "--variant", ""},
	} {
		stdout, stderr, code := runCLI(t, args...)
		if code != 0 || !strings.HasPrefix(strings.TrimSpace(stdout), "{") && !strings.HasPrefix(strings.TrimSpace(stdout), "[") {
			t.Errorf("%v: exit %d, stdout %.80q, stderr %q", args, code, stdout, stderr)
		}
	}
	// After "--" everything is a path, even if it looks like a flag.
	_, _, code := runCLI(t, "validate", "--json", "--", path, "--json")
	if code != 1 {
		t.Errorf("validate -- PATH --json: exit %d, want 1 (a file named --json does not exist)", code)
	}
	_, stderr, code := runCLI(t, "inspect", path, "--nope")
	if code != 2 || !strings.Contains(stderr, "flag provided but not defined") {
		t.Errorf("unknown trailing flag: exit %d, %q", code, stderr)
	}
}
