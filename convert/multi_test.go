package convert_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ckpt-go/ckpt/convert"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/testutil"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/shard"
)

// rankTensors are rank's part of save i: names carry both numbers, and
// dtypes and shapes vary by rank (world ranks hold uneven parts).
func rankTensors(t testing.TB, i, rank int) []safetensors.TensorData {
	dts := []dtype.DType{dtype.F32, dtype.BF16, dtype.F8_E4M3, dtype.I64}
	var ts []safetensors.TensorData
	for j := range 1 + rank%3 {
		ts = append(ts, tensor(t, fmt.Sprintf("s%d.r%d.t%d", i, rank, j), dts[(rank+j)%len(dts)], int64(4+rank), 8))
	}
	return ts
}

// allTensors is save i of world ranks, whole.
func allTensors(t testing.TB, i, world int) []safetensors.TensorData {
	var out []safetensors.TensorData
	for r := range world {
		out = append(out, rankTensors(t, i, r)...)
	}
	return out
}

// saveRanks runs SaveShard for the given ranks of save i at once, as
// goroutines, and fails on any error.
func saveRanks(t testing.TB, loc string, i, world int, ranks ...int) []*convert.ShardResult {
	t.Helper()
	if ranks == nil {
		for r := range world {
			ranks = append(ranks, r)
		}
	}
	res := make([]*convert.ShardResult, len(ranks))
	errs := make([]error, len(ranks))
	var wg sync.WaitGroup
	for k, r := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[k], errs[k] = convert.SaveShard(context.Background(), loc, r, world, rankTensors(t, i, r), convert.ShardOptions{Step: int64(i)})
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return res
}

func TestSaveShardCommit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt") // created by the ranks
	res := saveRanks(t, dir, 1, 4)
	for r, sr := range res {
		if want := fmt.Sprintf("model-%05d-of-00004.safetensors", r+1); sr.File != want || sr.Rank != r || sr.Save != res[0].Save {
			t.Errorf("rank %d: %+v, want file %s and one save token", r, sr, want)
		}
	}
	// Shards and markers, but no index: nothing to load yet.
	if _, err := os.Stat(filepath.Join(dir, "model.safetensors.index.json")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("an index before Commit: %v", err)
	}
	cr, err := convert.Commit(context.Background(), dir, convert.CommitOptions{VerifyData: true})
	if err != nil {
		t.Fatal(err)
	}
	want := allTensors(t, 1, 4)
	if cr.World != 4 || cr.Step != 1 || cr.Tensors != len(want) || len(cr.Files) != 4 || cr.Index != "model.safetensors.index.json" {
		t.Errorf("commit result %+v", cr)
	}
	checkLoaded(t, dir, want)
	// Only the checkpoint is left: no marker, no temporary, no lock.
	if got, wantFiles := testutil.Entries(t, dir), append(slices.Clone(cr.Files), cr.Index); !slices.Equal(got, sorted(wantFiles)) {
		t.Errorf("folder %v, want %v", got, sorted(wantFiles))
	}
	// The shards carry the step.
	h, err := safetensors.ReadHeaderFile(filepath.Join(dir, cr.Files[2]))
	if err != nil || h.Metadata[convert.MetaStep] != "1" || h.Metadata[convert.MetaFormat] != "pt" {
		t.Errorf("shard metadata %v, %v", h.Metadata, err)
	}
	// A second Commit finds nothing to commit.
	if _, err := convert.Commit(context.Background(), dir, convert.CommitOptions{}); !errors.Is(err, convert.ErrIncomplete) {
		t.Errorf("second Commit: %v", err)
	}
}

func sorted(s []string) []string { s = slices.Clone(s); slices.Sort(s); return s }

// TestCommitReplaces: ranks saving onto a committed checkpoint (a single
// file, then an index) leave it loaded until Commit switches.
func TestCommitReplaces(t *testing.T) {
	for _, prev := range []string{"single", "sharded", "multi"} {
		t.Run(prev, func(t *testing.T) {
			dir := t.TempDir()
			old := allTensors(t, 7, 3)
			switch prev {
			case "single", "sharded":
				max := int64(1 << 20)
				if prev == "sharded" {
					max = 200
				}
				if _, err := shard.Write(context.Background(), dir, "model", "", old, nil, shard.WithMaxShardSize(max)); err != nil {
					t.Fatal(err)
				}
			case "multi":
				saveRanks(t, dir, 7, 3)
				if _, err := convert.Commit(context.Background(), dir, convert.CommitOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			before := testutil.Entries(t, dir)
			res := saveRanks(t, dir, 8, 4)
			for _, sr := range res {
				if !strings.Contains(sr.File, ".swap-"+sr.Save+".") {
					t.Errorf("rank %d wrote %s over a committed checkpoint, want a swap name", sr.Rank, sr.File)
				}
			}
			checkLoaded(t, dir, old) // not switched yet
			cr, err := convert.Commit(context.Background(), dir, convert.CommitOptions{})
			if err != nil {
				t.Fatal(err)
			}
			checkLoaded(t, dir, allTensors(t, 8, 4))
			got := testutil.Entries(t, dir)
			if want := sorted(append(slices.Clone(cr.Files), cr.Index)); !slices.Equal(got, want) {
				t.Errorf("folder %v, want %v (before: %v)", got, want, before)
			}
			if len(cr.Replaced) == 0 {
				t.Errorf("nothing replaced: %+v", cr)
			}
		})
	}
}

// TestCommitMissingRank: a rank that never saved, or whose shard is
// damaged, makes Commit fail naming it, and the previous checkpoint stays
// the one loaded; once the rank has saved, Commit succeeds.
func TestCommitMissingRank(t *testing.T) {
	dir := t.TempDir()
	old := allTensors(t, 1, 2)
	saveRanks(t, dir, 1, 2)
	if _, err := convert.Commit(context.Background(), dir, convert.CommitOptions{}); err != nil {
		t.Fatal(err)
	}
	res := saveRanks(t, dir, 2, 4, 0, 1, 3)
	_, err := convert.Commit(context.Background(), dir, convert.CommitOptions{})
	var ce *convert.Error
	if !errors.As(err, &ce) || ce.Kind != convert.ErrIncomplete || !slices.Equal(ce.Ranks, []int{2}) || !strings.Contains(err.Error(), "rank 2") {
		t.Fatalf("Commit with rank 2 missing: %v", err)
	}
	checkLoaded(t, dir, old)

	// Damaged shards: truncated, a header byte changed, data changed
	// (found only with VerifyData).
	shardOf := func(r int) string {
		for _, sr := range res {
			if sr.Rank == r {
				return filepath.Join(dir, sr.File)
			}
		}
		t.Fatalf("no rank %d", r)
		return ""
	}
	saveRanks(t, dir, 2, 4, 2)
	for _, tc := range []struct {
		name   string
		rank   int
		damage func(b []byte) []byte
		verify bool
	}{
		{"truncated", 1, func(b []byte) []byte { return b[:len(b)-1] }, false},
		{"header", 3, func(b []byte) []byte { b[20] ^= 1; return b }, false},
		{"data", 0, func(b []byte) []byte { b[len(b)-1] ^= 1; return b }, true},
	} {
		p := shardOf(tc.rank)
		orig, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, tc.damage(slices.Clone(orig)), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err = convert.Commit(context.Background(), dir, convert.CommitOptions{VerifyData: tc.verify})
		if !errors.As(err, &ce) || ce.Kind != convert.ErrIncomplete || !slices.Equal(ce.Ranks, []int{tc.rank}) {
			t.Fatalf("%s shard of rank %d: %v", tc.name, tc.rank, err)
		}
		checkLoaded(t, dir, old)
		os.WriteFile(p, orig, 0o644)
	}
	if _, err := convert.Commit(context.Background(), dir, convert.CommitOptions{VerifyData: true}); err != nil {
		t.Fatal(err)
	}
	checkLoaded(t, dir, allTensors(t, 2, 4))
}

// TestCommitNewestSave: markers of an earlier save onto the same
// checkpoint never fill in for a rank missing from the newest one.
func TestCommitNewestSave(t *testing.T) {
	dir := t.TempDir()
	saveRanks(t, dir, 1, 3)       // never committed
	saveRanks(t, dir, 2, 3, 0, 2) // rank 1 missing
	_, err := convert.Commit(context.Background(), dir, convert.CommitOptions{})
	var ce *convert.Error
	if !errors.As(err, &ce) || ce.Kind != convert.ErrIncomplete || !slices.Equal(ce.Ranks, []int{1}) {
		t.Fatalf("Commit: %v", err)
	}
	saveRanks(t, dir, 2, 3, 1)
	cr, err := convert.Commit(context.Background(), dir, convert.CommitOptions{})
	if err != nil || cr.Step != 2 {
		t.Fatalf("Commit: %+v, %v", cr, err)
	}
	checkLoaded(t, dir, allTensors(t, 2, 3))
}

func TestCommitDuplicateTensor(t *testing.T) {
	dir := t.TempDir()
	a := []safetensors.TensorData{tensor(t, "w", dtype.F32, 2, 2), tensor(t, "a", dtype.F32, 2)}
	b := []safetensors.TensorData{tensor(t, "b", dtype.F32, 2), tensor(t, "w", dtype.F32, 2, 2)}
	for r, ts := range [][]safetensors.TensorData{a, b} {
		if _, err := convert.SaveShard(context.Background(), dir, r, 2, ts, convert.ShardOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := convert.Commit(context.Background(), dir, convert.CommitOptions{})
	var ce *convert.Error
	if !errors.As(err, &ce) || ce.Kind != convert.ErrInvalid || !strings.HasPrefix(ce.Msg, "duplicate: ") || ce.Tensor != "w" || !slices.Equal(ce.Ranks, []int{0, 1}) {
		t.Fatalf("Commit: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "model.safetensors.index.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("index written: %v", err)
	}
}

// TestCommitConflict: a checkpoint committed by another writer after the
// ranks saved makes Commit refuse.
func TestCommitConflict(t *testing.T) {
	dir := t.TempDir()
	saveRanks(t, dir, 1, 2)
	other := allTensors(t, 9, 1)
	if _, err := shard.Write(context.Background(), dir, "model", "", other, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := convert.Commit(context.Background(), dir, convert.CommitOptions{}); !errors.Is(err, convert.ErrConflict) {
		t.Fatalf("Commit: %v", err)
	}
	checkLoaded(t, dir, other)
}

func TestSaveShardOptions(t *testing.T) {
	dir := t.TempDir()
	ts := rankTensors(t, 1, 0)
	for _, tc := range []struct {
		rank, world int
		opts        convert.ShardOptions
		kind        convert.ErrorKind
		msg         string // what the message must say
	}{
		{2, 2, convert.ShardOptions{}, convert.ErrOption, ""},
		{-1, 2, convert.ShardOptions{}, convert.ErrOption, ""},
		{0, 0, convert.ShardOptions{}, convert.ErrOption, ""},
		{0, 100000, convert.ShardOptions{}, convert.ErrOption, ""},
		{0, 1, convert.ShardOptions{Prefix: "a.b"}, convert.ErrOption, ""},
		{0, 1, convert.ShardOptions{Metadata: map[string]string{"step": "3"}}, convert.ErrInvalid, "metadata step"},
	} {
		_, err := convert.SaveShard(context.Background(), dir, tc.rank, tc.world, ts, tc.opts)
		if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("rank %d world %d %+v: %v, want %v", tc.rank, tc.world, tc.opts, err, tc.kind)
		}
	}
	bad := []safetensors.TensorData{{Name: "x", DType: dtype.F32, Shape: []int64{2}, Data: make([]byte, 4)}}
	_, err := convert.SaveShard(context.Background(), dir, 1, 3, bad, convert.ShardOptions{})
	var ce *convert.Error
	if !errors.As(err, &ce) || ce.Kind != convert.ErrInvalid || !strings.HasPrefix(ce.Msg, "data length: ") || !slices.Equal(ce.Ranks, []int{1}) {
		t.Errorf("short data: %v", err)
	}
	if got := testutil.Entries(t, dir); len(got) != 0 {
		t.Errorf("refused saves wrote %v", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := convert.SaveShard(ctx, dir, 0, 1, ts, convert.ShardOptions{}); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled: %v", err)
	}
	if _, err := convert.Commit(context.Background(), dir, convert.CommitOptions{Prefix: "-x"}); !errors.Is(err, convert.ErrOption) {
		t.Errorf("bad prefix: %v", err)
	}
}
