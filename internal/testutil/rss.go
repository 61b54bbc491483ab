package testutil

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// ProcStatus returns the value of a "Key:  N kB" line of /proc/self/status
// (VmRSS, VmHWM, RssAnon, ...) in bytes, or -1 where there is none.
func ProcStatus(key string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, key+":"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n << 10
			}
		}
	}
	return -1
}

// ResetPeakRSS makes the process's peak resident size (VmHWM) start again
// from its present one, through /proc/self/clear_refs.
func ResetPeakRSS() error { return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

// PeakRSS returns the process's peak resident size since it started or
// since ResetPeakRSS, in bytes; -1 where /proc/self/status is missing.
func PeakRSS() int64 { return max(ProcStatus("VmHWM"), ProcStatus("VmRSS")) }

// PrintReport prints v as a line "RSS <JSON>", the report a child process
// gives RunChild.
func PrintReport(v any) {
	j, _ := json.Marshal(v)
	fmt.Printf("RSS %s\n", j)
}

// RunChild runs the test named test alone in a copy of the test binary,
// with env ("KEY=value") added to its environment, and decodes into v the
// report it printed with PrintReport. It returns all the child printed,
// and fails t when the child fails or prints no report.
func RunChild(t testing.TB, test string, env []string, v any) []byte {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	_, rest, ok := strings.Cut(string(out), "RSS ")
	if !ok {
		t.Fatalf("no report:\n%s", out)
	}
	line, _, _ := strings.Cut(rest, "\n")
	if err := json.Unmarshal([]byte(line), v); err != nil {
		t.Fatal(err)
	}
	return out
}

// SkipUnderRace skips a test that measures the process (resident memory,
// bytes read from disk) when the race detector is built in: its shadow
// memory and its own reads are counted too.
func SkipUnderRace(t testing.TB) {
	t.Helper()
	if Race {
		t.Skip("measures the process; the race detector's own memory and reads would count")
	}
}
