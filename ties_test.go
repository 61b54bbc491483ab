package ckpt

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/torch"
)

// tiedSafetensors writes the PyTorch fixture (ptFixture: dec.weight tied
// to enc.weight) as a safetensors file with torch.WriteSafetensors: the
// tie is in its metadata, the tensors checksummed.
func tiedSafetensors(t *testing.T) (string, map[string][]byte) {
	t.Helper()
	views, storages := ptFixture(t)
	dir := t.TempDir()
	ck, err := torch.Open(writePT(t, dir, "m.pt", torchArchive(t, views, storages, false)))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	out := filepath.Join(dir, "m.safetensors")
	if err := torch.WriteSafetensors(context.Background(), ck, out); err != nil {
		t.Fatal(err)
	}
	return out, ptWant(views, storages)
}

// TestTiesFromMetadata: a safetensors file whose metadata records a tie
// loads the tied name as a tensor of its own with the kept tensor's bytes,
// through every entry point, mapped or read, as stored or converted, from
// a path or an fs.FS; Contents lists the kept tensor once with the tie in
// its metadata, and the tie's checksum is its kept tensor's.
func TestTiesFromMetadata(t *testing.T) {
	path, want := tiedSafetensors(t)
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range want {
			if !yield(n) {
				return
			}
		}
	})
	for _, tc := range []struct {
		name string
		path string
		opts []Option
	}{
		{"mmap", path, []Option{WithReadStrategy("mmap")}},
		{"pread", path, []Option{WithReadStrategy("pread")}},
		{"bf16", path, []Option{WithDType(To(dtype.BF16))}},
		{"fs", "m.safetensors", []Option{WithFS(os.DirFS(filepath.Dir(path)))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := mustOpen(t, tc.path, tc.opts...)
			if got := slices.Sorted(slices.Values(m.Names())); !slices.Equal(got, names) {
				t.Fatalf("Names %v, want %v", got, names)
			}
			w := mustLoad(t, m)
			stored := map[string]dtype.DType{"dec.weight": dtype.F32}
			for _, ti := range headerOf(t, path).Tensors {
				stored[ti.Name] = ti.DType
			}
			conv := func(name string) []byte {
				got, _ := w.Tensor(name)
				if got == nil || got.DType == stored[name] {
					return want[name]
				}
				out := make([]byte, len(want[name])*got.DType.Bits()/stored[name].Bits())
				if _, err := dtype.Convert(out, got.DType, want[name], stored[name], dtype.Options{}); err != nil {
					t.Fatal(err)
				}
				return out
			}
			if tc.name == "bf16" {
				if d, _ := w.Tensor("dec.weight"); d.DType != dtype.BF16 {
					t.Errorf("the tie loads as %s", d.DType)
				}
			}
			for _, n := range names {
				got, err := w.Tensor(n)
				if err != nil || !bytes.Equal(got.Bytes(), conv(n)) {
					t.Errorf("%s: %v", n, err)
				}
			}
			dec, _ := w.Tensor("dec.weight")
			enc, _ := w.Tensor("enc.weight")
			if !bytes.Equal(dec.Bytes(), enc.Bytes()) || !slices.Equal(dec.Shape, enc.Shape) || dec.DType != enc.DType {
				t.Errorf("the tie differs from its tensor")
			}
			one, err := m.LoadTensor(context.Background(), "dec.weight")
			if err != nil || !bytes.Equal(one.Bytes(), enc.Bytes()) {
				t.Errorf("LoadTensor: %v", err)
			}
			items, err := m.Items()
			if err != nil {
				t.Fatal(err)
			}
			var tied *Item
			for _, it := range items {
				if it.Name == "dec.weight" {
					tied = it
				}
			}
			if tied == nil || tied.Data.Tensor != "enc.weight" {
				t.Errorf("the tie's Item reads %v", tied)
			}
			c, err := m.Contents(m.Components()[0])
			if err != nil {
				t.Fatal(err)
			}
			if len(c.Tensors) != len(names)-1 || c.Metadata[torch.AliasesKey] != `{"dec.weight":"enc.weight"}` {
				t.Errorf("contents: %d tensors, metadata %v", len(c.Tensors), c.Metadata)
			}
			p, err := m.Plan()
			if err != nil || !slices.ContainsFunc(p.Components[0].Tensors, func(tp TensorPlan) bool { return tp.Name == "dec.weight" }) {
				t.Errorf("plan: %v", err)
			}
		})
	}

	// A flipped bit in the kept tensor's bytes is found through the tie.
	info := headerOf(t, path).Tensors
	var at int64
	for _, ti := range info {
		if ti.Name == "enc.weight" {
			at = ti.Begin + 5
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[8+int64(binary.LittleEndian.Uint64(b))+at] ^= 1
	bad := filepath.Join(t.TempDir(), "bad.safetensors")
	if err := os.WriteFile(bad, b, 0o644); err != nil {
		t.Fatal(err)
	}
	m := mustOpen(t, bad)
	if _, err := m.LoadTensor(context.Background(), "dec.weight"); !errors.Is(err, ErrChecksum) || !strings.Contains(err.Error(), "enc.weight") {
		t.Errorf("a damaged kept tensor through its tie: %v, want ErrChecksum naming enc.weight", err)
	}
	if _, err := m.Load(context.Background()); !errors.Is(err, ErrChecksum) {
		t.Errorf("Load: %v, want ErrChecksum", err)
	}
}

func headerOf(t *testing.T, path string) *safetensors.Header {
	t.Helper()
	h, err := safetensors.ReadHeaderFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestTiesHostile: metadata ties that cannot hold are ErrResolve errors
// naming the file and the tied name (errors.Is torch.ErrInvalidFormat),
// never a panic; a tie to a tensor of a scaled layout is refused
// (torch.ErrUnsupported).
func TestTiesHostile(t *testing.T) {
	dir := t.TempDir()
	ts := ckpttest.Tensors(t, "a:F32[4] b:F32[2,2]")
	for i, c := range []struct {
		value, tensor string
	}{
		{`not json`, ""},
		{`["a"]`, ""},
		{`{"x":1}`, "x"},
		{`{"x":"a","x":"b"}`, "x"},
		{`{"x":"nope"}`, "x"},            // no such tensor
		{`{"b":"a"}`, "b"},               // collides with a stored tensor
		{`{"x":"x"}`, "x"},               // itself
		{`{"x":"y","y":"a"}`, "x"},       // chain
		{`{"x":"y","y":"x"}`, "x"},       // cycle
		{`{"x":"a"} trailing`, ""},       // data after the object
		{`{"x":{"y":"a"}}`, "x"},         // nested
		{strings.Repeat("[", 1<<16), ""}, // deep
	} {
		b, err := ckpttest.Encode(ts, map[string]string{torch.AliasesKey: c.value})
		if err != nil {
			t.Fatal(err)
		}
		path := writePT(t, dir, fmt.Sprintf("h%d.safetensors", i), b)
		_, err = Open(path)
		var e *Error
		if !errors.Is(err, ErrResolve) || !errors.Is(err, torch.ErrInvalidFormat) || !errors.As(err, &e) || e.Path != path || e.Tensor != c.tensor {
			t.Errorf("%.40q: %v, want ErrResolve naming %s and tensor %q", c.value, err, path, c.tensor)
		}
	}

	// Many ties to one tensor are many tensors (the value is bounded by
	// the header that holds it).
	many := map[string]string{}
	for i := range 5000 {
		many[fmt.Sprintf("t.%d", i)] = "a"
	}
	b, err := ckpttest.Encode(ts, map[string]string{torch.AliasesKey: torch.FormatAliases(many)})
	if err != nil {
		t.Fatal(err)
	}
	m := mustOpen(t, writePT(t, dir, "many.safetensors", b))
	w := mustLoad(t, m)
	a, _ := w.Tensor("a")
	if x, err := w.Tensor("t.4999"); w.Len() != 5002 || err != nil || !bytes.Equal(x.Bytes(), a.Bytes()) {
		t.Errorf("many ties: %d tensors, %v", w.Len(), err)
	}

	// A tie to the data of a scaled FP8 weight, or to its scale.
	fp8 := []ckpttest.Tensor{ckpttest.T("l.weight", dtype.F8_E4M3, 4, 4), ckpttest.T("l.weight_scale_inv", dtype.F32, 1, 1)}
	for _, kept := range []string{"l.weight", "l.weight_scale_inv"} {
		b, err := ckpttest.Encode(fp8, map[string]string{torch.AliasesKey: `{"head.weight":"` + kept + `"}`})
		if err != nil {
			t.Fatal(err)
		}
		_, err = Open(writePT(t, dir, "fp8.safetensors", b))
		if !errors.Is(err, ErrResolve) || !errors.Is(err, torch.ErrUnsupported) || !strings.Contains(err.Error(), "head.weight") {
			t.Errorf("a tie to %s of a scaled layout: %v", kept, err)
		}
	}
}

// TestTiesShardSet: in a shard set, each shard may record ties, naming a
// tensor of any shard, and the set's ties are their union; a name tied
// to two tensors by two shards is refused naming both.
func TestTiesShardSet(t *testing.T) {
	write := func(dir string, meta1, meta2 map[string]string) string {
		t.Helper()
		s1, err := ckpttest.Encode(ckpttest.Tensors(t, "a:F32[4]"), meta1)
		if err != nil {
			t.Fatal(err)
		}
		s2, err := ckpttest.Encode(ckpttest.Tensors(t, "b:BF16[2,3]"), meta2)
		if err != nil {
			t.Fatal(err)
		}
		writePT(t, dir, "model-00001-of-00002.safetensors", s1)
		writePT(t, dir, "model-00002-of-00002.safetensors", s2)
		return writePT(t, dir, "model.safetensors.index.json",
			[]byte(`{"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}`))
	}
	// The tie to a is in the second shard, the tie to b in both.
	ix := write(t.TempDir(), map[string]string{torch.AliasesKey: `{"y":"b"}`}, map[string]string{torch.AliasesKey: `{"x":"a","y":"b"}`})
	m := mustOpen(t, ix)
	w := mustLoad(t, m)
	for tied, kept := range map[string]string{"x": "a", "y": "b"} {
		a, _ := w.Tensor(kept)
		b, err := w.Tensor(tied)
		if err != nil || !bytes.Equal(a.Bytes(), b.Bytes()) || b.DType != a.DType {
			t.Errorf("%s: %v", tied, err)
		}
	}
	c, err := m.Contents(m.Components()[0])
	if err != nil || len(c.Tensors) != 2 || c.Metadata[torch.AliasesKey] != `{"x":"a","y":"b"}` {
		t.Errorf("contents: %v, %v", c, err)
	}
	// Package shard's warning that the shards' values differ does not
	// apply: the ties are their union.
	if p, err := m.Plan(); err != nil || len(p.Components[0].Warnings) != 0 {
		t.Errorf("plan warnings: %v, %v", p.Components[0].Warnings, err)
	}
	ix = write(t.TempDir(), map[string]string{torch.AliasesKey: `{"y":"a"}`}, map[string]string{torch.AliasesKey: `{"y":"b"}`})
	_, err = Open(ix)
	if !errors.Is(err, ErrResolve) || !strings.Contains(err.Error(), "model-00001-of-00002") || !strings.Contains(err.Error(), "model-00002-of-00002") {
		t.Errorf("conflicting ties: %v", err)
	}
}

// FuzzTies: whatever a file's metadata records under torch.AliasesKey,
// Open never panics and refuses with a typed error, or loads every tied
// name with its kept tensor's bytes.
func FuzzTies(f *testing.F) {
	for _, s := range []string{`{"x":"a"}`, `{"x":"a","y":"b"}`, `{"b":"a"}`, `{"x":"y","y":"a"}`, `{}`, `{"x":"nope"}`, `[`} {
		f.Add(s)
	}
	ts := ckpttest.MustParseTensors("a:F32[4] b:BF16[2,2]")
	f.Fuzz(func(t *testing.T, value string) {
		b, err := ckpttest.Encode(ts, map[string]string{torch.AliasesKey: value})
		if err != nil {
			return // not a header the encoder writes
		}
		m, err := Open("m.safetensors", WithFS(fstest.MapFS{"m.safetensors": {Data: b}}))
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || !errors.Is(err, ErrResolve) {
				t.Fatalf("untyped error %T: %v", err, err)
			}
			return
		}
		defer m.Close()
		ties, err := torch.ParseAliases(value)
		if err != nil {
			t.Fatalf("opened with ties %q that do not parse: %v", value, err)
		}
		w, err := m.Load(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		for tied, kept := range ties {
			x, err1 := w.Tensor(tied)
			y, err2 := w.Tensor(kept)
			if err1 != nil || err2 != nil || !bytes.Equal(x.Bytes(), y.Bytes()) {
				t.Fatalf("%s -> %s: %v %v", tied, kept, err1, err2)
			}
		}
	})
}

// TestTiesTorchKeyTaken: a PyTorch checkpoint with a non-tensor value
// named like torch.AliasesKey is refused (torch.ErrUnsupported), as
// torch.WriteSafetensors refuses it: carried into a converted file's
// metadata, it would read back as ties.
func TestTiesTorchKeyTaken(t *testing.T) {
	p := []byte{0x80, 2, '}', 'X'}
	p = binary.LittleEndian.AppendUint32(p, uint32(len(torch.AliasesKey)))
	p = append(p, torch.AliasesKey...)
	p = append(p, 'K', 5, 's', '.') // BININT1 5, SETITEM, STOP
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, _ := zw.CreateHeader(&zip.FileHeader{Name: "archive/data.pkl", Method: zip.Store})
	w.Write(p)
	zw.Close()
	path := writePT(t, t.TempDir(), "m.pt", buf.Bytes())
	if _, err := Open(path); !errors.Is(err, ErrResolve) || !errors.Is(err, torch.ErrUnsupported) || !strings.Contains(err.Error(), path) {
		t.Errorf("%v, want ErrResolve naming %s", err, path)
	}
}
