package shard

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/ckpt-go/ckpt/internal/atomicfile"
	"github.com/ckpt-go/ckpt/internal/setname"
)

// fileOps are the file system operations a commit performs after the new
// files are written. Tests replace them to inject failures, to check what
// readers could observe between steps, and to slow the steps down so that
// a killed writer dies inside them.
type fileOps interface {
	rename(from, to string) error
	link(from, to string) error
	remove(name string) error
	syncDir(dir string) error
}

type osOps struct{}

func (osOps) rename(from, to string) error { return os.Rename(from, to) }
func (osOps) link(from, to string) error   { return os.Link(from, to) }
func (osOps) remove(name string) error     { return os.Remove(name) }
func (osOps) syncDir(dir string) error     { return atomicfile.SyncDir(dir) }

// commit is one replacement of the set of a prefix and variant in a folder.
// See WriteFrom for the protocol and what readers see at every step.
type commit struct {
	dir             string
	prefix, variant string
	ops             fileOps
	lock            *atomicfile.Lock
	files           []string          // standard names of the new safetensors files, in shard order
	temps           map[string]string // name -> temporary path, until placed
	cur             *os.File
	placed          []string // names this commit created before the switch
	done            bool

	replaced, leftovers, warnings []string
}

// create starts the temporary file for name.
func (tx *commit) create(name string) (*os.File, error) {
	f, err := atomicfile.CreateTemp(tx.dir, name)
	if err != nil {
		return nil, &Error{Kind: ErrWrite, Path: tx.dir, Shard: name, Err: err}
	}
	tx.cur = f
	tx.temps[name] = f.Name()
	return f, nil
}

// finish makes the current temporary file durable and closes it.
func (tx *commit) finish(name string) error {
	f := tx.cur
	tx.cur = nil
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return &Error{Kind: ErrWrite, Path: tx.dir, Shard: name, Err: err}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return &Error{Kind: ErrWrite, Path: tx.dir, Shard: name, Err: err}
	}
	if err := f.Close(); err != nil {
		return &Error{Kind: ErrWrite, Path: tx.dir, Shard: name, Err: err}
	}
	return nil
}

func (tx *commit) writeFile(name string, b []byte) error {
	if _, err := tx.create(name); err != nil {
		return err
	}
	if _, err := tx.cur.Write(b); err != nil {
		tx.cur.Close()
		tx.cur = nil
		return &Error{Kind: ErrWrite, Path: tx.dir, Shard: name, Err: err}
	}
	return tx.finish(name)
}

// abort removes the temporary files that were not moved into place.
func (tx *commit) abort() {
	if tx.done {
		return
	}
	tx.done = true
	if tx.cur != nil {
		tx.cur.Close()
	}
	for _, tmp := range tx.temps {
		os.Remove(tmp)
	}
}

func (tx *commit) path(name string) string { return filepath.Join(tx.dir, name) }

func (tx *commit) warn(format string, args ...any) {
	tx.warnings = append(tx.warnings, fmt.Sprintf(format, args...))
}

// exclusive reports whether this save holds its target's lock, so that
// hidden files of the target (temporaries, backups) are known to belong
// to no live save.
func (tx *commit) exclusive() bool { return tx.lock.Exclusive() }

// removeStaleTemps removes the temporary files that killed saves of this
// set left, before this save writes its own.
func (tx *commit) removeStaleTemps() error {
	if !tx.exclusive() {
		return nil
	}
	files, err := tx.setFiles()
	if err != nil {
		return err
	}
	for _, f := range files {
		if f.Role != setname.Temp {
			continue
		}
		if err := tx.ops.remove(tx.path(f.name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			tx.warn("could not remove %s, left by an earlier save: %v", f.name, err)
			continue
		}
		tx.leftovers = append(tx.leftovers, f.name)
	}
	return nil
}

type namedFile struct {
	name string
	setname.File
}

// setFiles lists the files of the folder that belong to this prefix and
// variant (any naming, hidden leftovers included, the lock file excluded).
func (tx *commit) setFiles() ([]namedFile, error) {
	entries, err := os.ReadDir(tx.dir)
	if err != nil {
		return nil, err
	}
	var out []namedFile
	for _, e := range entries {
		s, ok := setname.Parse(e.Name())
		if !ok || s.Prefix != tx.prefix || s.Variant != tx.variant || s.Role == setname.Lock || e.IsDir() {
			continue
		}
		out = append(out, namedFile{e.Name(), s})
	}
	return out, nil
}

// commit moves the written files into place and removes what remains of
// the previous set. indexDoc renders the index for the actual file names
// (standard name -> name used); it is nil for a single file. It returns
// the names the files were committed under, in shard order.
func (tx *commit) commit(index string, indexDoc func(names map[string]string) ([]byte, error)) ([]string, error) {
	prev, err := tx.setFiles()
	if err != nil {
		return nil, &Error{Kind: ErrCommit, Path: tx.dir, Msg: "listing the previous set", Err: err}
	}
	has := func(name string) bool {
		return slices.ContainsFunc(prev, func(f namedFile) bool { return f.name == name })
	}
	if index == "" {
		// A single file: one rename switches every reader that prefers a
		// single file to an index (package variant, transformers); readers
		// that prefer the index switch when the index is removed.
		name := tx.files[0]
		if err := tx.ops.rename(tx.temps[name], tx.path(name)); err != nil {
			return nil, tx.fail("moving "+name+" into place", err)
		}
		delete(tx.temps, name)
		tx.placed = append(tx.placed, name)
		if err := tx.ops.syncDir(tx.dir); err != nil {
			tx.done = true
			return nil, tx.notDurable(err)
		}
		if err := tx.switchOut(setname.IndexName(tx.prefix, tx.variant), has); err != nil {
			return nil, err
		}
		tx.removePrevious(prev, map[string]bool{name: true})
		return tx.files, nil
	}
	// 1. Place the shards under names no file has: their standard names
	// if all are free, otherwise swap names, so that no file of the
	// previous set changes before the switch.
	names := make(map[string]string, len(tx.files))
	token := ""
	for _, f := range tx.files {
		names[f] = f
		if _, err := os.Lstat(tx.path(f)); err == nil && token == "" {
			if token, err = randomToken(); err != nil {
				return nil, tx.fail("making a swap name", err)
			}
		}
	}
	if token != "" {
		for _, f := range tx.files {
			names[f] = setname.SwapName(f, token)
		}
	}
	for _, f := range tx.files {
		if err := tx.ops.rename(tx.temps[f], tx.path(names[f])); err != nil {
			return nil, tx.fail("moving "+names[f]+" into place", err)
		}
		delete(tx.temps, f)
		tx.placed = append(tx.placed, names[f])
	}
	// 2. The index, written and synced with the shards, switches readers
	// with one rename.
	doc, err := indexDoc(names)
	if err == nil {
		err = tx.writeFile(index, doc)
	}
	if err != nil {
		return nil, tx.fail("writing "+index, err)
	}
	if err := tx.ops.syncDir(tx.dir); err != nil {
		return nil, tx.fail("syncing the folder", err)
	}
	if err := tx.ops.rename(tx.temps[index], tx.path(index)); err != nil {
		return nil, tx.fail("moving "+index+" into place", err)
	}
	delete(tx.temps, index)
	tx.placed = append(tx.placed, index)
	if err := tx.ops.syncDir(tx.dir); err != nil {
		tx.done = true
		return nil, tx.notDurable(err)
	}
	if err := tx.switchOut(setname.SingleName(tx.prefix, tx.variant), has); err != nil {
		return nil, err
	}
	keep := map[string]bool{index: true}
	for _, n := range names {
		keep[n] = true
	}
	tx.removePrevious(prev, keep)
	out := make([]string, len(tx.files))
	for i, f := range tx.files {
		out[i] = names[f]
	}
	if token == "" {
		return out, nil
	}

	// 3. Swap names: hard-link the shards to their standard names (free
	// now), switch the index to them, and drop the swap names.
	if err := tx.unswap(index, names, indexDoc); err != nil {
		tx.warn("the set keeps its swap names (%s, ...): %v", out[0], err)
		return out, nil
	}
	return tx.files, nil
}

// switchOut removes the previous set's entry point that still shadows the
// new one for some readers: the single file when the new set has an index,
// the index when the new set is a single file. Its removal is the switch
// for those readers, so a failure fails the commit: the new files are
// removed again when no file of the previous set had their names, and the
// error says which readers load which set otherwise.
func (tx *commit) switchOut(old string, has func(string) bool) error {
	if !has(old) {
		tx.done = true
		return nil
	}
	err := tx.ops.remove(tx.path(old))
	if err == nil || errors.Is(err, fs.ErrNotExist) {
		tx.done = true
		tx.replaced = append(tx.replaced, old)
		return nil
	}
	if !slices.ContainsFunc(tx.placed, has) {
		return tx.fail("removing "+old+", which would shadow the new set", err)
	}
	tx.done = true
	return &Error{Kind: ErrCommit, Path: tx.dir, Err: err,
		Msg: fmt.Sprintf("the new set is in place, but %s of the previous set could not be removed: readers that prefer it to the new %s still load the previous set", old, tx.placed[len(tx.placed)-1])}
}

// unswap moves a committed set from its swap names to its standard names
// with a second index switch. On failure the set stays as it was.
func (tx *commit) unswap(index string, names map[string]string, indexDoc func(map[string]string) ([]byte, error)) error {
	var linked []string
	undo := func(err error) error {
		for _, f := range linked {
			if rerr := tx.ops.remove(tx.path(f)); rerr != nil {
				tx.warn("could not remove %s: %v", f, rerr)
			}
		}
		if tmp, ok := tx.temps[index]; ok {
			os.Remove(tmp)
			delete(tx.temps, index)
		}
		return err
	}
	same := make(map[string]string, len(names))
	for _, f := range tx.files {
		if err := tx.ops.link(tx.path(names[f]), tx.path(f)); err != nil {
			return undo(err)
		}
		linked = append(linked, f)
		same[f] = f
	}
	doc, err := indexDoc(same)
	if err != nil {
		return undo(err)
	}
	if err := tx.writeFile(index, doc); err != nil {
		return undo(err)
	}
	if err := tx.ops.syncDir(tx.dir); err != nil {
		return undo(err)
	}
	if err := tx.ops.rename(tx.temps[index], tx.path(index)); err != nil {
		return undo(err)
	}
	delete(tx.temps, index)
	if err := tx.ops.syncDir(tx.dir); err != nil {
		tx.warn("syncing %s after renaming the shards: %v", tx.dir, err)
	}
	for _, f := range tx.files {
		if err := tx.ops.remove(tx.path(names[f])); err != nil {
			tx.warn("could not remove %s: %v", names[f], err)
		}
	}
	if err := tx.ops.syncDir(tx.dir); err != nil {
		tx.warn("syncing %s after removing the swap names: %v", tx.dir, err)
	}
	return nil
}

// removePrevious removes the files of the previous set once the new one is
// in place: a single file first (it would shadow a new index for readers
// that prefer single files), then indexes, then shards, then hidden
// leftovers of earlier saves. Failures are warnings: the new set is
// committed, and the next save removes what is left.
func (tx *commit) removePrevious(prev []namedFile, keep map[string]bool) {
	order := func(f namedFile) int {
		switch {
		case f.Role == setname.Single:
			return 0
		case f.IsIndex():
			return 1
		case f.IsShard():
			return 2
		}
		return 3
	}
	slices.SortStableFunc(prev, func(a, b namedFile) int { return order(a) - order(b) })
	removed, keepShards := false, false
	for _, f := range prev {
		if keep[f.name] || (f.Hidden() && !tx.exclusive()) || (keepShards && f.IsShard()) {
			continue
		}
		if err := tx.ops.remove(tx.path(f.name)); err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				tx.warn("could not remove %s: %v", f.name, err)
				if f.IsIndex() {
					// Its shards stay, so that it stays loadable.
					keepShards = true
					tx.warn("kept the previous shards, which %s may name", f.name)
				}
			}
			continue
		}
		removed = true
		if f.Hidden() {
			tx.leftovers = append(tx.leftovers, f.name)
		} else {
			tx.replaced = append(tx.replaced, f.name)
		}
	}
	for _, f := range prev {
		if keep[f.name] && !f.Hidden() {
			tx.replaced = append(tx.replaced, f.name) // overwritten by the rename
		}
	}
	if removed {
		if err := tx.ops.syncDir(tx.dir); err != nil {
			tx.warn("syncing %s after removing the previous set: %v", tx.dir, err)
		}
	}
}

// fail undoes a commit that failed before its switch: the files it placed
// are removed (no reader's index names them) and the previous set is
// untouched.
func (tx *commit) fail(msg string, cause error) error {
	var rerrs []error
	for _, n := range slices.Backward(tx.placed) { // the entry point first
		if err := tx.ops.remove(tx.path(n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			rerrs = append(rerrs, err)
		}
	}
	if len(tx.placed) > 0 {
		if err := tx.ops.syncDir(tx.dir); err != nil {
			rerrs = append(rerrs, err)
		}
	}
	tx.placed = nil
	e := &Error{Kind: ErrCommit, Path: tx.dir, Msg: msg + "; the previous set is untouched", Err: cause}
	if len(rerrs) > 0 {
		e.Msg += ", but some new files could not be removed"
		e.Err = errors.Join(append([]error{cause}, rerrs...)...)
	}
	return e
}

// notDurable is the error of a commit whose switch succeeded but whose
// folder could not be synced: readers see the new set, which a power loss
// may undo. The previous set's files are kept.
func (tx *commit) notDurable(err error) error {
	return &Error{Kind: ErrCommit, Path: tx.dir, Msg: "the new set is in place but syncing the folder failed (a power loss may revert it); the previous set's files were kept", Err: err}
}

func randomToken() (string, error) {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}
