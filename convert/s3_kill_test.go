//go:build unix

package convert_test

import (
	"bytes"
	"context"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ckpt-go/ckpt/convert"
	"github.com/ckpt-go/ckpt/internal/s3test"
	"github.com/ckpt-go/ckpt/internal/testutil"
)

// TestSaveS3KillChild is the trainer that TestSaveS3Killed runs and kills:
// it saves to an s3:// location of the parent's server (CKPT_S3_ENDPOINT)
// in a loop, logging each save's number before it begins and after it
// ends, until it is killed.
func TestSaveS3KillChild(t *testing.T) {
	c := testutil.AsKillChild(t, "TestSaveS3Killed")
	needS3(t)
	if c.Slow > 0 {
		convert.SetHook(func(string) { time.Sleep(c.Slow) })
	}
	c.Loop(t, func(i int) error {
		ts, opts := killSave(t, i)
		_, err := convert.Save(context.Background(), c.Dir, ts, opts)
		return err
	})
}

// TestSaveS3Killed kills a trainer that saves to S3 in a loop (the saves
// of TestSaveKilled: sharded, single-file and FP8 checkpoints, KeepLast 3,
// every third one replacing "latest") at random instants, half of the
// time with every step of a save slowed down so that kills land between
// the steps. After a kill the trainer resumes the way one does after a
// crash: it saves again the checkpoint it was killed in, unless that one
// was committed. After each kill, with no repair run first, every folder
// that holds a manifest or a set's entry point loads as one complete save
// under its own name; the three newest committed saves load (one per name);
// any other folder is marked as an incomplete save (never files nobody
// owns); and the save begun again succeeds even where the killed one left
// files under its name. A final save then removes what killed prunes had
// left, and the location holds KeepLast checkpoints.
func TestSaveS3Killed(t *testing.T) {
	s := needS3(t)
	kills, budget, least := 120, 8*time.Second, 10
	if testing.Short() {
		kills, budget, least = 30, 2*time.Second, 5
	}
	bucket := s.NewBucket(t)
	dir := "s3://" + bucket + "/run"
	env := s3ChildEnv(s)
	next := 0                     // the next save's number
	committed := map[string]int{} // checkpoint name -> the newest save committed under it
	begun := -1                   // the highest save number begun
	var midSave, resaved, incomplete, removing, stale int
	// The budget bounds the kills; a loaded machine, whose children start
	// slower, may take up to four budgets to reach the least.
	start := time.Now()
	deadline, hard := start.Add(budget), start.Add(4*budget)
	k := 0
	for ; k < kills && (time.Now().Before(deadline) || k < least && time.Now().Before(hard)); k++ {
		kill := testutil.Kill{Child: "TestSaveS3KillChild", Dir: dir, Start: next, Env: env, MaxDelay: 150 * time.Millisecond}
		if k%2 == 1 {
			kill.Slow, kill.MaxDelay = 2*time.Millisecond, 200*time.Millisecond
		}
		killed := kill.Run(t)
		last, ended, completed := killed.Saves()
		begun = max(begun, last)
		if last >= 0 && !ended {
			midSave++
		}
		for _, i := range completed {
			_, opts := killSave(t, i)
			name := cmpOr(opts.Name, "checkpoint-"+strconv.Itoa(i))
			committed[name] = max(committed[name], i)
		}

		// The manifests: what Checkpoints counts.
		cps, err := convert.Checkpoints(dir)
		if err != nil {
			t.Fatalf("kill %d: Checkpoints: %v", k, err)
		}
		manifest := map[string]int{}
		for _, c := range cps {
			manifest[c.Name] = int(c.Step)
			committed[c.Name] = max(committed[c.Name], int(c.Step))
		}
		folders := s3Folders(t, s, bucket, "run")
		for name, keys := range folders {
			switch {
			case slices.Contains(keys, "checkpoint.json") || slices.Contains(keys, "model.safetensors") ||
				slices.Contains(keys, "model.safetensors.index.json"):
				i := loadedSave(t, dir+"/"+name)
				if i > begun {
					t.Fatalf("kill %d: %s holds save %d, never begun", k, name, i)
				}
				// The weights are those the manifest describes, or those of
				// the save killed between its index and its manifest.
				if m, ok := manifest[name]; ok && i != m {
					if i != last || ended {
						t.Fatalf("kill %d (during save %d, ended %v): %s holds save %d, its manifest says %d", k, last, ended, name, i, m)
					}
					stale++
				}
			case slices.Contains(keys, convert.IncompleteName):
				if bytes.Contains(s.Get(t, bucket, "run/"+name+"/"+convert.IncompleteName), []byte(`"removing"`)) {
					removing++
				} else {
					incomplete++
				}
			default:
				t.Fatalf("kill %d (during save %d, ended %v): %s holds files of no checkpoint and no marker: %v\nlog: %s",
					k, last, ended, name, keys, killed.Log)
			}
		}
		// The three newest committed saves (one per name) load.
		names := slices.Collect(maps.Keys(committed))
		slices.SortFunc(names, func(a, b string) int { return committed[b] - committed[a] })
		for _, name := range names[:min(3, len(names))] {
			if _, ok := folders[name]; !ok {
				t.Fatalf("kill %d (during save %d, ended %v): %s (save %d) is gone; committed %v; folders %v\nlog: %s", k, last, ended, name, committed[name], committed, folders, killed.Log)
			}
			if i := loadedSave(t, dir+"/"+name); i != committed[name] && (name != "latest" || i != last || ended) {
				t.Fatalf("kill %d (during save %d, ended %v): %s holds save %d, want %d\nlog: %s", k, last, ended, name, i, committed[name], killed.Log)
			}
		}
		// Resume: save again the checkpoint the kill interrupted, unless
		// its manifest made it in.
		switch {
		case last < 0:
		case ended:
			next = last + 1
		default:
			_, opts := killSave(t, last)
			if name := cmpOr(opts.Name, "checkpoint-"+strconv.Itoa(last)); manifest[name] == last && slices.Contains(folders[name], "checkpoint.json") {
				next = last + 1
			} else {
				next = last
				resaved++
			}
		}
	}
	t.Logf("%d kills: %d during a save, %d saves begun again; seen: %d folders of killed saves, %d of killed removals, %d manifests not yet rewritten",
		k, midSave, resaved, incomplete, removing, stale)
	if k < least || midSave < k/2 {
		t.Errorf("%d kills, %d of them during a save", k, midSave)
	}

	// One more save, uninterrupted: it succeeds, removes what killed prunes
	// had left, and KeepLast checkpoints remain.
	ts, opts := killSave(t, next)
	if _, err := convert.Save(context.Background(), dir, ts, opts); err != nil {
		t.Fatal(err)
	}
	committed[cmpOr(opts.Name, "checkpoint-"+strconv.Itoa(next))] = next
	cps, err := convert.Checkpoints(dir)
	if want := min(3, len(committed)); err != nil || len(cps) != want || cps[len(cps)-1].Step != int64(next) {
		t.Errorf("after a final save: %+v (want %d), %v", cps, want, err)
	}
	for name, keys := range s3Folders(t, s, bucket, "run") {
		if slices.ContainsFunc(cps, func(c convert.CheckpointInfo) bool { return c.Name == name }) {
			continue
		}
		if !slices.Contains(keys, convert.IncompleteName) ||
			bytes.Contains(s.Get(t, bucket, "run/"+name+"/"+convert.IncompleteName), []byte(`"removing"`)) {
			t.Errorf("after a final save %s holds %v", name, keys)
		}
	}
}

// s3Folders lists the objects under prefix/ of bucket by their first
// folder: folder -> the rest of their keys.
func s3Folders(t *testing.T, s *s3test.Server, bucket, prefix string) map[string][]string {
	t.Helper()
	keys, _ := objects(t, s, bucket, prefix)
	out := map[string][]string{}
	for _, k := range keys {
		folder, rest, _ := strings.Cut(k, "/")
		out[folder] = append(out[folder], path.Clean(rest))
	}
	return out
}
