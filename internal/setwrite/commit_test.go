package setwrite

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/dtype"
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

func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
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
	if got := entries(t, dir); !slices.Equal(got, append(slices.Clone(std), res.Index)) {
		t.Fatalf("folder %v", got)
	}

	// A single file whose previous index cannot be removed (it would
	// shadow it for readers that follow indexes) is removed again: the
	// previous set is untouched.
	before := entries(t, dir)
	_, err = Commit(ctx, set(failRemove{sink.NewDir(dir), "model.safetensors.index.json"}, 1, true))
	if !errors.As(err, &e) || e.Stage != StageSwitch || e.InPlace || !strings.Contains(err.Error(), "untouched") {
		t.Fatalf("shadow not removed: %v", err)
	}
	if got := entries(t, dir); !slices.Equal(got, before) {
		t.Fatalf("folder %v, before %v", got, before)
	}
	res, err = Commit(ctx, set(sink.NewDir(dir), 1, true))
	if err != nil || !slices.Equal(res.Files, []string{"model.safetensors"}) || res.Index != "" {
		t.Fatalf("single file: %+v, %v", res, err)
	}
	if got := entries(t, dir); !slices.Equal(got, []string{"model.safetensors"}) {
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
	if got := entries(t, dir); !slices.Equal(got, []string{"model.safetensors"}) {
		t.Fatalf("after a failure: folder %v", got)
	}
}
