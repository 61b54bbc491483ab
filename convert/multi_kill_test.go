//go:build unix

package convert_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/convert"
	"github.com/ckpt-go/ckpt/internal/s3test"
	"github.com/ckpt-go/ckpt/internal/testutil"
	"github.com/ckpt-go/ckpt/shard"
)

// rankDirEnv gives TestSaveShardRankChild its folder.
const rankDirEnv = "CKPT_RANK_DIR"

// commitWorld is the world of save i of the kill test: 1 to 3 ranks; every
// fourth save is a single file written by package shard instead, so that
// commits replace single files and indexes alike.
func commitWorld(i int) int {
	if i%4 == 3 {
		return 0
	}
	return 1 + i%3
}

// killParentEnv names the test that runs TestCommitKillChild.
const killParentEnv = "CKPT_KILL_PARENT"

// TestCommitKillChild is the job that TestCommitKilled and
// TestCommitS3Killed run and kill: it
// first runs Commit once (to finish a commit killed before), then saves in
// a loop, its ranks as goroutines, and commits; it logs "b N" before save
// N begins, "c N" before its Commit and "e N" when it is committed.
func TestCommitKillChild(t *testing.T) {
	c := testutil.AsKillChild(t, os.Getenv(killParentEnv))
	dir := c.Dir
	remote := strings.HasPrefix(dir, "s3://")
	if remote {
		needS3(t)
	}
	if d := c.Slow; d > 0 {
		convert.SetHook(func(string) { time.Sleep(d) })
	}
	fmt.Println("ready")
	ctx := context.Background()
	if cr, err := convert.Commit(ctx, dir, convert.CommitOptions{}); err == nil {
		c.Log("e", int(cr.Step))
	} else if !errors.Is(err, convert.ErrIncomplete) && !errors.Is(err, convert.ErrConflict) {
		c.Fail(t, c.Start, err)
	}
	for i := c.Start; ; i++ {
		c.Log("b", i)
		world := commitWorld(i)
		if world == 0 && remote {
			world = 2 // package shard writes files only: two ranks instead
		}
		if world == 0 {
			c.Log("c", i)
			if _, err := shard.Write(ctx, dir, "model", "", allTensors(t, i, 2), nil); err != nil {
				c.Fail(t, i, err)
			}
			c.Log("e", i)
			continue
		}
		var wg sync.WaitGroup
		errs := make([]error, world)
		for r := range world {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[r] = convert.SaveShard(ctx, dir, r, world, rankTensors(t, i, r), convert.ShardOptions{Step: int64(i)})
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			c.Fail(t, i, err)
		}
		c.Log("c", i)
		if _, err := convert.Commit(ctx, dir, convert.CommitOptions{}); err != nil {
			c.Fail(t, i, err)
		}
		c.Log("e", i)
	}
}

// commitLoaded returns the save the folder loads as, failing unless it
// holds exactly the complete tensors of one save; -1 when it holds none.
func commitLoaded(t *testing.T, dir string) int {
	t.Helper()
	m, err := ckpt.Open(dir, ckpt.WithDType(ckpt.AsStored))
	if err != nil {
		return -1
	}
	defer m.Close()
	names := m.Names()
	num, _, _ := strings.Cut(strings.TrimPrefix(slices.Min(names), "s"), ".")
	i, err := strconv.Atoi(num)
	if err != nil {
		t.Fatalf("tensor %q", names[0])
	}
	world := commitWorld(i)
	if world == 0 {
		world = 2 // a single file of two ranks' tensors
	}
	want := allTensors(t, i, world)
	if len(names) != len(want) {
		t.Fatalf("%d tensors, save %d has %d: %v", len(names), i, len(want), names)
	}
	for _, w := range want {
		got, err := m.LoadTensor(context.Background(), w.Name)
		if err != nil || !bytes.Equal(got.Bytes(), w.Data) {
			t.Fatalf("save %d: tensor %s differs (%v)", i, w.Name, err)
		}
	}
	return i
}

// TestCommitKilled kills a job that saves with SaveShard and Commit in a
// loop at random instants (half of the runs with every step slowed down,
// so that kills land between the steps), and checks after each kill, with
// no repair run first, that the folder loads as exactly one complete
// save: the newest committed one, or the one whose Commit was killed. A
// last save and Commit must leave nothing but the checkpoint.
func TestCommitKilled(t *testing.T) {
	dir := t.TempDir()
	commitKilled(t, "TestCommitKilled", dir, nil, 12*time.Millisecond, func() []string { return testutil.Entries(t, dir) })
}

// TestCommitS3Killed is TestCommitKilled with the ranks and the commits
// writing to an s3:// location of the test's server (every save written
// by ranks: package shard's single files are local only).
func TestCommitS3Killed(t *testing.T) {
	s := needS3(t)
	bucket := s.NewBucket(t)
	commitKilled(t, "TestCommitS3Killed", "s3://"+bucket+"/step", s3ChildEnv(s), 120*time.Millisecond, func() []string {
		keys, uploads := objects(t, s, bucket, "step")
		if len(uploads) > 0 {
			t.Fatalf("uploads in progress: %v", uploads)
		}
		return keys
	})
}

// s3ChildEnv is the environment that points a kill test's child at s.
func s3ChildEnv(s *s3test.Server) []string {
	return []string{"CKPT_S3_ENDPOINT=" + s.Endpoint, "AWS_ACCESS_KEY_ID=" + s.AccessKey,
		"AWS_SECRET_ACCESS_KEY=" + s.SecretKey, "AWS_REGION=" + s.Region}
}

// commitKilled is TestCommitKilled at dir, a folder or an s3:// location
// (env points the child at its server), whose files list gives; the child
// is killed within maxDelay of its start.
func commitKilled(t *testing.T, name, dir string, env []string, maxDelay time.Duration, list func() []string) {
	kills, budget, least := 150, 3*time.Second, 20
	if testing.Short() {
		kills, budget, least = 30, time.Second, 8
	}
	budget += 10 * maxDelay // slower children (S3) get more time
	next, newest := 0, -1   // the next save's number; the newest committed
	begun := map[int]bool{}
	var during, switched int
	// The budget bounds the kills; a loaded machine, whose children start
	// slower, may take up to four budgets to reach the least.
	start := time.Now()
	deadline, hard := start.Add(budget), start.Add(4*budget)
	k := 0
	for ; k < kills && (time.Now().Before(deadline) || k < least && time.Now().Before(hard)); k++ {
		kill := testutil.Kill{Child: "TestCommitKillChild", Dir: dir, Start: next, MaxDelay: maxDelay,
			Env: append([]string{killParentEnv + "=" + name}, env...)}
		if k%2 == 1 {
			kill.Slow = 300 * time.Microsecond
		}
		killed := kill.Run(t)
		last, committing := -1, false
		for _, e := range killed.Events {
			switch e.Op {
			case "b":
				last, committing = e.N, false
				begun[e.N] = true
			case "c":
				committing = true
			case "e":
				newest = max(newest, e.N)
				committing = false
			}
		}
		if committing {
			during++
		}
		got := commitLoaded(t, dir)
		switch {
		case got == newest:
		case got > newest && begun[got]:
			// The killed commit had switched, or the next job's first
			// Commit committed a save whose ranks had all finished.
			newest = got
			switched++
		default:
			t.Fatalf("kill %d (save %d, committing %v): the folder loads save %d, the newest committed is %d\n%v\nlog: %s",
				k, last, committing, got, newest, list(), killed.Log)
		}
		if last >= 0 {
			next = last + 1
		}
	}
	t.Logf("%d kills: %d during a commit, %d of which had switched", k, during, switched)
	if k < least || during < k/10 {
		t.Errorf("%d kills, %d of them during a commit", k, during)
	}

	// One more save and commit leave only the checkpoint.
	for next%4 == 3 {
		next++
	}
	world := commitWorld(next)
	saveRanks(t, dir, next, world)
	cr, err := convert.Commit(context.Background(), dir, convert.CommitOptions{VerifyData: true})
	if err != nil {
		t.Fatal(err)
	}
	checkLoaded(t, dir, allTensors(t, next, world))
	if got, want := list(), sorted(append(slices.Clone(cr.Files), cr.Index)); !slices.Equal(got, want) {
		t.Errorf("after a last commit the folder holds %v, want %v (removed %v)", got, want, cr.Removed)
	}
}

// TestSaveShardRankChild is one rank of TestSaveShardProcesses.
func TestSaveShardRankChild(t *testing.T) {
	dir := os.Getenv(rankDirEnv)
	rank, err := strconv.Atoi(os.Getenv("CKPT_RANK"))
	if dir == "" || err != nil {
		t.Skip("run by TestSaveShardProcesses")
	}
	if _, err := convert.SaveShard(context.Background(), dir, rank, 3, rankTensors(t, 5, rank), convert.ShardOptions{Step: 5}); err != nil {
		t.Fatal(err)
	}
}

// TestSaveShardProcesses saves with three processes as ranks, onto a
// checkpoint committed before, and commits from a fourth.
func TestSaveShardProcesses(t *testing.T) {
	dir := t.TempDir()
	saveRanks(t, dir, 4, 2)
	if _, err := convert.Commit(context.Background(), dir, convert.CommitOptions{}); err != nil {
		t.Fatal(err)
	}
	cmds := make([]*exec.Cmd, 3)
	outs := make([]bytes.Buffer, 3)
	for r := range cmds {
		cmds[r] = exec.Command(os.Args[0], "-test.run=^TestSaveShardRankChild$", "-test.count=1")
		cmds[r].Env = append(os.Environ(), rankDirEnv+"="+dir, "CKPT_RANK="+strconv.Itoa(r))
		cmds[r].Stdout, cmds[r].Stderr = &outs[r], &outs[r]
		if err := cmds[r].Start(); err != nil {
			t.Fatal(err)
		}
	}
	for r, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatalf("rank %d: %v\n%s", r, err, outs[r].String())
		}
	}
	checkLoaded(t, dir, allTensors(t, 4, 2))
	if _, err := convert.Commit(context.Background(), dir, convert.CommitOptions{VerifyData: true}); err != nil {
		t.Fatal(err)
	}
	checkLoaded(t, dir, allTensors(t, 5, 3))
}

// A FIFO (or a link to one) where the previous single file or a shard is
// expected never blocks SaveShard or Commit.
func TestCommitFIFO(t *testing.T) {
	dir := t.TempDir()
	// A link to a FIFO: listed as a file.
	if err := syscall.Mkfifo(filepath.Join(dir, ".fifo"), 0o644); err != nil {
		t.Skip(err)
	}
	if err := os.Symlink(".fifo", filepath.Join(dir, "model.safetensors")); err != nil {
		t.Skip(err)
	}
	done := make(chan error, 1)
	go func() {
		if _, err := convert.SaveShard(context.Background(), dir, 0, 2, rankTensors(t, 1, 0), convert.ShardOptions{}); err != nil {
			done <- err
			return
		}
		if err := syscall.Mkfifo(filepath.Join(dir, "model-00002-of-00002.swap-000000000000.safetensors"), 0o644); err != nil {
			done <- err
			return
		}
		_, err := convert.Commit(context.Background(), dir, convert.CommitOptions{})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, convert.ErrIncomplete) {
			t.Errorf("Commit: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("blocked on a FIFO")
	}
}
