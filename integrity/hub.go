package integrity

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"path/filepath"
	"strconv"

	"github.com/ckpt-go/ckpt/internal/pathutil"
)

// The Hugging Face hub cache.
//
// The hub keeps a repository's files in REPO/blobs/NAME, named by their
// content, and each revision's tree in REPO/snapshots/REV/ as symbolic
// links into the blobs (REPO is models--ORG--NAME under the cache). NAME
// is the SHA-256 of the content (64 hex digits) for files stored with git
// LFS — every weights file — and the git blob hash of the content (40 hex
// digits: SHA-1 of "blob SIZE\x00" and the content) for small files kept in
// git itself (configs, indexes). Verify hashes each blob it reaches through
// a snapshot and compares the result with the name.

// Blob hash algorithms, as FileReport.Blob names them.
const (
	algoSHA256  = "sha256"
	algoGitSHA1 = "git-sha1"
)

// hubBlob reports whether the file name (as reached, in its folder), whose
// links lead to real, is a file of a hub cache snapshot: real is
// REPO/blobs/NAME and name's folder is inside REPO/snapshots/. algo is the
// algorithm NAME is a hash of ("" when it is no hash), want is NAME.
func hubBlob(name, real string) (algo, want string, ok bool) {
	real, err := filepath.Abs(real)
	if err != nil {
		return "", "", false
	}
	blobs := filepath.Dir(real)
	if filepath.Base(blobs) != "blobs" {
		return "", "", false
	}
	repo := filepath.Dir(blobs)
	dir, err := filepath.EvalSymlinks(filepath.Dir(name))
	if err != nil {
		return "", "", false
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return "", "", false
	}
	snaps := filepath.Join(repo, "snapshots")
	if dir == snaps || !pathutil.Within(snaps, dir) {
		return "", "", false
	}
	want = filepath.Base(real)
	switch {
	case isHex(want, sha256.Size):
		return algoSHA256, want, true
	case isHex(want, sha1.Size):
		return algoGitSHA1, want, true
	}
	return "", want, true
}

// isHex reports whether s is n bytes in lowercase hex.
func isHex(s string, n int) bool {
	if len(s) != 2*n {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// blobCheck is the hash check of a hub blob.
type blobCheck struct {
	algo string // algoSHA256 or algoGitSHA1
	want string // the blob's name
}

// hasher returns the hash of a blob of the given size, fed its content.
func (b *blobCheck) hasher(size int64) hash.Hash {
	if b.algo == algoGitSHA1 {
		h := sha1.New()
		h.Write([]byte("blob " + strconv.FormatInt(size, 10) + "\x00"))
		return h
	}
	return sha256.New()
}

// problem returns the problem of a blob whose content hashes to sum, or
// nil when that is its name.
func (b *blobCheck) problem(display string, sum []byte) *Problem {
	got := hex.EncodeToString(sum)
	if got == b.want {
		return nil
	}
	what := "SHA-256"
	if b.algo == algoGitSHA1 {
		what = "git blob SHA-1"
	}
	return newProblem(BlobMismatch, display, "", nil,
		"the hub blob it links to is named "+b.want+", but its content's "+what+" is "+got+" (the blob was damaged or replaced)")
}
