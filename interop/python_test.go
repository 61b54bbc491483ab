package interop_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// python returns the interpreter of the pinned reference environment, or
// skips the test (fails it when CKPT_INTEROP=1).
func python(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("CKPT_INTEROP_PYTHON"); p != "" {
		return p
	}
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		self = "python_test.go"
	}
	bin := "bin/python"
	if runtime.GOOS == "windows" {
		bin = `Scripts\python.exe`
	}
	p := filepath.Join(filepath.Dir(self), ".venv", filepath.FromSlash(bin))
	if _, err := os.Stat(p); err == nil {
		return p
	}
	msg := "interop: no Python reference environment (" + p + " is missing); run `bash interop/setup.sh` or set CKPT_INTEROP_PYTHON"
	if os.Getenv("CKPT_INTEROP") == "1" {
		t.Fatal(msg + " — CKPT_INTEROP=1 requires it")
	}
	t.Skip(msg)
	return ""
}

// script returns the path of a script under interop/py.
func script(name string) string {
	_, self, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(self), "py", name)
}

// runPy runs a script of interop/py with the reference interpreter and
// returns its standard output; a failure of the script fails the test.
func runPy(t testing.TB, name string, args ...string) []byte {
	t.Helper()
	py := python(t)
	cmd := exec.Command(py, append([]string{script(name)}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, errb.String())
	}
	t.Logf("%s %s: %v", name, args[0], time.Since(start).Round(time.Millisecond))
	return out.Bytes()
}

// readJSON decodes the JSON file at path (a result the reference wrote) into
// v, failing the test if it cannot.
func readJSON(t testing.TB, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

// writeList writes paths, one a line, to the file name in dir for the
// reference to read, and returns that file's path.
func writeList(t testing.TB, dir, name string, paths []string) string {
	t.Helper()
	list := filepath.Join(dir, name)
	if err := os.WriteFile(list, []byte(strings.Join(paths, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	return list
}

// mismatches collects disagreements with a few examples.
type mismatches struct {
	n        int
	examples []string
}

func (m *mismatches) add(format string, args ...any) {
	m.n++
	if len(m.examples) < 8 {
		m.examples = append(m.examples, fmt.Sprintf(format, args...))
	}
}

func (m *mismatches) report(t testing.TB, what string, total int) {
	t.Helper()
	if m.n > 0 {
		t.Errorf("%s: %d of %d disagree with ml_dtypes, e.g.\n\t%s", what, m.n, total, strings.Join(m.examples, "\n\t"))
	}
}
