package variant

import (
	"crypto/sha256"
	"io/fs"
	"os"
	"sync"

	"github.com/ckpt-go/ckpt/internal/srcfs"
	"github.com/ckpt-go/ckpt/shard"
)

// kept is the checkpoint resolution opened to check the candidate a plan
// uses, kept so that Plan.Open can hand it over instead of reading and
// validating the same files again (for an index of a million tensors,
// most of the time of opening a folder). Opening a checkpoint opens no
// file (shards are opened on first use), so a kept one holds memory only.
//
// It is handed over only while the files look as they did when it was
// opened: the index (when there is one) has the same content, checked by
// its SHA-256, and every file the same identity, size and modification
// time. Otherwise Plan.Open opens the planned files anew, with the errors
// that gives. What a kept checkpoint does not re-check at hand-over, a
// shard's header, it checks when it opens the shard (a shard whose size or
// header bytes changed is refused there).
type kept struct {
	mu    sync.Mutex
	ck    *shard.Checkpoint // nil once handed over
	index bool              // ck was opened from an index (its path's file)
	sum   [sha256.Size]byte // the index's SHA-256
	files []fileState       // ck.Path(), then ck.Files() for an index
}

// fileState is what a file looked like when a checkpoint was opened.
type fileState struct {
	path string
	info fs.FileInfo
}

// same reports whether a and b describe the same file unchanged, as far
// as a stat tells: identity (operating system files), type, size and
// modification time.
func same(src srcfs.FS, a, b fs.FileInfo) bool {
	if src.IsOS() && !os.SameFile(a, b) {
		return false
	}
	return a.Mode() == b.Mode() && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}

// statAll stats the checkpoint's files: path (the index or single file),
// then the shards of an index.
func statAll(src srcfs.FS, path string, ck *shard.Checkpoint, index bool) ([]fileState, bool) {
	paths := []string{path}
	if index {
		paths = append(paths, ck.Files()...)
	}
	out := make([]fileState, len(paths))
	for i, p := range paths {
		st, err := src.Stat(p)
		if err != nil {
			return nil, false
		}
		out[i] = fileState{path: p, info: st}
	}
	return out, true
}

// hashIndex returns the SHA-256 of the index at path, read as package
// shard reads it (at most shard.MaxIndexSize bytes of a regular file).
func hashIndex(src srcfs.FS, path string) ([sha256.Size]byte, bool) {
	data, err := src.ReadFile(path, shard.MaxIndexSize)
	if err != nil {
		return [sha256.Size]byte{}, false
	}
	return sha256.Sum256(data), true
}

// openKept opens path (an index when index is set, a single file
// otherwise) with opts, as shard.Open does, and returns the checkpoint
// with, when the files kept still during the open, the state to hand it
// over later (nil otherwise). The index's content and state are taken
// before the open and its state again after it: a change while the open
// read it (a write, a rename over it) leaves nothing to hand over.
func openKept(src srcfs.FS, path string, index bool, opts []shard.Option) (*shard.Checkpoint, *kept, error) {
	before, statErr := src.Stat(path)
	var sum [sha256.Size]byte
	hashed := true
	if index && statErr == nil {
		sum, hashed = hashIndex(src, path)
	}
	ck, err := shard.Open(path, opts...)
	if err != nil {
		return nil, nil, err
	}
	if statErr != nil || !hashed {
		return ck, nil, nil
	}
	files, ok := statAll(src, path, ck, index)
	if !ok || !same(src, before, files[0].info) {
		return ck, nil, nil
	}
	return ck, &kept{ck: ck, index: index, sum: sum, files: files}, nil
}

// take hands the kept checkpoint over when the files are unchanged (see
// kept), at most once; nil otherwise. opts are the plan's shard options:
// a shard that now breaks the symlink rule is not handed over either.
func (k *kept) take(src srcfs.FS, opts []shard.Option) *shard.Checkpoint {
	if k == nil {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	ck := k.ck
	if ck == nil {
		return nil
	}
	k.ck = nil // whatever happens, Open has it or opens anew
	if !k.unchanged(src, opts) {
		ck.Close()
		return nil
	}
	return ck
}

func (k *kept) unchanged(src srcfs.FS, opts []shard.Option) bool {
	for i, f := range k.files {
		if i > 0 {
			if _, err := shard.ResolveFile(f.path, opts...); err != nil {
				return false
			}
		}
		st, err := src.Stat(f.path)
		if err != nil || !same(src, f.info, st) {
			return false
		}
	}
	if k.index {
		sum, ok := hashIndex(src, k.files[0].path)
		if !ok || sum != k.sum {
			return false
		}
	}
	return true
}

// drop closes the kept checkpoint, if still there.
func (k *kept) drop() {
	if k == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.ck != nil {
		k.ck.Close()
		k.ck = nil
	}
}
