package convert

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/testutil"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/shard"
	"github.com/ckpt-go/ckpt/torch"
)

// TestRunTorchFixtures converts every checkpoint PyTorch wrote and
// compares each tensor with the file safetensors.torch wrote beside it;
// tied names are recorded as aliases of a kept tensor with their bytes.
func TestRunTorchFixtures(t *testing.T) {
	dir := testutil.Fixtures(t, "torch", "cases.json")
	for _, c := range []struct {
		src, expected string
		files         int // a sharded checkpoint keeps its shards
	}{
		{"mlp_f32.bin", "mlp_f32.expected.safetensors", 1},
		{"tied_bf16.pt", "tied_bf16.expected.safetensors", 1},
		{"dtypes.pt", "dtypes.expected.safetensors", 1},
		{"train_state.pt", "train_state.expected.safetensors", 1},
		{"sharded/pytorch_model.bin.index.json", "sharded.expected.safetensors", 2},
	} {
		out := t.TempDir() + string(filepath.Separator)
		rep := run(t, filepath.Join(dir, c.src), out, Options{Verify: true})
		if len(rep.Components) != 1 || len(rep.Components[0].Files) != c.files {
			t.Fatalf("%s: wrote %+v, want %d files", c.src, rep.Components, c.files)
		}
		entry := cmp.Or(rep.Components[0].Index, rep.Components[0].Files[0])
		got, err := shard.Open(filepath.Join(out, entry))
		if err != nil {
			t.Fatal(err)
		}
		want, err := safetensors.Open(filepath.Join(dir, c.expected))
		if err != nil {
			t.Fatal(err)
		}
		var aliases map[string]string
		if a := got.Metadata()[torch.AliasesKey]; a != "" {
			if err := json.Unmarshal([]byte(a), &aliases); err != nil {
				t.Fatal(err)
			}
		}
		for _, n := range want.Names() {
			wt, _ := want.Tensor(n)
			name := n
			if k, ok := aliases[n]; ok {
				name = k
			}
			gt, err := got.Tensor(name)
			if err != nil {
				t.Errorf("%s: %s: %v", c.src, n, err)
				continue
			}
			wb, _ := wt.Bytes()
			gb, _ := gt.Bytes()
			if gt.DType() != wt.DType() || !bytes.Equal(gb, wb) {
				t.Errorf("%s: %s differs (%s vs %s)", c.src, n, gt.DType(), wt.DType())
			}
		}
		if got.Metadata()["format"] != "pt" {
			t.Errorf("%s: metadata %v", c.src, got.Metadata())
		}
		got.Close()
		want.Close()
	}
	if n := torchNaming("pytorch_model-00001-of-00002.bin"); n != "model.safetensors" {
		t.Errorf("naming %s", n)
	}
}

func TestRunTorchCastAndFolder(t *testing.T) {
	dir := testutil.Fixtures(t, "torch", "cases.json")
	// A component folder with only PyTorch weights converts to a folder
	// with model.safetensors, its other files copied.
	src := t.TempDir()
	b, err := os.ReadFile(filepath.Join(dir, "mlp_f32.bin"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(src, "pytorch_model.bin"), b, 0o644)
	os.WriteFile(filepath.Join(src, "config.json"), []byte(`{"torch_dtype": "float32"}`), 0o644)
	dst := filepath.Join(t.TempDir(), "out")
	rep := run(t, src, dst, Options{Policy: ckpt.Policy{Default: target(t, "bf16")}})
	if files := testutil.Entries(t, dst); len(files) != 2 || files[1] != "model.safetensors" {
		t.Errorf("folder: %v", files)
	}
	f, err := safetensors.Open(filepath.Join(dst, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want, _ := safetensors.Open(filepath.Join(dir, "mlp_f32.expected.safetensors"))
	defer want.Close()
	for _, n := range want.Names() {
		wt, _ := want.Tensor(n)
		wb, _ := wt.Bytes()
		conv := make([]byte, len(wb)/2)
		dtype.Convert(conv, dtype.BF16, wb, dtype.F32, dtype.Options{})
		gt, err := f.Tensor(n)
		if err != nil {
			t.Fatal(err)
		}
		gb, _ := gt.Bytes()
		if !bytes.Equal(gb, conv) {
			t.Errorf("%s: not the BF16 of the source", n)
		}
	}
	if rep.Summary.Narrowed == 0 || len(rep.Skipped) != 0 {
		t.Errorf("summary %+v, skipped %v", rep.Summary, rep.Skipped)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "config.json")); string(b) != "{\n  \"torch_dtype\": \"bfloat16\"\n}\n" {
		t.Errorf("config.json: %q", b)
	}

	// Hostile and legacy files are refused before anything is written.
	for _, tc := range []struct {
		file string
		kind error
		says string
	}{{"evil.pt", torch.ErrForbiddenGlobal, ""}, {"legacy.bin", torch.ErrUnsupported, ": legacy format: "}} {
		out := filepath.Join(t.TempDir(), "o")
		_, err := Run(context.Background(), filepath.Join(dir, tc.file), out+string(filepath.Separator), Options{})
		if !errors.Is(err, ErrSource) || !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v", tc.file, err)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("%s: output written", tc.file)
		}
	}
}

// The loader's refusals of a PyTorch source keep convert's kinds: a
// source variant of a PyTorch file is an option that does not apply to it
// (ErrOption), and a target a tensor cannot take is ErrCast naming the
// tensor, with no component for a single file.
func TestRunTorchRefusals(t *testing.T) {
	dir := t.TempDir()
	views, storages, err := ckpttest.TorchOf([]ckpttest.Tensor{ckpttest.T("w", dtype.F32, 4, 2), ckpttest.T("c", dtype.C64, 3)})
	if err != nil {
		t.Fatal(err)
	}
	b, err := ckpttest.EncodeTorch(views, storages, false)
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(dir, "model.pt")
	if err := os.WriteFile(src, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Run(context.Background(), src, filepath.Join(dir, "a.safetensors"), Options{SourceVariant: "fp16"})
	if !errors.Is(err, ErrOption) || !strings.Contains(err.Error(), "no precision variants") {
		t.Errorf("SourceVariant of a PyTorch file: %v", err)
	}
	_, err = Run(context.Background(), src, filepath.Join(dir, "b.safetensors"), Options{Policy: ckpt.Policy{Rules: []ckpt.Rule{mustRule(t, "c=F32")}}})
	var ce *Error
	if !errors.As(err, &ce) || ce.Kind != ErrCast || ce.Tensor != "c" || ce.Component != "" || !strings.Contains(err.Error(), "complex C64 cannot become F32") {
		t.Errorf("complex to real: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "b.safetensors")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused conversion wrote its output: %v", err)
	}
}
