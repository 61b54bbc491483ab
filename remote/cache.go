package remote

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ckpt-go/ckpt/internal/atomicfile"
	"github.com/ckpt-go/ckpt/source"
)

// Cache is an optional local read-through cache of remote objects (pass it
// with WithCache). An object is kept under a name derived from its location,
// ETag (or Last-Modified time) and size, so a replaced object is never
// served from an older copy; objects without either validator are not
// cached. The bytes a load fetches are written to a temporary file beside
// the final one as they arrive (the load itself still reads straight into
// its buffers); once every byte of the object has been fetched, the file is
// synced and renamed into place, so that a reader never sees a partial
// entry. Later opens of the same version read the entry with pread instead
// of the network, and touch its modification time.
//
// The cache is bounded: after each new entry, entries are removed oldest
// modification time first until their total is at most the bound, and
// temporary files left by processes that died (unchanged for an hour) are
// removed. Several processes may share a folder: entries appear by atomic
// rename, evictions take a file lock (flock; on systems without it,
// concurrent evictions are not coordinated), and an entry removed while
// another process reads it stays readable to that process.
//
// Failures of the cache (a full disk, a folder made read-only) never fail
// a load: the entry is dropped, and Stats counts the error.
type Cache struct {
	dir string
	max int64

	hits, misses, stored, evicted, errs atomic.Int64
	errMu                               sync.Mutex
	lastErr                             error
}

// NewCache returns a cache in dir (created if needed) holding at most
// maxBytes. A size bound that is not positive is an ErrInvalid error; a
// folder that cannot be created an ErrUnavailable one.
func NewCache(dir string, maxBytes int64) (*Cache, error) {
	if maxBytes <= 0 {
		return nil, &Error{Kind: ErrInvalid, Location: dir, Msg: fmt.Sprintf("cache size bound %d: must be positive", maxBytes)}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, &Error{Kind: ErrUnavailable, Location: dir, Msg: "the cache cannot be used", Err: err}
	}
	return &Cache{dir: dir, max: maxBytes}, nil
}

// CacheStats counts what a Cache did.
type CacheStats struct {
	// Hits and Misses count opened objects found or not in the cache.
	Hits, Misses int64
	// Stored counts entries written; Evicted entries removed to stay
	// within the bound.
	Stored, Evicted int64
	// Errors counts failures of the cache (each dropped an entry); Last
	// is the most recent.
	Errors int64
	Last   error
}

// Stats returns what c did so far.
func (c *Cache) Stats() CacheStats {
	c.errMu.Lock()
	last := c.lastErr
	c.errMu.Unlock()
	return CacheStats{Hits: c.hits.Load(), Misses: c.misses.Load(), Stored: c.stored.Load(),
		Evicted: c.evicted.Load(), Errors: c.errs.Load(), Last: last}
}

func (c *Cache) fail(err error) {
	c.errs.Add(1)
	c.errMu.Lock()
	c.lastErr = &Error{Kind: ErrUnavailable, Location: c.dir, Msg: "the cache cannot be used", Err: err}
	c.errMu.Unlock()
}

// cacheName is the entry name of one version of an object: a hash of the
// location and the version, then ".obj".
func cacheName(location string, v version) string {
	validator := v.etag
	if validator == "" {
		validator = "mtime:" + strconv.FormatInt(v.modTime.UnixNano(), 10)
	}
	h := sha256.Sum256([]byte(location + "\x00" + validator + "\x00" + strconv.FormatInt(v.size, 10)))
	return hex.EncodeToString(h[:20]) + ".obj"
}

// cacheEntry is one object's entry: the committed file (a hit) or the
// temporary file being filled (a miss).
type cacheEntry struct {
	c    *Cache
	name string
	size int64

	miss bool // immutable: the entry was not in the cache when opened

	hit *os.File // the committed entry (guarded by mu)

	mu     sync.Mutex
	tmp    *os.File
	have   []span // byte ranges written to tmp, sorted and merged
	failed bool
	done   bool
	bad    bool // discarded: its bytes failed the store's checksum
}

type span struct{ off, end int64 }

// entry returns the cache entry of one version of an object at location,
// or nil when it is not cacheable (no validator, empty, larger than the
// cache).
func (c *Cache) entry(location string, v version) *cacheEntry {
	if c == nil || (v.etag == "" && v.modTime.IsZero()) || v.size <= 0 || v.size > c.max {
		return nil
	}
	e := &cacheEntry{c: c, name: cacheName(location, v), size: v.size}
	path := filepath.Join(c.dir, e.name)
	if f, err := os.Open(path); err == nil {
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() && st.Size() == v.size {
			now := time.Now()
			_ = os.Chtimes(path, now, now) // least recently used goes first
			e.hit = f
			c.hits.Add(1)
			return e
		}
		f.Close()
	}
	c.misses.Add(1)
	e.miss = true
	return e
}

// readSpans fills spans from a committed entry; false when it is not one
// (or reading it failed, which drops it).
func (e *cacheEntry) readSpans(spans []source.Span) bool {
	e.mu.Lock()
	hit := e.hit
	e.mu.Unlock()
	if hit == nil {
		return false
	}
	for _, s := range spans {
		if n, err := hit.ReadAt(s.Dst, s.Off); n != len(s.Dst) {
			e.c.fail(fmt.Errorf("reading entry %s: %d of %d bytes at %d: %v", e.name, n, len(s.Dst), s.Off, err))
			e.mu.Lock()
			e.hit = nil
			e.mu.Unlock()
			return false
		}
	}
	return true
}

// fillHead records the object's first bytes.
func (e *cacheEntry) fillHead(head []byte) {
	if e.miss && len(head) > 0 {
		e.write(head, 0)
	}
}

// write records b, the object's bytes at off, committing the entry once
// every byte is there.
func (e *cacheEntry) write(b []byte, off int64) {
	if !e.miss || len(b) == 0 {
		return
	}
	e.mu.Lock()
	if e.failed || e.done {
		e.mu.Unlock()
		return
	}
	if e.tmp == nil {
		f, err := atomicfile.CreateTemp(e.c.dir, e.name)
		if err == nil {
			err = f.Truncate(e.size)
			if err != nil {
				f.Close()
				os.Remove(f.Name())
			}
		}
		if err != nil {
			e.failed = true
			e.mu.Unlock()
			e.c.fail(err)
			return
		}
		e.tmp = f
	}
	tmp := e.tmp
	e.mu.Unlock()

	if _, err := tmp.WriteAt(b, off); err != nil {
		e.abandon(err)
		return
	}

	e.mu.Lock()
	if e.failed || e.done {
		e.mu.Unlock()
		return
	}
	e.have = addSpan(e.have, span{off, off + int64(len(b))})
	complete := len(e.have) == 1 && e.have[0].off == 0 && e.have[0].end == e.size
	if complete {
		e.done = true
	}
	e.mu.Unlock()
	if complete {
		e.commit()
	}
}

// close releases the entry: a committed file is closed, a partly filled
// one removed.
func (e *cacheEntry) close() {
	e.mu.Lock()
	hit, tmp := e.hit, e.tmp
	e.hit, e.tmp = nil, nil
	e.failed = true
	e.mu.Unlock()
	if hit != nil {
		hit.Close()
	}
	if tmp != nil {
		tmp.Close()
		os.Remove(tmp.Name())
	}
}

// discard drops the entry because its bytes failed the store's checksum:
// a partly filled file is removed and never committed, a committed one
// (this process's or another's) is removed, so that the next open fetches
// the object again.
func (e *cacheEntry) discard() {
	e.mu.Lock()
	committed := e.done || e.hit != nil
	e.failed, e.bad = true, true
	e.mu.Unlock()
	e.close()
	if committed {
		if err := os.Remove(filepath.Join(e.c.dir, e.name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			e.c.fail(err)
		}
	}
}

// addSpan inserts s into sorted, merged spans.
func addSpan(have []span, s span) []span {
	i, _ := slices.BinarySearchFunc(have, s.off, func(a span, off int64) int { return cmp.Compare(a.off, off) })
	have = slices.Insert(have, i, s)
	out := have[:1]
	for _, x := range have[1:] {
		last := &out[len(out)-1]
		if x.off <= last.end {
			last.end = max(last.end, x.end)
		} else {
			out = append(out, x)
		}
	}
	return out
}

// abandon drops the temporary file after a failure.
func (e *cacheEntry) abandon(err error) {
	e.mu.Lock()
	if e.failed {
		e.mu.Unlock()
		return
	}
	e.failed = true
	tmp := e.tmp
	e.tmp = nil
	e.mu.Unlock()
	if tmp != nil {
		tmp.Close()
		os.Remove(tmp.Name())
	}
	e.c.fail(err)
}

// commit syncs the complete temporary file, renames it into place and
// evicts what no longer fits.
func (e *cacheEntry) commit() {
	e.mu.Lock()
	tmp := e.tmp
	e.tmp = nil
	e.mu.Unlock()
	if tmp == nil {
		return
	}
	err := tmp.Sync()
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(e.c.dir, e.name))
	}
	if err != nil {
		os.Remove(tmp.Name())
		e.c.fail(err)
		return
	}
	e.mu.Lock()
	bad := e.bad
	e.mu.Unlock()
	if bad {
		// Discarded while it was being committed.
		os.Remove(filepath.Join(e.c.dir, e.name))
		return
	}
	e.c.stored.Add(1)
	if err := e.c.evict(); err != nil {
		e.c.fail(err)
	}
}

// staleTemp is how long a temporary file may stay unchanged before an
// eviction pass takes it for the leftover of a dead process.
const staleTemp = time.Hour

// evict removes entries, oldest modification time first, until the
// entries total at most the bound, and stale temporary files; it holds the
// cache folder's lock while it does.
func (c *Cache) evict() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lock, err := atomicfile.LockTarget(ctx, c.dir, "cache")
	if err != nil {
		return err
	}
	defer lock.Unlock()
	des, err := os.ReadDir(c.dir)
	if err != nil {
		return err
	}
	type ent struct {
		name string
		size int64
		mod  time.Time
	}
	var ents []ent
	var total int64
	now := time.Now()
	for _, de := range des {
		if !de.Type().IsRegular() {
			continue
		}
		info, err := de.Info()
		if err != nil {
			continue
		}
		name := de.Name()
		if target, ok := atomicfile.TempTarget(name); ok && filepath.Ext(target) == ".obj" {
			if now.Sub(info.ModTime()) > staleTemp {
				_ = os.Remove(filepath.Join(c.dir, name))
			}
			continue
		}
		if filepath.Ext(name) != ".obj" {
			continue
		}
		ents = append(ents, ent{name, info.Size(), info.ModTime()})
		total += info.Size()
	}
	slices.SortFunc(ents, func(a, b ent) int { return cmp.Or(a.mod.Compare(b.mod), cmp.Compare(a.name, b.name)) })
	for _, x := range ents {
		if total <= c.max {
			break
		}
		if err := os.Remove(filepath.Join(c.dir, x.name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		total -= x.size
		c.evicted.Add(1)
	}
	return nil
}
