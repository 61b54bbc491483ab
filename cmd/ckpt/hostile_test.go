package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/internal/hostile"
	"github.com/ckpt-go/ckpt/internal/testutil"
)

// cliRun runs the command line in-process under testutil.Deadline.
func cliRun(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	testutil.Within(t, "ckpt "+strings.Join(args, " "), func() error {
		code = run(&env{stdout: &out, stderr: &errOut}, args)
		return nil
	})
	return out.String(), errOut.String(), code
}

// TestHostile runs ckpt validate, inspect, plan and resolve (with and without
// --follow-symlinks) on every hostile case, holding them to the verdicts
// the library gives: the kind of error in the JSON output, the exit
// status, and a message that names the file concerned.
func TestHostile(t *testing.T) {
	for _, c := range hostile.Cases(t) {
		t.Run(c.Name, func(t *testing.T) {
			for _, follow := range []bool{false, true} {
				var flags []string
				folderWant, shardWant := c.Folder, c.ShardWant
				if follow {
					flags = []string{"--follow-symlinks"}
					folderWant, shardWant = c.FolderFollow, c.ShardFollow
				}
				// resolve takes folders, pipelines included.
				stdout, stderr, code := cliRun(t, append([]string{"resolve", "--json", c.Dir}, flags...)...)
				var res resolveOutput
				if err := json.Unmarshal([]byte(stdout), &res); err != nil {
					t.Fatalf("resolve %v: %v\n%s%s", flags, err, stdout, stderr)
				}
				checkCLI(t, "resolve", flags, code, res.Error, folderWant, c.Culprit)

				// validate and inspect take component folders and files.
				targets := map[string]string{}
				if !c.Pipeline {
					targets[c.Dir] = folderWant
				}
				if c.File != "" {
					if st, err := os.Stat(c.Path()); err != nil || !st.IsDir() {
						targets[c.Path()] = shardWant
					}
				}
				for target, want := range targets {
					stdout, stderr, code := cliRun(t, append([]string{"validate", "--json", target}, flags...)...)
					var results []validateResult
					if err := json.Unmarshal([]byte(stdout), &results); err != nil || len(results) != 1 {
						t.Fatalf("validate %s %v: %v\n%s%s", target, flags, err, stdout, stderr)
					}
					checkCLI(t, "validate "+target, flags, code, results[0].Error, want, c.Culprit)

					_, stderr, code = cliRun(t, append([]string{"inspect", "--json", target}, flags...)...)
					switch {
					case want == hostile.OK && code != 0:
						t.Errorf("inspect %s %v: exit %d: %s", target, flags, code, stderr)
					case want != hostile.OK && (code != 1 || !strings.Contains(stderr, c.Culprit)):
						t.Errorf("inspect %s %v: exit %d, want 1 and a message naming %s: %s", target, flags, code, c.Culprit, stderr)
					}

					// plan goes through the loader: the same verdict.
					_, stderr, code = cliRun(t, append([]string{"plan", "--budget", "none", target}, flags...)...)
					switch {
					case want == hostile.OK && code != 0:
						t.Errorf("plan %s %v: exit %d: %s", target, flags, code, stderr)
					case want != hostile.OK && (code != 1 || !strings.Contains(stderr, c.Culprit)):
						t.Errorf("plan %s %v: exit %d, want 1 and a message naming %s: %s", target, flags, code, c.Culprit, stderr)
					}
				}
			}
		})
	}
}

// checkCLI holds one command's JSON error and exit status to want.
func checkCLI(t *testing.T, what string, flags []string, code int, e *errorInfo, want, culprit string) {
	t.Helper()
	if want == hostile.OK {
		if code != 0 || e != nil {
			t.Errorf("%s %v: exit %d, error %+v", what, flags, code, e)
		}
		return
	}
	if code != 1 || e == nil {
		t.Errorf("%s %v: exit %d, error %+v; want %s", what, flags, code, e, want)
		return
	}
	if kind, says := hostile.Kind(want); want != hostile.Any && (e.Kind != kind || !strings.Contains(e.Message, says)) {
		t.Errorf("%s %v: kind %s, want %s: %s", what, flags, e.Kind, want, e.Message)
	}
	if !strings.Contains(e.Message, culprit) {
		t.Errorf("%s %v: the message does not name %s: %s", what, flags, culprit, e.Message)
	}
	if e.Kind == "insecure_path" && !strings.Contains(e.Message, "--follow-symlinks") {
		t.Errorf("%s %v: the message does not point to --follow-symlinks: %s", what, flags, e.Message)
	}
}
