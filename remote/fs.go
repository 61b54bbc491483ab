package remote

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ckpt-go/ckpt/source"
)

var errNotExist = fs.ErrNotExist

// FS is a read-only file system over an object store (NewS3FS) or an HTTP
// server (NewHTTPFS). It implements fs.FS, fs.StatFS, fs.ReadDirFS and
// source.RangeFS, so that ckpt.Open (through WithFS or a registered
// location), package shard and package variant read checkpoints from it.
//
// Files are opened with one ranged GET of their first bytes (WithHeadSize,
// 1 MiB by default): the response also gives the object's size and ETag,
// and a safetensors header that fits costs no other request. Every later
// read of that file is pinned to that version (If-Match on the ETag, and
// the response's ETag, size and range checked), so that an object replaced
// while it is read fails with ErrChanged instead of mixing two versions.
// The FS remembers what it opened and listed (one version per name for its
// lifetime: open a new FS to see changes); a file's first bytes are kept
// only as far as they were read, so that reopening a shard to verify its
// header costs no request.
//
// The bytes read of an S3 object are compared with the CRC-32C the store
// holds of it, once they cover the object (or its parts): see
// "Integrity" in the package documentation, WithStoreChecksums and
// VerifyObject.
//
// Opened files implement io.ReaderAt (ranged GETs, retried, each bounded by
// the request timeout) and io.Reader. Folders are listed with
// ListObjectsV2 (S3); plain HTTP cannot list folders (ErrInvalid): name
// a file or an index there. An FS is safe for concurrent use.
type FS struct {
	be   backend
	opts options

	mu     sync.Mutex
	objs   map[string]*object    // opened (pinned) objects
	dirs   map[string][]dirEntry // listed folders, sorted by name
	closed atomic.Bool
	used   atomic.Int64 // the most of its first bytes a partly read file needed

	skipBufs sync.Pool // *[]byte: bytes between spans, when they are accounted

	stats stats
}

// backend is what differs between S3 and HTTP.
type backend interface {
	// where returns the location of name, for messages.
	where(name string) string
	// get starts a GET of the n > 0 bytes of name at off, pinned to pin's
	// version when pin is not nil.
	get(ctx context.Context, name string, off, n int64, pin *version) (io.ReadCloser, response, error)
	// head describes name without reading it.
	head(ctx context.Context, name string) (version, error)
	// list lists the folder dir ("." for the root), calling page before
	// each request; ErrInvalid when the backend cannot.
	list(ctx context.Context, dir string, page func()) ([]dirEntry, error)
	// checksum returns the CRC-32C the store holds of name's version pin
	// (nil when it holds none), making at most conc requests at once and
	// calling count before each.
	checksum(ctx context.Context, name string, pin version, conc int, count func()) (*storeSum, error)
	// canList reports whether list works.
	canList() bool
}

// version identifies one version of an object.
type version struct {
	size    int64
	etag    string
	modTime time.Time
}

// response is what a GET's response says.
type response struct {
	version
	first int64 // first byte served
	n     int64 // bytes in the body
	whole bool  // the server sent the whole object, ignoring Range
}

// dirEntry is one entry of a folder listing.
type dirEntry struct {
	name    string // base name
	dir     bool
	size    int64
	modTime time.Time
}

// stats counts what an FS asked of its server.
type stats struct {
	gets, heads, lists, retries, bytes atomic.Int64
}

// Stats counts the requests an FS made and the bytes it received.
type Stats struct {
	// Requests is GETs + HEADs + LISTs.
	Requests int64
	// GETs, HEADs and LISTs count requests by kind (each retry counts).
	// HEADs include the requests that ask for an object's checksum
	// (HeadObject, and GetObjectAttributes for a composite one): one per
	// object whose data is read, where the store can hold one.
	GETs, HEADs, LISTs int64
	// Retries counts the requests that were retries of a failed one.
	Retries int64
	// Bytes counts the body bytes received (bytes read between coalesced
	// tensors included).
	Bytes int64
}

// Stats returns what the FS asked of its server so far.
func (f *FS) Stats() Stats {
	s := Stats{GETs: f.stats.gets.Load(), HEADs: f.stats.heads.Load(), LISTs: f.stats.lists.Load(),
		Retries: f.stats.retries.Load(), Bytes: f.stats.bytes.Load()}
	s.Requests = s.GETs + s.HEADs + s.LISTs
	return s
}

func newFS(be backend, opts []Option) *FS {
	return &FS{be: be, opts: buildOptions(opts), objs: make(map[string]*object), dirs: make(map[string][]dirEntry)}
}

// object is an opened object: its pinned version and its first bytes.
type object struct {
	name  string
	ready chan struct{} // closed once opened (or failed)
	err   error

	version
	mu       sync.Mutex
	head     []byte // the object's first bytes
	headUsed int64  // how far head was read
	open     int    // open file handles
	cache    *cacheEntry
	sums     objectSums // the store's checksum and the bytes that passed (guarded by mu)
}

// Close releases what the FS holds for its cache (open entries, partly
// filled temporary files). Reads after Close fail with fs.ErrClosed. The
// loader closes the file systems it opened for a location when the Model
// is closed.
func (f *FS) Close() error {
	if f.closed.Swap(true) {
		return nil
	}
	f.mu.Lock()
	objs := make([]*object, 0, len(f.objs))
	for _, o := range f.objs {
		objs = append(objs, o)
	}
	f.mu.Unlock()
	for _, o := range objs {
		<-o.ready
		if o.cache != nil {
			o.cache.close()
		}
	}
	return nil
}

// RangeConfig returns the batching of loads from f (source.RangeFS).
func (f *FS) RangeConfig() source.RangeConfig {
	return source.RangeConfig{Concurrency: f.opts.concurrency, Chunk: f.opts.chunk, MaxGap: f.opts.maxGap}
}

// Location returns the location of name in f (s3://BUCKET/KEY or a URL).
func (f *FS) Location(name string) string { return f.be.where(name) }

func pathErr(op, name string, err error) error { return &fs.PathError{Op: op, Path: name, Err: err} }

// Open opens the file or folder name.
func (f *FS) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, pathErr("open", name, fs.ErrInvalid)
	}
	if name == "." {
		return &dirFile{f: f, name: name}, nil
	}
	if e, ok := f.listed(name); ok && e.dir {
		return &dirFile{f: f, name: name}, nil
	}
	o, err := f.object(context.Background(), name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			if isDir, derr := f.isDir(context.Background(), name); derr == nil && isDir {
				return &dirFile{f: f, name: name}, nil
			}
		}
		return nil, pathErr("open", name, err)
	}
	o.mu.Lock()
	o.open++
	o.mu.Unlock()
	return &file{f: f, o: o}, nil
}

// Stat describes name: from the listing of its folder when it was listed,
// from the opened object, or by opening it (one GET of its first bytes,
// which a later Open reuses).
func (f *FS) Stat(name string) (fs.FileInfo, error) {
	if !fs.ValidPath(name) {
		return nil, pathErr("stat", name, fs.ErrInvalid)
	}
	if name == "." {
		return dirInfo("."), nil
	}
	f.mu.Lock()
	o := f.objs[name]
	f.mu.Unlock()
	if o == nil {
		if e, ok := f.listed(name); ok {
			if e.dir {
				return dirInfo(e.name), nil
			}
			return &fileInfo{name: e.name, size: e.size, modTime: e.modTime}, nil
		}
		if f.parentListed(name) {
			return nil, pathErr("stat", name, fs.ErrNotExist)
		}
	}
	o, err := f.object(context.Background(), name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			if isDir, derr := f.isDir(context.Background(), name); derr == nil && isDir {
				return dirInfo(path.Base(name)), nil
			}
		}
		return nil, pathErr("stat", name, err)
	}
	return o.info(), nil
}

// ReadDir lists the folder name, sorted by name (fs.ReadDirFS).
func (f *FS) ReadDir(name string) ([]fs.DirEntry, error) {
	if !fs.ValidPath(name) {
		return nil, pathErr("readdir", name, fs.ErrInvalid)
	}
	es, err := f.listing(context.Background(), name)
	if err != nil {
		return nil, pathErr("readdir", name, err)
	}
	out := make([]fs.DirEntry, len(es))
	for i, e := range es {
		if e.dir {
			out[i] = fs.FileInfoToDirEntry(dirInfo(e.name))
		} else {
			out[i] = fs.FileInfoToDirEntry(&fileInfo{name: e.name, size: e.size, modTime: e.modTime})
		}
	}
	return out, nil
}

// listing returns the listing of dir, listing it once.
func (f *FS) listing(ctx context.Context, dir string) ([]dirEntry, error) {
	f.mu.Lock()
	es, ok := f.dirs[dir]
	f.mu.Unlock()
	if ok {
		return es, nil
	}
	if !f.be.canList() {
		return nil, &Error{Kind: ErrInvalid, Location: f.be.where(dir),
			Msg: "folders cannot be listed over plain HTTP: name a safetensors file or an index (.safetensors.index.json)"}
	}
	var got []dirEntry
	err := f.retry(ctx, dir, "", func(ctx context.Context) error {
		var err error
		got, err = f.be.list(ctx, dir, func() { f.stats.lists.Add(1) })
		return err
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(got, func(a, b dirEntry) int { return strings.Compare(a.name, b.name) })
	got = slices.CompactFunc(got, func(a, b dirEntry) bool { return a.name == b.name })
	f.mu.Lock()
	f.dirs[dir] = got
	f.mu.Unlock()
	return got, nil
}

// listed looks name up in its folder's listing, when that was listed.
func (f *FS) listed(name string) (dirEntry, bool) {
	dir, base := path.Dir(name), path.Base(name)
	f.mu.Lock()
	es, ok := f.dirs[dir]
	f.mu.Unlock()
	if !ok {
		return dirEntry{}, false
	}
	i, found := slices.BinarySearchFunc(es, base, func(e dirEntry, b string) int { return strings.Compare(e.name, b) })
	if !found {
		return dirEntry{}, false
	}
	return es[i], true
}

// parentListed reports whether name's folder was listed (so that a name
// missing from it does not exist).
func (f *FS) parentListed(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.dirs[path.Dir(name)]
	return ok
}

// isDir reports whether name is a folder: a listing with entries (which is
// kept as its listing).
func (f *FS) isDir(ctx context.Context, name string) (bool, error) {
	if !f.be.canList() {
		return false, nil
	}
	es, err := f.listing(ctx, name)
	if err != nil {
		return false, err
	}
	if len(es) == 0 {
		f.mu.Lock()
		delete(f.dirs, name) // not a folder: no listing to keep
		f.mu.Unlock()
		return false, nil
	}
	return true, nil
}

// object opens name once: one GET of its first bytes, which pins the
// version. Concurrent callers share the request; a failure is not kept.
func (f *FS) object(ctx context.Context, name string) (*object, error) {
	if f.closed.Load() {
		return nil, fs.ErrClosed
	}
	f.mu.Lock()
	o := f.objs[name]
	if o == nil {
		o = &object{name: name, ready: make(chan struct{})}
		f.objs[name] = o
		f.mu.Unlock()
		o.err = f.openObject(ctx, o)
		if o.err != nil {
			f.mu.Lock()
			delete(f.objs, name)
			f.mu.Unlock()
		}
		close(o.ready)
	} else {
		f.mu.Unlock()
	}
	select {
	case <-o.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if o.err != nil {
		return nil, o.err
	}
	return o, nil
}

// openObject reads the first bytes of o and its version.
func (f *FS) openObject(ctx context.Context, o *object) error {
	want := f.headSize()
	var pin *version
	err := f.retry(ctx, o.name, rangeString(0, want), func(ctx context.Context) error {
		f.stats.gets.Add(1)
		body, r, err := f.be.get(ctx, o.name, 0, want, pin)
		if err != nil {
			var re *Error
			if errors.As(err, &re) && re.Kind == ErrRequest && re.Status == 416 {
				// An empty object has no byte 0: describe it instead.
				f.stats.heads.Add(1)
				v, herr := f.be.head(ctx, o.name)
				if herr != nil {
					return herr
				}
				if v.size != 0 {
					return err
				}
				o.version, o.head = v, nil
				return nil
			}
			return err
		}
		defer body.Close()
		if r.whole && r.size > want {
			return &Error{Kind: ErrRequest, Status: 200,
				Msg: "the server ignores Range requests and sent the whole file; serve it with range support"}
		}
		if r.first != 0 || r.n != min(want, r.size) {
			return &Error{Kind: ErrRequest, Msg: "the response's range is not the one asked for"}
		}
		if pin == nil {
			v := r.version
			pin = &v
		} else if err := checkVersion(*pin, r.version); err != nil {
			return err
		}
		buf := make([]byte, r.n)
		n, err := io.ReadFull(body, buf)
		f.stats.bytes.Add(int64(n))
		if err != nil {
			return bodyErr(err)
		}
		o.version, o.head = r.version, buf
		return nil
	})
	if err != nil {
		return err
	}
	if c := f.opts.cache; c != nil {
		o.cache = c.entry(f.be.where(o.name), o.version)
		if o.cache != nil {
			o.cache.fillHead(o.head)
		}
	}
	return nil
}

// headSize is how many first bytes opening a file reads: WithHeadSize for
// the first file; then twice the most that earlier files which were only
// partly read needed (the header of a shard, when the others' were read),
// at least 64 KiB and at most WithHeadSize. Files of one checkpoint have
// headers of similar sizes, so planning many shards reads about their
// headers, not a megabyte each.
func (f *FS) headSize() int64 {
	used := f.used.Load()
	if used == 0 {
		return f.opts.headSize
	}
	n := (2*used + minHead - 1) / minHead * minHead
	return min(max(n, minHead), f.opts.headSize)
}

// minHead is the least a file's first read asks for once sizes were learnt.
const minHead = 64 << 10

// checkVersion fails with ErrChanged when got is not the pinned version.
func checkVersion(pin, got version) error {
	switch {
	case pin.etag != "" && got.etag != "" && pin.etag != got.etag:
		return &Error{Kind: ErrChanged, Msg: "the object was replaced: ETag " + got.etag + ", was " + pin.etag + " when it was opened"}
	case pin.etag == "" && !pin.modTime.IsZero() && !got.modTime.IsZero() && !pin.modTime.Equal(got.modTime):
		return &Error{Kind: ErrChanged, Msg: "the file was replaced: Last-Modified " + got.modTime.UTC().Format(time.RFC1123) + ", was " + pin.modTime.UTC().Format(time.RFC1123)}
	case got.size >= 0 && pin.size != got.size && pin.etag != "" && got.etag == pin.etag:
		// Not a new version: the store's bytes of the pinned one differ.
		return &Error{Kind: ErrChecksum, Msg: "the store answered for ETag " + pin.etag + " with an object of " + itoa(got.size) +
			" bytes; it had " + itoa(pin.size) + " when it was opened: its bytes of one version differ"}
	case got.size >= 0 && pin.size != got.size:
		return &Error{Kind: ErrChanged, Msg: "the object changed size since it was opened"}
	}
	return nil
}

func (o *object) info() *fileInfo {
	return &fileInfo{name: path.Base(o.name), size: o.size, modTime: o.modTime}
}

// ReadRanges reads the spans of file name (source.RangeFS): with one request
// from the first span's offset to the last one's end, pinned to the
// version name was opened with, straight into the spans' buffers, the bytes
// between them discarded; a request that fails is retried from the byte it
// reached. Spans must be sorted and must not overlap.
func (f *FS) ReadRanges(ctx context.Context, name string, spans []source.Span) error {
	if len(spans) == 0 {
		return nil
	}
	o, err := f.object(ctx, name)
	if err != nil {
		return err
	}
	for i, s := range spans {
		if s.Off < 0 || s.Off+int64(len(s.Dst)) > o.size || (i > 0 && s.Off < spans[i-1].Off+int64(len(spans[i-1].Dst))) {
			return &Error{Kind: ErrRequest, Location: f.be.where(name), Range: rangeString(s.Off, int64(len(s.Dst))),
				Msg: "span outside the object or overlapping the previous one"}
		}
	}
	return f.fetch(ctx, o, spans)
}

// readAt is ReadAt for an opened object.
func (f *FS) readAt(ctx context.Context, o *object, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, &Error{Kind: ErrRequest, Location: f.be.where(o.name), Msg: "negative offset"}
	}
	if off >= o.size {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	want := len(p)
	n := int(min(int64(want), o.size-off))
	p = p[:n]
	// The first bytes are in memory.
	o.mu.Lock()
	h := int64(len(o.head))
	if off < h {
		c := copy(p, o.head[off:])
		t := o.sums.t
		if end := off + int64(c); end > o.headUsed {
			o.headUsed = end
			t.setSeed(o.head[:end])
		}
		o.mu.Unlock()
		if err := t.add(off, p[:c]); err != nil {
			o.discard()
			return 0, err
		}
		if c < n {
			if err := f.fetch(ctx, o, []source.Span{{Off: off + int64(c), Dst: p[c:]}}); err != nil {
				return c, err
			}
		}
	} else {
		o.mu.Unlock()
		if err := f.fetch(ctx, o, []source.Span{{Off: off, Dst: p}}); err != nil {
			return 0, err
		}
	}
	if n < want {
		return n, io.EOF
	}
	return n, nil
}

// fetch reads spans of o (sorted, inside it): from the cache when it holds
// o, else with one pinned request, retried from where it stopped. What
// arrives is accounted in o's tally (the store's checksum is asked on the
// first fetch of o).
func (f *FS) fetch(ctx context.Context, o *object, spans []source.Span) error {
	if f.closed.Load() {
		return pathErr("read", o.name, fs.ErrClosed)
	}
	t, err := f.tallyOf(ctx, o)
	if err != nil {
		return err
	}
	return f.fetchInto(ctx, o, spans, t)
}

// fetchInto is fetch accounting what arrives in t (none when nil): the
// spans' bytes and those between them, before they reach the cache, so
// that a mismatch found is never committed there.
func (f *FS) fetchInto(ctx context.Context, o *object, spans []source.Span, t *tally) error {
	if o.cache != nil && o.cache.readSpans(spans) {
		if err := f.tallyCached(o.cache, spans, t); err != nil {
			o.discard()
			return err
		}
		return nil
	}
	start := spans[0].Off
	last := spans[len(spans)-1]
	end := last.Off + int64(len(last.Dst))
	if end == start {
		return nil
	}
	pos, si := start, 0
	err := f.retry(ctx, o.name, rangeString(start, end-start), func(ctx context.Context) error {
		f.stats.gets.Add(1)
		body, r, err := f.be.get(ctx, o.name, pos, end-pos, &o.version)
		if err != nil {
			return err
		}
		defer body.Close()
		if err := checkVersion(o.version, r.version); err != nil {
			return err
		}
		if r.whole && !(pos == 0 && end == o.size) {
			return &Error{Kind: ErrRequest, Status: 200,
				Msg: "the server ignores Range requests and sent the whole file; serve it with range support"}
		}
		if r.first != pos || r.n != end-pos {
			return &Error{Kind: ErrRequest, Msg: "the response's range is not the one asked for"}
		}
		for pos < end {
			s := spans[si]
			if pos < s.Off {
				n, err := f.skip(body, pos, s.Off-pos, t)
				pos += n
				if errors.Is(err, ErrChecksum) {
					o.discard()
					return err
				}
				if err != nil {
					return bodyErr(err)
				}
				continue
			}
			dst := s.Dst[pos-s.Off:]
			n, err := io.ReadFull(body, dst)
			f.stats.bytes.Add(int64(n))
			if terr := t.add(pos, dst[:n]); terr != nil {
				o.discard()
				return terr
			}
			if o.cache != nil && n > 0 {
				o.cache.write(dst[:n], pos)
			}
			pos += int64(n)
			if err != nil {
				return bodyErr(err)
			}
			si++
		}
		return nil
	})
	return err
}

// tallyCached accounts in t spans read from the cache entry e and the
// bytes between them (which a request would have read too), read from e.
func (f *FS) tallyCached(e *cacheEntry, spans []source.Span, t *tally) error {
	if t == nil {
		return nil
	}
	for i, s := range spans {
		if err := t.add(s.Off, s.Dst); err != nil {
			return err
		}
		if i+1 < len(spans) {
			if err := f.tallyCachedGap(e, s.Off+int64(len(s.Dst)), spans[i+1].Off, t); err != nil {
				return err
			}
		}
	}
	return nil
}

// tallyCachedGap accounts in t the bytes from pos to end of the cache
// entry e.
func (f *FS) tallyCachedGap(e *cacheEntry, pos, end int64, t *tally) error {
	bp := f.skipBuf()
	defer f.skipBufs.Put(bp)
	for pos < end {
		b := (*bp)[:min(int64(len(*bp)), end-pos)]
		if !e.readSpans([]source.Span{{Off: pos, Dst: b}}) {
			return nil // the entry is gone: these bytes are not accounted
		}
		if err := t.add(pos, b); err != nil {
			return err
		}
		pos += int64(len(b))
	}
	return nil
}

// skip reads the n bytes at pos of body that no span wants, accounting
// them in t; it returns how many it read and the error reading them, or
// the tally's (ErrChecksum).
func (f *FS) skip(body io.Reader, pos, n int64, t *tally) (int64, error) {
	if t == nil {
		k, err := io.CopyN(io.Discard, body, n)
		f.stats.bytes.Add(k)
		return k, err
	}
	bp := f.skipBuf()
	defer f.skipBufs.Put(bp)
	var done int64
	for done < n {
		b := (*bp)[:min(int64(len(*bp)), n-done)]
		k, err := io.ReadFull(body, b)
		f.stats.bytes.Add(int64(k))
		if terr := t.add(pos+done, b[:k]); terr != nil {
			return done + int64(k), terr
		}
		done += int64(k)
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// skipBuf returns a buffer that bytes between spans are read into when
// they are accounted (put it back in f.skipBufs).
func (f *FS) skipBuf() *[]byte {
	if bp, ok := f.skipBufs.Get().(*[]byte); ok {
		return bp
	}
	b := make([]byte, 256<<10)
	return &b
}

// bodyErr classifies an error reading a response body: it ended early or
// the connection broke (both retried).
func bodyErr(err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return &Error{Kind: ErrUnavailable, Msg: "the response ended early", Err: err, retry: true}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return &Error{Kind: ErrUnavailable, Msg: "reading the response", Err: err, retry: true}
}

func rangeString(off, n int64) string {
	if n <= 0 {
		return ""
	}
	return "bytes=" + itoa(off) + "-" + itoa(off+n-1)
}

// file is an open object.
type file struct {
	f      *FS
	o      *object
	pos    int64
	closed atomic.Bool
}

func (fl *file) Stat() (fs.FileInfo, error) { return fl.o.info(), nil }

// ReadAt reads len(p) bytes at off (fewer, with io.EOF, at the end of the
// object), pinned to the version opened.
func (fl *file) ReadAt(p []byte, off int64) (int, error) {
	if fl.closed.Load() {
		return 0, pathErr("read", fl.o.name, fs.ErrClosed)
	}
	return fl.f.readAt(context.Background(), fl.o, p, off)
}

// Read reads sequentially.
func (fl *file) Read(p []byte) (int, error) {
	if fl.closed.Load() {
		return 0, pathErr("read", fl.o.name, fs.ErrClosed)
	}
	if fl.pos >= fl.o.size {
		return 0, io.EOF
	}
	n, err := fl.f.readAt(context.Background(), fl.o, p, fl.pos)
	fl.pos += int64(n)
	if err == io.EOF && n > 0 {
		err = nil
	}
	return n, err
}

// Close releases the file. When no handle of the object is left open, its
// first bytes are kept only as far as they were read (a safetensors
// header), so that a model with many shards holds headers, not megabytes.
func (fl *file) Close() error {
	if fl.closed.Swap(true) {
		return nil
	}
	o := fl.o
	o.mu.Lock()
	defer o.mu.Unlock()
	o.open--
	if o.open == 0 && int64(len(o.head)) > o.headUsed {
		o.head = slices.Clone(o.head[:o.headUsed])
		o.sums.t.setSeed(o.head)
	}
	if o.open == 0 && o.headUsed > 0 && o.headUsed < o.size {
		for {
			old := fl.f.used.Load()
			if o.headUsed <= old || fl.f.used.CompareAndSwap(old, o.headUsed) {
				break
			}
		}
	}
	return nil
}

// dirFile is an open folder.
type dirFile struct {
	f    *FS
	name string
	es   []fs.DirEntry
	read bool
}

func (d *dirFile) Stat() (fs.FileInfo, error) { return dirInfo(path.Base(d.name)), nil }
func (d *dirFile) Read([]byte) (int, error) {
	return 0, pathErr("read", d.name, errors.New("is a directory"))
}
func (d *dirFile) Close() error { return nil }

// ReadDir lists the folder (fs.ReadDirFile).
func (d *dirFile) ReadDir(n int) ([]fs.DirEntry, error) {
	if !d.read {
		es, err := d.f.ReadDir(d.name)
		if err != nil {
			return nil, err
		}
		d.es, d.read = es, true
	}
	if n <= 0 {
		out := d.es
		d.es = nil
		return out, nil
	}
	if len(d.es) == 0 {
		return nil, io.EOF
	}
	k := min(n, len(d.es))
	out := d.es[:k]
	d.es = d.es[k:]
	return out, nil
}

type fileInfo struct {
	name    string
	size    int64
	modTime time.Time
}

func (i *fileInfo) Name() string       { return i.name }
func (i *fileInfo) Size() int64        { return i.size }
func (i *fileInfo) Mode() fs.FileMode  { return 0o444 }
func (i *fileInfo) ModTime() time.Time { return i.modTime }
func (i *fileInfo) IsDir() bool        { return false }
func (i *fileInfo) Sys() any           { return nil }

type dirInfo string

func (d dirInfo) Name() string       { return string(d) }
func (d dirInfo) Size() int64        { return 0 }
func (d dirInfo) Mode() fs.FileMode  { return fs.ModeDir | 0o555 }
func (d dirInfo) ModTime() time.Time { return time.Time{} }
func (d dirInfo) IsDir() bool        { return true }
func (d dirInfo) Sys() any           { return nil }

var (
	_ fs.StatFS      = (*FS)(nil)
	_ fs.ReadDirFS   = (*FS)(nil)
	_ source.RangeFS = (*FS)(nil)
	_ io.ReaderAt    = (*file)(nil)
	_ fs.ReadDirFile = (*dirFile)(nil)
)
