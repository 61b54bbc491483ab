//go:build unix

package shard_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/testutil"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/shard"
	"github.com/ckpt-go/ckpt/variant"
)

// killSave is save number i of the kill test: its tensors carry the number
// in their names, and its layout cycles through 2 shards, 2 shards again
// (the same names, so the shards go through swap names), a single file and
// 3 shards, so every transition between layouts is exercised.
func killSave(i int) (tensors []safetensors.TensorData, maxShard int64) {
	n, maxShard := [4]int{4, 4, 2, 6}[i%4], [4]int64{128, 128, 1 << 20, 128}[i%4]
	for j := range n {
		name := fmt.Sprintf("s%d.t%d", i, j)
		b, err := ckpttest.Fill(name, dtype.F32, []int64{16})
		if err != nil {
			panic(err)
		}
		tensors = append(tensors, safetensors.TensorData{Name: name, DType: dtype.F32, Shape: []int64{16}, Data: b})
	}
	return tensors, maxShard
}

func writeSave(dir string, i int, opts ...shard.WriteOption) (*shard.WriteResult, error) {
	ts, maxShard := killSave(i)
	return shard.Write(context.Background(), dir, "model", "", ts, nil, append(opts, shard.WithMaxShardSize(maxShard))...)
}

// TestKillChild is the writer that TestWriteKilled runs and kills: it
// saves into the folder in a loop, logging each save's number before it
// begins and after it ends, until it is killed.
func TestKillChild(t *testing.T) {
	c := testutil.AsKillChild(t, "TestWriteKilled")
	var opts []shard.WriteOption
	if c.Slow > 0 {
		opts = append(opts, shard.WithSlowCommit(c.Slow))
	}
	c.Loop(t, func(i int) error {
		_, err := writeSave(c.Dir, i, opts...)
		return err
	})
}

// loadedSave returns the number of the save that c holds, failing when it
// holds anything but exactly the complete tensors of one save.
func loadedSave(t *testing.T, c *shard.Checkpoint, who string) int {
	t.Helper()
	defer c.Close()
	names := c.Names()
	if len(names) == 0 {
		t.Fatalf("%s: an empty checkpoint", who)
	}
	num, _, _ := strings.Cut(strings.TrimPrefix(names[0], "s"), ".")
	i, err := strconv.Atoi(num)
	if err != nil {
		t.Fatalf("%s: tensor %q", who, names[0])
	}
	want, _ := killSave(i)
	if len(names) != len(want) {
		t.Fatalf("%s: %d tensors, save %d has %d", who, len(names), i, len(want))
	}
	for _, w := range want {
		tt, err := c.Tensor(w.Name)
		if err != nil {
			t.Fatalf("%s: save %d: %v", who, i, err)
		}
		b, err := tt.Bytes()
		if err != nil || !bytes.Equal(b, w.Data) {
			t.Fatalf("%s: save %d: tensor %s differs (%v)", who, i, w.Name, err)
		}
	}
	return i
}

// readers open the folder as the two kinds of reader do and return the
// save each one loads: shard.Open on the index when there is one (as
// diffusers prefers), else on the single file; and package variant, which
// prefers a complete single file.
func readers(t *testing.T, dir string) (indexFirst, viaVariant int) {
	t.Helper()
	entry := filepath.Join(dir, "model.safetensors.index.json")
	if _, err := os.Stat(entry); err != nil {
		entry = filepath.Join(dir, "model.safetensors")
	}
	c, err := shard.Open(entry)
	if err != nil {
		t.Fatalf("shard.Open(%s): %v\nfolder: %v", filepath.Base(entry), err, testutil.Entries(t, dir))
	}
	indexFirst = loadedSave(t, c, "shard.Open")
	plan, err := variant.ResolveComponent(dir, "")
	if err == nil {
		c, err = plan.Open()
	}
	if err != nil {
		t.Fatalf("variant: %v\nfolder: %v", err, testutil.Entries(t, dir))
	}
	return indexFirst, loadedSave(t, c, "variant")
}

// TestWriteKilled kills a writer that saves in a loop at random instants,
// hundreds of times (half of them with every commit step slowed down, so
// that kills land between the steps of the switch), and checks after each
// kill that both kinds of reader load exactly the complete previous or new
// save, with no repair run first. A final save must then leave only its
// own files: the leftovers of all the killed saves are gone.
func TestWriteKilled(t *testing.T) {
	kills, budget := 300, 4*time.Second
	if testing.Short() {
		kills, budget = 40, time.Second
	}
	root := t.TempDir()
	dir := filepath.Join(root, "ckpt")
	if _, err := writeSave(dir, 0); err != nil {
		t.Fatal(err)
	}
	visible := []int{0} // the saves readers loaded after the last kill
	next := 1           // the number of the next save
	var midSave, disagree, swapped, leftovers int
	deadline := time.Now().Add(budget)
	k := 0
	for ; k < kills && time.Now().Before(deadline); k++ {
		slow := k%2 == 1
		kill := testutil.Kill{Child: "TestKillChild", Dir: dir, Start: next, MaxDelay: 8 * time.Millisecond}
		if slow {
			// A save takes a few milliseconds, more when slowed down.
			kill.Slow, kill.MaxDelay = 300*time.Microsecond, 15*time.Millisecond
		}
		killed := kill.Run(t)

		// Which saves may readers load? The last one begun, or the one
		// before it (what readers loaded before, for the child's first).
		last, ended, _ := killed.Saves()
		var allowed []int
		switch {
		case last < 0:
			allowed = visible
		case ended:
			allowed = []int{last}
		case last == next:
			allowed = append(slices.Clone(visible), last)
		default:
			allowed = []int{last - 1, last}
		}
		if last >= 0 && !ended {
			midSave++
		}
		a, b := readers(t, dir)
		if !slices.Contains(allowed, a) || !slices.Contains(allowed, b) {
			t.Fatalf("kill %d (during save %d, ended %v): readers load saves %d (shard.Open) and %d (variant), want one of %v\nfolder: %v",
				k, last, ended, a, b, allowed, testutil.Entries(t, dir))
		}
		if a != b {
			disagree++ // killed between the switches of single-first and index-first readers
		}
		if ix, err := os.ReadFile(filepath.Join(dir, "model.safetensors.index.json")); err == nil && bytes.Contains(ix, []byte(".swap-")) {
			swapped++ // killed between the switch to swap names and the one back
		}
		visible = slices.Compact([]int{min(a, b), max(a, b)})
		if last >= 0 {
			next = last + 1
		}
		if l, err := shard.Leftovers(dir); err != nil {
			t.Fatal(err)
		} else if len(l) > 0 {
			leftovers++
		}
	}
	t.Logf("%d kills: %d during a save, %d left readers on different saves, %d an index naming swap names, %d leftovers",
		k, midSave, disagree, swapped, leftovers)
	if k < 20 || midSave < k/2 || (k >= 100 && disagree+swapped == 0) {
		t.Errorf("%d kills, %d of them during a save, %d between two switches", k, midSave, disagree+swapped)
	}

	// One more save removes every leftover of the killed ones.
	res, err := writeSave(dir, next)
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(res.Files)
	if res.Index != "" {
		want = append(want, res.Index)
	}
	slices.Sort(want)
	if got := testutil.Entries(t, dir); !slices.Equal(got, want) || len(res.Warnings) != 0 {
		t.Errorf("after a final save the folder holds %v, want %v (warnings %v)", got, want, res.Warnings)
	}
	if l, err := shard.Leftovers(dir); err != nil || len(l) != 0 {
		t.Errorf("after a final save: leftovers %v, %v", l, err)
	}
}
