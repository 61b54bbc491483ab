package torch

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/klauspost/compress/zip"

	"github.com/ckpt-go/ckpt/internal/crc32c"
	"github.com/ckpt-go/ckpt/safetensors"
)

// Verifying a checkpoint's data.
//
// A PyTorch checkpoint has no per-tensor checksums, but its zip archive
// has one per record: the directory at the end of the archive gives each
// record's CRC-32 (IEEE) and sizes, and so does each record's local header
// in front of its bytes. Open reads and checks the directory, data.pkl
// (whose CRC the zip reader checks) and every tensor's bounds, but not the
// data of the storage records: VerifyRecords reads them and compares, and
// the loader (package ckpt) compares each tensor's as it reads it
// (Tensor.RecordCRC).

// defaultVerifyRead is the buffer VerifyRecords reads a record through
// when VerifyOptions.ReadSize is not set.
const defaultVerifyRead = 1 << 20

// localHeaderLen is the fixed part of a zip local file header.
const localHeaderLen = 30

// VerifyOptions configures VerifyRecords.
type VerifyOptions struct {
	// Workers is the number of records read at once (default 1). Each
	// reads one record at a time, in order, through its own buffer.
	Workers int
	// ReadSize is the bytes one worker reads at once (default 1 MiB):
	// memory use is about Workers times ReadSize.
	ReadSize int
	// Summed, when set, gives the CRC-32 (IEEE) of the bytes of a
	// stored record (StoredRecords) that another pass over its file
	// read: ok is true when that pass summed every byte of it.
	// VerifyRecords checks such a record from the CRC instead of reading
	// its bytes again (it still reads its local header).
	Summed func(file, record string) (crc uint32, ok bool)
}

// StoredRecord is a record of a checkpoint's archive stored as is (not
// compressed, as torch.save writes every record): its bytes in the file.
type StoredRecord struct {
	File       string // the archive (a shard's path, or NewReader's name)
	Name       string // e.g. "archive/data/3"
	Begin, End int64  // the record's bytes in File (End excluded)
}

// StoredRecords lists the stored records of the checkpoint's archives
// whose bytes lie within their files, in each file's order: the records
// whose CRC-32 a pass that reads the files in order for another purpose
// (hashing a whole file) can take on the way and hand to VerifyRecords
// (VerifyOptions.Summed), so that their bytes are read once. A record
// whose local header cannot be found, or that is encrypted, compressed or
// runs past the end of its file, is not listed: VerifyRecords reads and
// reports it as before. The local headers of records other than the
// storages' are read here (a few hundred bytes each).
func (c *Checkpoint) StoredRecords() []StoredRecord {
	var out []StoredRecord
	for _, sf := range c.files {
		first := len(out)
		for _, f := range sf.ar.files {
			if f.Flags&1 != 0 || f.Method != zip.Store || f.UncompressedSize64 != f.CompressedSize64 {
				continue
			}
			off, err := sf.ar.dataOffset(f)
			if err != nil || !sf.ar.within(off, f.CompressedSize64) {
				continue
			}
			out = append(out, StoredRecord{File: sf.path, Name: f.Name, Begin: off, End: off + int64(f.CompressedSize64)})
		}
		slices.SortFunc(out[first:], func(a, b StoredRecord) int { return cmp.Compare(a.Begin, b.Begin) })
	}
	return out
}

// VerifyStats says what VerifyRecords read.
type VerifyStats struct {
	// Records is the number of records whose bytes were read and
	// compared with their CRC-32, and Bytes their bytes.
	Records int
	Bytes   int64
	// Tensors is the number of tensors (Len, aliases not counted) whose
	// storage records were read and matched their CRC-32.
	Tensors int
}

// RecordError is a record of a checkpoint's archive whose bytes disagree
// with what the archive records of them: their CRC-32 differs from the
// directory's, the record's local header gives another CRC-32 than the
// directory, or the bytes cannot be read (Msg says which). It names the
// file, the record, the tensors that view the record's storage and the
// record's bytes in the file. errors.Is(err, safetensors.ErrChecksum)
// matches it: it is the condition a checksum mismatch of a safetensors
// file is.
type RecordError struct {
	File   string // the archive (a shard's path for a sharded checkpoint)
	Record string // the record's name, e.g. "archive/data/3"
	// Tensors are the names (aliases included) of the tensors that view
	// the record's storage, sorted; empty for a record no tensor views
	// (data.pkl, version, a storage left unused).
	Tensors []string
	// Begin and End are the record's stored bytes in File (offsets,
	// End excluded).
	Begin, End int64
	// Want is the CRC-32 the directory records, Got the CRC-32 of the
	// bytes read (equal when only the local header disagrees).
	Want, Got uint32
	// Msg says what is wrong, for people.
	Msg string
	// Err is the error that kept the bytes from being read, if any (nil
	// for a mismatch).
	Err error
}

// Error formats the error as
// `torch: FILE: RECORD: bytes B to E (tensors "A", "B"): MESSAGE`.
func (e *RecordError) Error() string {
	var b strings.Builder
	b.WriteString("torch: ")
	if e.File != "" {
		b.WriteString(e.File + ": ")
	}
	fmt.Fprintf(&b, "%s: bytes %d to %d", e.Record, e.Begin, e.End)
	if len(e.Tensors) > 0 {
		b.WriteString(" (" + plural(len(e.Tensors), "tensor", "tensors") + " ")
		for i, t := range e.Tensors {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(strconv.Quote(t))
		}
		b.WriteString(")")
	}
	b.WriteString(": " + e.Msg)
	return b.String()
}

// Is reports whether target is safetensors.ErrChecksum.
func (e *RecordError) Is(target error) bool { return target == safetensors.ErrChecksum }

// Unwrap returns the error that kept the bytes from being read, if any.
func (e *RecordError) Unwrap() error { return e.Err }

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// VerifyRecords reads every record of the checkpoint's archives once (for
// a sharded checkpoint, of every shard) and compares the CRC-32 of its
// bytes with the one the zip directory records for it, and that one with
// the CRC-32 the record's local header gives. It calls fn with each
// record that disagrees (from one goroutine at a time, in no particular
// order) and returns what it read. Tensors that view a damaged storage are
// named in the RecordError; a tensor is counted in VerifyStats.Tensors
// when its storage's record matched.
//
// Memory is bounded by opts (Workers buffers of ReadSize bytes), never by
// a size the archive gives: a record whose bytes would run past the end
// of its file is reported without being read. The error is for what
// prevented the check: a canceled ctx, a closed checkpoint.
func (c *Checkpoint) VerifyRecords(ctx context.Context, opts VerifyOptions, fn func(*RecordError)) (VerifyStats, error) {
	var st VerifyStats
	if c == nil {
		return st, &Error{Kind: ErrInvalidArgument, Msg: "nil checkpoint"}
	}
	if c.closed.Load() {
		return st, &Error{Kind: ErrClosed, File: c.path, Msg: "the checkpoint is closed"}
	}
	workers, readSize := max(opts.Workers, 1), opts.ReadSize
	if readSize <= 0 {
		readSize = defaultVerifyRead
	}

	type recKey struct {
		sf     *shardFile
		record string
	}
	kept := make(map[recKey]int)
	for _, t := range c.tensors {
		kept[recKey{t.sf, t.rec.Name}]++
	}

	type job struct {
		sf *shardFile
		f  *zip.File
	}
	var jobs []job
	for _, sf := range c.files {
		for _, f := range sf.ar.files { // the directory's order: the order torch.save wrote them, for reads in order
			jobs = append(jobs, job{sf, f})
		}
	}

	var mu sync.Mutex
	var viewers map[recKey][]string // the tensors (every name, aliases too) that view each record; made for the first problem
	report := func(e *RecordError, ok bool, n int64, k recKey) {
		mu.Lock()
		defer mu.Unlock()
		if e != nil {
			if viewers == nil {
				viewers = make(map[recKey][]string)
				for name, t := range c.byName {
					tk := recKey{t.sf, t.rec.Name}
					viewers[tk] = append(viewers[tk], name)
				}
			}
			e.Tensors = slices.Clone(viewers[k])
			slices.Sort(e.Tensors)
			fn(e)
		}
		if n >= 0 {
			st.Records++
			st.Bytes += n
		}
		if ok {
			st.Tensors += kept[k]
		}
	}
	ch := make(chan job)
	var wg sync.WaitGroup
	for range min(workers, max(len(jobs), 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf []byte
			for j := range ch {
				if ctx.Err() != nil || c.closed.Load() {
					continue
				}
				if buf == nil {
					buf = make([]byte, readSize)
				}
				e, n := verifyRecord(ctx, j.sf, j.f, buf, opts.Summed)
				if ctx.Err() != nil {
					continue
				}
				report(e, e == nil, n, recKey{j.sf, j.f.Name})
			}
		}()
	}
	for _, j := range jobs {
		if ctx.Err() != nil {
			break
		}
		ch <- j
	}
	close(ch)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return st, err
	}
	if c.closed.Load() {
		return st, &Error{Kind: ErrClosed, File: c.path, Msg: "the checkpoint was closed while it was verified"}
	}
	return st, nil
}

// verifyRecord checks one record of sf's archive through buf: it returns
// the problem, if any, and the bytes checked (-1 when it was not read).
// A stored record whose CRC summed gives (VerifyOptions.Summed) is not
// read again.
func verifyRecord(ctx context.Context, sf *shardFile, f *zip.File, buf []byte, summed func(file, record string) (uint32, bool)) (*RecordError, int64) {
	a := sf.ar
	fail := func(begin, end int64, got uint32, msg string) *RecordError {
		return &RecordError{File: sf.path, Record: f.Name, Begin: begin, End: end, Want: f.CRC32, Got: got, Msg: msg}
	}
	if f.Flags&1 != 0 {
		return fail(0, 0, 0, "an encrypted record: its bytes cannot be verified"), -1
	}
	off, err := a.dataOffset(f)
	if err != nil {
		return fail(0, 0, 0, "unreadable local header: "+err.Error()), -1
	}
	n := int64(f.CompressedSize64)
	if !a.within(off, f.CompressedSize64) {
		return fail(off, a.size, 0, fmt.Sprintf("truncated: the directory gives the record %d bytes at offset %d, past the end of the file (%d bytes)",
			f.CompressedSize64, off, a.size)), -1
	}
	// The local header is read first, through buf (which the bytes then
	// reuse), and compared last.
	lh, lhOK, lhErr := localHeader(a.r, f, off, buf)
	var got uint32
	if f.Method == zip.Store {
		if f.UncompressedSize64 != f.CompressedSize64 {
			return fail(off, off+n, 0, fmt.Sprintf("a stored record of %d bytes whose directory says it holds %d", n, f.UncompressedSize64)), -1
		}
		done := int64(0)
		if summed != nil {
			if crc, ok := summed(sf.path, f.Name); ok {
				got, done = crc, n
			}
		}
		for pos := done; pos < n; {
			if err := ctx.Err(); err != nil {
				return nil, -1
			}
			m := min(int64(len(buf)), n-pos)
			k, err := a.r.ReadAt(buf[:m], off+pos)
			if int64(k) != m {
				if err == nil || err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				e := fail(off, off+n, 0, fmt.Sprintf("reading byte %d: %v", off+pos+int64(k), err))
				e.Err = err
				return e, -1
			}
			got = crc32c.UpdateIEEE(got, buf[:m])
			pos += m
		}
	} else {
		// A compressed record (not one torch.save writes): its CRC is of
		// the decompressed bytes, streamed through buf.
		rc, err := f.Open()
		if err != nil {
			return fail(off, off+n, 0, "cannot open the record: "+err.Error()), -1
		}
		h := crc32.NewIEEE()
		_, err = io.CopyBuffer(h, io.LimitReader(rc, int64(f.UncompressedSize64)), buf)
		rc.Close()
		got = h.Sum32()
		if err != nil && err != zip.ErrChecksum {
			e := fail(off, off+n, got, "cannot read the record: "+err.Error())
			e.Err = err
			return e, -1
		}
	}
	if got != f.CRC32 {
		return fail(off, off+n, got, fmt.Sprintf("CRC-32 mismatch: the zip directory says %08x, the %d bytes have %08x", f.CRC32, n, got)), n
	}
	switch {
	case lhErr != nil:
		return fail(off, off+n, got, "unreadable local header: "+lhErr.Error()), n
	case !lhOK:
	case lh.crc != f.CRC32:
		return fail(off, off+n, got, fmt.Sprintf("CRC-32 mismatch: the record's local header says %08x, the zip directory and the bytes %08x", lh.crc, f.CRC32)), n
	case lh.csize != 0xffffffff && uint64(lh.csize) != f.CompressedSize64 || lh.usize != 0xffffffff && uint64(lh.usize) != f.UncompressedSize64:
		return fail(off, off+n, got, fmt.Sprintf("size mismatch: the record's local header says %d bytes (%d uncompressed), the zip directory %d (%d)",
			lh.csize, lh.usize, f.CompressedSize64, f.UncompressedSize64)), n
	}
	return nil, n
}

// local is what a record's local header says of its bytes.
type local struct{ crc, csize, usize uint32 }

// localHeader returns the CRC-32 and sizes the local header of f, whose
// data start at off, gives: ok is false when the header defers them to a
// data descriptor (sizes of 0xffffffff are in its zip64 extra field).
// The zip reader does not expose where the header starts, so it is found
// from its end: the header ends at off with f's name and an extra field
// of at most 65535 bytes. It reads at most a fixed window (a few hundred
// bytes first, as torch.save pads the extra field to 64 bytes), into buf
// where the window fits.
func localHeader(r io.ReaderAt, f *zip.File, off int64, buf []byte) (lh local, ok bool, err error) {
	if f.Flags&0x8 != 0 {
		return lh, false, nil
	}
	fixed := int64(localHeaderLen + len(f.Name))
	for _, maxExtra := range []int64{512, 1<<16 - 1} {
		w := min(off, fixed+maxExtra)
		if w < fixed {
			return lh, false, fmt.Errorf("the record's data start at byte %d, before room for its local header", off)
		}
		if int64(len(buf)) < w {
			buf = make([]byte, w) // at most 30 + 65535 + 65535 bytes: bounded by the format
		}
		buf := buf[:w]
		if k, err := r.ReadAt(buf, off-w); int64(k) != w {
			return lh, false, err
		}
		for x := int64(0); x <= w-fixed; x++ {
			h := buf[w-fixed-x:]
			if binary.LittleEndian.Uint32(h) != 0x04034b50 ||
				int(binary.LittleEndian.Uint16(h[26:])) != len(f.Name) ||
				int64(binary.LittleEndian.Uint16(h[28:])) != x ||
				!bytes.Equal(h[localHeaderLen:fixed], []byte(f.Name)) {
				continue
			}
			le := binary.LittleEndian
			return local{crc: le.Uint32(h[14:]), csize: le.Uint32(h[18:]), usize: le.Uint32(h[22:])}, true, nil
		}
		if w < fixed+maxExtra {
			break // the window reached the start of the file
		}
	}
	return lh, false, fmt.Errorf("no local header named %q ends at byte %d", f.Name, off)
}

// Index is a parsed PyTorch shard index (pytorch_model.bin.index.json),
// for a caller that checks an index against its shards itself (package
// integrity) rather than opening the set.
type Index struct {
	// Names are the tensors of the weight map, in the index's order.
	Names []string
	// WeightMap maps each tensor to the shard that holds it: a bare file
	// name in the index's folder.
	WeightMap map[string]string
	// Shards are the shard names, in the order the weight map first
	// names them.
	Shards []string
}

// ParseIndex parses a PyTorch shard index by the rules Open applies: a
// JSON object of at most MaxIndexSize bytes whose "weight_map" is a
// non-empty object of tensor names to bare shard file names (a path is an
// ErrInsecurePath error), naming no tensor twice; other keys are ignored.
func ParseIndex(data []byte) (*Index, error) {
	if len(data) > MaxIndexSize {
		return nil, &Error{Kind: ErrInvalidFormat, Msg: fmt.Sprintf("invalid index: %d bytes, more than the %d an index may have", len(data), MaxIndexSize)}
	}
	ix, err := parseIndex(data)
	if err != nil {
		return nil, err
	}
	return &Index{Names: ix.names, WeightMap: ix.weightMap, Shards: ix.shards}, nil
}
