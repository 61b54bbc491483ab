package torch

import (
	"bytes"
	"context"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ckpt-go/ckpt/internal/testutil"
	"github.com/ckpt-go/ckpt/safetensors"
)

func TestWriteSafetensors(t *testing.T) {
	c, err := openBytes(t, tinyZip("archive/"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "model.safetensors")
	if err := WriteSafetensors(context.Background(), c, out); err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got := f.Names(); !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(c.Names()))) {
		t.Errorf("names %v", got)
	}
	m := f.Metadata()
	want := map[string]string{
		"format": "pt", AliasesKey: `{"model.tied":"model.w","model.tied2":"model.w"}`,
		"epoch": "3", "lr": "0.0003", "name": "run1", "flags.0": "True", "flags.1": "None",
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("metadata %s = %q, want %q", k, m[k], v)
		}
	}
	sums := 0
	for k := range m {
		if strings.HasPrefix(k, safetensors.ChecksumPrefix) {
			sums++
		}
	}
	if len(m)-sums-1 != len(want) || sums != c.Len() || m[safetensors.HeaderChecksumKey] == "" {
		t.Errorf("metadata %v (%d checksums, %d tensors)", m, sums, c.Len())
	}
	for name, tn := range c.Tensors() {
		ft, err := f.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := tn.Bytes()
		got, _ := ft.Bytes()
		if ft.DType() != tn.DType() || !slices.Equal(ft.Shape(), tn.Shape()) || !bytes.Equal(got, want) {
			t.Errorf("%s: %s %v", name, ft.DType(), ft.Shape())
		}
		if sum, ok, err := ft.Checksum(); err != nil || !ok || sum != safetensors.Checksum(want) {
			t.Errorf("%s: checksum %08x, %v, %v; the bytes have %08x", name, sum, ok, err, safetensors.Checksum(want))
		}
		if err := ft.Verify(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if got := testutil.Entries(t, dir); !slices.Equal(got, []string{"model.safetensors"}) {
		t.Errorf("folder holds %v", got)
	}
}

// failingReader fails every read once armed.
type failingReader struct {
	r     io.ReaderAt
	armed atomic.Bool
}

func (f *failingReader) ReadAt(p []byte, off int64) (int, error) {
	if f.armed.Load() {
		return 0, errors.New("disk on fire")
	}
	return f.r.ReadAt(p, off)
}

// TestWriteSafetensorsAtomic: a failed read, a canceled context or a
// metadata collision leave the previous file untouched and no temporary
// file behind.
func TestWriteSafetensorsAtomic(t *testing.T) {
	dir := t.TempDir()
	out := writeFile(t, dir, "model.safetensors", []byte("previous"))
	check := func(what string) {
		t.Helper()
		if b, err := os.ReadFile(out); err != nil || string(b) != "previous" {
			t.Errorf("%s: the previous file changed: %q %v", what, b, err)
		}
		if got := testutil.Entries(t, dir); !slices.Equal(got, []string{"model.safetensors"}) {
			t.Errorf("%s: folder holds %v", what, got)
		}
	}
	data := tinyZip("archive/")
	fr := &failingReader{r: bytes.NewReader(data)}
	c, err := NewReader(fr, int64(len(data)), "flaky.pt")
	if err != nil {
		t.Fatal(err)
	}
	fr.armed.Store(true)
	err = WriteSafetensors(context.Background(), c, out)
	if !errors.Is(err, ErrIO) {
		t.Errorf("failed read: %v", err)
	}
	check("failed read")

	fr.armed.Store(false)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := WriteSafetensors(ctx, c, out); !errors.Is(err, ErrWrite) || !errors.Is(err, context.Canceled) {
		t.Errorf("canceled: %v", err)
	}
	check("canceled")

	for _, key := range []string{"format", AliasesKey} {
		p := newPK().op(opEMPTY_DICT).str(key).str("x").op(opSETITEM).bytes()
		c2, err := openBytes(t, torchZip("a/", p, "", nil))
		if err != nil {
			t.Fatal(err)
		}
		if err := WriteSafetensors(context.Background(), c2, out); !duplicateName.Matches(err) {
			t.Errorf("%s: %v", key, err)
		}
		check(key)
	}

	if err := WriteSafetensors(context.Background(), nil, out); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("nil: %v", err)
	}
	c.Close()
	if err := WriteSafetensors(context.Background(), c, out); !errors.Is(err, ErrClosed) {
		t.Errorf("closed: %v", err)
	}
	check("closed")
}

// TestWriteSafetensorsEmpty: a checkpoint of values only converts to a
// file with no tensors.
func TestWriteSafetensorsEmpty(t *testing.T) {
	c, err := openBytes(t, torchZip("a/", newPK().op(opEMPTY_DICT).str("epoch").int(2).op(opSETITEM).bytes(), "", nil))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "x.safetensors")
	if err := WriteSafetensors(context.Background(), c, out); err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Len() != 0 || f.Metadata()["epoch"] != "2" {
		t.Errorf("%d tensors, metadata %v", f.Len(), f.Metadata())
	}
}

// TestParseAliases: the value WriteSafetensors writes reads back; a
// malformed one, a repeated tied name, a self-tie and a chain or cycle
// are ErrInvalidFormat naming the tensor.
func TestParseAliases(t *testing.T) {
	got, err := ParseAliases(`{"lm_head.weight":"embed.weight","b":"embed.weight"}`)
	if err != nil || !maps.Equal(got, map[string]string{"lm_head.weight": "embed.weight", "b": "embed.weight"}) {
		t.Errorf("%v, %v", got, err)
	}
	for s, tensor := range map[string]string{
		`[]`: "", `{"a":1}`: "a", `{"a":"b"} {}`: "", `{"a":"b"`: "", ``: "",
		`{"a":"b","a":"c"}`: "a", `{"a":"a"}`: "a", `{"a":"b","b":"c"}`: "a", `{"a":"b","b":"a"}`: "a",
	} {
		_, err := ParseAliases(s)
		var e *Error
		if !errors.Is(err, ErrInvalidFormat) || !errors.As(err, &e) || e.Tensor != tensor {
			t.Errorf("%q: %v", s, err)
		}
	}
}
