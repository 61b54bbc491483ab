//go:build unix

package convert_test

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/convert"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/testutil"
	"github.com/ckpt-go/ckpt/safetensors"
)

// killNoSwapEnv tells the child of TestSaveKilled to save without the
// atomic folder swap.
const killNoSwapEnv = "CKPT_SAVE_KILL_NOSWAP"

// killSave is save number i of the kill test: its tensors carry the number
// in their names; its layout cycles through a sharded set, a single file
// and an FP8 set; every third save (i%3 == 2) replaces the checkpoint
// "latest" (Overwrite), the others write checkpoint-i. KeepLast is 3.
func killSave(t testing.TB, i int) ([]safetensors.TensorData, convert.SaveOptions) {
	opts := convert.SaveOptions{Step: int64(i), KeepLast: 3, MaxShardSize: [3]int64{256, 1 << 20, 512}[i%3]}
	if i%3 == 2 {
		opts.Name, opts.Overwrite = "latest", true
	}
	dt := [3]dtype.DType{dtype.F32, dtype.BF16, dtype.F8_E4M3}[i%3]
	var ts []safetensors.TensorData
	for j := range 4 {
		ts = append(ts, tensor(t, fmt.Sprintf("s%d.t%d", i, j), dt, 8, 16))
	}
	return ts, opts
}

// TestSaveKillChild is the trainer that TestSaveKilled runs and kills: it
// saves in a loop, logging each save's number before it begins and after
// it ends, until it is killed.
func TestSaveKillChild(t *testing.T) {
	c := testutil.AsKillChild(t, "TestSaveKilled")
	if c.Slow > 0 {
		convert.SetHook(func(string) { time.Sleep(c.Slow) })
	}
	if os.Getenv(killNoSwapEnv) != "" {
		convert.SetExchange(func(a, b string) error { return convert.ErrExchangeUnsupported })
	}
	c.Loop(t, func(i int) error {
		ts, opts := killSave(t, i)
		_, err := convert.Save(context.Background(), c.Dir, ts, opts)
		return err
	})
}

// loadedSave returns the number of the save that the checkpoint folder
// holds, failing unless it holds exactly the complete tensors of one save,
// under the name that save gives it.
func loadedSave(t *testing.T, folder string) int {
	t.Helper()
	m, err := ckpt.Open(folder, ckpt.WithDType(ckpt.AsStored))
	if err != nil {
		var entries any = "(an s3:// location)"
		if !strings.HasPrefix(folder, "s3://") {
			entries = testutil.Entries(t, folder)
		}
		t.Fatalf("%s: %v\nfolder: %v", folder, err, entries)
	}
	defer m.Close()
	names := m.Names()
	num, _, _ := strings.Cut(strings.TrimPrefix(slices.Min(names), "s"), ".")
	i, err := strconv.Atoi(num)
	if err != nil {
		t.Fatalf("%s: tensor %q", folder, names[0])
	}
	want, opts := killSave(t, i)
	if name := cmpOr(opts.Name, "checkpoint-"+strconv.Itoa(i)); name != filepath.Base(folder) {
		t.Fatalf("%s holds save %d, which is named %s", folder, i, name)
	}
	if len(names) != len(want) {
		t.Fatalf("%s: %d tensors, save %d has %d", folder, len(names), i, len(want))
	}
	for _, w := range want {
		got, err := m.LoadTensor(context.Background(), w.Name)
		if err != nil || !bytes.Equal(got.Bytes(), w.Data) {
			t.Fatalf("%s: save %d: tensor %s differs (%v)", folder, i, w.Name, err)
		}
	}
	return i
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// TestSaveKilled kills a trainer that saves in a loop at random instants,
// hundreds of times (half of them with every step of a save slowed down,
// so that kills land between the steps; a third of them without the atomic
// folder swap), and checks after each kill, with no repair run first, that
// every visible folder is one complete save under its own name, that at
// most KeepLast+1 are visible, and that the three newest committed saves
// are (one per name: "latest" holds the newest save that replaced it; only
// the fallback without the swap may have it moved aside while the killed
// save was replacing it). A final
// save must then leave only checkpoints: every leftover is gone.
func TestSaveKilled(t *testing.T) {
	kills, budget := 300, 5*time.Second
	if testing.Short() {
		kills, budget = 40, time.Second
	}
	dir := filepath.Join(t.TempDir(), "run")
	// Save creates it, but a child may be killed before its first save.
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	next := 0                     // the next save's number
	committed := map[string]int{} // checkpoint name -> the newest save committed under it
	var midSave, hidden, aside int
	latestAside := false // the last check found "latest" moved aside
	deadline := time.Now().Add(budget)
	k := 0
	for ; k < kills && time.Now().Before(deadline); k++ {
		slow, noSwap := k%2 == 1, k%3 == 1
		kill := testutil.Kill{Child: "TestSaveKillChild", Dir: dir, Start: next, MaxDelay: 10 * time.Millisecond}
		if slow {
			kill.Slow, kill.MaxDelay = 200*time.Microsecond, 20*time.Millisecond
		}
		if noSwap {
			kill.Env = []string{killNoSwapEnv + "=1"}
		}
		killed := kill.Run(t)
		last, ended, completed := killed.Saves()
		if last >= 0 && !ended {
			midSave++
		}

		// Every visible folder is one complete save under its name.
		visible := map[string]int{}
		for _, e := range testutil.Entries(t, dir) {
			if strings.HasPrefix(e, ".ckpt-tmp-") || strings.HasPrefix(e, ".ckpt-del-") || strings.HasPrefix(e, ".ckpt-old-") {
				hidden++
			}
			if strings.HasPrefix(e, ".") {
				if strings.HasPrefix(e, ".ckpt-old-") {
					aside++
				}
				continue
			}
			i := loadedSave(t, filepath.Join(dir, e))
			if i > max(last, next-1) {
				t.Fatalf("kill %d: %s holds save %d, never begun", k, e, i)
			}
			visible[e] = i
			committed[e] = max(committed[e], i)
		}
		for _, i := range completed {
			_, opts := killSave(t, i)
			name := cmpOr(opts.Name, "checkpoint-"+strconv.Itoa(i))
			committed[name] = max(committed[name], i)
		}
		if len(visible) > 4 {
			t.Fatalf("kill %d: %d checkpoints visible with KeepLast 3: %v", k, len(visible), testutil.Entries(t, dir))
		}
		// The three newest committed saves (one per name) are visible,
		// except a "latest" that the fallback has moved aside while the
		// save killed was replacing it: it stays aside until a later save
		// restores it, so also after a child that completed no save.
		names := slices.Collect(maps.Keys(committed))
		slices.SortFunc(names, func(a, b string) int { return committed[b] - committed[a] })
		_, latestVisible := visible["latest"]
		for _, name := range names[:min(3, len(names))] {
			i, ok := visible[name]
			switch {
			case ok && i == committed[name]:
			case !ok && name == "latest" && noSwap && !ended && last%3 == 2:
			case !ok && name == "latest" && latestAside && len(completed) == 0:
			default:
				cps, _ := convert.Checkpoints(dir)
				t.Fatalf("kill %d (during save %d, ended %v, swap %v): %s should hold save %d: %v\n%+v\nlog: %s",
					k, last, ended, !noSwap, name, committed[name], testutil.Entries(t, dir), cps, killed.Log)
			}
		}
		latestAside = committed["latest"] > 0 && !latestVisible
		if last >= 0 {
			next = last + 1
		}
	}
	t.Logf("%d kills: %d during a save, %d hidden folders seen (%d moved aside)", k, midSave, hidden, aside)
	if k < 20 || midSave < k/2 {
		t.Errorf("%d kills, %d of them during a save", k, midSave)
	}

	// One more save removes every leftover of the killed ones.
	ts, opts := killSave(t, next)
	p, err := convert.Save(context.Background(), dir, ts, opts)
	if err != nil {
		t.Fatal(err)
	}
	res, _ := p.Wait()
	for _, e := range testutil.Entries(t, dir) {
		if strings.HasPrefix(e, ".") {
			t.Errorf("after a final save the folder holds %s (%v)", e, res.Leftovers)
		}
	}
	// KeepLast 3 keeps the three newest names, or as many as were ever
	// committed: on a slow machine most kills land before a save ends.
	committed[cmpOr(opts.Name, "checkpoint-"+strconv.Itoa(next))] = next
	want := min(3, len(committed))
	if cps, err := convert.Checkpoints(dir); err != nil || len(cps) != want || cps[len(cps)-1].Step != int64(next) {
		t.Errorf("after a final save: %+v (want %d), %v", cps, want, err)
	}
}
