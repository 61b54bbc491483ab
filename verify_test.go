package ckpt

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/source"
	"github.com/ckpt-go/ckpt/torch"
)

// checksummed rewrites every safetensors file under dir with package
// safetensors' writer, which names a checksum for every tensor (and the
// header's own), and checks each tensor's with CRC-32C computed here.
func checksummed(t testing.TB, dir string) {
	t.Helper()
	table := crc32.MakeTable(crc32.Castagnoli)
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".safetensors") {
			return err
		}
		f, err := safetensors.Open(path)
		if err != nil {
			return err
		}
		var ts []safetensors.TensorData
		for _, info := range f.Header().Tensors {
			st, err := f.Tensor(info.Name)
			if err != nil {
				return err
			}
			b := make([]byte, st.ByteLen())
			if err := st.ReadTo(b); err != nil {
				return err
			}
			ts = append(ts, safetensors.TensorData{Name: info.Name, DType: info.DType, Shape: info.Shape, Data: b})
		}
		meta := f.Metadata()
		f.Close()
		if err := safetensors.Save(context.Background(), path, ts, meta); err != nil {
			return err
		}
		h, err := safetensors.ReadHeaderFile(path)
		if err != nil {
			return err
		}
		for _, td := range ts {
			if got, want := h.Metadata[safetensors.ChecksumPrefix+td.Name], fmt.Sprintf("%08x", crc32.Checksum(td.Data, table)); got != want {
				return fmt.Errorf("%s: %s's checksum is %q, want %q", path, td.Name, got, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// copyTree copies the folder src to a new temporary folder.
func copyTree(t testing.TB, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), filepath.Base(src))
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	return dst
}

// flip flips one bit at a random byte of the stored tensor name (of the
// files under dir) and returns the file and the byte's offset in it.
func flip(t testing.TB, dir, name string, rng *rand.Rand) (string, int64) {
	t.Helper()
	var file string
	var at int64 = -1
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".safetensors") || at >= 0 {
			return err
		}
		h, err := safetensors.ReadHeaderFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if info, ok := h.Lookup(name); ok {
			file, at = path, h.DataOffset+info.Begin+rng.Int64N(info.End-info.Begin)
		}
		return nil
	})
	if at < 0 {
		t.Fatalf("no stored tensor %s under %s", name, dir)
	}
	flipAt(t, file, at, byte(1)<<rng.IntN(8))
	return file, at
}

func flipAt(t testing.TB, file string, at int64, mask byte) {
	t.Helper()
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [1]byte
	if _, err := f.ReadAt(b[:], at); err != nil {
		t.Fatal(err)
	}
	b[0] ^= mask
	if _, err := f.WriteAt(b[:], at); err != nil {
		t.Fatal(err)
	}
}

// verifyFixture writes a component folder with checksums: a BF16 weight,
// an F32 bias, an integer tensor, and a DeepSeek block-FP8 weight of 256×256
// (blocks of 128) with its scale_inv, in two shards.
func verifyFixture(t testing.TB) string {
	t.Helper()
	codes := make([]byte, 256*256)
	for i := range codes {
		codes[i] = byte(i*13) & 0xf7
	}
	sb := make([]byte, 4*4)
	for i := 0; i < len(sb); i += 4 {
		binary.LittleEndian.PutUint32(sb[i:], math.Float32bits(float32(i+3)/16))
	}
	dir := filepath.Join(t.TempDir(), "m")
	if _, err := ckpttest.WriteWeights(dir, ckpttest.Weights{Shards: 2, Tensors: []ckpttest.Tensor{
		ckpttest.T("a.weight", dtype.BF16, 64, 48),
		ckpttest.T("b.bias", dtype.F32, 64),
		ckpttest.T("ids", dtype.I64, 10),
		{Name: "proj.weight", DType: dtype.F8_E4M3, Shape: []int64{256, 256}, Data: codes},
		{Name: "proj.weight_scale_inv", DType: dtype.F32, Shape: []int64{2, 2}, Data: sb},
	}}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"quantization_config":{"quant_method":"fp8","weight_block_size":[128,128]}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	checksummed(t, dir)
	return dir
}

// verifyStored maps each stored tensor of verifyFixture to the logical
// tensor that reads it.
var verifyStored = map[string]string{"a.weight": "a.weight", "b.bias": "b.bias", "ids": "ids", "proj.weight": "proj.weight", "proj.weight_scale_inv": "proj.weight"}

// verifyCase is one way of opening verifyFixture.
type verifyCase struct {
	name string
	opts []Option
	fsys func(dir string) fs.FS // opens the folder's base name in this fs.FS; nil: the path
}

func verifyCases(t *testing.T) []verifyCase {
	mapFS := func(dir string) fs.FS {
		m := fstest.MapFS{}
		filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := os.ReadFile(path)
			rel, _ := filepath.Rel(filepath.Dir(dir), path)
			m[filepath.ToSlash(rel)] = &fstest.MapFile{Data: b}
			return err
		})
		return m
	}
	var out []verifyCase
	for _, target := range []struct {
		name string
		t    Target
	}{{"stored", AsStored}, {"f32", To(dtype.F32)}, {"bf16", To(dtype.BF16)}} {
		out = append(out,
			verifyCase{name: target.name + "/mmap", opts: []Option{WithDType(target.t), WithReadStrategy("mmap")}},
			verifyCase{name: target.name + "/pread", opts: []Option{WithDType(target.t), WithReadStrategy("pread")}},
			verifyCase{name: target.name + "/dirfs", opts: []Option{WithDType(target.t)}, fsys: func(dir string) fs.FS { return os.DirFS(filepath.Dir(dir)) }},
			verifyCase{name: target.name + "/mapfs", opts: []Option{WithDType(target.t)}, fsys: mapFS},
			verifyCase{name: target.name + "/range", opts: []Option{WithDType(target.t)}, fsys: func(dir string) fs.FS {
				return &fakeRangeFS{FS: os.DirFS(filepath.Dir(dir)), t: t, cfg: source.RangeConfig{Concurrency: 3, Chunk: 1 << 20, MaxGap: 64}}
			}},
		)
	}
	return out
}

func (c verifyCase) open(t *testing.T, dir string, opts ...Option) (*Model, error) {
	opts = append(slices.Clone(c.opts), opts...)
	if c.fsys == nil {
		return Open(dir, opts...)
	}
	return Open(filepath.Base(dir), append(opts, WithFS(c.fsys(dir)))...)
}

// checkChecksumErr checks that err is a checksum mismatch naming the file,
// the tensor and the byte range holding the offset at.
func checkChecksumErr(t *testing.T, what string, err error, file, tensor string, at int64) {
	t.Helper()
	if !errors.Is(err, ErrChecksum) {
		t.Errorf("%s: %v, want ErrChecksum", what, err)
		return
	}
	var ce *safetensors.ChecksumError
	if !errors.As(err, &ce) {
		t.Errorf("%s: %v is not a *safetensors.ChecksumError", what, err)
		return
	}
	if ce.Tensor != tensor || filepath.Base(ce.File) != filepath.Base(file) || at < ce.Begin || at >= ce.End {
		t.Errorf("%s: %v: names %s of %s, bytes [%d, %d); the flipped bit is in %s of %s at %d", what, err, ce.Tensor, ce.File, ce.Begin, ce.End, tensor, file, at)
	}
	msg := err.Error()
	for _, s := range []string{tensor, filepath.Base(file), fmt.Sprintf("bytes %d to %d", ce.Begin, ce.End)} {
		if !strings.Contains(msg, s) {
			t.Errorf("%s: message %q does not say %q", what, msg, s)
		}
	}
}

// readItem reads every part of it with Part.ReadAt, in pieces of 700
// bytes in reverse order, as a consumer reading in parallel might.
func readItem(it *Item) error {
	for _, p := range append([]Part{it.Data}, it.Scales...) {
		buf := make([]byte, 700)
		n := p.Size()
		last := (n - 1) / 700 * 700
		for off := last; off >= 0; off -= 700 {
			if _, err := p.ReadAt(buf[:min(700, n-off)], off); err != nil && err != io.EOF {
				return err
			}
		}
	}
	return nil
}

// viewBytes loads m and returns the bytes of its tensors and scales that
// are views of the mapping.
func viewBytes(t *testing.T, m *Model) int64 {
	t.Helper()
	w, err := m.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var n int64
	for _, tt := range w.All() {
		for _, x := range append([]*Tensor{tt}, tt.Scales...) {
			if !x.Location.Owned {
				n += int64(len(x.Bytes()))
			}
		}
	}
	return n
}

// Every stored tensor of a checksummed checkpoint, damaged by one flipped
// bit, is refused by Load (nil Weights), LoadTensor, Item.Produce and the
// items' Part.ReadAt with a *safetensors.ChecksumError naming the file,
// the tensor and its bytes — views (verified by their pass), pread copies,
// conversions, dequantized and kept-quantized FP8 weights with their
// scales, from a path, an os.DirFS, a MapFS and a RangeFS — and the
// undamaged tensors still load. With VerifyNever the damaged bytes load.
func TestVerifyRefusesEveryDamagedTensor(t *testing.T) {
	clean := verifyFixture(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range verifyCases(t) {
		t.Run(c.name, func(t *testing.T) {
			m, err := c.open(t, clean)
			if err != nil {
				t.Fatal(err)
			}
			good := loadBytes(t, m)
			p, err := m.Plan()
			if err != nil {
				t.Fatal(err)
			}
			if p.Verify.Tensors != 4 || p.Verify.Unverified != 0 || p.Verify.Policy != "present" {
				t.Errorf("plan: %+v, want 4 tensors verified", p.Verify)
			}
			// The plan's pass over views is the bytes a load hands out
			// as views of the mapping.
			if pass := viewBytes(t, m); p.Verify.PassBytes != pass || strings.HasSuffix(c.name, "/mmap") != (pass > 0) {
				t.Errorf("plan: pass over %d bytes of views, the load's views hold %d", p.Verify.PassBytes, pass)
			} else if pass > 0 && !strings.Contains(p.String(), "of zero-copy views read once before the load returns them") {
				t.Errorf("plan does not say that views are read by a pass:\n%s", p)
			}
			m.Close()
			for stored, logical := range verifyStored {
				dir := copyTree(t, clean)
				file, at := flip(t, dir, stored, rng)
				m, err := c.open(t, dir)
				if err != nil {
					t.Fatal(err)
				}
				w, err := m.Load(context.Background())
				if w != nil {
					t.Errorf("%s damaged: Load returned weights", stored)
					w.Close()
				}
				checkChecksumErr(t, stored+" damaged: Load", err, file, stored, at)
				_, err = m.LoadTensor(context.Background(), logical)
				checkChecksumErr(t, stored+" damaged: LoadTensor", err, file, stored, at)
				items, err := m.Items()
				if err != nil {
					t.Fatal(err)
				}
				for _, it := range items {
					_, perr := it.Produce(context.Background(), make([]byte, it.Bytes))
					rerr := readItem(it)
					if it.Key != logical {
						if perr != nil || rerr != nil {
							t.Errorf("%s damaged: %s: Produce %v, ReadAt %v", stored, it.Key, perr, rerr)
						}
						continue
					}
					checkChecksumErr(t, stored+" damaged: Produce", perr, file, stored, at)
					checkChecksumErr(t, stored+" damaged: Part.ReadAt", rerr, file, stored, at)
				}
				for name := range verifyStored {
					if verifyStored[name] != logical && name == verifyStored[name] {
						if _, err := m.LoadTensor(context.Background(), name); err != nil {
							t.Errorf("%s damaged: LoadTensor(%s): %v", stored, name, err)
						}
					}
				}
				m.Close()
				// VerifyNever loads the damaged bytes.
				m, err = c.open(t, dir, WithVerify(VerifyNever))
				if err != nil {
					t.Fatal(err)
				}
				got := loadBytes(t, m)
				if strings.HasPrefix(c.name, "stored/") && stored == logical && bytes.Equal(got[logical], good[logical]) {
					t.Errorf("%s damaged, VerifyNever: the tensor loads the undamaged bytes", stored)
				}
				m.Close()
			}
		})
	}
}

// A header whose checksums are damaged (a tensor's value changed, a key
// renamed, the header's own checksum changed) makes every load refuse with
// ErrChecksum naming the file; the plan says so where the header shows
// it (not a changed tensor checksum, which only the tensor's bytes
// contradict); VerifyNever loads it.
func TestVerifyDamagedHeader(t *testing.T) {
	clean := verifyFixture(t)
	for _, damage := range []struct {
		name, from, to string
		planned        bool
	}{
		{"value", `"ckpt.crc32c.b.bias":"`, "", false},
		{"key", `"ckpt.crc32c.b.bias"`, `"ckpt.crc32c.b.biaz"`, true},
		{"header", `"ckpt.header.crc32c":"`, "", true},
	} {
		dir := copyTree(t, clean)
		var file string
		filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if strings.HasSuffix(path, ".safetensors") && file == "" {
				b, _ := os.ReadFile(path)
				i := bytes.Index(b, []byte(damage.from))
				if i < 0 {
					return nil
				}
				file = path
				if damage.to == "" {
					j := i + len(damage.from)
					b[j] = "0123456789abcdef"[(strings.IndexByte("0123456789abcdef", b[j])+1)%16]
				} else {
					copy(b[i:], damage.to)
				}
				os.WriteFile(path, b, 0o644)
			}
			return nil
		})
		if file == "" {
			t.Fatal("no checksum of b.bias in the fixture's headers")
		}
		m := mustOpen(t, dir)
		_, err := m.Load(context.Background())
		if !errors.Is(err, ErrChecksum) || !strings.Contains(err.Error(), filepath.Base(file)) {
			t.Errorf("%s damaged: Load: %v, want ErrChecksum naming %s", damage.name, err, filepath.Base(file))
		}
		p, err := m.Plan()
		if err != nil {
			t.Fatal(err)
		}
		if damage.planned != (p.Verify.Refused == 2) || damage.planned != strings.Contains(p.String(), "REFUSES") {
			t.Errorf("%s damaged: plan %+v\n%s", damage.name, p.Verify, p)
		}
		for _, c := range p.Components {
			for _, tp := range c.Tensors {
				if want := map[bool]string{true: "refused: damaged checksums", false: "checksum"}[damage.planned]; tp.Name == "b.bias" && tp.Verify != want {
					t.Errorf("%s damaged: b.bias plans %q, want %q", damage.name, tp.Verify, want)
				}
			}
		}
		loadBytes(t, mustOpen(t, dir, WithVerify(VerifyNever)))
	}
}

// VerifyAlways refuses a file without checksums (Load, LoadTensor, Part.ReadAt,
// before anything is read), and the plan says so; VerifyPresent reads it.
func TestVerifyAlwaysRefusesUnchecksummed(t *testing.T) {
	path := ckpttest.File(t, ckpttest.Tensors(t, "a:BF16[64,32] ids:I64[7]")...)
	m := mustOpen(t, path, WithVerify(VerifyAlways))
	if w, err := m.Load(context.Background()); !errors.Is(err, ErrChecksum) || w != nil || !strings.Contains(err.Error(), path) {
		t.Errorf("Load: %v, want ErrChecksum naming %s", err, path)
	}
	if _, err := m.LoadTensor(context.Background(), "a"); !errors.Is(err, ErrChecksum) {
		t.Errorf("LoadTensor: %v", err)
	}
	items, _ := m.Items()
	if items[0].check() != checkRefused {
		t.Errorf("item check %s", items[0].check().string())
	}
	if _, err := items[0].Data.ReadAt(make([]byte, 8), 0); !errors.Is(err, ErrChecksum) {
		t.Errorf("Part.ReadAt: %v", err)
	}
	p, _ := m.Plan()
	if p.Verify.Refused != 2 || p.Verify.Policy != "always" || !strings.Contains(p.String(), "verify (always)") {
		t.Errorf("plan %+v:\n%s", p.Verify, p)
	}
	p, _ = mustOpen(t, path).Plan()
	if p.Verify.Unverified != 2 || p.Verify.Why["not verified: no checksums"] != 2 {
		t.Errorf("VerifyPresent plan %+v", p.Verify)
	}
	loadBytes(t, mustOpen(t, path))
}

// Rank parts: with VerifyPresent a part that is not its whole tensor is
// not verified (the plan says so, and the load reads only the part); with
// VerifyAlways the load reads the rest of the tensor too — the plan counts
// those bytes — and refuses a damaged tensor wherever the flipped bit is,
// for splits of dimension 0 and 1, views, conversions and dequantized FP8
// parts, through Load, LoadTensor, Produce and Part.ReadAt.
func TestVerifyRankParts(t *testing.T) {
	clean := verifyFixture(t)
	rng := rand.New(rand.NewPCG(3, 4))
	for _, c := range []struct {
		name   string
		target Target
		dim    int
		read   readStrategy
	}{
		{"rows-stored-mmap", AsStored, 0, readMmap},
		{"rows-f32-mmap", To(dtype.F32), 0, readMmap},
		{"rows-f32-pread", To(dtype.F32), 0, readPread},
		{"cols-stored-mmap", AsStored, 1, readMmap},
		{"cols-f32-pread", To(dtype.F32), 1, readPread},
	} {
		t.Run(c.name, func(t *testing.T) {
			splits := []Split{{Pattern: MustParsePattern("a.weight"), Dim: c.dim}, {Pattern: MustParsePattern("proj.weight"), Dim: c.dim}}
			opts := func(v Verify, rank int) []Option {
				return []Option{WithDType(c.target), WithReadStrategy(c.read.string()), WithVerify(v), WithRank(rank, 2, splits...)}
			}
			// VerifyPresent: the parts are not verified, and only they are read.
			m := mustOpen(t, clean, opts(VerifyPresent, 1)...)
			p, _ := m.Plan()
			if p.Verify.Unverified != 2 || p.Verify.Why["not verified: rank part"] != 2 || p.Verify.Tensors != 2 || p.Verify.ReadBytes != 0 {
				t.Errorf("VerifyPresent plan: %+v", p.Verify)
			}
			rc := countReads(m)
			loadBytes(t, m)
			var read int64
			for _, n := range rc.bytes {
				read += n
			}
			if read != p.TotalReadBytes {
				t.Errorf("VerifyPresent: read %d bytes, the plan reads %d", read, p.TotalReadBytes)
			}
			// VerifyAlways: the rest is read too.
			present := p
			m = mustOpen(t, clean, opts(VerifyAlways, 1)...)
			p, _ = m.Plan()
			if p.PeakBytes < present.PeakBytes || p.TotalResidentBytes != present.TotalResidentBytes {
				t.Errorf("VerifyAlways plans a peak of %d bytes (resident %d), VerifyPresent %d (resident %d)", p.PeakBytes, p.TotalResidentBytes, present.PeakBytes, present.TotalResidentBytes)
			}
			var rest int64
			for _, tp := range p.Components[0].Tensors {
				rest += tp.VerifyReadBytes
				if want := map[bool]string{true: "checksum (reads the rest of the tensor)", false: "checksum"}[tp.Split != nil]; tp.Verify != want {
					t.Errorf("VerifyAlways: %s plans %q, want %q", tp.Name, tp.Verify, want)
				}
			}
			if p.Verify.Tensors != 4 || p.Verify.ReadBytes != rest || rest == 0 || !strings.Contains(p.String(), "more to verify rank parts") {
				t.Errorf("VerifyAlways plan: %+v (rest %d)\n%s", p.Verify, rest, p)
			}
			rc = countReads(m)
			want := loadBytes(t, m)
			read = 0
			for _, n := range rc.bytes {
				read += n
			}
			if read != p.TotalReadBytes+rest {
				t.Errorf("VerifyAlways: read %d bytes, the plan reads %d + %d to verify", read, p.TotalReadBytes, rest)
			}
			for _, stored := range []string{"a.weight", "proj.weight", "proj.weight_scale_inv"} {
				dir := copyTree(t, clean)
				file, at := flip(t, dir, stored, rng)
				logical := verifyStored[stored]
				m := mustOpen(t, dir, opts(VerifyAlways, 1)...)
				_, err := m.Load(context.Background())
				checkChecksumErr(t, stored+" damaged: Load", err, file, stored, at)
				_, err = m.LoadTensor(context.Background(), logical)
				checkChecksumErr(t, stored+" damaged: LoadTensor", err, file, stored, at)
				items, _ := m.Items()
				for _, it := range items {
					if it.Key != logical {
						continue
					}
					_, err := it.Produce(context.Background(), make([]byte, it.Bytes))
					checkChecksumErr(t, stored+" damaged: Produce", err, file, stored, at)
					checkChecksumErr(t, stored+" damaged: Part.ReadAt", readItem(it), file, stored, at)
				}
				// VerifyPresent loads the parts unverified: wrong bytes when
				// the bit is in this rank's part.
				got := loadBytes(t, mustOpen(t, dir, opts(VerifyPresent, 1)...))
				if !strings.Contains(stored, "scale") && !bytes.Equal(got[logical], want[logical]) {
					t.Logf("%s damaged inside rank 1's part: VerifyPresent loads it unverified, as planned", stored)
				}
			}
		})
	}
}

// The pieces of a tensor's check may arrive in any order, overlap, and
// come from several goroutines: the check compares the CRC of the whole
// once every byte is in, and finds a changed byte: for a safetensors
// tensor's CRC-32C and a PyTorch storage record's CRC-32.
func TestTensorCheckPieces(t *testing.T) {
	data := make([]byte, 10007)
	for i := range data {
		data[i] = byte(i * 31)
	}
	f, err := safetensors.OpenBytes(mustSerialize(t, data))
	if err != nil {
		t.Fatal(err)
	}
	sf, _ := f.Tensor("x")
	// The same bytes as a PyTorch tensor: its storage record's CRC-32
	// (IEEE), combined with crc32c.CombineIEEE.
	arc, err := ckpttest.EncodeTorch([]ckpttest.TorchTensor{{Name: "x", Storage: "0", Shape: []int64{int64(len(data))}, Stride: []int64{1}}},
		map[string]ckpttest.TorchStorage{"0": {DType: dtype.U8, Data: data}}, false)
	if err != nil {
		t.Fatal(err)
	}
	tc, err := torch.NewReader(bytes.NewReader(arc), int64(len(arc)), "x.pt")
	if err != nil {
		t.Fatal(err)
	}
	pt, _ := tc.Tensor("x")
	rng := rand.New(rand.NewPCG(5, 6))
	for round := range 100 {
		var st storedTensor = sf
		if round >= 50 {
			st = torchTensor{pt}
		}
		ck := newTensorCheck(st, checkRead)
		if ck.ieee != (round >= 50) || ck.size != int64(len(data)) {
			t.Fatalf("round %d: check %+v", round, ck)
		}
		b := data
		bad := round%2 == 1
		if bad {
			b = bytes.Clone(data)
			b[rng.IntN(len(b))] ^= 4
		}
		type piece struct{ lo, hi int64 }
		var ps []piece
		for lo := int64(0); lo < int64(len(b)); {
			hi := min(int64(len(b)), lo+1+rng.Int64N(900))
			ps = append(ps, piece{lo, hi})
			if rng.IntN(3) == 0 && lo > 0 { // an overlapping read
				ps = append(ps, piece{lo - rng.Int64N(lo), hi})
			}
			lo = hi
		}
		rng.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
		errs := make(chan error, len(ps))
		for _, p := range ps {
			go func() { errs <- ck.add(p.lo, b[p.lo:p.hi]) }()
		}
		var got error
		for range ps {
			if err := <-errs; err != nil {
				got = err
			}
		}
		if bad != errors.Is(got, ErrChecksum) || ck.verified == bad {
			t.Fatalf("round %d (damaged %v): %v, verified %v", round, bad, got, ck.verified)
		}
	}
}

func mustSerialize(t *testing.T, data []byte) []byte {
	t.Helper()
	b, err := safetensors.Serialize([]safetensors.TensorData{{Name: "x", DType: dtype.U8, Shape: []int64{int64(len(data))}, Data: data}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
