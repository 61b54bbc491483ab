package ckpt

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/ckpt-go/ckpt/internal/crc32c"
	"github.com/ckpt-go/ckpt/safetensors"
)

// Verification while reading.
//
// A file whose header names checksums (safetensors.ChecksumPrefix: a
// CRC-32C of every tensor's stored bytes) is verified by the one load path
// as its bytes pass: every read a load already does — a piece copied or
// converted from the mapping, a pread into a staging buffer or straight
// into the output, a ranged request of a remote source, a Part.ReadAt of
// an executor's upload — also adds the CRC of the bytes it read to the
// tensor's check. The pieces of a tensor are read in parallel and complete
// in any order: each one's CRC is combined with its neighbours'
// (safetensors.CombineChecksums), so that no byte is read twice, and the
// read that completes the tensor compares the CRC with the header's. A
// mismatch is a *safetensors.ChecksumError (ErrChecksum) naming the file,
// the tensor and its bytes, and the load returns it with nothing loaded.
//
// A conversion from a mapping sums the bytes as it converts them
// (dtype.ConvertSum): the BF16 and F16 → F32 kernels fold the CRC-32C from
// the source registers they load anyway (carry-less multiplication,
// VPCLMULQDQ, on ZMM registers with AVX-512, else YMM), where its work
// hides behind the conversion's stores, and other pairs convert steps of
// 192 KiB (crc32c.Step) and sum each one right after, from the CPU's
// cache. A copy from a mapping sums each step after copying it, from the
// copy; a pread or ranged read sums the bytes it read. With the folding
// kernels, which prefetch their source, a warm BF16 → F32 load of 1 GiB
// takes about 1.03× as long verified as not (1.06× before the prefetch,
// 1.18× when the CRC ran after each converted step, 1.37× with
// hash/crc32); read from the disk, where the reads dominate, 0.98×
// (medians of BenchmarkVerifiedLoad).
//
// Zero-copy views are not read by the load: Load verifies them with a
// pass over the mapping, by all workers in pieces of 4 MiB, before it
// returns them (ViewCheckPass, the default) — chosen over verifying on
// the first touch of the pages, which would need the pages protected and
// a fault handler, would fail a view long after Load returned, and could
// vouch for no byte of a tensor before all of them were read (its CRC
// covers them all). A caller that reads every byte anyway can instead
// have the views handed out unverified and verified by that read, through
// Tensor.Chunks (ViewCheckOnRead, onread.go). The pass maps each piece's
// pages in one call (MADV_POPULATE_READ on Linux: a file read from the
// disk arrives in large reads, and the caller's touches find the pages
// mapped) and sums it; a read-ahead maps the pieces ahead of the workers
// (readahead.go), so that from the disk the reads overlap the sums. The
// plan counts the pass (VerifyPlan.PassBytes). Its cost is one more read
// of the bytes, at the memory's or the disk's speed: a load that then sums
// every byte with all cores takes as long verified as an unverified load
// that reads every byte once before it sums them (BenchmarkVerifiedLoad,
// view-touch: 1.00), 1.2× as long as an unverified load that only sums
// them, in the page cache, and 1.1–1.3× from the disk; verified as the
// sum reads them (ViewCheckOnRead), 1.0–1.1×.
//
// A rank's part of a split tensor (WithRank) reads only some of the
// tensor's bytes, and the CRC covers all of them. With VerifyPresent a
// part that is not the whole tensor is not verified (the plan says so);
// with VerifyAlways the load also reads the rest of the tensor, only to
// verify it (the plan counts those bytes: TensorPlan.VerifyReadBytes),
// from the mapping (its pages dropped again) or with pread through the
// staging buffers; a split of a dimension after the first reads the whole
// tensor again.
//
// PyTorch checkpoints name no checksum per tensor, but torch.save stores
// every storage in a record of its zip archive, whose directory records
// the CRC-32 (IEEE polynomial) of the record's bytes (claimOf). A tensor
// whose bytes are exactly its record's — a contiguous view of its whole
// storage, from its start, in a little-endian archive: most weights — is
// verified as any checksummed tensor, from the bytes the load reads
// (pread: PyTorch files are never mapped), with the CRC-32C kernels'
// folding on the IEEE polynomial's constants (crc32c.UpdateIEEE) and CRCs
// combined with crc32c.CombineIEEE. A rank's part of it follows the rule above. Any
// other view (part of its storage, a strided or transposed view gathered
// from it, a big-endian archive's byte-swapped one) reads bytes the CRC
// does not cover: with VerifyPresent it is loaded unverified and the plan
// says so ("not verified: a view of its storage"); with VerifyAlways the
// load also reads its whole storage record as stored, only to verify it
// (checkRecord; the plan counts those bytes in VerifyReadBytes): once per
// tensor, load and Part, whichever part of the view is loaded. A mismatch
// is a *safetensors.ChecksumError naming the file, the tensor, its
// storage record and the record's bytes. A pread that converts reads,
// sums and converts a step (crc32c.Step) at a time, from the cache its
// read wrote. Verifying costs a warm converting load of 64 MiB 1.17× the
// unverified time, a warm load as stored 1.33× (a pread from the page
// cache at memory-copy speed, and a pass more over its bytes), convert.Run
// 1.01× (BENCHMARKS.md, torch-load).

// checkMode says whether and how a load verifies the stored bytes that a Part
// reads against the checksum its file names.
type checkMode uint8

const (
	// checkOff: the policy is VerifyNever.
	checkOff checkMode = iota
	// checkRead: the part is the whole tensor, verified from the bytes the
	// load reads (or, for a view, the pass over the mapping).
	checkRead
	// checkRest: a rank's part of the tensor, verified by also reading the
	// rest of the tensor (VerifyAlways).
	checkRest
	// checkRecord: a PyTorch view whose bytes are not its storage
	// record's, verified by also reading the whole record (VerifyAlways).
	checkRecord
	// checkView: such a view, not verified (VerifyPresent): the record's
	// CRC-32 covers the storage as stored, not the view's bytes.
	checkView
	// checkPart: a rank's part of the tensor, not verified (VerifyPresent):
	// the checksum covers the whole tensor.
	checkPart
	// checkNoChecksums: the tensor's file names no checksums; read as it is
	// (VerifyPresent).
	checkNoChecksums
	// checkRefused: the tensor's file names no checksums and the policy is
	// VerifyAlways: reading it is ErrChecksum.
	checkRefused
	// checkDamaged: the checksums in the tensor's file header are damaged
	// (see safetensors.Header.Checksums): reading it is ErrChecksum.
	checkDamaged
)

// string returns the check as plans write it: "checksum", "checksum
// (reads the rest of the tensor)", "checksum (reads its storage record)",
// "not verified: rank part", "not verified: a view of its storage", "not
// verified: no checksums", "not verified: never", "refused: no checksums"
// or "refused: damaged checksums".
func (c checkMode) string() string {
	switch c {
	case checkOff:
		return "not verified: never"
	case checkRead:
		return "checksum"
	case checkRest:
		return "checksum (reads the rest of the tensor)"
	case checkRecord:
		return "checksum (reads its storage record)"
	case checkView:
		return "not verified: a view of its storage"
	case checkPart:
		return "not verified: rank part"
	case checkNoChecksums:
		return "not verified: no checksums"
	case checkRefused:
		return "refused: no checksums"
	case checkDamaged:
		return "refused: damaged checksums"
	}
	return fmt.Sprintf("checkMode(%d)", uint8(c))
}

// Verified reports whether the load verifies the bytes (checkRead,
// checkRest, checkRecord).
func (c checkMode) verified() bool { return c == checkRead || c == checkRest || c == checkRecord }

// Refused reports whether reading the bytes is refused with ErrChecksum
// (checkRefused, checkDamaged).
func (c checkMode) refused() bool { return c == checkRefused || c == checkDamaged }

// weaker orders checks by what they leave unproven: an item is as verified
// as its least verified part.
func (c checkMode) weaker(d checkMode) bool {
	rank := func(c checkMode) int {
		return [...]int{checkRead: 0, checkRest: 1, checkRecord: 2, checkPart: 3, checkView: 4, checkNoChecksums: 5, checkOff: 6, checkRefused: 7, checkDamaged: 8}[c]
	}
	return rank(c) > rank(d)
}

// decideCheck is the rule: the policy, whether the file names checksums
// (damaged: they are damaged), whether they cover the storage the tensor
// views rather than its bytes (view: claimOf), and whether the part is
// the whole tensor.
func decideCheck(v Verify, has, damaged, view, whole bool) checkMode {
	switch {
	case v == VerifyNever:
		return checkOff
	case damaged:
		return checkDamaged
	case !has && v == VerifyAlways:
		return checkRefused
	case !has:
		return checkNoChecksums
	case view && v == VerifyAlways:
		return checkRecord
	case view:
		return checkView
	case whole:
		return checkRead
	case v == VerifyAlways:
		return checkRest
	}
	return checkPart
}

// covers reports whether the selection is every byte of a tensor of n
// bytes.
func (s strided) covers(n int64) bool { return s.total() == n && s.first == 0 && s.count <= 1 }

// restBytes is what verifying a part with checkRest reads beyond the part:
// the bytes before and after a contiguous part, the whole tensor again
// for a strided one.
func restBytes(sel strided, n int64) int64 {
	if sel.isContiguous() {
		return n - sel.total()
	}
	return n
}

// restRanges returns the ranges of a tensor of n bytes that verifying a
// part with checkRest reads: see restBytes.
func restRanges(sel strided, n int64) [][2]int64 {
	if !sel.isContiguous() {
		return [][2]int64{{0, n}}
	}
	var out [][2]int64
	if sel.first > 0 {
		out = append(out, [2]int64{0, sel.first})
	}
	if end := sel.first + sel.total(); end < n {
		out = append(out, [2]int64{end, n})
	}
	return out
}

// checkOf decides how a part (the selection sel of st's bytes) is
// verified.
func (m *Model) checkOf(st storedTensor, sel strided) checkMode {
	v := m.cfg.policy.Verify
	if v == VerifyNever {
		return checkOff
	}
	cl, has, err := claimOf(st)
	return decideCheck(v, has, err != nil, cl.view, sel.covers(st.ByteLen()))
}

// refusal is the error of reading st's bytes under a refusing check.
func (m *Model) refusal(st storedTensor, c checkMode) error {
	if c == checkDamaged {
		if _, _, err := st.Checksum(); err != nil {
			return err
		}
	}
	return &safetensors.Error{Kind: safetensors.ErrChecksum, File: filePath(st), Tensor: st.Name(),
		Msg: "the file names no checksums, and the policy verifies always (VerifyAlways refuses what it cannot verify)"}
}

// newCheck returns the check of one load of the part sel of st: nil when
// the part is not verified, an error when reading it is refused.
func (m *Model) newCheck(st storedTensor, sel strided) (*tensorCheck, error) {
	c := m.checkOf(st, sel)
	switch {
	case c.refused():
		return nil, m.refusal(st, c)
	case !c.verified():
		return nil, nil
	}
	ck := newTensorCheck(st, c)
	if ck.size == 0 {
		return nil, ck.of.VerifyChecksum(0) // the CRC of no bytes
	}
	return ck, nil
}

// newTensorCheck returns the check of st's claim, of the kind c.
func newTensorCheck(st storedTensor, c checkMode) *tensorCheck {
	cl, _, _ := claimOf(st)
	return &tensorCheck{of: cl.of, size: cl.size, ieee: cl.ieee, kind: c}
}

// tensorCheck verifies one stored tensor from the bytes a load reads of
// it, in pieces that arrive in any order, from any goroutine: each piece's
// CRC is combined with its neighbours', and the piece that completes the
// tensor compares the whole CRC with the header's.
type tensorCheck struct {
	of   checked // the bytes the claim covers (claimOf): the tensor's, or its storage record's
	size int64
	ieee bool      // a CRC-32 (IEEE), else a CRC-32C
	kind checkMode // checkRead, checkRest or checkRecord

	mu       sync.Mutex
	spans    []span // disjoint, by offset: claimed by a reader, or summed
	covered  int64  // bytes of spans
	verified bool   // a round covered the whole tensor and matched
	rest     bool   // the rest of a part is being read (Part.ReadAt)

	// A Part's checkRecord: all of the record read and verified once.
	recMu   sync.Mutex
	recDone bool
	recErr  error
}

// crcOf returns the CRC of b in the claim's polynomial.
func (c *tensorCheck) crcOf(b []byte) uint32 { return c.update(0, b) }

// update returns the CRC of the bytes whose CRC is crc followed by b, in
// the claim's polynomial.
func (c *tensorCheck) update(crc uint32, b []byte) uint32 {
	if c.ieee {
		return crc32c.UpdateIEEE(crc, b)
	}
	return safetensors.UpdateChecksum(crc, b)
}

// combine returns the CRC of A followed by B (n bytes) in the claim's
// polynomial.
func (c *tensorCheck) combine(a, b uint32, n int64) uint32 {
	if c.ieee {
		return crc32c.CombineIEEE(a, b, n)
	}
	return safetensors.CombineChecksums(a, b, n)
}

// span is a run of a tensor's bytes: [lo, hi), with its CRC once summed.
type span struct {
	lo, hi int64
	crc    uint32
	summed bool
}

// add records the bytes b, read at offset lo of the tensor: their CRC
// joins the check's (bytes already recorded are skipped). The add that
// completes the tensor returns the comparison with the header's checksum:
// a *safetensors.ChecksumError on a mismatch.
func (c *tensorCheck) add(lo int64, b []byte) error { return c.addSummed(lo, b, 0, false) }

// addSummed is add for bytes whose CRC the caller computed as it read
// them (summed): it is used when no part of b was recorded before.
func (c *tensorCheck) addSummed(lo int64, b []byte, crc uint32, summed bool) error {
	hi := lo + int64(len(b))
	if lo < 0 || hi > c.size || lo >= hi {
		return nil
	}
	var buf [4]span
	c.mu.Lock()
	claimed := c.claim(lo, hi, buf[:0])
	c.mu.Unlock()
	if len(claimed) == 0 {
		return nil
	}
	for i := range claimed {
		s := &claimed[i]
		if summed && s.lo == lo && s.hi == hi {
			s.crc = crc
			continue
		}
		s.crc = c.crcOf(b[s.lo-lo : s.hi-lo])
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range claimed {
		c.sum(s)
	}
	return c.complete()
}

// claim inserts the parts of [lo, hi) no span covers as claimed spans and
// appends them to out. c.mu is held.
func (c *tensorCheck) claim(lo, hi int64, out []span) []span {
	i, _ := slices.BinarySearchFunc(c.spans, lo, func(s span, x int64) int {
		switch {
		case s.hi <= x:
			return -1
		case s.lo > x:
			return 1
		}
		return 0
	})
	// c.spans[i] is the first span ending after lo.
	at := lo
	first := len(out)
	for at < hi {
		if i < len(c.spans) && c.spans[i].lo <= at {
			at = c.spans[i].hi
			i++
			continue
		}
		end := hi
		if i < len(c.spans) {
			end = min(end, c.spans[i].lo)
		}
		out = append(out, span{lo: at, hi: end})
		at = end
	}
	for _, s := range out[first:] {
		j, _ := slices.BinarySearchFunc(c.spans, s.lo, func(t span, x int64) int { return cmpInt(t.lo, x) })
		c.spans = slices.Insert(c.spans, j, s)
		c.covered += s.hi - s.lo
	}
	return out
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// sum records the CRC of the claimed span s and merges it with summed
// neighbours. c.mu is held.
func (c *tensorCheck) sum(s span) {
	i, ok := slices.BinarySearchFunc(c.spans, s.lo, func(t span, x int64) int { return cmpInt(t.lo, x) })
	if !ok || c.spans[i].hi != s.hi {
		return // a new round began (Part.ReadAt read the tensor again)
	}
	c.spans[i].crc, c.spans[i].summed = s.crc, true
	if i+1 < len(c.spans) && c.spans[i+1].summed && c.spans[i+1].lo == s.hi {
		n := c.spans[i+1]
		c.spans[i].crc = c.combine(c.spans[i].crc, n.crc, n.hi-n.lo)
		c.spans[i].hi = n.hi
		c.spans = slices.Delete(c.spans, i+1, i+2)
	}
	if i > 0 && c.spans[i-1].summed && c.spans[i-1].hi == c.spans[i].lo {
		p, n := &c.spans[i-1], c.spans[i]
		p.crc = c.combine(p.crc, n.crc, n.hi-n.lo)
		p.hi = n.hi
		c.spans = slices.Delete(c.spans, i, i+1)
	}
}

// complete compares the CRC once one summed span covers the tensor, and
// starts a new round. c.mu is held.
func (c *tensorCheck) complete() error {
	if len(c.spans) != 1 || !c.spans[0].summed || c.spans[0].lo != 0 || c.spans[0].hi != c.size {
		return nil
	}
	crc := c.spans[0].crc
	c.spans, c.covered, c.rest = c.spans[:0], 0, false
	if err := c.of.VerifyChecksum(crc); err != nil {
		return err
	}
	c.verified = true
	return nil
}

// startRest reports, once per round, that the spans cover a part of
// partSize bytes: its reader then reads the rest (Part.ReadAt).
func (c *tensorCheck) startRest(partSize int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rest || c.covered < partSize || c.covered == 0 {
		return false
	}
	c.rest = true
	return true
}

// readRanges reads the ranges of the tensor (through its file's ReadAt:
// the mapping, pread, a remote source) in pieces of at most buf's size,
// and adds them.
func (c *tensorCheck) readRanges(ctx context.Context, ranges [][2]int64, buf []byte) error {
	for _, r := range ranges {
		for at := r[0]; at < r[1]; {
			if err := ctx.Err(); err != nil {
				return err
			}
			b := buf[:min(int64(len(buf)), r[1]-at)]
			if _, err := c.of.ReadAt(b, at); err != nil {
				return err
			}
			if err := c.add(at, b); err != nil {
				return err
			}
			at += int64(len(b))
		}
	}
	return nil
}

// readWhole reads all of the check's bytes and verifies them, once: a
// Part's checkRecord, before its first ReadAt returns any byte. Other
// calls wait for the first and return its result.
func (c *tensorCheck) readWhole() error {
	c.recMu.Lock()
	defer c.recMu.Unlock()
	if !c.recDone {
		c.recErr = c.readRanges(context.Background(), [][2]int64{{0, c.size}}, make([]byte, min(c.size, 1<<20)))
		c.recDone = true
	}
	return c.recErr
}

// finish makes sure the check completed: the load's reads cover every
// byte of the tensor, so that a check that did not complete is a bug of
// the loader, reported rather than passed over.
func (c *tensorCheck) finish() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.verified {
		return nil
	}
	return &Error{Kind: ErrRead, Tensor: c.of.Name(),
		Msg: fmt.Sprintf("internal error: the load read %d of the tensor's %d bytes, so its checksum was not compared", c.covered, c.size)}
}

// finishIn is finish for a check of p's part (nil: none), its error
// naming p's tensor.
func (c *tensorCheck) finishIn(p *piece) error {
	if c == nil {
		return nil
	}
	if err := c.finish(); err != nil {
		return readErr(err, p.c.name, p.t.Name)
	}
	return nil
}

// planVerify computes what verifying e's part costs, for the budget
// before any file is opened: from the checksum keys in the metadata Open
// read (a file that names them names one for every tensor, or a load
// refuses it), the policy, and which stored tensors the part reads whole.
// Plan and Load decide from the files themselves (checkOf); the rule is
// decideCheck either way.
func (m *Model) planVerify(c *modelComponent, e *entry) {
	e.vsum, e.vextra = false, 0
	v := m.cfg.policy.Verify
	if v == VerifyNever || e.sl == nil {
		return
	}
	part := func(name string, at int32, size int64, sel strided) {
		has := false
		if at >= 0 {
			has = c.ck.checksummedAt(int(at)) // no lookup by name
		} else {
			has = c.ck.checksummed(name)
		}
		rec, view := c.ck.viewed(name)
		switch decideCheck(v, has, false, view, sel.covers(size)) {
		case checkRead:
			e.vsum = true
		case checkRest:
			e.vsum = true
			e.vextra += restBytes(sel, size)
		case checkRecord:
			e.vsum = true
			e.vextra += rec
		}
	}
	if e.q == nil {
		part(e.name, e.at, e.sl.stored, e.sl.data)
		return
	}
	n, _ := e.q.Data.DType.ByteLen(numElements(e.q.Data.Shape))
	part(e.q.Data.Name, e.at, n, e.sl.data)
	for i, s := range e.q.Scales {
		n, _ := s.DType.ByteLen(numElements(s.Shape))
		part(s.Name, -1, n, e.sl.q.scales[i].sel)
	}
}

// checkVerify refuses, before anything is allocated, a load of entries
// that reads tensors whose checks refuse them.
func (m *Model) checkVerify(c *modelComponent, e *entry) error {
	if m.cfg.policy.Verify == VerifyNever {
		return nil
	}
	st, scales, err := c.stored(e)
	if err != nil {
		return inComponent(err, c.name)
	}
	if ck := m.checkOf(st, e.sl.data); ck.refused() {
		return m.refusal(st, ck)
	}
	for i, sc := range scales {
		if ck := m.checkOf(sc, e.sl.q.scales[i].sel); ck.refused() {
			return m.refusal(sc, ck)
		}
	}
	return nil
}
