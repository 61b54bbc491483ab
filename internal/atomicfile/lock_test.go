package atomicfile

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/ckpt-go/ckpt/internal/testutil"
)

func needFlock(t *testing.T) {
	t.Helper()
	if !flockSupported {
		t.Skip("no flock on this platform")
	}
}

// A second locker waits for the first, gives up when its context ends,
// and gets the lock once the first unlocks; the lock file is removed.
func TestLockSerializes(t *testing.T) {
	needFlock(t)
	dir := t.TempDir()
	a, err := LockTarget(context.Background(), dir, "f.bin")
	if err != nil {
		t.Fatal(err)
	}
	if !a.Exclusive() || !Held(dir, "f.bin") || filepath.Base(a.Path()) != ".f.bin.lock" {
		t.Fatalf("lock %+v, held %v", a, Held(dir, "f.bin"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if _, err := LockTarget(ctx, dir, "f.bin"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second lock while held: %v", err)
	}
	got := make(chan error, 1)
	go func() {
		b, err := LockTarget(context.Background(), dir, "f.bin")
		if err == nil {
			err = b.Unlock()
		}
		got <- err
	}()
	time.Sleep(10 * time.Millisecond)
	select {
	case err := <-got:
		t.Fatalf("second lock taken while held: %v", err)
	default:
	}
	if err := a.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if Held(dir, "f.bin") {
		t.Error("held after unlock")
	}
	if names := testutil.Entries(t, dir); len(names) != 0 {
		t.Errorf("left %v", names)
	}
	if err := a.Unlock(); err != nil {
		t.Errorf("second Unlock: %v", err)
	}
}

// A lock file left by a killed holder is reused and then removed; a
// symlink planted as the lock file is refused, not followed.
func TestLockStaleAndSymlink(t *testing.T) {
	needFlock(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, ".f.bin.lock"), nil, 0o644)
	if Held(dir, "f.bin") {
		t.Fatal("a lock file nobody holds reads as held")
	}
	l, err := LockTarget(context.Background(), dir, "f.bin")
	if err != nil {
		t.Fatal(err)
	}
	l.Unlock()
	if names := testutil.Entries(t, dir); len(names) != 0 {
		t.Errorf("left %v", names)
	}
	victim := filepath.Join(t.TempDir(), "victim")
	os.Symlink(victim, filepath.Join(dir, ".g.lock"))
	if _, err := LockTarget(context.Background(), dir, "g"); err == nil {
		t.Fatal("symlinked lock file accepted")
	}
	if _, err := os.Lstat(victim); err == nil {
		t.Error("the symlink's target was created")
	}
}

// Create removes the temporaries of its own target left by killed writes,
// never those of other targets nor those of a live write of the same
// target (it waits for that one instead).
func TestCreateRemovesStaleTemps(t *testing.T) {
	needFlock(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "f.bin")
	for _, n := range []string{".f.bin.tmp-123", ".f.bin.tmp-9", ".f.bin.tmp-x", ".g.bin.tmp-1", ".f.bin.tmp-1.tmp-2x", "f.bin.tmp-5"} {
		os.WriteFile(filepath.Join(dir, n), []byte("stale"), 0o644)
	}
	live, err := Create(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{".f.bin.lock", ".f.bin.tmp-1.tmp-2x", ".f.bin.tmp-x", ".g.bin.tmp-1", filepath.Base(live.Name()), "f.bin.tmp-5"}
	slices.Sort(want)
	if got := testutil.Entries(t, dir); !slices.Equal(got, want) {
		t.Fatalf("after Create: %v, want %v", got, want)
	}
	// A second writer of the same file waits; the live temporary survives.
	done := make(chan *File, 1)
	go func() {
		f, err := Create(context.Background(), path)
		if err != nil {
			t.Error(err)
		}
		done <- f
	}()
	time.Sleep(20 * time.Millisecond)
	if _, err := os.Stat(live.Name()); err != nil {
		t.Fatal("a live write's temporary file was removed:", err)
	}
	live.Write([]byte("one"))
	if err := live.Commit(); err != nil {
		t.Fatal(err)
	}
	second := <-done
	if second == nil {
		t.FailNow()
	}
	second.Write([]byte("two"))
	if err := second.Commit(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "two" {
		t.Errorf("content %q", b)
	}
	if got := testutil.Entries(t, dir); slices.Contains(got, ".f.bin.lock") || len(got) != 5 {
		t.Errorf("after both commits: %v", got)
	}
}

func TestTempNames(t *testing.T) {
	for _, tc := range []struct {
		entry, target string
		ok            bool
	}{
		{".model.safetensors.tmp-123", "model.safetensors", true},
		{".a.tmp-1.tmp-22", "a.tmp-1", true},
		{".a.tmp-", "", false},
		{".a.tmp-1x", "", false},
		{"a.tmp-1", "", false},
		{"..tmp-1", "", false},
	} {
		got, ok := TempTarget(tc.entry)
		if got != tc.target || ok != tc.ok {
			t.Errorf("TempTarget(%q) = %q, %v", tc.entry, got, ok)
		}
		if ok && !IsTempOf(tc.entry, got) {
			t.Errorf("IsTempOf(%q, %q) false", tc.entry, got)
		}
	}
}
