package convert_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/ckpt-go/ckpt/convert"
	"github.com/ckpt-go/ckpt/internal/testutil"
	"github.com/ckpt-go/ckpt/shard"
)

// FuzzRankMarker plants arbitrary bytes as rank 1's completion marker of a
// save of two ranks: Commit never panics, and either commits exactly the
// two ranks' tensors or fails with ErrIncomplete or ErrConflict, writing
// no index. (The ranks' files are saved once and copied into each run's
// folder, so that a run's coverage does not depend on goroutine timing.)
func FuzzRankMarker(f *testing.F) {
	src := f.TempDir()
	saveRanks(f, src, 1, 2)
	files := map[string][]byte{}
	for _, e := range testutil.Entries(f, src) {
		b, err := os.ReadFile(filepath.Join(src, e))
		if err != nil {
			f.Fatal(err)
		}
		files[e] = b
	}
	const marker = ".model-00002-of-00002.ckpt-rank.json"
	real := files[marker]
	if real == nil {
		f.Fatalf("no %s in %v", marker, testutil.Entries(f, src))
	}
	f.Add(real)
	f.Add(bytes.Replace(real, []byte(`"rank": 1`), []byte(`"rank": 0`), 1))
	f.Add(bytes.Replace(real, []byte(`"world": 2`), []byte(`"world": 99999`), 1))
	f.Add(bytes.Replace(real, []byte(`"size": `), []byte(`"size": 1`), 1))
	f.Add(bytes.Replace(real, []byte(`"name": "s1.r1.t0"`), []byte(`"name": "s1.r0.t0"`), 1))
	f.Add([]byte(`{"format": "ckpt.rank/v1", "prefix": "model", "rank": 1, "world": 2, "file": "model-00002-of-00002.safetensors", "tensors": null}`))
	f.Add([]byte("\xff"))
	want := allTensors(f, 1, 2)
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		for name, data := range files {
			if name == marker {
				data = b
			}
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		_, err := convert.Commit(context.Background(), dir, convert.CommitOptions{})
		if err == nil {
			// Read back with package shard (the loader's worker pools
			// would make the coverage of runs vary).
			ck, err := shard.Open(filepath.Join(dir, "model.safetensors.index.json"))
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			if ck.Len() != len(want) {
				t.Fatalf("%d tensors committed, want %d", ck.Len(), len(want))
			}
			for _, w := range want {
				tn, err := ck.Tensor(w.Name)
				if err != nil {
					t.Fatal(err)
				}
				if got, err := tn.Bytes(); err != nil || !bytes.Equal(got, w.Data) {
					t.Fatalf("tensor %s differs (%v)", w.Name, err)
				}
			}
			return
		}
		if !errors.Is(err, convert.ErrIncomplete) && !errors.Is(err, convert.ErrConflict) {
			t.Fatalf("Commit: %v", err)
		}
		if _, err := os.Stat(filepath.Join(dir, "model.safetensors.index.json")); err == nil {
			t.Fatal("a failed Commit wrote the index")
		}
	})
}
