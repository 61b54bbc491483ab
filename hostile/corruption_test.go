package hostile_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/integrity"
	"github.com/ckpt-go/ckpt/internal/s3test"
	"github.com/ckpt-go/ckpt/remote"
	"github.com/ckpt-go/ckpt/safetensors"
)

// The package's S3 server, started on first use and stopped by TestMain.
var (
	s3Once   sync.Once
	s3Srv    *s3test.Server
	s3Reason string
	s3Err    error
)

func TestMain(m *testing.M) {
	code := m.Run()
	s3Srv.Stop()
	os.Exit(code)
}

func needS3(t testing.TB) *s3test.Server {
	t.Helper()
	s3Once.Do(func() { s3Srv, s3Reason, s3Err = s3test.Start() })
	s := s3test.Need(t, s3Srv, s3Reason, s3Err)
	remote.SetS3Client(s.Client())
	t.Cleanup(func() { remote.SetS3Client(nil) })
	return s
}

// region is where in a safetensors file a damaged byte lies.
type region struct {
	what   string // "length", "header", "padding", "tensor"
	tensor string // for "tensor"
}

// regionOf classifies offset off of the file b.
func regionOf(t *testing.T, b []byte, off int64) region {
	h, err := safetensors.ReadHeader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case off < 8:
		return region{what: "length"}
	case off >= h.DataOffset:
		for _, ti := range h.Tensors {
			if off-h.DataOffset >= ti.Begin && off-h.DataOffset < ti.End {
				return region{what: "tensor", tensor: ti.Name}
			}
		}
		t.Fatalf("offset %d in no tensor", off)
	}
	// The JSON ends at its last '}': spaces pad it to the data's alignment.
	if off > int64(bytes.LastIndexByte(b[:h.DataOffset], '}')) {
		return region{what: "padding"}
	}
	return region{what: "header"}
}

// corruptionFixtures are checkpoints with checksums (written by
// ckpttest without them, then given them by integrity.Checksum, as
// `ckpt checksum` does): a single file, a shard set, a pipeline.
func corruptionFixtures(t *testing.T) map[string]string {
	ts := ckpttest.Tensors(t, "emb.weight:BF16[64,16] l0.q_proj.weight:F32[16,16] l0.norm.weight:F32[16] l0.k_proj.weight:F8_E4M3[16,32] head.bias:F16[8]")
	out := map[string]string{
		"single": ckpttest.Dir(t, ckpttest.Weights{Tensors: ts}),
		"shards": ckpttest.Dir(t, ckpttest.Weights{Shards: 3, Tensors: ts}),
		"pipeline": ckpttest.NewPipeline(t, ckpttest.Pipeline{Components: []ckpttest.Component{
			{Name: "unet", Weights: []ckpttest.Weights{{Prefix: ckpttest.DiffusersPrefix, Shards: 2, Tensors: ts}}},
			{Name: "text_encoder", Weights: []ckpttest.Weights{{Tensors: ts[:3]}}},
		}}),
	}
	for name, dir := range out {
		if _, err := integrity.Checksum(context.Background(), dir); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		rep, err := integrity.Verify(context.Background(), dir, integrity.RequireChecksums())
		if err != nil || !rep.OK() {
			t.Fatalf("%s: %v %v", name, err, rep.Err())
		}
	}
	return out
}

// weightFiles lists the safetensors files under dir, relative to it.
func weightFiles(t *testing.T, dir string) []string {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".safetensors") {
			rel, _ := filepath.Rel(dir, p)
			files = append(files, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(files)
	return files
}

// copyTree copies the regular files of src into a new folder.
func copyTree(t *testing.T, src string) string {
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(dst, filepath.Dir(rel)), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// loadAll loads every tensor of location as stored, by qualified name.
func loadAll(location string) (map[string][]byte, error) {
	m, err := ckpt.Open(location, ckpt.WithDType(ckpt.AsStored))
	if err != nil {
		return nil, err
	}
	defer m.Close()
	w, err := m.Load(context.Background())
	if err != nil {
		return nil, err
	}
	defer w.Close()
	out := map[string][]byte{}
	for name, tn := range w.All() {
		out[name] = bytes.Clone(tn.Bytes())
	}
	return out, nil
}

// damage is one corruption of one file.
type damage struct {
	file   string // relative to the checkpoint's root
	region region // where a flipped bit lies; what "truncated" for a cut
	desc   string
	apply  func([]byte) []byte
}

// randomDamage picks a file and flips one bit at a random position of
// it, or cuts it at a random length.
func randomDamage(t *testing.T, r *rand.Rand, root string, files []string) damage {
	file := files[r.IntN(len(files))]
	b, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		t.Fatal(err)
	}
	if r.IntN(5) == 0 {
		n := r.Int64N(int64(len(b)))
		return damage{file: file, region: region{what: "truncated"}, desc: fmt.Sprintf("%s cut to %d of %d bytes", file, n, len(b)),
			apply: func(b []byte) []byte { return b[:n] }}
	}
	// Half of the flips in tensor data, half in the length field, the
	// header and its padding.
	h, err := safetensors.ReadHeader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	off := r.Int64N(h.DataOffset)
	pad := int64(bytes.LastIndexByte(b[:h.DataOffset], '}')) + 1
	switch k := r.IntN(8); {
	case k < 4 && h.DataLen > 0:
		off = h.DataOffset + r.Int64N(h.DataLen)
	case k == 4 && pad < h.DataOffset:
		off = pad + r.Int64N(h.DataOffset-pad)
	}
	bit := byte(1) << r.IntN(8)
	reg := regionOf(t, b, off)
	return damage{file: file, region: reg, desc: fmt.Sprintf("%s: bit %#x of byte %d flipped (%s %s)", file, bit, off, reg.what, reg.tensor),
		apply: func(b []byte) []byte { b[off] ^= bit; return b }}
}

// checkDamage asserts what verify and the loader make of a damaged copy:
// verify reports the damaged tensor by name (a flipped bit in the data),
// or a problem of the damaged file (a header, its padding, a cut); the
// loader refuses the checkpoint, or, where the damaged file is one it
// does not load (another variant), loads exactly the intact tensors.
func checkDamage(t *testing.T, d damage, rep *integrity.Report, verr error, loaded map[string][]byte, lerr error, want map[string][]byte) {
	t.Helper()
	if verr != nil {
		t.Fatalf("%s: verify could not check: %v", d.desc, verr)
	}
	found := false
	for _, p := range rep.Problems {
		if !strings.HasSuffix(d.file, p.File) && !strings.HasSuffix(p.File, d.file) {
			continue
		}
		if d.region.what != "tensor" || p.Tensor == d.region.tensor {
			found = true
		}
	}
	if !found {
		t.Errorf("%s: verify does not report it: %v", d.desc, rep.Problems)
	}
	if lerr != nil {
		return
	}
	// Loaded: only what verify and the checksums allow, and never
	// different values.
	for name, b := range loaded {
		if !bytes.Equal(b, want[name]) {
			t.Errorf("%s: %s loaded with wrong values", d.desc, name)
		}
	}
	if len(loaded) != len(want) {
		t.Errorf("%s: %d tensors loaded, want %d", d.desc, len(loaded), len(want))
	}
}

// TestCorruption flips one bit at random positions (length field, header,
// padding, each tensor's data) and cuts files at random lengths, in single
// files, shard sets and pipelines on disk and in S3: every damaged tensor
// is named by integrity.Verify, every damage is refused by Load, nothing
// loads wrong values.
func TestCorruption(t *testing.T) {
	fixtures := corruptionFixtures(t)
	r := rand.New(rand.NewPCG(18, 18))
	for _, name := range []string{"single", "shards", "pipeline"} {
		root := fixtures[name]
		want, err := loadAll(root)
		if err != nil {
			t.Fatal(err)
		}
		files := weightFiles(t, root)
		seen := map[string]int{}
		for range 80 {
			d := randomDamage(t, r, root, files)
			seen[d.region.what]++
			dir := copyTree(t, root)
			path := filepath.Join(dir, d.file)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, d.apply(b), 0o644); err != nil {
				t.Fatal(err)
			}
			rep, verr := integrity.Verify(context.Background(), dir)
			loaded, lerr := loadAll(dir)
			if lerr == nil {
				t.Errorf("%s: %s: Load succeeded", name, d.desc)
			}
			if lerr != nil && d.region.what == "tensor" && !errors.Is(lerr, ckpt.ErrChecksum) {
				t.Errorf("%s: %s: Load: %v, want ErrChecksum", name, d.desc, lerr)
			}
			checkDamage(t, d, rep, verr, loaded, lerr, want)
		}
		t.Logf("%s: %v", name, seen)
	}
}

// TestCorruptionS3: the same damage, in objects of an S3 store (written
// damaged, so that the store's own checksum matches what it holds: the
// checkpoint's checksums find it).
func TestCorruptionS3(t *testing.T) {
	s := needS3(t)
	fixtures := corruptionFixtures(t)
	r := rand.New(rand.NewPCG(18, 3))
	for _, name := range []string{"single", "shards", "pipeline"} {
		root := fixtures[name]
		want, err := loadAll(root)
		if err != nil {
			t.Fatal(err)
		}
		files := weightFiles(t, root)
		for i := range 12 {
			d := randomDamage(t, r, root, files)
			bucket := s.NewBucket(t)
			prefix := fmt.Sprintf("%s-%d", name, i)
			s.PutDir(t, bucket, prefix, root)
			b, err := os.ReadFile(filepath.Join(root, d.file))
			if err != nil {
				t.Fatal(err)
			}
			s.Put(t, bucket, prefix+"/"+d.file, d.apply(b))
			loc := "s3://" + bucket + "/" + prefix
			rep, verr := integrity.Verify(context.Background(), loc)
			loaded, lerr := loadAll(loc)
			if lerr == nil {
				t.Errorf("%s: %s: Load succeeded", name, d.desc)
			}
			checkDamage(t, d, rep, verr, loaded, lerr, want)
		}
	}
}
