package remote

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/source"
)

// Verifying what arrives against the store's checksum (the package
// documentation, "Integrity", says what is covered): an object's tally
// accounts the bytes handed out of it per segment (the object, or each
// part of a composite checksum), combining the CRCs of the pieces, and
// compares each segment a pass completes.

// storeSum is the CRC-32C a store holds of an object.
type storeSum struct {
	value     string // as the store gave it: base64, with "-N" for a composite
	typ       string // FULL_OBJECT or COMPOSITE
	crc       uint32 // of the object, or of its parts' CRCs (COMPOSITE)
	ends      []int64
	parts     []uint32 // COMPOSITE: the parts' own CRCs, when the store listed them
	versionID string
}

// composite reports whether s is the CRC of the parts' CRCs.
func (s *storeSum) composite() bool { return s.ends != nil }

// tally accounts the bytes of one object that passed, per segment (the
// object, or each of its parts), and compares each completed segment with
// the store's checksum.
type tally struct {
	loc, etag string
	sum       *storeSum

	mu   sync.Mutex
	segs []segment
	err  error  // the first mismatch: every later read fails with it
	seed []byte // the object's first bytes as reads are served them from memory
}

// segment is a byte range verified as one: runs are the pieces of it that
// passed in the current pass, sorted, disjoint, neighbours merged; when
// they cover it, the pass is complete: its CRC is checked and a new pass
// begins.
type segment struct {
	off, end int64
	gen      int // the pass
	runs     safetensors.ChecksumRuns
	done     bool   // a pass was completed
	crc      uint32 // the last completed pass's CRC
}

func newTally(loc, etag string, size int64, sum *storeSum) *tally {
	t := &tally{loc: loc, etag: etag, sum: sum}
	if !sum.composite() {
		t.segs = []segment{{off: 0, end: size}}
		return t
	}
	t.segs = make([]segment, len(sum.ends))
	var off int64
	for i, e := range sum.ends {
		t.segs[i] = segment{off: off, end: e}
		off = e
	}
	return t
}

// piece is a part of a read that no run of its segment covered yet.
type piece struct {
	seg, gen int
	off, end int64
	crc      uint32
}

// add accounts b, the object's bytes at off, and returns the tally's
// error: the first mismatch found, now or before.
func (t *tally) add(off int64, b []byte) error {
	if t == nil {
		return nil
	}
	end := off + int64(len(b))
	t.mu.Lock()
	if t.err != nil || len(b) == 0 {
		t.mu.Unlock()
		return t.err
	}
	var ps []piece
	i, _ := slices.BinarySearchFunc(t.segs, off, func(s segment, off int64) int {
		if s.end <= off {
			return -1
		}
		return 1
	})
	for ; i < len(t.segs) && t.segs[i].off < end; i++ {
		s := &t.segs[i]
		a, z := max(off, s.off), min(end, s.end)
		if a >= z {
			continue
		}
		for _, g := range s.runs.Gaps(a, z, nil) {
			ps = append(ps, piece{seg: i, gen: s.gen, off: g[0], end: g[1]})
		}
	}
	t.mu.Unlock()

	for k := range ps {
		p := &ps[k]
		p.crc = safetensors.Checksum(b[p.off-off : p.end-off])
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range ps {
		s := &t.segs[p.seg]
		if s.gen != p.gen || !s.runs.Add(p.off, p.end, p.crc) {
			continue // the pass was completed, or another read took the range, meanwhile
		}
		if crc, whole := s.runs.Whole(s.off, s.end); whole {
			s.done, s.crc = true, crc
			s.runs.Reset()
			s.gen++
			if t.err == nil {
				t.err = t.check(p.seg)
			}
			// The next pass has the first bytes: reads get them from
			// memory, not from the store, and need not read them again.
			if a, z := s.off, min(s.end, int64(len(t.seed))); a < z && !(a == s.off && z == s.end) {
				s.runs.Add(a, z, safetensors.Checksum(t.seed[a:z]))
			}
		}
	}
	return t.err
}

// check compares the completed segment i with the store's checksum.
func (t *tally) check(i int) error {
	s := &t.segs[i]
	if !t.sum.composite() {
		if s.crc != t.sum.crc {
			return t.mismatch(rangeString(s.off, s.end-s.off), fmt.Sprintf("the %d bytes read (the whole object) have CRC-32C %s; the store holds %s (%s)",
				s.end-s.off, crcBase64(s.crc), t.sum.value, t.sum.typ))
		}
		return nil
	}
	if t.sum.parts != nil && s.crc != t.sum.parts[i] {
		return t.mismatch(rangeString(s.off, s.end-s.off), fmt.Sprintf("part %d of %d: the bytes read have CRC-32C %s; the store holds %s for the part",
			i+1, len(t.segs), crcBase64(s.crc), crcBase64(t.sum.parts[i])))
	}
	var cat []byte
	for k := range t.segs {
		if !t.segs[k].done {
			return nil
		}
		cat = binary.BigEndian.AppendUint32(cat, t.segs[k].crc)
	}
	if got := safetensors.Checksum(cat); got != t.sum.crc {
		return t.mismatch(rangeString(0, t.segs[len(t.segs)-1].end), fmt.Sprintf("the %d parts read have the composite CRC-32C %s-%d; the store holds %s (%s)",
			len(t.segs), crcBase64(got), len(t.segs), t.sum.value, t.sum.typ))
	}
	return nil
}

func (t *tally) mismatch(rng, msg string) error {
	v := "ETag " + t.etag
	if t.sum.versionID != "" && t.sum.versionID != "null" {
		v += ", version " + t.sum.versionID
	}
	return &Error{Kind: ErrChecksum, Location: t.loc, Range: rng,
		Msg: "the bytes read are not those the store holds for " + v + ": " + msg}
}

// setSeed records the object's first bytes that reads are served from
// memory (the FS's copy of them, which it may trim).
func (t *tally) setSeed(b []byte) {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.seed = b
	t.mu.Unlock()
}

// fail records err (a mismatch found by another read of the object).
func (t *tally) fail(err error) {
	if t == nil {
		return
	}
	t.mu.Lock()
	if t.err == nil {
		t.err = err
	}
	t.mu.Unlock()
}

// verified reports whether every segment was verified, by one pass or
// another (and none failed).
func (t *tally) verified() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return false
	}
	for _, s := range t.segs {
		if !s.done {
			return false
		}
	}
	return true
}

// objectSums is an object's verification state: the store's checksum,
// asked once (a failed request is asked again by the next read).
type objectSums struct {
	done bool
	wait chan struct{} // closed when the request in flight ends
	sum  *storeSum     // nil: nothing to verify
	t    *tally
}

// tallyOf returns o's tally, asking the store for its checksum on first
// use; nil when the store holds no CRC-32C of it (or WithStoreChecksums
// turned verification off).
func (f *FS) tallyOf(ctx context.Context, o *object) (*tally, error) {
	if !f.opts.storeSums {
		return nil, nil
	}
	for {
		o.mu.Lock()
		if o.sums.done {
			t := o.sums.t
			o.mu.Unlock()
			return t, nil
		}
		if ch := o.sums.wait; ch != nil {
			o.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		ch := make(chan struct{})
		o.sums.wait = ch
		o.mu.Unlock()

		sum, err := f.storeSum(ctx, o)
		var t *tally
		if err == nil && sum != nil && o.size > 0 {
			t = newTally(f.be.where(o.name), o.etag, o.size, sum)
		}
		o.mu.Lock()
		o.sums.wait = nil
		var head []byte
		if err == nil {
			o.sums.done, o.sums.sum, o.sums.t = true, sum, t
			// The first bytes handed out so far count.
			head = o.head[:min(int64(len(o.head)), o.headUsed)]
		}
		o.mu.Unlock()
		close(ch)
		if err != nil {
			return nil, err
		}
		t.setSeed(head)
		if err := t.add(0, head); err != nil {
			o.discard()
			return nil, err
		}
		return t, nil
	}
}

// storeSum asks the store for the CRC-32C of o's pinned version.
func (f *FS) storeSum(ctx context.Context, o *object) (*storeSum, error) {
	var sum *storeSum
	err := f.retry(ctx, o.name, "", func(ctx context.Context) error {
		var err error
		sum, err = f.be.checksum(ctx, o.name, o.version, f.opts.concurrency, func() { f.stats.heads.Add(1) })
		return err
	})
	return sum, err
}

// discard drops o's cache entry: its bytes failed their checksum.
func (o *object) discard() {
	if o.cache != nil {
		o.cache.discard()
	}
}

// parseStoreSum parses a CRC-32C as S3 gives it: base64 of the big-endian
// CRC, "-N" after a composite's. ok is false when s is none.
func parseStoreSum(value, typ string) (sum *storeSum, parts int, ok bool) {
	if value == "" {
		return nil, 0, false
	}
	b64, n, multi := strings.Cut(value, "-")
	crc, ok := parseCRCBase64(b64)
	if !ok {
		return nil, 0, false
	}
	if typ == "" {
		typ = "FULL_OBJECT"
		if multi {
			typ = "COMPOSITE"
		}
	}
	s := &storeSum{value: value, typ: typ, crc: crc}
	switch {
	case typ == "FULL_OBJECT" && !multi:
		return s, 0, true
	case typ == "COMPOSITE" && multi:
		var k int
		if _, err := fmt.Sscanf(n, "%d", &k); err != nil || k < 1 || itoa(int64(k)) != n {
			return nil, 0, false
		}
		return s, k, true
	}
	return nil, 0, false
}

// crcBase64 is a CRC-32C as S3 headers carry it: base64 of its big-endian
// bytes.
func crcBase64(c uint32) string {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], c)
	return base64.StdEncoding.EncodeToString(b[:])
}

// parseCRCBase64 parses a CRC-32C in crcBase64's form.
func parseCRCBase64(s string) (uint32, bool) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(b) != 4 {
		return 0, false
	}
	return binary.BigEndian.Uint32(b), true
}

// VerifyObject reads every byte of the file name and compares their
// CRC-32C with the checksum the store holds of the version the FS opened
// (see "Integrity" in the package documentation): true when they match;
// false, reading nothing, when the store holds no CRC-32C of it (or
// WithStoreChecksums(false) turned verification off). A difference is an
// error of kind ErrChecksum (matching safetensors.ErrChecksum) naming the
// object, and later reads of the object through f fail with it too. It
// reads with f's concurrency and chunk size, from its cache when that
// holds the object; ctx cancels it.
func (f *FS) VerifyObject(ctx context.Context, name string) (bool, error) {
	if !fs.ValidPath(name) || name == "." {
		return false, pathErr("verify", name, fs.ErrInvalid)
	}
	o, err := f.object(ctx, name)
	if err != nil {
		return false, pathErr("verify", name, err)
	}
	if f.closed.Load() {
		return false, pathErr("verify", name, fs.ErrClosed)
	}
	shared, err := f.tallyOf(ctx, o)
	if err != nil || shared == nil {
		return false, err
	}
	// A tally of its own: this pass alone decides.
	t := newTally(shared.loc, shared.etag, o.size, shared.sum)
	chunk := f.opts.chunk
	n := (o.size + chunk - 1) / chunk
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(int64(max(f.opts.concurrency, 1)), n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf []byte
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= n {
					return
				}
				off := i * chunk
				if buf == nil {
					buf = make([]byte, min(chunk, o.size))
				}
				b := buf[:min(chunk, o.size-off)]
				if err := f.fetchInto(ctx, o, []source.Span{{Off: off, Dst: b}}, t); err != nil {
					cancel(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		if errors.Is(err, ErrChecksum) {
			shared.fail(err)
		}
		return false, err
	}
	if !t.verified() {
		// Every byte passed, so every segment is done: not reached.
		return false, &Error{Kind: ErrRequest, Location: t.loc, Msg: "the object was not read whole"}
	}
	return true, nil
}
