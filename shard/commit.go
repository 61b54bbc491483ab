package shard

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
)

// fileOps are the file system operations a commit performs after the new
// files are written. Tests replace them to inject failures and to check
// what readers could observe between steps.
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
func (osOps) syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !syncUnsupported(err) {
		return err
	}
	return nil
}

// commit is one atomic replacement of a set of files in a folder.
type commit struct {
	dir   string
	ops   fileOps
	order []string          // final names, in write order (the index last)
	temps map[string]string // final name -> temporary path
	cur   *os.File
	done  bool
}

// create starts the temporary file for name.
func (tx *commit) create(name string) (*os.File, error) {
	if tx.temps == nil {
		if err := os.MkdirAll(tx.dir, 0o755); err != nil {
			return nil, &Error{Kind: ErrWrite, Path: tx.dir, Err: err}
		}
		tx.temps = make(map[string]string)
	}
	f, err := os.CreateTemp(tx.dir, "."+name+".tmp-*")
	if err != nil {
		return nil, &Error{Kind: ErrWrite, Path: tx.dir, Shard: name, Err: err}
	}
	tx.cur = f
	tx.order = append(tx.order, name)
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
	f, err := tx.create(name)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
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

type stepKind int

const (
	stepAside stepKind = iota // an old file renamed to its backup name
	stepLink                  // an old file hard-linked to its backup name
	stepPlace                 // a new file renamed into place
)

type step struct {
	kind   stepKind
	name   string // final name, relative to dir
	backup string // backup name, relative to dir
}

// commit moves the written files into place, replacing the previous set
// old (indexes first). It returns the replaced names and cleanup warnings;
// on error everything is restored.
func (tx *commit) commit(old []string) (replaced, warnings []string, err error) {
	token, err := randomToken()
	if err != nil {
		return nil, nil, &Error{Kind: ErrCommit, Path: tx.dir, Err: err}
	}
	backupOf := func(name string) string { return "." + name + ".old-" + token }
	isNew := make(map[string]bool, len(tx.order))
	for _, n := range tx.order {
		isNew[n] = true
	}
	newHasIndex := strings.HasSuffix(tx.order[len(tx.order)-1], ".json")
	var steps []step
	linked := make(map[string]string) // final name -> backup made by link

	fail := func(msg string, cause error) ([]string, []string, error) {
		var rerrs []error
		consumed := make(map[string]bool)
		for i := len(steps) - 1; i >= 0; i-- {
			s := steps[i]
			var err error
			switch s.kind {
			case stepPlace:
				if b, ok := linked[s.name]; ok {
					err = tx.ops.rename(tx.path(b), tx.path(s.name))
					consumed[b] = err == nil
				} else {
					err = tx.ops.remove(tx.path(s.name))
				}
			case stepLink:
				if !consumed[s.backup] {
					err = tx.ops.remove(tx.path(s.backup))
				}
			case stepAside:
				err = tx.ops.rename(tx.path(s.backup), tx.path(s.name))
			}
			if err != nil {
				rerrs = append(rerrs, err)
			}
		}
		if err := tx.ops.syncDir(tx.dir); err != nil {
			rerrs = append(rerrs, err)
		}
		e := &Error{Kind: ErrCommit, Path: tx.dir, Msg: msg + "; the previous set was restored", Err: cause}
		if len(rerrs) > 0 {
			e.Msg = msg + "; restoring the previous set failed too"
			e.Err = errors.Join(append([]error{cause}, rerrs...)...)
		}
		return nil, nil, e
	}

	// 1. Hide the previous index(es), and a previous single file when the
	// new set has an index (a complete single file would shadow it).
	// 2. Back up the remaining previous files: hard links for names the new
	// set reuses (so the swap leaves no gap), renames for the others.
	for phase := 1; phase <= 2; phase++ {
		for _, name := range old {
			hide := strings.HasSuffix(name, ".json") || (newHasIndex && !strings.Contains(name, "-of-"))
			if (phase == 1) != hide {
				continue
			}
			b := backupOf(name)
			if phase == 2 && isNew[name] {
				if err := tx.ops.link(tx.path(name), tx.path(b)); err == nil {
					steps = append(steps, step{stepLink, name, b})
					linked[name] = b
					continue
				}
			}
			if err := tx.ops.rename(tx.path(name), tx.path(b)); err != nil {
				return fail("moving aside "+name, err)
			}
			steps = append(steps, step{stepAside, name, b})
		}
	}
	// 3. Move the new files in, the index (or single file) last.
	for _, name := range tx.order {
		if err := tx.ops.rename(tx.temps[name], tx.path(name)); err != nil {
			return fail("moving "+name+" into place", err)
		}
		delete(tx.temps, name)
		steps = append(steps, step{kind: stepPlace, name: name})
	}
	if err := tx.ops.syncDir(tx.dir); err != nil {
		return fail("syncing the folder", err)
	}
	tx.done = true
	// 4. The new set is durable: drop the backups.
	for _, s := range steps {
		if s.kind == stepPlace {
			continue
		}
		if err := tx.ops.remove(tx.path(s.backup)); err != nil {
			warnings = append(warnings, fmt.Sprintf("could not remove backup %s: %v", s.backup, err))
		}
	}
	if err := tx.ops.syncDir(tx.dir); err != nil {
		warnings = append(warnings, fmt.Sprintf("syncing %s after removing backups: %v", tx.dir, err))
	}
	return old, warnings, nil
}

func randomToken() (string, error) {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}
