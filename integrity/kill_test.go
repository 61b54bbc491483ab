//go:build unix

package integrity_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/integrity"
	"github.com/ckpt-go/ckpt/internal/testutil"
	"github.com/ckpt-go/ckpt/safetensors"
)

// killSet is the checkpoint of the kill test: four shards of 256 KiB
// without checksums, written as transformers writes them (mode 0640).
func killSet(t testing.TB) map[string][]byte {
	t.Helper()
	var ts []ckpttest.Tensor
	for i := range 8 {
		ts = append(ts, ckpttest.T(fmt.Sprintf("layers.%d.weight", i), dtype.BF16, 256, 256))
	}
	dir := t.TempDir()
	if _, err := ckpttest.WriteWeights(dir, ckpttest.Weights{Shards: 4, Tensors: ts, Metadata: map[string]string{"format": "pt"}}); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = b
	}
	return files
}

// TestChecksumKillChild is the process TestChecksumKilled kills: in a
// loop, it puts the files of killSet back into its folder (each replaced
// by a rename: every file is at all times a whole old or new one), then
// adds checksums to them.
func TestChecksumKillChild(t *testing.T) {
	c := testutil.AsKillChild(t, "TestChecksumKilled")
	files := killSet(t)
	c.Loop(t, func(i int) error {
		for name, b := range files {
			tmp := filepath.Join(c.Dir, "."+name+".restore")
			if err := os.WriteFile(tmp, b, 0o640); err != nil {
				return err
			}
			if err := os.Chmod(tmp, 0o640); err != nil {
				return err
			}
			if err := os.Rename(tmp, filepath.Join(c.Dir, name)); err != nil {
				return err
			}
		}
		c.Log("r", i) // restored: the checksums are being added
		_, err := integrity.Checksum(context.Background(), c.Dir)
		return err
	})
}

// TestChecksumKilled kills Checksum at random instants while it rewrites
// a set, and checks after each kill, with no repair first, that every
// file is whole: the old file or the new one, the same tensors and
// metadata, its mode kept, its checksums (when it has them) complete and
// right, the set verifying without a problem. A last Checksum then
// completes the set.
func TestChecksumKilled(t *testing.T) {
	kills, budget := 200, 4*time.Second
	if testing.Short() {
		kills, budget = 30, time.Second
	}
	files := killSet(t)
	want := map[string]map[string][]byte{}
	for name, b := range files {
		if !strings.HasSuffix(name, ".safetensors") {
			continue
		}
		f, err := safetensors.OpenBytes(b)
		if err != nil {
			t.Fatal(err)
		}
		want[name] = map[string][]byte{}
		for n, tt := range f.Tensors() {
			b, _ := tt.Bytes()
			want[name][n] = b
		}
	}
	dir := t.TempDir()
	deadline := time.Now().Add(budget)
	next, k, mixed := 0, 0, 0
	for ; k < kills && time.Now().Before(deadline); k++ {
		killed := testutil.Kill{Child: "TestChecksumKillChild", Dir: dir, Start: next, MaxDelay: 30 * time.Millisecond}.Run(t)
		last, _, _ := killed.Saves()
		if last >= 0 {
			next = last + 1
		}
		with, restoring := 0, false
		for name, tensors := range want {
			path := filepath.Join(dir, name)
			st, err := os.Stat(path)
			if os.IsNotExist(err) && last <= 0 {
				restoring = true // killed before the first restore was whole
				continue
			}
			if err != nil {
				t.Fatalf("kill %d: %v", k, err)
			}
			if st.Mode().Perm() != 0o640 {
				t.Fatalf("kill %d: %s has mode %v, want 0640", k, name, st.Mode().Perm())
			}
			f, err := safetensors.Open(path)
			if err != nil {
				t.Fatalf("kill %d: %s does not load: %v", k, name, err)
			}
			sums, err := f.Header().Checksums()
			if err != nil {
				t.Fatalf("kill %d: %s: %v", k, name, err)
			}
			if sums != nil {
				with++
			}
			if f.Metadata()["format"] != "pt" || f.Len() != len(tensors) {
				t.Fatalf("kill %d: %s: metadata %v, %d tensors", k, name, f.Metadata(), f.Len())
			}
			for n, b := range tensors {
				tt, err := f.Tensor(n)
				if err != nil {
					t.Fatalf("kill %d: %s: %v", k, name, err)
				}
				got, _ := tt.Bytes()
				if !bytes.Equal(got, b) {
					t.Fatalf("kill %d: %s: tensor %s differs", k, name, n)
				}
			}
			f.Close()
		}
		if with > 0 && with < len(want) {
			mixed++
		}
		if _, err := os.Stat(filepath.Join(dir, index)); err == nil && !restoring {
			if rep := verify(t, dir); !rep.OK() {
				t.Fatalf("kill %d: %v", k, messages(rep))
			}
		}
	}
	t.Logf("%d kills, %d of them with old and new files side by side", k, mixed)
	if k < 10 || mixed == 0 {
		t.Errorf("%d kills, %d mid-set: the kills did not land inside Checksum", k, mixed)
	}
	checksum(t, dir)
	wantOK(t, verify(t, dir, integrity.RequireChecksums()))
}
