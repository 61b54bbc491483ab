package testutil

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The environment a kill test's parent gives its child.
const (
	killTestEnv  = "CKPT_KILL_TEST"  // the name of the child test
	killDirEnv   = "CKPT_KILL_DIR"   // the folder the child saves into
	killLogEnv   = "CKPT_KILL_LOG"   // the child's log of begun and ended saves
	killStartEnv = "CKPT_KILL_START" // the first save number
	killSlowEnv  = "CKPT_KILL_SLOW"  // a delay at every step of a save
)

// KillChild is the child side of a kill test: a test that saves into a
// folder in a loop until its parent kills it at a random instant (see
// Kill). Its log tells the parent which saves had begun and ended.
type KillChild struct {
	Dir   string        // the folder to save into
	Start int           // the number of the first save
	Slow  time.Duration // a delay to put at every step of a save; 0 for none
	log   *os.File
}

// AsKillChild returns the settings Kill gave t, the child test, and skips t
// when it is run otherwise (the skip names parent, the test that runs it).
func AsKillChild(t *testing.T, parent string) *KillChild {
	if os.Getenv(killTestEnv) != t.Name() {
		t.Skip("run by " + parent)
	}
	log, err := os.OpenFile(os.Getenv(killLogEnv), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	start, err := strconv.Atoi(os.Getenv(killStartEnv))
	if err != nil {
		t.Fatal(err)
	}
	c := &KillChild{Dir: os.Getenv(killDirEnv), Start: start, log: log}
	if d, err := time.ParseDuration(os.Getenv(killSlowEnv)); err == nil && d > 0 {
		c.Slow = d
	}
	return c
}

// Log writes the line "op i" to the log. The file is unbuffered: the kernel
// keeps the line when the process is killed.
func (c *KillChild) Log(op string, i int) { fmt.Fprintf(c.log, "%s %d\n", op, i) }

// Fail logs the failure of save i as "x i error", which makes the parent's
// Kill.Run fail, and fails t.
func (c *KillChild) Fail(t *testing.T, i int, err error) {
	fmt.Fprintf(c.log, "x %d %v\n", i, err)
	t.Fatal(err)
}

// Loop tells the parent that the child is ready, then runs save(i) for
// i = Start, Start+1, ... until the process is killed, logging "b i"
// before each save and "e i" after it. A failed save is logged as
// "x i error" and fails t.
func (c *KillChild) Loop(t *testing.T, save func(i int) error) {
	fmt.Println("ready")
	for i := c.Start; ; i++ {
		c.Log("b", i)
		if err := save(i); err != nil {
			c.Fail(t, i, err)
		}
		c.Log("e", i)
	}
}

// Kill is one run of a kill test's child: the test Child, run alone in a
// copy of the test binary, is killed at a random instant below MaxDelay
// after it is ready.
type Kill struct {
	Child    string        // the name of the child test, which calls AsKillChild
	Dir      string        // the folder it saves into
	Start    int           // the number of its first save
	Slow     time.Duration // a delay it puts at every step of a save; 0 for none
	Env      []string      // more environment for it, as "KEY=value"
	MaxDelay time.Duration // the most it runs once ready
}

// KillEvent is a line "op n" of a killed child's log: "b" (save n begun),
// "e" (save n ended) or one the child test logs itself.
type KillEvent struct {
	Op string
	N  int
}

// Killed is what a killed child left: its log, as events and as written,
// and its standard error.
type Killed struct {
	Events []KillEvent
	Log    []byte
	Stderr string
}

// Saves reads the "b" and "e" events: the last save begun (-1 for none),
// whether it ended, and the saves that ended, in order.
func (r Killed) Saves() (last int, ended bool, completed []int) {
	last = -1
	for _, e := range r.Events {
		switch e.Op {
		case "b":
			last, ended = e.N, false
		case "e":
			ended = true
			completed = append(completed, e.N)
		}
	}
	return last, ended, completed
}

// Run runs the child and kills it. It fails t when the child does not start
// or logs a failed save.
func (k Kill) Run(t *testing.T) Killed {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "log")
	cmd := exec.Command(os.Args[0], "-test.run=^"+k.Child+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), killTestEnv+"="+k.Child, killDirEnv+"="+k.Dir, killLogEnv+"="+logPath,
		killStartEnv+"="+strconv.Itoa(k.Start), killSlowEnv+"="+k.Slow.String())
	cmd.Env = append(cmd.Env, k.Env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		cmd.Wait()
		t.Fatalf("child: %q, %v; stderr: %s", line, err, stderr.String())
	}
	time.Sleep(rand.N(k.MaxDelay))
	cmd.Process.Kill()
	go io.Copy(io.Discard, out)
	cmd.Wait()

	r := Killed{Stderr: stderr.String()}
	r.Log, _ = os.ReadFile(logPath)
	for _, l := range strings.Split(strings.TrimSpace(string(r.Log)), "\n") {
		var e KillEvent
		if _, err := fmt.Sscanf(l, "%s %d", &e.Op, &e.N); err != nil {
			continue
		}
		if e.Op == "x" {
			t.Fatalf("the child failed: %s\nstderr: %s", l, r.Stderr)
		}
		r.Events = append(r.Events, e)
	}
	return r
}
