package ckpt

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/testutil"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/torch"
	"github.com/ckpt-go/ckpt/variant"
)

// ptView and ptStorage are the tensors and storages of a test PyTorch
// checkpoint.
type (
	ptView    = ckpttest.TorchTensor
	ptStorage = ckpttest.TorchStorage
)

// torchArchive is ckpttest.EncodeTorch, failing the test on an error.
func torchArchive(t testing.TB, views []ptView, storages map[string]ptStorage, big bool) []byte {
	t.Helper()
	b, err := ckpttest.EncodeTorch(views, storages, big)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// f32s returns the little-endian bytes of float32 values.
func f32s(vs ...float32) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

// ramp is n float32 values: -n/2, ..., with a fraction that BF16 rounds.
func ramp(n int) []float32 {
	vs := make([]float32, n)
	for i := range vs {
		vs[i] = float32(i-n/2) * 1.0009765625
	}
	return vs
}

// bf16s converts float32 values to BF16 bytes.
func bf16s(t testing.TB, vs []float32) []byte {
	t.Helper()
	out := make([]byte, 2*len(vs))
	if _, err := dtype.Convert(out, dtype.BF16, f32s(vs...), dtype.F32, dtype.Options{}); err != nil {
		t.Fatal(err)
	}
	return out
}

// gatherView returns a view's contiguous bytes from its storage's
// elements of es bytes: the test's own reading of strides.
func gatherView(v ptView, data []byte, es int64) []byte {
	var out []byte
	n := numElements(v.Shape)
	for e := range n {
		off, rem := v.Offset, e
		for i := len(v.Shape) - 1; i >= 0; i-- {
			off += rem % v.Shape[i] * v.Stride[i]
			rem /= v.Shape[i]
		}
		out = append(out, data[off*es:(off+1)*es]...)
	}
	return out
}

// ptFixture is the checkpoint most tests read: contiguous F32 and BF16
// weights, a transposed view and an offset slice of one storage, a tie
// (the same view under two names), an F32 value BF16 overflows, and an
// integer tensor.
func ptFixture(t testing.TB) ([]ptView, map[string]ptStorage) {
	w := ramp(8 * 6)
	views := []ptView{
		{Name: "enc.weight", Storage: "0", Shape: []int64{8, 6}, Stride: []int64{6, 1}},
		{Name: "dec.weight", Storage: "0", Shape: []int64{8, 6}, Stride: []int64{6, 1}}, // tied to enc.weight
		{Name: "enc.weight_t", Storage: "0", Shape: []int64{6, 8}, Stride: []int64{1, 6}},
		{Name: "enc.rows", Storage: "0", Offset: 12, Shape: []int64{4, 6}, Stride: []int64{6, 1}},
		{Name: "h.weight", Storage: "1", Shape: []int64{4, 8}, Stride: []int64{8, 1}},
		{Name: "big", Storage: "2", Shape: []int64{4}, Stride: []int64{1}},
		{Name: "steps", Storage: "3", Shape: []int64{3}, Stride: []int64{1}},
	}
	var steps []byte
	for _, v := range []int64{1, -2, 3} {
		steps = binary.LittleEndian.AppendUint64(steps, uint64(v))
	}
	storages := map[string]ptStorage{
		"0": {DType: dtype.F32, Data: f32s(w...)},
		"1": {DType: dtype.BF16, Data: bf16s(t, ramp(32))},
		"2": {DType: dtype.F32, Data: f32s(1, math.MaxFloat32, -math.MaxFloat32, 2)},
		"3": {DType: dtype.I64, Data: steps},
	}
	return views, storages
}

// ptWant is each tensor's expected bytes as stored.
func ptWant(views []ptView, storages map[string]ptStorage) map[string][]byte {
	out := map[string][]byte{}
	for _, v := range views {
		s := storages[v.Storage]
		out[v.Name] = gatherView(v, s.Data, int64(s.DType.Bits()/8))
	}
	return out
}

func writePT(t testing.TB, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// convertTo is want's bytes converted to dt, with the statistics.
func convertTo(t testing.TB, b []byte, from, to dtype.DType) ([]byte, dtype.Stats) {
	t.Helper()
	if from == to {
		return b, dtype.Stats{}
	}
	n := int64(len(b)) * 8 / int64(from.Bits())
	out := make([]byte, n*int64(to.Bits())/8)
	st, err := dtype.Convert(out, to, b, from, dtype.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return out, st
}

// TestTorchLoad loads a PyTorch file as stored and under dtype
// policies, whole and tensor by tensor: every tensor (the transposed and
// sliced views gathered, the tie loaded under both names) equals its
// expected bytes, conversions equal dtype.Convert's with its overflow
// statistics, and the Items' Parts read the stored bytes.
func TestTorchLoad(t *testing.T) {
	views, storages := ptFixture(t)
	want := ptWant(views, storages)
	path := writePT(t, t.TempDir(), "model.pt", torchArchive(t, views, storages, false))
	for _, c := range []struct {
		name string
		opts []Option
		to   func(stored dtype.DType) dtype.DType
	}{
		{"as stored", nil, func(d dtype.DType) dtype.DType { return d }},
		{"floats to F32", []Option{WithDType(To(dtype.F32))}, func(d dtype.DType) dtype.DType {
			if d.IsFloat() {
				return dtype.F32
			}
			return d
		}},
		{"floats to BF16", []Option{WithDType(To(dtype.BF16))}, func(d dtype.DType) dtype.DType {
			if d.IsFloat() {
				return dtype.BF16
			}
			return d
		}},
		{"mmap asked", []Option{WithReadStrategy("mmap")}, func(d dtype.DType) dtype.DType { return d }},
	} {
		m := mustOpen(t, path, c.opts...)
		if got := m.Names(); len(got) != len(views) {
			t.Fatalf("%s: names %v", c.name, got)
		}
		w := mustLoad(t, m)
		for _, v := range views {
			tt, err := w.Tensor(v.Name)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			stored := storages[v.Storage].DType
			wb, wst := convertTo(t, want[v.Name], stored, c.to(stored))
			if tt.DType != c.to(stored) || tt.Stored != stored || !slices.Equal(tt.Shape, v.Shape) || !bytes.Equal(tt.Bytes(), wb) {
				t.Errorf("%s: %s: %s %v (stored %s), want %s %v; bytes equal %v", c.name, v.Name, tt.DType, tt.Shape, tt.Stored, c.to(stored), v.Shape, bytes.Equal(tt.Bytes(), wb))
			}
			if tt.Stats != wst {
				t.Errorf("%s: %s: stats %+v, want %+v", c.name, v.Name, tt.Stats, wst)
			}
			if !tt.Location.Owned || filepath.Base(tt.Location.File) != "model.pt" {
				t.Errorf("%s: %s: location %+v", c.name, v.Name, tt.Location)
			}
			one, err := m.LoadTensor(context.Background(), v.Name)
			if err != nil || !bytes.Equal(one.Bytes(), tt.Bytes()) || one.DType != tt.DType {
				t.Errorf("%s: LoadTensor(%s): %v", c.name, v.Name, err)
			}
		}
		if st := w.Stats(); c.name == "floats to BF16" && st.Overflow != 2 {
			t.Errorf("%s: %d overflows, want 2 (±MaxFloat32)", c.name, st.Overflow)
		}
		items, err := m.Items()
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range items {
			if it.Action == ActionView {
				t.Errorf("%s: %s is a view of a PyTorch file", c.name, it.Key)
			}
			b, err := io.ReadAll(io.NewSectionReader(&it.Data, 0, it.Data.Size()))
			if err != nil || !bytes.Equal(b, want[it.Name]) {
				t.Errorf("%s: %s: Data reads %v (%v)", c.name, it.Key, b, err)
			}
			// In odd pieces, from the end.
			b = make([]byte, it.Data.Size())
			for off := int64(len(b)); off > 0; off -= 7 {
				lo := max(off-7, 0)
				if _, err := it.Data.ReadAt(b[lo:off], lo); err != nil {
					t.Fatal(err)
				}
			}
			if !bytes.Equal(b, want[it.Name]) {
				t.Errorf("%s: %s: Data read in pieces differs", c.name, it.Key)
			}
			dst := make([]byte, it.Bytes)
			if _, err := it.Produce(context.Background(), dst); err != nil {
				t.Fatal(err)
			}
			if tt, _ := w.Tensor(it.Key); !bytes.Equal(dst, tt.Bytes()) {
				t.Errorf("%s: %s: Produce differs from Load", c.name, it.Key)
			}
		}
	}
}

// TestTorchPlan: the plan says the file is read with pread and why, and
// how each tensor is verified against its storage record's CRC-32: a
// tensor whose bytes are its record's by checksum, a view of its storage
// (transposed, an offset slice) not with VerifyPresent and by reading its
// record with VerifyAlways (counted in verify_read_bytes), nothing with
// VerifyNever. (Until PyTorch records were verified, the plan said "not
// verified: no checksums" of every tensor and VerifyAlways refused them.)
func TestTorchPlan(t *testing.T) {
	views, storages := ptFixture(t)
	path := writePT(t, t.TempDir(), "pytorch_model.bin", torchArchive(t, views, storages, false))
	isView := map[string]bool{"enc.weight_t": true, "enc.rows": true}
	for _, c := range []struct {
		v          Verify
		whole, vw  string
		text       string
		readBytes  int64
		verifiedTs int
	}{
		{VerifyPresent, "checksum", "not verified: a view of its storage", "verify (present): 5 tensors (488 B) by checksum, 2 not (a view of its storage: 2)", 0, 5},
		{VerifyAlways, "checksum", "checksum (reads its storage record)", "verify (always): 7 tensors (776 B) by checksum, reading 384 B more to verify rank parts and views", 2 * 192, 7},
		{VerifyNever, "not verified: never", "not verified: never", "verify (never): 0 tensors (0 B) by checksum, 7 not (never: 7)", 0, 0},
	} {
		m := mustOpen(t, path, WithReadStrategy("mmap"), WithVerify(c.v))
		p, err := m.Plan()
		if err != nil {
			t.Fatal(err)
		}
		cp := p.Components[0]
		if cp.ReadStrategy != "pread" || !strings.Contains(cp.ReadStrategyReason, "PyTorch") {
			t.Errorf("strategy %s (%s)", cp.ReadStrategy, cp.ReadStrategyReason)
		}
		text := p.String()
		for _, s := range []string{"read by pread (PyTorch checkpoint", c.text + "\n"} {
			if !strings.Contains(text, s) {
				t.Errorf("%s: plan text lacks %q:\n%s", c.v, s, text)
			}
		}
		for _, tp := range cp.Tensors {
			want, rb := c.whole, int64(0)
			if isView[tp.Name] {
				want = c.vw
				if c.v == VerifyAlways {
					rb = 192 // storage 0: 48 F32
				}
			}
			if tp.Verify != want || tp.VerifyReadBytes != rb || tp.Action != "read" {
				t.Errorf("%s: %s: verify %q (%d bytes), action %q; want %q (%d bytes)", c.v, tp.Name, tp.Verify, tp.VerifyReadBytes, tp.Action, want, rb)
			}
		}
		if p.Verify.ReadBytes != c.readBytes || p.Verify.Tensors != c.verifiedTs || p.Verify.Refused != 0 {
			t.Errorf("%s: verify plan %+v", c.v, p.Verify)
		}
		if _, err := m.Load(context.Background()); err != nil {
			t.Errorf("%s: %v", c.v, err)
		}
		if _, err := m.LoadTensor(context.Background(), "enc.weight_t"); err != nil {
			t.Errorf("%s, one tensor: %v", c.v, err)
		}
	}
}

// TestTorchRank: every rank's part of a tensor split along dimension 0 or
// 1 (gathered views included) equals the slice of the whole, as stored
// and converted.
func TestTorchRank(t *testing.T) {
	views, storages := ptFixture(t)
	path := writePT(t, t.TempDir(), "model.pt", torchArchive(t, views, storages, false))
	for _, target := range []Target{AsStored, To(dtype.F32)} {
		whole := mustLoad(t, mustOpen(t, path, WithDType(target)))
		for _, name := range []string{"enc.weight", "enc.weight_t", "enc.rows", "h.weight", "dec.weight"} {
			full, _ := whole.Tensor(name)
			for dim := range 2 {
				for world := 2; world <= 3; world++ {
					parts := rankParts(t, path, name, dim, world, WithDType(target))
					var bs [][]byte
					var shapes [][]int64
					for _, p := range parts {
						bs = append(bs, p.Bytes())
						shapes = append(shapes, p.Shape)
					}
					if c := concat(bs, shapes, dim, int64(full.DType.Bits()/8)); !bytes.Equal(c, full.Bytes()) {
						t.Errorf("%s %s dim %d world %d: parts differ from the whole", target, name, dim, world)
					}
				}
			}
		}
	}
}

// TestTorchShardedFolderAndFS opens a sharded index, a component folder
// with only PyTorch weights (and one where safetensors weights win), and
// both through an fs.FS: each loads the tensors of the file.
func TestTorchShardedFolderAndFS(t *testing.T) {
	views, storages := ptFixture(t)
	want := ptWant(views, storages)
	dir := t.TempDir()
	// Shard 1: the views of storage 0; shard 2: the others.
	var a, b []ptView
	for _, v := range views {
		if v.Storage == "0" {
			a = append(a, v)
		} else {
			b = append(b, v)
		}
	}
	sa := map[string]ptStorage{"0": storages["0"]}
	sb := maps.Clone(storages)
	delete(sb, "0")
	writePT(t, dir, "sharded/pytorch_model-00001-of-00002.bin", torchArchive(t, a, sa, false))
	writePT(t, dir, "sharded/pytorch_model-00002-of-00002.bin", torchArchive(t, b, sb, true)) // big-endian
	var wm []string
	for _, v := range a {
		wm = append(wm, `"`+v.Name+`": "pytorch_model-00001-of-00002.bin"`)
	}
	for _, v := range b {
		wm = append(wm, `"`+v.Name+`": "pytorch_model-00002-of-00002.bin"`)
	}
	writePT(t, dir, "sharded/pytorch_model.bin.index.json", []byte(`{"weight_map": {`+strings.Join(wm, ", ")+`}}`))
	one := torchArchive(t, views, storages, false)
	writePT(t, dir, "folder/pytorch_model.bin", one)
	writePT(t, dir, "folder/config.json", []byte(`{"torch_dtype": "float32"}`))
	writePT(t, dir, "both/pytorch_model.bin", one)
	writePT(t, dir, "both/model.safetensors", mustEncode(t, ckpttest.Tensors(t, "only:F32[2]")...))

	check := func(what string, m *Model, files int) {
		t.Helper()
		w := mustLoad(t, m)
		if w.Len() != len(views) {
			t.Errorf("%s: %d tensors", what, w.Len())
		}
		for _, v := range views {
			tt, err := w.Tensor(v.Name)
			if err != nil || !bytes.Equal(tt.Bytes(), want[v.Name]) {
				t.Errorf("%s: %s: %v", what, v.Name, err)
			}
		}
		c, err := m.Contents(m.Components()[0])
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Files) != files || len(c.Tensors) != len(views)-1 || c.Metadata[torch.AliasesKey] != `{"dec.weight":"enc.weight"}` {
			t.Errorf("%s: contents: files %v, %d tensors, metadata %v", what, c.Files, len(c.Tensors), c.Metadata)
		}
	}
	check("index", mustOpen(t, filepath.Join(dir, "sharded/pytorch_model.bin.index.json")), 2)
	m := mustOpen(t, filepath.Join(dir, "folder"))
	if m.Components()[0] != "folder" {
		t.Errorf("folder: component %v", m.Components())
	}
	check("folder", m, 1)
	if got := mustOpen(t, filepath.Join(dir, "both")).Names(); !slices.Equal(got, []string{"only"}) {
		t.Errorf("safetensors and PyTorch weights: %v, want the safetensors ones", got)
	}
	fsys := os.DirFS(dir)
	check("fs index", mustOpen(t, "sharded/pytorch_model.bin.index.json", WithFS(fsys)), 2)
	check("fs folder", mustOpen(t, "folder", WithFS(fsys)), 1)
	check("fs file", mustOpen(t, "folder/pytorch_model.bin", WithFS(fsys)), 1)
	check("map fs", mustOpen(t, "m.pt", WithFS(fstest.MapFS{"m.pt": {Data: one}})), 1)
	// A folder's PyTorch weights have variants as safetensors weights do:
	// this one has none.
	if _, err := Open(filepath.Join(dir, "folder"), WithVariant("fp16")); !errors.Is(err, ErrResolve) || !errors.Is(err, variant.ErrVariantNotFound) {
		t.Errorf("variant: %v", err)
	}
	if _, err := Open(filepath.Join(dir, "folder/pytorch_model.bin"), WithVariant("fp16")); !errors.Is(err, ErrOption) {
		t.Errorf("variant of a file: %v", err)
	}
}

// TestTorchRefusals: a pickle naming a forbidden global, a FIFO, a
// missing file and a legacy-format file fail Open with typed errors.
func TestTorchRefusals(t *testing.T) {
	dir := t.TempDir()
	var evil []byte
	evil = append(evil, 0x80, 2, 'c')
	evil = append(evil, "posix\nsystem\n"...)
	evil = append(evil, 'X', 4, 0, 0, 0)
	evil = append(evil, "true"...)
	evil = append(evil, 0x85, 'R', '.')
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, _ := zw.CreateHeader(&zip.FileHeader{Name: "archive/data.pkl", Method: zip.Store})
	w.Write(evil)
	zw.Close()
	_, err := Open(writePT(t, dir, "evil.pt", buf.Bytes()))
	if !errors.Is(err, torch.ErrForbiddenGlobal) || !errors.Is(err, ErrResolve) {
		t.Errorf("forbidden global: %v", err)
	}
	var te *torch.Error
	if !errors.As(err, &te) || te.Global != "posix system" {
		t.Errorf("forbidden global: %#v", te)
	}
	if _, err := Open(filepath.Join(dir, "none.bin")); !errors.Is(err, os.ErrNotExist) || !errors.Is(err, ErrResolve) {
		t.Errorf("missing: %v", err)
	}
	if _, err := Open(writePT(t, dir, "legacy.bin", []byte{0x80, 2, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19})); !errors.Is(err, torch.ErrUnsupported) {
		t.Errorf("legacy: %v", err)
	}
}

// TestTorchFixtures loads the checkpoints PyTorch wrote (when the shared
// fixtures are there): every tensor, tied names included, equals the copy
// safetensors.torch wrote beside it, as stored and, for floats, converted
// to F32; the legacy format and the evil pickle are refused.
func TestTorchFixtures(t *testing.T) {
	dir := testutil.Fixtures(t, "torch", "cases.json")
	for _, c := range []struct{ src, expected string }{
		{"mlp_f32.bin", "mlp_f32.expected.safetensors"},
		{"tied_bf16.pt", "tied_bf16.expected.safetensors"},
		{"dtypes.pt", "dtypes.expected.safetensors"},
		{"train_state.pt", "train_state.expected.safetensors"},
		{"sharded/pytorch_model.bin.index.json", "sharded.expected.safetensors"},
		{"sharded", "sharded.expected.safetensors"}, // a folder: its index
	} {
		exp, err := safetensors.Open(filepath.Join(dir, c.expected))
		if err != nil {
			t.Fatal(err)
		}
		for _, target := range []Target{AsStored, To(dtype.F32)} {
			m := mustOpen(t, filepath.Join(dir, c.src), WithDType(target))
			w := mustLoad(t, m)
			if w.Len() != exp.Len() {
				t.Errorf("%s: %d tensors, want %d", c.src, w.Len(), exp.Len())
			}
			for name, et := range exp.Tensors() {
				tt, err := w.Tensor(name)
				if err != nil {
					t.Errorf("%s: %v", c.src, err)
					continue
				}
				eb, _ := et.Bytes()
				to := et.DType()
				if d, _ := target.DType(); target != AsStored && to.IsFloat() {
					to = d
				}
				wb, _ := convertTo(t, eb, et.DType(), to)
				if tt.DType != to || !slices.Equal(tt.Shape, et.Shape()) || !bytes.Equal(tt.Bytes(), wb) {
					t.Errorf("%s (%s): %s: %s %v, want %s %v", c.src, target, name, tt.DType, tt.Shape, to, et.Shape())
				}
			}
		}
		exp.Close()
	}
	_, err := Open(filepath.Join(dir, "evil.pt"))
	var te *torch.Error
	if !errors.Is(err, torch.ErrForbiddenGlobal) || !errors.As(err, &te) || te.Global != "posix system" {
		t.Errorf("evil.pt: %v", err)
	}
	if _, err := Open(filepath.Join(dir, "legacy.bin")); !errors.Is(err, torch.ErrUnsupported) || !strings.Contains(err.Error(), "legacy format") {
		t.Errorf("legacy.bin: %v", err)
	}
}

// TestTorchMatchesSafetensors: a PyTorch checkpoint loads exactly as the
// safetensors file of the same tensors does (dtype, shape, bytes,
// statistics, split, scales), under every policy: as stored, converted,
// split by rank along dimension 0 and 1 with and without a conversion,
// and a block-scaled FP8 weight (config.json beside the file)
// dequantized or kept quantized with its scale.
func TestTorchMatchesSafetensors(t *testing.T) {
	views, storages := ptFixture(t)
	fp8 := make([]byte, 4*8)
	for i := range fp8 {
		fp8[i] = byte(0x30 + i) // finite E4M3 values
	}
	views = append(views, ptView{Name: "q.weight", Storage: "4", Shape: []int64{4, 8}, Stride: []int64{8, 1}},
		ptView{Name: "q.weight_scale_inv", Storage: "5", Shape: []int64{1, 1}, Stride: []int64{1, 1}})
	storages["4"] = ptStorage{DType: dtype.F8_E4M3, Data: fp8}
	storages["5"] = ptStorage{DType: dtype.F32, Data: f32s(0.5)}
	want := ptWant(views, storages)
	var sts []ckpttest.Tensor
	for _, v := range views {
		sts = append(sts, ckpttest.Tensor{Name: v.Name, DType: storages[v.Storage].DType, Shape: v.Shape, Data: want[v.Name]})
	}
	dir := t.TempDir()
	cfg := []byte(`{"quantization_config":{"quant_method":"fp8","weight_block_size":[128,128]}}`)
	pt := filepath.Join(dir, "pt", "pytorch_model.bin")
	writePT(t, dir, "pt/pytorch_model.bin", torchArchive(t, views, storages, false))
	writePT(t, dir, "pt/config.json", cfg)
	writePT(t, dir, "st/model.safetensors", mustEncode(t, sts...))
	writePT(t, dir, "st/config.json", cfg)
	splits := []Split{{Pattern: MustParsePattern("enc.*"), Dim: 0}, {Pattern: MustParsePattern("dec.weight"), Dim: 1},
		{Pattern: MustParsePattern("h.weight"), Dim: 1}, {Pattern: MustParsePattern("big"), Dim: 0}}
	cases := [][]Option{nil, {WithDType(To(dtype.F32))}, {WithDType(To(dtype.BF16))}}
	for rank := range 2 {
		cases = append(cases, []Option{WithRank(rank, 2, splits...)}, []Option{WithRank(rank, 2, splits...), WithDType(To(dtype.F32))})
	}
	for i, opts := range cases {
		// The safetensors file read with pread too, so that the actions
		// are the same (read, not view).
		wp := mustLoad(t, mustOpen(t, pt, opts...))
		ws := mustLoad(t, mustOpen(t, filepath.Join(dir, "st"), append(slices.Clone(opts), WithReadStrategy("pread"))...))
		if wp.Len() != ws.Len() {
			t.Fatalf("case %d: %d tensors, safetensors %d", i, wp.Len(), ws.Len())
		}
		for name, s := range ws.All() {
			p, err := wp.Tensor(name)
			if err != nil {
				t.Fatal(err)
			}
			same := func(a, b *Tensor) bool {
				return a.DType == b.DType && slices.Equal(a.Shape, b.Shape) && bytes.Equal(a.Bytes(), b.Bytes()) &&
					a.Stats == b.Stats && a.Action() == b.Action() && (a.Split == nil) == (b.Split == nil) && len(a.Scales) == len(b.Scales)
			}
			ok := same(p, s)
			for k := range min(len(p.Scales), len(s.Scales)) {
				ok = ok && same(p.Scales[k], s.Scales[k])
			}
			if !ok {
				t.Errorf("case %d: %s: %s %v %s, safetensors %s %v %s", i, name, p.DType, p.Shape, p.Action(), s.DType, s.Shape, s.Action())
			}
		}
		if q, _ := wp.Tensor("q.weight"); q.Layout == "" {
			t.Errorf("case %d: q.weight is not a quantized weight (%s)", i, q.Action())
		}
	}
}
