package integrity_test

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/integrity"
	"github.com/ckpt-go/ckpt/safetensors"
)

// hubSnapshot lays the files of folder src out as the Hugging Face hub
// cache does: REPO/blobs/NAME, named by the SHA-256 of the content for
// .safetensors files (git LFS) and by the git blob SHA-1 for the others,
// and REPO/snapshots/REV/FILE, relative symlinks to them. It returns the
// snapshot folder and each file's blob path.
func hubSnapshot(t *testing.T, src string) (string, map[string]string) {
	t.Helper()
	repo := filepath.Join(t.TempDir(), "hub", "models--org--name")
	snap := filepath.Join(repo, "snapshots", strings.Repeat("ab", 20))
	blobs := filepath.Join(repo, "blobs")
	for _, d := range []string{snap, blobs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	paths := map[string]string{}
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		var name string
		if strings.HasSuffix(e.Name(), ".safetensors") || strings.HasSuffix(e.Name(), ".bin") {
			sum := sha256.Sum256(b)
			name = hex.EncodeToString(sum[:])
		} else {
			h := sha1.New()
			fmt.Fprintf(h, "blob %d\x00", len(b))
			h.Write(b)
			name = hex.EncodeToString(h.Sum(nil))
		}
		blob := filepath.Join(blobs, name)
		if err := os.WriteFile(blob, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..", "..", "blobs", name), filepath.Join(snap, e.Name())); err != nil {
			t.Skip("no symbolic links:", err)
		}
		paths[e.Name()] = blob
	}
	return snap, paths
}

// TestHubCache: a hub snapshot's blobs are hashed against their names
// (SHA-256 for LFS files, git blob SHA-1 for small ones), alongside the
// tensors' checksums; its links lead out of the folder, so the folder
// needs FollowSymlinks (a file named directly is followed); Checksum
// refuses to rewrite content-addressed blobs.
func TestHubCache(t *testing.T) {
	src := sharded(t)
	if err := os.WriteFile(filepath.Join(src, "config.json"), []byte(`{"model_type": "llama"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := integrity.Checksum(context.Background(), src); err != nil {
		t.Fatal(err)
	}
	snap, blobs := hubSnapshot(t, src)

	rep := verify(t, snap)
	wantProblems(t, rep, []integrity.Kind{integrity.InsecurePath, integrity.InsecurePath, integrity.InsecurePath},
		shard1+`: a symbolic link that leads out of its folder: not followed (FollowSymlinks allows it)`,
		shard2+`: a symbolic link that leads out of its folder: not followed (FollowSymlinks allows it)`,
		index+`: a symbolic link that leads out of its folder: not followed (FollowSymlinks allows it)`)

	// Blobs are read in order, in reads of 5 bytes here: the tensors' CRCs
	// are taken across the reads.
	wantOK(t, verify(t, snap, integrity.FollowSymlinks(), integrity.WithPieces(16, 5)))
	rep = verify(t, snap, integrity.FollowSymlinks())
	wantOK(t, rep)
	if rep.Blobs != 4 || rep.VerifiedTensors != 3 || len(rep.Files) != 4 {
		t.Errorf("report %+v", rep)
	}
	for _, f := range rep.Files {
		algo := "sha256:"
		if f.Kind != "safetensors" {
			algo = "git-sha1:"
		}
		if f.Blob != algo+filepath.Base(blobs[f.Name]) {
			t.Errorf("file %+v: blob %s, want %s", f, f.Blob, algo+filepath.Base(blobs[f.Name]))
		}
	}

	// A file of the snapshot named directly is followed, its blob hashed.
	rep = verify(t, filepath.Join(snap, shard1))
	wantOK(t, rep)
	if rep.Blobs != 1 || rep.VerifiedTensors != 1 {
		t.Errorf("direct: report %+v", rep)
	}

	// Damage: a tensor of an LFS blob, and a small git blob.
	b, e := tensorOffset(t, blobs[shard2], "c")
	flip(t, blobs[shard2], b)
	cfg, err := os.ReadFile(blobs["config.json"])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(blobs["config.json"], append(cfg, ' '), 0o644); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(blobs[shard2])
	sum := sha256.Sum256(raw)
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00%s ", len(cfg)+1, cfg)
	hdr, err := safetensors.ReadHeaderFile(blobs[shard2])
	if err != nil {
		t.Fatal(err)
	}
	sums, _ := hdr.Checksums()
	small := verify(t, snap, integrity.FollowSymlinks(), integrity.WithPieces(16, 5))
	rep = verify(t, snap, integrity.FollowSymlinks())
	if !slices.Equal(messages(small), messages(rep)) || small.VerifiedTensors != 3 {
		t.Errorf("read in 5-byte reads: %v, %d tensors verified", messages(small), small.VerifiedTensors)
	}
	wantProblems(t, rep, []integrity.Kind{integrity.BlobMismatch, integrity.BlobMismatch, integrity.ChecksumMismatch},
		`config.json: the hub blob it links to is named `+filepath.Base(blobs["config.json"])+`, but its content's git blob SHA-1 is `+hex.EncodeToString(h.Sum(nil))+` (the blob was damaged or replaced)`,
		shard2+`: the hub blob it links to is named `+filepath.Base(blobs[shard2])+`, but its content's SHA-256 is `+hex.EncodeToString(sum[:])+` (the blob was damaged or replaced)`,
		fmt.Sprintf(`%s: tensor "c": checksum mismatch in bytes %d to %d: the header says crc32c %s, the data have %s`,
			shard2, b, e, safetensors.FormatChecksum(sums["c"]), crcOf(t, blobs[shard2], b, e)))

	// Checksum does not rewrite blobs.
	_, err = integrity.Checksum(context.Background(), filepath.Join(snap, shard1))
	if !hasKind(err, integrity.NotWritable) {
		t.Errorf("Checksum of a hub file: %v, want NotWritable", err)
	}
}
