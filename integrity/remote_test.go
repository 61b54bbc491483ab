package integrity_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/ckpt-go/ckpt/integrity"
	"github.com/ckpt-go/ckpt/internal/s3test"
	"github.com/ckpt-go/ckpt/remote"
	"github.com/ckpt-go/ckpt/safetensors"
)

// The S3 server of these tests: versitygw started on first use (or
// CKPT_S3_ENDPOINT's), stopped when they end.
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

// needS3 returns the server, with its client registered for s3://
// locations (reading and writing) until the test ends.
func needS3(t testing.TB) *s3test.Server {
	t.Helper()
	s3Once.Do(func() { s3Srv, s3Reason, s3Err = s3test.Start() })
	s := s3test.Need(t, s3Srv, s3Reason, s3Err)
	remote.SetS3Client(s.Client())
	t.Cleanup(func() { remote.SetS3Client(nil) })
	return s
}

// TestS3 verifies a set in an S3 bucket (read with ranged requests through
// package source's registry), finds a damaged and a truncated object, and
// adds checksums to a set in place (each object replaced in one step).
func TestS3(t *testing.T) {
	s := needS3(t)
	bucket := s.NewBucket(t)
	dir := sharded(t)
	raw := contents(t, dir)
	s.PutDir(t, bucket, "raw", dir)
	checksum(t, dir)
	s.PutDir(t, bucket, "ckpt", dir)
	loc := "s3://" + bucket + "/ckpt"

	for _, l := range []string{loc, loc + "/", loc + "/" + index} {
		rep := verify(t, l)
		wantOK(t, rep)
		if rep.VerifiedTensors != 3 || rep.VerifiedBytes != 40 || len(rep.Files) != 3 {
			t.Errorf("%s: report %+v", l, rep)
		}
	}
	rep := verify(t, loc+"/"+shard2)
	if wantOK(t, rep); rep.VerifiedTensors != 2 || rep.Files[0].Name != shard2 {
		t.Errorf("a shard: report %+v", rep)
	}

	// A damaged object, then a truncated one.
	good, err := os.ReadFile(filepath.Join(dir, shard2))
	if err != nil {
		t.Fatal(err)
	}
	b, e := tensorOffset(t, filepath.Join(dir, shard2), "c")
	bad := bytes.Clone(good)
	bad[b+1] ^= 0x40
	s.Put(t, bucket, "ckpt/"+shard2, bad)
	rep = verify(t, loc)
	if len(rep.Problems) != 1 || rep.Problems[0].Kind != integrity.ChecksumMismatch || rep.Problems[0].Tensor != "c" ||
		rep.Problems[0].File != shard2 || *rep.Problems[0].Range != (integrity.Range{Begin: b, End: e}) {
		t.Errorf("damaged object: %v", messages(rep))
	}
	s.Put(t, bucket, "ckpt/"+shard2, good[:len(good)-2])
	wantProblems(t, verify(t, loc), []integrity.Kind{integrity.Truncated},
		fmt.Sprintf(`model-00002-of-00002.safetensors: tensor "c": truncated: the file ends at byte %d, inside the tensor's bytes %d to %d (the header needs %d bytes)`, e-2, b, e, e))

	// Checksums added in place, then verified; the bytes are the same.
	rawLoc := "s3://" + bucket + "/raw"
	if rep := verify(t, rawLoc); !rep.OK() || rep.UncheckedTensors != 3 {
		t.Fatalf("raw: %+v", rep)
	}
	cr := checksum(t, rawLoc)
	if !slices.Equal(cr.Written, []string{shard1, shard2}) {
		t.Fatalf("Checksum: %+v", cr)
	}
	wantOK(t, verify(t, rawLoc, integrity.RequireChecksums()))
	back := t.TempDir()
	for _, n := range []string{shard1, shard2, index} {
		if err := os.WriteFile(filepath.Join(back, n), s.Get(t, bucket, "raw/"+n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := contents(t, back)
	for f, m := range raw {
		for k, v := range m {
			if !bytes.Equal(got[f][k], v) {
				t.Errorf("%s: %s changed", f, k)
			}
		}
	}
	if cr := checksum(t, rawLoc); len(cr.Written) != 0 || len(cr.Verified) != 2 {
		t.Errorf("second run: %+v", cr)
	}

	// A damaged object is not rewritten.
	s.Put(t, bucket, "ckpt/"+shard2, bad)
	if _, err := integrity.Checksum(context.Background(), loc); !errors.Is(err, safetensors.ErrChecksum) {
		t.Errorf("Checksum of a damaged object: %v", err)
	}
	if !bytes.Equal(s.Get(t, bucket, "ckpt/"+shard2), bad) {
		t.Error("the damaged object was rewritten")
	}
}

// TestS3Torch verifies a PyTorch set on S3 through the same file system
// safetensors files are read through: sound, a damaged record named by
// tensor, a truncated object named; Checksum skips its files and writes
// nothing.
func TestS3Torch(t *testing.T) {
	s := needS3(t)
	bucket := s.NewBucket(t)
	dir := torchSharded(t)
	s.PutDir(t, bucket, "pt", dir)
	loc := "s3://" + bucket + "/pt"
	for _, l := range []string{loc, loc + "/" + tindex, loc + "/" + tshard2} {
		rep := verify(t, l)
		wantOK(t, rep)
		if rep.ArchiveTensors == 0 || rep.ArchiveTensors != rep.Tensors {
			t.Errorf("%s: report %+v", l, rep)
		}
	}
	good, err := os.ReadFile(filepath.Join(dir, tshard2))
	if err != nil {
		t.Fatal(err)
	}
	ranges, _ := storageRanges(t, filepath.Join(dir, tshard2))
	bad := bytes.Clone(good)
	bad[ranges["1"].Begin] ^= 0x40
	s.Put(t, bucket, "pt/"+tshard2, bad)
	rep := verify(t, loc)
	if len(rep.Problems) != 1 || rep.Problems[0].Kind != integrity.ChecksumMismatch || rep.Problems[0].Tensor != "c" || rep.Problems[0].File != tshard2 {
		t.Errorf("damaged object: %v", messages(rep))
	}
	cr, err := integrity.Checksum(context.Background(), loc)
	if !errors.Is(err, safetensors.ErrChecksum) || cr == nil || len(cr.Written) != 0 || !bytes.Equal(s.Get(t, bucket, "pt/"+tshard2), bad) {
		t.Errorf("Checksum of a damaged object: %v", err)
	}
	s.Put(t, bucket, "pt/"+tshard2, good[:len(good)-30])
	rep = verify(t, loc)
	if len(rep.Problems) != 1 || rep.Problems[0].Kind != integrity.InvalidArchive || rep.Problems[0].File != tshard2 {
		t.Errorf("truncated object: %v", messages(rep))
	}
	s.Put(t, bucket, "pt/"+tshard2, good)
	cr, err = integrity.Checksum(context.Background(), loc)
	if err != nil || len(cr.Written) != 0 || len(cr.Skipped) != 2 {
		t.Errorf("Checksum: %+v %v", cr, err)
	}
}

// TestHTTP verifies a file and an index served over HTTP (ranged GETs);
// a folder cannot be listed there: an error, not a problem.
func TestHTTP(t *testing.T) {
	dir := sharded(t)
	checksum(t, dir)
	srv := httptest.NewServer(http.FileServer(http.Dir(dir)))
	defer srv.Close()
	for _, l := range []string{srv.URL + "/" + index, srv.URL + "/" + shard1} {
		wantOK(t, verify(t, l, integrity.RequireChecksums()))
	}
	b, _ := tensorOffset(t, filepath.Join(dir, shard1), "a")
	flip(t, filepath.Join(dir, shard1), b)
	if rep := verify(t, srv.URL+"/"+index); len(rep.Problems) != 1 || rep.Problems[0].Tensor != "a" {
		t.Errorf("damaged: %v", messages(rep))
	}
	if _, err := integrity.Checksum(context.Background(), srv.URL+"/"+shard2); !hasKind(err, integrity.NotWritable) {
		t.Errorf("Checksum over HTTP: %v, want NotWritable", err)
	}
}

// TestHTTPTorch verifies a PyTorch index and its shards served over
// HTTP. (A .bin named directly is refused by package remote's HTTP
// source, which takes .safetensors files and indexes only.)
func TestHTTPTorch(t *testing.T) {
	dir := torchSharded(t)
	srv := httptest.NewServer(http.FileServer(http.Dir(dir)))
	defer srv.Close()
	for _, l := range []string{srv.URL + "/" + tindex} {
		if rep := verify(t, l); !rep.OK() || rep.ArchiveTensors == 0 {
			t.Errorf("%s: %v %+v", l, messages(rep), rep)
		}
	}
	ranges, _ := storageRanges(t, filepath.Join(dir, tshard1))
	flip(t, filepath.Join(dir, tshard1), ranges["0"].Begin)
	if rep := verify(t, srv.URL+"/"+tindex); len(rep.Problems) != 1 || rep.Problems[0].Tensor != "a" || rep.Problems[0].File != tshard1 {
		t.Errorf("damaged: %v", messages(rep))
	}
}

// TestWithFS verifies the files of an fs.FS (read through their ReadAt)
// and names them relative to the location.
func TestWithFS(t *testing.T) {
	dir := sharded(t)
	checksum(t, dir)
	fsys := fstest.MapFS{}
	for _, n := range []string{shard1, shard2, index} {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		fsys["m/"+n] = &fstest.MapFile{Data: b, Mode: 0o644}
	}
	for _, l := range []string{"m", "m/" + index, "m/" + shard2} {
		wantOK(t, verify(t, l, integrity.WithFS(fsys), integrity.RequireChecksums()))
	}
	b, _ := tensorOffset(t, filepath.Join(dir, shard2), "b")
	fsys["m/"+shard2].Data[b] ^= 2
	rep := verify(t, "m", integrity.WithFS(fsys))
	if len(rep.Problems) != 1 || rep.Problems[0].File != shard2 || rep.Problems[0].Tensor != "b" {
		t.Errorf("damaged: %v", messages(rep))
	}
	if _, err := integrity.Checksum(context.Background(), "m", integrity.WithFS(fsys)); !hasKind(err, integrity.ChecksumMismatch) {
		t.Errorf("Checksum: %v", err)
	}
	// Files without ReadAt are read in order.
	rep = verify(t, "m", integrity.WithFS(plainFS{fsys}), integrity.WithPieces(16, 7))
	if len(rep.Problems) != 1 || rep.Problems[0].File != shard2 || rep.Problems[0].Tensor != "b" || rep.VerifiedTensors != 3 {
		t.Errorf("files without ReadAt: %v, %+v", messages(rep), rep)
	}
	fsys["m/"+shard2].Data[b] ^= 2
	wantOK(t, verify(t, "m", integrity.WithFS(plainFS{fsys}), integrity.RequireChecksums()))
	if _, err := integrity.Verify(context.Background(), "../x", integrity.WithFS(fsys)); err == nil {
		t.Error("an invalid fs.FS name: no error")
	}
}

// TestCanceled: a canceled context stops Verify with its error.
func TestCanceled(t *testing.T) {
	dir := sharded(t)
	checksum(t, dir)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := integrity.Verify(ctx, dir); !errors.Is(err, context.Canceled) {
		t.Errorf("Verify: %v, want context.Canceled", err)
	}
	if _, err := integrity.Checksum(ctx, dir); !errors.Is(err, context.Canceled) {
		t.Errorf("Checksum: %v, want context.Canceled", err)
	}
}

// plainFS serves files that have neither ReadAt nor Seek.
type plainFS struct{ fsys fs.FS }

func (p plainFS) Open(name string) (fs.File, error) {
	f, err := p.fsys.Open(name)
	if err != nil {
		return nil, err
	}
	if d, ok := f.(fs.ReadDirFile); ok {
		return d, nil
	}
	return plainFile{f}, nil
}

type plainFile struct{ f fs.File }

func (p plainFile) Read(b []byte) (int, error) { return p.f.Read(b) }
func (p plainFile) Stat() (fs.FileInfo, error) { return p.f.Stat() }
func (p plainFile) Close() error               { return p.f.Close() }
