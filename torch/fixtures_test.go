package torch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/internal/testutil"
	"github.com/ckpt-go/ckpt/safetensors"
)

type fixtureCase struct {
	Name    string                        `json:"name"`
	File    string                        `json:"file"`
	Tensors map[string][2]json.RawMessage `json:"tensors"`
	Expect  string                        `json:"expect"`
}

// TestFixtures reads every checkpoint of the fixtures, converts it, and
// compares each tensor byte for byte with the expected safetensors file
// that safetensors.torch wrote beside it: names, dtypes, shapes, bytes;
// tied names as aliases of a kept tensor with the same bytes.
func TestFixtures(t *testing.T) {
	dir := testutil.Fixtures(t, "torch", "cases.json") // what PyTorch itself wrote
	raw, err := os.ReadFile(filepath.Join(dir, "cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []fixtureCase
	if err := json.Unmarshal(raw, &cases); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range cases {
		if c.Tensors == nil {
			continue
		}
		n++
		t.Run(c.Name, func(t *testing.T) {
			ck, err := Open(filepath.Join(dir, c.File))
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			out := filepath.Join(t.TempDir(), "out.safetensors")
			if err := WriteSafetensors(context.Background(), ck, out); err != nil {
				t.Fatal(err)
			}
			exp, err := safetensors.Open(filepath.Join(dir, c.Name+".expected.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			defer exp.Close()
			got, err := safetensors.Open(out)
			if err != nil {
				t.Fatal(err)
			}
			defer got.Close()
			if !slices.Equal(slices.Sorted(maps.Keys(c.Tensors)), slices.Sorted(slices.Values(exp.Names()))) {
				t.Fatalf("cases.json lists %v, the expected file has %v", slices.Sorted(maps.Keys(c.Tensors)), exp.Names())
			}
			for name, spec := range c.Tensors {
				var dt string
				var shape []int64
				if json.Unmarshal(spec[0], &dt) != nil || json.Unmarshal(spec[1], &shape) != nil || allowed["torch "+dt] == nil {
					t.Fatalf("cases.json: %s: %s", name, spec)
				}
				ct, err := ck.Tensor(name)
				if err != nil {
					t.Fatal(err)
				}
				if ct.DType() != allowed["torch "+dt].dt || !slices.Equal(ct.Shape(), shape) {
					t.Errorf("%s: %s %v, cases.json says %s %v", name, ct.DType(), ct.Shape(), dt, shape)
				}
			}
			aliases := ck.Aliases()
			var wantAliases string
			if len(aliases) > 0 {
				b, _ := json.Marshal(aliases)
				wantAliases = string(b)
			}
			if m := got.Metadata(); m[AliasesKey] != wantAliases || m[FormatKey] != "pt" {
				t.Errorf("metadata %v", m)
			}
			if len(got.Names())+len(aliases) != exp.Len() {
				t.Errorf("%d tensors and %d aliases for %d expected", len(got.Names()), len(aliases), exp.Len())
			}
			for name, et := range exp.Tensors() {
				want, err := et.Bytes()
				if err != nil {
					t.Fatal(err)
				}
				kept := name
				if a, ok := aliases[name]; ok {
					kept = a
					if got.Has(name) {
						t.Errorf("%s: an alias written as a tensor", name)
					}
				}
				gt, err := got.Tensor(kept)
				if err != nil {
					t.Errorf("%s: %v", name, err)
					continue
				}
				gb, _ := gt.Bytes()
				if gt.DType() != et.DType() || !slices.Equal(gt.Shape(), et.Shape()) || !bytes.Equal(gb, want) {
					t.Errorf("%s (as %s): %s %v, want %s %v; bytes equal %v", name, kept, gt.DType(), gt.Shape(), et.DType(), et.Shape(), bytes.Equal(gb, want))
				}
				// The checkpoint reads the same bytes as the file it wrote.
				ct, err := ck.Tensor(name)
				if err != nil {
					t.Fatal(err)
				}
				if b, err := ct.Bytes(); err != nil || !bytes.Equal(b, want) {
					t.Errorf("%s: Bytes differ (%v)", name, err)
				}
			}
			switch c.Name {
			case "tied_bf16":
				if !maps.Equal(aliases, map[string]string{"lm_head.weight": "embed.weight"}) {
					t.Errorf("aliases %v", aliases)
				}
				if tt, _ := ck.Tensor("proj.weight_t"); tt.Contiguous() {
					t.Error("proj.weight_t read as contiguous")
				}
			case "train_state":
				want := map[string]string{"epoch": "3", "step": "1200", "lr": "0.0003"}
				if !maps.Equal(ck.Metadata(), want) {
					t.Errorf("checkpoint metadata %v", ck.Metadata())
				}
				m := got.Metadata()
				for k, v := range want {
					if m[k] != v {
						t.Errorf("file metadata %s = %q, want %q", k, m[k], v)
					}
				}
			}
		})
	}
	if n < 5 {
		t.Errorf("only %d cases with tensors", n)
	}
}

// TestFixtureRefusals: the legacy format and the pickle that runs a
// command are refused, and nothing is written or executed.
func TestFixtureRefusals(t *testing.T) {
	dir := testutil.Fixtures(t, "torch", "cases.json") // what PyTorch itself wrote
	_, err := Open(filepath.Join(dir, "legacy.bin"))
	if !legacyFormat.Matches(err) || !strings.Contains(err.Error(),
		"legacy format: the pre-1.6 PyTorch format; re-save with torch.save(..., _use_new_zipfile_serialization=True)") {
		t.Errorf("legacy: %v", err)
	}
	marker := "/tmp/ckpt-pwned"
	_, statErr := os.Stat(marker)
	_, err = Open(filepath.Join(dir, "evil.pt"))
	var e *Error
	if !errors.Is(err, ErrForbiddenGlobal) || !errors.As(err, &e) || e.Global != "posix system" {
		t.Fatalf("evil: %v", err)
	}
	if !strings.Contains(err.Error(), "evil.pt") || !strings.Contains(err.Error(), `"posix system"`) {
		t.Errorf("message %q", err)
	}
	if os.IsNotExist(statErr) {
		if _, err := os.Stat(marker); !os.IsNotExist(err) {
			t.Errorf("%s exists after opening evil.pt", marker)
		}
	}
}
