package atomicfile

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/ckpt-go/ckpt/internal/safeopen"
)

// Lock is an exclusive lock on a save target, held through the lock file
// ".NAME.lock" in the target's folder (an advisory flock). Every writer of
// ckpt takes it for the whole save, so that two saves of the same target
// never interleave and a save may remove the temporary files that earlier,
// killed saves of its target left: while it holds the lock, no live save
// of that target owns any. The lock file is removed on Unlock; a killed
// holder's lock file is reused (the kernel released its lock) and removed
// by the next save.
//
// On platforms without flock (Windows, Solaris, AIX, ...) Lock holds
// nothing: Exclusive reports false and callers must not remove temporary
// files they did not create.
type Lock struct {
	f    *os.File
	path string
}

// lockPoll bounds the wait between two attempts to take a held lock.
const lockPoll = 50 * time.Millisecond

// LockName is the name of the lock file of target name: ".NAME.lock".
func LockName(name string) string { return "." + name + ".lock" }

// LockTarget takes the lock of the target called name in dir, waiting
// while another process (or another save in this one) holds it, until ctx
// is done. dir must exist.
func LockTarget(ctx context.Context, dir, name string) (*Lock, error) {
	path := filepath.Join(dir, LockName(name))
	if !flockSupported {
		return &Lock{path: path}, nil
	}
	delay := time.Millisecond
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		f, err := openLockFile(path)
		if err != nil {
			return nil, err
		}
		ok, err := tryLock(f)
		if err != nil {
			f.Close()
			return nil, &os.PathError{Op: "flock", Path: path, Err: err}
		}
		if ok {
			// The previous holder removes the file before it unlocks: if
			// it did so after we opened it, we hold a lock on a file that
			// is no longer the lock file, and must start again.
			fst, err1 := f.Stat()
			pst, err2 := os.Lstat(path)
			if err1 == nil && err2 == nil && os.SameFile(fst, pst) {
				return &Lock{f: f, path: path}, nil
			}
			f.Close()
			continue
		}
		f.Close()
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		delay = min(2*delay, lockPoll)
	}
}

// Exclusive reports whether the lock is really held: false on platforms
// without file locks.
func (l *Lock) Exclusive() bool { return l != nil && l.f != nil }

// Path returns the lock file's path.
func (l *Lock) Path() string { return l.path }

// Unlock removes the lock file and releases the lock. It is a no-op on a
// released Lock.
func (l *Lock) Unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	rerr := os.Remove(l.path)
	cerr := l.f.Close()
	l.f = nil
	if rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		return rerr
	}
	return cerr
}

// Held reports whether a live save holds the lock of target name in dir.
// It is false when there is no lock file, when its holder died, and on
// platforms without file locks.
func Held(dir, name string) bool {
	if !flockSupported {
		return false
	}
	// Without blocking: a FIFO planted as the lock file must not hang
	// ckpt validate (it is not a lock file, so nothing holds it).
	f, _, err := safeopen.Open(filepath.Join(dir, LockName(name)))
	if err != nil {
		return false
	}
	defer f.Close()
	return probeHeld(f)
}

// CreateTemp creates the temporary file ".NAME.tmp-DIGITS" for target name
// in dir, as Create does.
func CreateTemp(dir, name string) (*os.File, error) {
	return os.CreateTemp(dir, "."+name+".tmp-*")
}

var tempSuffixRE = regexp.MustCompile(`^\.tmp-[0-9]+$`)

// IsTempOf reports whether entry is a temporary file of target name, as
// CreateTemp names them.
func IsTempOf(entry, name string) bool {
	rest, ok := strings.CutPrefix(entry, "."+name)
	return ok && tempSuffixRE.MatchString(rest)
}

// TempTarget returns the target of a temporary file name made by
// CreateTemp, and whether entry is one.
func TempTarget(entry string) (string, bool) {
	if !strings.HasPrefix(entry, ".") {
		return "", false
	}
	i := strings.LastIndex(entry, ".tmp-")
	if i <= 1 || !tempSuffixRE.MatchString(entry[i:]) {
		return "", false
	}
	return entry[1:i], true
}

// removeStaleTemps removes the temporary files of target name in dir. The
// caller holds the target's lock, so no live save owns any of them.
func removeStaleTemps(dir, name string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.Type().IsRegular() && IsTempOf(e.Name(), name) {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}
