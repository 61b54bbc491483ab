package convert

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/testutil"
	"github.com/ckpt-go/ckpt/quant"
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

// tiedTorch writes a PyTorch checkpoint whose lm_head.weight is tied to
// embed.weight (the same view of one storage), beside a tensor of its
// own, and returns its path and each tensor's stored bytes.
func tiedTorch(t *testing.T) (string, map[string][]byte) {
	t.Helper()
	ts := []ckpttest.Tensor{ckpttest.T("embed.weight", dtype.F32, 8, 4), ckpttest.T("norm.weight", dtype.F32, 4)}
	views, storages, err := ckpttest.TorchOf(ts)
	if err != nil {
		t.Fatal(err)
	}
	tie := views[0]
	tie.Name = "lm_head.weight"
	views = append(views, tie)
	path := filepath.Join(t.TempDir(), "m.pt")
	if err := ckpttest.WriteTorch(path, views, storages); err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{"embed.weight": storages["0"].Data, "lm_head.weight": storages["0"].Data, "norm.weight": storages["1"].Data}
	return path, want
}

// TestRunTorchTies: a tied name is written once, the tie in the metadata,
// and a reload gives both names bit-exact, as stored and under a dtype
// policy, and again after converting the output; a policy that would give
// the two names different dtypes, or quantize them with scales, is
// refused before anything is written, naming both.
func TestRunTorchTies(t *testing.T) {
	src, want := tiedTorch(t)
	bf16 := target(t, "bf16")
	lm := ckpt.MustParsePattern("lm_head.weight")
	embed := ckpt.MustParsePattern("embed.weight")
	f8 := []ckpt.Rule{{Pattern: lm, Target: target(t, "f8_e4m3")}, {Pattern: embed, Target: target(t, "f8_e4m3")}}
	for _, c := range []struct {
		name string
		opts Options
		to   dtype.DType
	}{
		{"stored", Options{}, dtype.F32},
		{"bf16", Options{Policy: ckpt.Policy{Default: bf16}}, dtype.BF16},
		{"rules", Options{Policy: ckpt.Policy{Rules: []ckpt.Rule{{Pattern: lm, Target: bf16}, {Pattern: embed, Target: bf16}}}}, dtype.BF16},
		{"f8 unscaled", Options{Policy: ckpt.Policy{Rules: f8}, Scale: Scale{Unscaled: true}}, dtype.F8_E4M3},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "m.safetensors")
			rep := run(t, src, out, c.opts)
			for _, tr := range rep.Tensors {
				if want := tr.Name == "embed.weight"; want != slices.Equal(tr.Tied, []string{"lm_head.weight"}) {
					t.Errorf("report: %s tied %v", tr.Name, tr.Tied)
				}
			}
			f, err := safetensors.Open(out)
			if err != nil {
				t.Fatal(err)
			}
			if f.Len() != 2 || f.Metadata()[torch.AliasesKey] != `{"lm_head.weight":"embed.weight"}` {
				t.Errorf("wrote %v, metadata %v", f.Names(), f.Metadata())
			}
			f.Close()
			check := func(path string) {
				t.Helper()
				m, err := ckpt.Open(path)
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				w, err := m.Load(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				defer w.Close()
				if w.Len() != 3 {
					t.Errorf("%s: %v", path, m.Names())
				}
				for _, n := range []string{"embed.weight", "lm_head.weight"} {
					got, err := w.Tensor(n)
					if err != nil {
						t.Fatal(err)
					}
					exp := want[n]
					if c.to != dtype.F32 {
						exp = make([]byte, len(want[n])*c.to.Bits()/32)
						dtype.Convert(exp, c.to, want[n], dtype.F32, dtype.Options{})
					}
					if got.DType != c.to || !bytes.Equal(got.Bytes(), exp) {
						t.Errorf("%s: %s: %s, not the source's bytes", path, n, got.DType)
					}
				}
			}
			check(out)
			// The output converts again, the tie kept.
			again := filepath.Join(t.TempDir(), "again.safetensors")
			run(t, out, again, Options{})
			check(again)
		})
	}

	// Sharded by size: the tie, in every shard's metadata, names a tensor
	// of one of them.
	dir := t.TempDir()
	rep := run(t, src, filepath.Join(dir, "model.safetensors"), Options{MaxShardSize: 100})
	ix := rep.Components[0].Index
	if len(rep.Components[0].Files) != 2 || ix == "" {
		t.Fatalf("sharded: %+v", rep.Components[0])
	}
	m, err := ckpt.Open(filepath.Join(dir, ix))
	if err != nil {
		t.Fatal(err)
	}
	w, err := m.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if lm, err := w.Tensor("lm_head.weight"); err != nil || !bytes.Equal(lm.Bytes(), want["embed.weight"]) || w.Len() != 3 {
		t.Errorf("sharded: %v, %v", m.Names(), err)
	}
	w.Close()
	m.Close()

	for _, c := range []struct {
		name string
		opts Options
		msg  []string
	}{
		{"tie only", Options{Policy: ckpt.Policy{Rules: []ckpt.Rule{{Pattern: lm, Target: bf16}}}},
			[]string{"lm_head.weight", "embed.weight", "F32 as stored", "BF16 (cast from F32)"}},
		{"kept only", Options{Policy: ckpt.Policy{Rules: []ckpt.Rule{{Pattern: embed, Target: bf16}}}},
			[]string{"lm_head.weight", "embed.weight", "F32 as stored", "BF16 (cast from F32)"}},
		{"scaled", Options{Policy: ckpt.Policy{Rules: f8}, Scale: Scale{Granularity: quant.PerChannel}},
			[]string{"lm_head.weight", "embed.weight", "with scales"}},
	} {
		dir := t.TempDir()
		_, err := Run(context.Background(), src, filepath.Join(dir, "m.safetensors"), c.opts)
		if !errors.Is(err, ErrCast) {
			t.Errorf("%s: %v, want ErrCast", c.name, err)
			continue
		}
		for _, s := range c.msg {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: %v, want it to name %q", c.name, err, s)
			}
		}
		if files := testutil.Entries(t, dir); len(files) != 0 {
			t.Errorf("%s: wrote %v", c.name, files)
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
	src := filepath.Join(dir, "model.pt")
	if err := ckpttest.WriteTorch(src, views, storages); err != nil {
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

// TestRunTorchVerify: a PyTorch source is verified against its storage
// records' CRC-32 as Run reads it: a bit flipped in the data of a record
// whose bytes are a tensor's fails Run, naming the file, the tensor and
// the record, with nothing written; views of part of a storage or
// transposed are not verified by default and are with VerifyAlways (by
// reading their record); VerifyNever converts the damaged source.
func TestRunTorchVerify(t *testing.T) {
	rows := make([]byte, 0, 300*64*4)
	for i := range 300 * 64 {
		rows = append(rows, dtype.Float32Bytes([]float32{float32(i%97) / 16})...)
	}
	views := []ckpttest.TorchTensor{
		{Name: "big", Storage: "1", Shape: []int64{300, 64}, Stride: []int64{64, 1}},
		{Name: "a_t", Storage: "0", Shape: []int64{6, 8}, Stride: []int64{1, 6}},
		{Name: "rows", Storage: "0", Offset: 12, Shape: []int64{4, 6}, Stride: []int64{6, 1}},
	}
	storages := map[string]ckpttest.TorchStorage{
		"0": {DType: dtype.F32, Data: rows[:48*4]},
		"1": {DType: dtype.F32, Data: rows},
	}
	b, err := ckpttest.EncodeTorch(views, storages, false)
	if err != nil {
		t.Fatal(err)
	}
	flip := func(t *testing.T, name string, at int64) (string, string) {
		t.Helper()
		src := filepath.Join(t.TempDir(), "model.pt")
		c, err := torch.NewReader(bytes.NewReader(b), int64(len(b)), "")
		if err != nil {
			t.Fatal(err)
		}
		tn, _ := c.Tensor(name)
		rec, off, _ := tn.Record()
		d := bytes.Clone(b)
		d[off+at] ^= 0x10
		if err := os.WriteFile(src, d, 0o644); err != nil {
			t.Fatal(err)
		}
		return src, rec
	}
	opts := func(v ckpt.Verify, to string) Options {
		var o Options
		o.Policy.Verify = v
		if to != "" {
			o.Policy.Default = target(t, to)
		}
		return o
	}
	for _, to := range []string{"", "BF16"} {
		// Undamaged: every mode converts it.
		src := filepath.Join(t.TempDir(), "model.pt")
		os.WriteFile(src, b, 0o644)
		for _, v := range []ckpt.Verify{ckpt.VerifyPresent, ckpt.VerifyAlways, ckpt.VerifyNever} {
			run(t, src, filepath.Join(t.TempDir(), "out.safetensors"), opts(v, to))
		}
		for _, c := range []struct {
			tensor   string
			at       int64
			failWhen []ckpt.Verify
			names    []string
		}{
			{"big", 300*64*2 + 1, []ckpt.Verify{ckpt.VerifyPresent, ckpt.VerifyAlways}, []string{"big"}},
			{"a_t", 1, []ckpt.Verify{ckpt.VerifyAlways}, []string{"a_t", "rows"}},
		} {
			src, rec := flip(t, c.tensor, c.at)
			for _, v := range []ckpt.Verify{ckpt.VerifyPresent, ckpt.VerifyAlways, ckpt.VerifyNever} {
				dst := filepath.Join(t.TempDir(), "out.safetensors")
				_, err := Run(context.Background(), src, dst, opts(v, to))
				if !slices.Contains(c.failWhen, v) {
					if err != nil {
						t.Errorf("%s damaged, %s, to %q: %v", c.tensor, v, to, err)
					}
					continue
				}
				var ce *safetensors.ChecksumError
				if !errors.Is(err, ckpt.ErrChecksum) || !errors.Is(err, ErrSource) || !errors.As(err, &ce) ||
					!slices.Contains(c.names, ce.Tensor) || ce.Record != rec || ce.File != src || !strings.Contains(err.Error(), rec) {
					t.Errorf("%s damaged, %s, to %q: %v, want ErrSource, ErrChecksum naming %v and %s", c.tensor, v, to, err, c.names, rec)
				}
				if _, err := os.Stat(dst); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s damaged, %s: the failed Run wrote its output: %v", c.tensor, v, err)
				}
			}
		}
	}
}
