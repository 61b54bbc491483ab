package setwrite

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/testutil"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/sink"
)

// noLinks is a folder sink without hard links, as an object store is to
// Commit.
type noLinks struct{ sink.Sink }

// failRemove is a folder sink whose removals of one file fail.
type failRemove struct {
	sink.Sink
	name string
}

func (s failRemove) Remove(ctx context.Context, name string) error {
	if name == s.name {
		return errors.New("injected failure")
	}
	return s.Sink.Remove(ctx, name)
}

func specsOf(n int) []safetensors.TensorSpec {
	var out []safetensors.TensorSpec
	for i := range n {
		out = append(out, safetensors.TensorSpec{Name: string(rune('a' + i)), DType: dtype.F32, Shape: []int64{4}})
	}
	return out
}

func zeros(s safetensors.TensorSpec, w io.Writer) error {
	n, _ := s.ByteLen()
	_, err := w.Write(make([]byte, n))
	return err
}

func TestCommit(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	set := func(s sink.Sink, n int, replace bool) *Set {
		return &Set{Sink: s, Prefix: "model", Specs: specsOf(n), Write: zeros, MaxShard: 16, Replace: replace}
	}
	res, err := Commit(ctx, set(sink.NewDir(dir), 2, false))
	if err != nil {
		t.Fatal(err)
	}
	std := []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}
	if !slices.Equal(res.Files, std) || res.Index != "model.safetensors.index.json" || res.Total != 32 {
		t.Fatalf("first set: %+v", res)
	}

	// A set there is refused without Replace, and nothing is written.
	_, err = Commit(ctx, set(sink.NewDir(dir), 2, false))
	var e *Error
	if !errors.As(err, &e) || e.Stage != StageExists || len(e.Files) != 3 {
		t.Fatalf("without Replace: %v", err)
	}

	// Replacing it goes through swap names: kept without hard links (as on
	// an object store), moved back to the standard names with them.
	res, err = Commit(ctx, set(noLinks{sink.NewDir(dir)}, 2, true))
	if err != nil || !strings.Contains(res.Files[0], ".swap-") || len(res.Replaced) != 3 {
		t.Fatalf("without links: %+v, %v", res, err)
	}
	res, err = Commit(ctx, set(sink.NewDir(dir), 2, true))
	if err != nil || !slices.Equal(res.Files, std) || len(res.Warnings) != 0 {
		t.Fatalf("with links: %+v, %v", res, err)
	}
	if got := testutil.Entries(t, dir); !slices.Equal(got, append(slices.Clone(std), res.Index)) {
		t.Fatalf("folder %v", got)
	}

	// A single file whose previous index cannot be removed (it would
	// shadow it for readers that follow indexes) is removed again: the
	// previous set is untouched.
	before := testutil.Entries(t, dir)
	_, err = Commit(ctx, set(failRemove{sink.NewDir(dir), "model.safetensors.index.json"}, 1, true))
	if !errors.As(err, &e) || e.Stage != StageSwitch || e.InPlace || !strings.Contains(err.Error(), "untouched") {
		t.Fatalf("shadow not removed: %v", err)
	}
	if got := testutil.Entries(t, dir); !slices.Equal(got, before) {
		t.Fatalf("folder %v, before %v", got, before)
	}
	res, err = Commit(ctx, set(sink.NewDir(dir), 1, true))
	if err != nil || !slices.Equal(res.Files, []string{"model.safetensors"}) || res.Index != "" {
		t.Fatalf("single file: %+v, %v", res, err)
	}
	if got := testutil.Entries(t, dir); !slices.Equal(got, []string{"model.safetensors"}) {
		t.Fatalf("folder %v", got)
	}

	// A failing data function leaves the previous set as it was.
	bad := set(sink.NewDir(dir), 3, true)
	bad.Write = func(s safetensors.TensorSpec, w io.Writer) error {
		if s.Name == "c" {
			return fs.ErrPermission
		}
		return zeros(s, w)
	}
	_, err = Commit(ctx, bad)
	var te *TensorError
	if !errors.As(err, &e) || e.Stage != StageWrite || !errors.As(err, &te) || te.Tensor != "c" {
		t.Fatalf("failing data: %v", err)
	}
	if got := testutil.Entries(t, dir); !slices.Equal(got, []string{"model.safetensors"}) {
		t.Fatalf("after a failure: folder %v", got)
	}
}

// logged records the changes a Batched folder sink makes and its
// barriers, in order.
type logged struct {
	*sink.Dir
	log *[]string
}

func (s logged) Create(ctx context.Context, name string, exclusive bool) (sink.File, error) {
	f, err := s.Dir.Create(ctx, name, exclusive)
	if err != nil {
		return nil, err
	}
	return loggedFile{f.(sink.Patchable), s.log, name}, nil
}

func (s logged) Remove(ctx context.Context, name string) error {
	*s.log = append(*s.log, "remove "+name)
	return s.Dir.Remove(ctx, name)
}

func (s logged) Link(ctx context.Context, from, to string) error {
	*s.log = append(*s.log, "link "+to)
	return s.Dir.Link(ctx, from, to)
}

func (s logged) Sync(ctx context.Context) error {
	*s.log = append(*s.log, "sync")
	return s.Dir.Sync(ctx)
}

type loggedFile struct {
	sink.Patchable
	log  *[]string
	name string
}

func (f loggedFile) Close() error {
	*f.log = append(*f.log, "close "+f.name)
	return f.Patchable.Close()
}

// On a Batched folder, whose changes become durable only at its Sync,
// Commit orders them with barriers: every shard before the index that
// names it, the index before any file of the previous set goes, the
// standard names before the index that names them, that index before
// the swap names go, and the removals at the end.
func TestCommitBarriers(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	var log []string
	s := logged{sink.NewDir(dir).Batched(), &log}
	set := &Set{Sink: s, Prefix: "model", Specs: specsOf(2), Write: zeros, MaxShard: 16, Replace: true}
	if _, err := Commit(ctx, set); err != nil {
		t.Fatal(err)
	}
	want := []string{"close model-00001-of-00002.safetensors", "close model-00002-of-00002.safetensors", "sync",
		"close model.safetensors.index.json", "sync", "sync"}
	if !slices.Equal(log, want) {
		t.Errorf("first set:\n got %q\nwant %q", log, want)
	}
	log = nil
	res, err := Commit(ctx, set) // over the first: swap names, then back
	if err != nil || len(res.Warnings) != 0 {
		t.Fatal(res, err)
	}
	syncs := func(i, j int) bool { return j > i && slices.Contains(log[i:j], "sync") }
	var closes, links, removes []int
	for i, op := range log {
		switch {
		case strings.HasPrefix(op, "close "):
			closes = append(closes, i)
		case strings.HasPrefix(op, "link "):
			links = append(links, i)
		case strings.HasPrefix(op, "remove "):
			removes = append(removes, i)
		}
	}
	// close swap shards, sync, close index, sync, removals of the old
	// shards, links, sync, close index, sync, removals of the swap names,
	// sync.
	if len(closes) != 4 || len(links) != 2 || len(removes) != 4 || log[len(log)-1] != "sync" {
		t.Fatalf("second set: %q", log)
	}
	if !syncs(closes[1], closes[2]) || !syncs(closes[2], removes[0]) || !syncs(links[1], closes[3]) || !syncs(closes[3], removes[2]) {
		t.Errorf("second set, a barrier missing: %q", log)
	}
	if got := testutil.Entries(t, dir); !slices.Equal(got, []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "model.safetensors.index.json"}) {
		t.Errorf("folder %v", got)
	}
	// A single file over the sharded set: the index that would shadow it
	// is gone durably before any of its shards goes.
	log = nil
	set.Specs = specsOf(1)
	if _, err := Commit(ctx, set); err != nil {
		t.Fatal(err)
	}
	ri, r1 := slices.Index(log, "remove model.safetensors.index.json"), slices.Index(log, "remove model-00001-of-00002.safetensors")
	if ri < 0 || r1 < 0 || !syncs(ri, r1) || log[len(log)-1] != "sync" {
		t.Errorf("single file over shards: %q", log)
	}
	if got := testutil.Entries(t, dir); !slices.Equal(got, []string{"model.safetensors"}) {
		t.Errorf("folder %v", got)
	}
}
