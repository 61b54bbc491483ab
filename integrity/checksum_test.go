package integrity_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/integrity"
	"github.com/ckpt-go/ckpt/safetensors"
)

// contents returns every tensor's bytes and the metadata of the
// safetensors files of dir, by file and tensor.
func contents(t *testing.T, dir string) map[string]map[string][]byte {
	t.Helper()
	out := map[string]map[string][]byte{}
	paths, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	for _, p := range paths {
		f, err := safetensors.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string][]byte{}
		for name, tt := range f.Tensors() {
			b, err := tt.Bytes()
			if err != nil {
				t.Fatal(err)
			}
			m[name] = bytes.Clone(b)
		}
		for k, v := range f.Metadata() {
			if !safetensors.IsChecksumKey(k) {
				m["metadata "+k] = []byte(v)
			}
		}
		f.Close()
		out[filepath.Base(p)] = m
	}
	return out
}

func checksum(t *testing.T, location string, opts ...integrity.Option) *integrity.ChecksumReport {
	t.Helper()
	cr, err := integrity.Checksum(context.Background(), location, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return cr
}

// TestChecksum adds checksums to a set in place: the same tensors and
// metadata, the index untouched, the files' modes kept; a second run only
// verifies; files that disagree with their checksums are refused.
func TestChecksum(t *testing.T) {
	dir := ckpttest.Dir(t, ckpttest.Weights{Shards: 2, Tensors: ckpttest.Tensors(t, setTensors), Metadata: map[string]string{"format": "pt"}})
	if err := os.Chmod(filepath.Join(dir, shard1), 0o640); err != nil {
		t.Fatal(err)
	}
	before := contents(t, dir)
	ix, err := os.ReadFile(filepath.Join(dir, index))
	if err != nil {
		t.Fatal(err)
	}
	cr := checksum(t, dir)
	if !slices.Equal(cr.Written, []string{shard1, shard2}) || len(cr.Verified) != 0 || !cr.Report.OK() {
		t.Fatalf("report %+v", cr)
	}
	after := contents(t, dir)
	for f, m := range before {
		for k, v := range m {
			if !bytes.Equal(after[f][k], v) {
				t.Errorf("%s: %s changed", f, k)
			}
		}
		if len(after[f]) != len(m) {
			t.Errorf("%s: %d entries, had %d", f, len(after[f]), len(m))
		}
	}
	if ix2, _ := os.ReadFile(filepath.Join(dir, index)); !bytes.Equal(ix, ix2) {
		t.Error("the index changed")
	}
	if st, err := os.Stat(filepath.Join(dir, shard1)); err != nil || st.Mode().Perm() != 0o640 {
		t.Errorf("mode %v, %v; want 0640", st.Mode(), err)
	}
	rep := verify(t, dir, integrity.RequireChecksums())
	wantOK(t, rep)
	if rep.VerifiedTensors != 3 || rep.VerifiedBytes != 40 {
		t.Errorf("report %+v", rep)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}

	// A second run verifies and writes nothing.
	cr = checksum(t, dir)
	if len(cr.Written) != 0 || !slices.Equal(cr.Verified, []string{shard1, shard2}) {
		t.Fatalf("second run: %+v", cr)
	}

	// A file whose data disagree with its checksums is not "fixed".
	b, _ := tensorOffset(t, filepath.Join(dir, shard2), "c")
	flip(t, filepath.Join(dir, shard2), b)
	damaged, _ := os.ReadFile(filepath.Join(dir, shard2))
	cr, err = integrity.Checksum(context.Background(), dir)
	var pe *integrity.ProblemsError
	if !errors.Is(err, safetensors.ErrChecksum) || !errors.As(err, &pe) || len(pe.Problems) != 1 || pe.Problems[0].Tensor != "c" {
		t.Fatalf("Checksum of a damaged set: %v", err)
	}
	if len(cr.Written) != 0 {
		t.Errorf("wrote %v", cr.Written)
	}
	if now, _ := os.ReadFile(filepath.Join(dir, shard2)); !bytes.Equal(now, damaged) {
		t.Error("the damaged file was rewritten")
	}
}

// TestChecksumRefusesDamage: damaged checksum metadata and structural
// problems are refused too, and nothing is written.
func TestChecksumRefusesDamage(t *testing.T) {
	dir := sharded(t)
	if err := ckpttest.WriteFile(filepath.Join(dir, shard1), ckpttest.Tensors(t, "a:F32[4]"),
		map[string]string{safetensors.ChecksumPrefix + "x": "00000000"}); err != nil {
		t.Fatal(err)
	}
	_, err := integrity.Checksum(context.Background(), dir)
	if !errors.Is(err, safetensors.ErrChecksum) || !hasKind(err, integrity.DamagedChecksums) {
		t.Errorf("damaged checksums: %v", err)
	}
	if h, _ := safetensors.ReadHeaderFile(filepath.Join(dir, shard2)); h == nil || h.Metadata != nil {
		t.Error("the other shard was rewritten")
	}

	dir = sharded(t)
	truncate(t, filepath.Join(dir, shard1), -1)
	_, err = integrity.Checksum(context.Background(), dir)
	if !hasKind(err, integrity.Truncated) || errors.Is(err, safetensors.ErrChecksum) {
		t.Errorf("truncated: %v", err)
	}
}

// TestChecksumLayouts: a file laid out by another writer (in the order
// given, data aligned to 4096, a symbolic link inside its folder) keeps
// its tensors, its alignment and its link.
func TestChecksumLayouts(t *testing.T) {
	dir := t.TempDir()
	tensors := data(t, "z:BF16[3] a:F32[5] m:U8[7]")
	// A file aligned to 4096 bytes, without checksums.
	aligned := filepath.Join(dir, "aligned.safetensors")
	if err := safetensors.Save(context.Background(), aligned, tensors, nil, safetensors.WithAlignment(4096), safetensors.WithoutChecksums()); err != nil {
		t.Fatal(err)
	}
	// A file in the given order (ckpttest's encoder), reached by a link.
	if err := ckpttest.WriteFile(filepath.Join(dir, "blob"), ckpttest.Tensors(t, "z:BF16[3] a:F32[5] m:U8[7]"), nil); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("blob", filepath.Join(dir, "linked.safetensors")); err != nil {
		t.Skip("no symbolic links:", err)
	}
	before := contents(t, dir)
	cr := checksum(t, dir)
	if !slices.Equal(cr.Written, []string{"aligned.safetensors", "linked.safetensors"}) {
		t.Fatalf("report %+v", cr)
	}
	if h, err := safetensors.ReadHeaderFile(aligned); err != nil || h.DataOffset%4096 != 0 {
		t.Errorf("aligned: %v, data at %d", err, h.DataOffset)
	}
	if st, err := os.Lstat(filepath.Join(dir, "linked.safetensors")); err != nil || st.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("the link was replaced: %v %v", st.Mode(), err)
	}
	after := contents(t, dir)
	for f, m := range before {
		for k, v := range m {
			if !bytes.Equal(after[f][k], v) {
				t.Errorf("%s: %s changed", f, k)
			}
		}
	}
	wantOK(t, verify(t, dir, integrity.RequireChecksums()))
}
