package safetensors

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/ckpt-go/ckpt/internal/crc32c"
)

// Checksums.
//
// The safetensors format has no checksum. ckpt's writers record one per
// tensor in the header's __metadata__, where every other reader ignores it:
// the key ChecksumPrefix+NAME holds the CRC-32C (Castagnoli polynomial) of
// the tensor's stored bytes, data_offsets[0] to data_offsets[1] of the data
// section, as 8 lowercase hexadecimal digits ("ckpt.crc32c.lm_head.weight":
// "1c291ca3").
//
// Why CRC-32C: it finds every burst error up to 32 bits and every error of
// up to 5 flipped bits in a tensor of up to about 2^27 bytes (and all odd
// numbers of flips in any length) — a flipped bit or a truncated copy,
// which is what storage and transfers do to files; it runs at memory
// speed (internal/crc32c: carry-less multiplication on amd64, hash/crc32's
// CRC32 instructions on arm64), so that verifying costs a few percent of
// a load; it is the checksum S3 computes for multipart parts; and two
// CRCs combine (CombineChecksums), so that a tensor read in pieces, in
// parallel, is verified without a second pass. It is not a defence against an attacker
// who rewrites a file on purpose: that is a signature's job.
//
// The header itself is covered too: HeaderChecksumKey holds the CRC-32C
// of the rest of the header in a canonical form (HeaderChecksum), so that
// a flipped bit in a dtype, a shape, an offset or a metadata value, which
// the tensors' checksums do not cover, is found as well.
//
// A header either names a checksum for every tensor and itself or for
// none; a key that names no tensor of the file, a tensor without one, a
// malformed value or a header that differs from its checksum is a damaged
// header, reported by Checksums.
const ChecksumPrefix = "ckpt.crc32c."

// HeaderChecksumKey is the __metadata__ key of the header's own checksum.
const HeaderChecksumKey = "ckpt.header.crc32c"

// Checksum returns the CRC-32C of b.
func Checksum(b []byte) uint32 { return crc32c.Checksum(b) }

// UpdateChecksum returns the CRC-32C of the bytes whose checksum is crc
// followed by b.
func UpdateChecksum(crc uint32, b []byte) uint32 { return crc32c.Update(crc, b) }

// CombineChecksums returns the CRC-32C of a sequence A followed by B, given
// crcA = Checksum(A), crcB = Checksum(B) and n = len(B), in O(log n) time:
// pieces of a tensor checked in parallel give the tensor's checksum.
func CombineChecksums(crcA, crcB uint32, n int64) uint32 { return crc32c.Combine(crcA, crcB, n) }

// FormatChecksum returns c as a checksum's metadata value: 8 lowercase
// hexadecimal digits.
func FormatChecksum(c uint32) string {
	const hex = "0123456789abcdef"
	var b [8]byte
	for i := 7; i >= 0; i-- {
		b[i] = hex[c&15]
		c >>= 4
	}
	return string(b[:])
}

// parseChecksum parses a checksum's metadata value.
func parseChecksum(s string) (uint32, bool) {
	if len(s) != 8 || strings.ToLower(s) != s {
		return 0, false
	}
	v, err := strconv.ParseUint(s, 16, 32)
	return uint32(v), err == nil
}

// IsChecksumKey reports whether the metadata key k holds a checksum: a
// tensor's or the header's.
func IsChecksumKey(k string) bool {
	return strings.HasPrefix(k, ChecksumPrefix) || k == HeaderChecksumKey
}

// HeaderChecksum returns the CRC-32C of a header's canonical form: its
// metadata entries other than checksums, sorted by key, then its tensors
// in file order with dtype, shape and data offsets, every string
// length-prefixed ("m" LEN ":" KEY LEN ":" VALUE ... "t" LEN ":" NAME
// DTYPE ":" DIM "," DIM ... ";" BEGIN "," END ";" ...). tensors must be in
// file (offset) order.
func HeaderChecksum(metadata map[string]string, tensors []TensorInfo) uint32 {
	keys := make([]string, 0, len(metadata))
	for k := range metadata {
		if !IsChecksumKey(k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var b []byte
	str := func(s string) {
		b = strconv.AppendInt(b, int64(len(s)), 10)
		b = append(b, ':')
		b = append(b, s...)
	}
	var crc uint32
	flush := func() {
		if len(b) > 4096 {
			crc = UpdateChecksum(crc, b)
			b = b[:0]
		}
	}
	for _, k := range keys {
		b = append(b, 'm')
		str(k)
		str(metadata[k])
		flush()
	}
	for _, t := range tensors {
		b = append(b, 't')
		str(t.Name)
		b = append(b, t.DType.String()...)
		b = append(b, ':')
		for i, d := range t.Shape {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, d, 10)
		}
		b = append(b, ';')
		b = strconv.AppendInt(b, t.Begin, 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, t.End, 10)
		b = append(b, ';')
		flush()
	}
	return UpdateChecksum(crc, b)
}

// Checksums returns the checksum of every tensor of the header, by name:
// nil, nil when the header names none. A header that names some but not
// all, a key naming a tensor the file does not hold, or a value that is not
// 8 lowercase hex digits is ErrChecksum naming the keys or tensors
// concerned: a damaged header (a flipped bit in a tensor's name or in a
// value), or metadata copied from another file.
func (h *Header) Checksums() (map[string]uint32, error) {
	var sums map[string]uint32
	var bad []string
	hv, hasHeader := h.Metadata[HeaderChecksumKey]
	for k, v := range h.Metadata {
		name, ok := strings.CutPrefix(k, ChecksumPrefix)
		if !ok {
			continue
		}
		if sums == nil {
			sums = make(map[string]uint32, len(h.Tensors))
		}
		c, ok := parseChecksum(v)
		if !ok {
			bad = append(bad, fmt.Sprintf("%s: %q is not 8 lowercase hex digits", k, v))
			continue
		}
		if _, ok := h.indexOf(name); !ok {
			bad = append(bad, fmt.Sprintf("%s names no tensor of the file", k))
			continue
		}
		sums[name] = c
	}
	if sums == nil && bad == nil && !hasHeader {
		return nil, nil
	}
	if !hasHeader {
		bad = append(bad, "no "+HeaderChecksumKey)
	} else if c, ok := parseChecksum(hv); !ok {
		bad = append(bad, fmt.Sprintf("%s: %q is not 8 lowercase hex digits", HeaderChecksumKey, hv))
	} else if got := HeaderChecksum(h.Metadata, h.Tensors); got != c {
		bad = append(bad, fmt.Sprintf("the header differs from its checksum (%s says %s, the header has %s): a dtype, shape, offset or metadata value changed after it was written", HeaderChecksumKey, hv, FormatChecksum(got)))
	}
	var missing []string
	for _, t := range h.Tensors {
		if _, ok := sums[t.Name]; !ok && !slices.ContainsFunc(bad, func(b string) bool { return strings.HasPrefix(b, ChecksumPrefix+t.Name+":") }) {
			missing = append(missing, t.Name)
		}
	}
	if len(missing) > 0 {
		bad = append(bad, fmt.Sprintf("no checksum for %s", listNames(missing, 5)))
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		return nil, &Error{Kind: ErrChecksum, Tensor: MetadataKey, Msg: "damaged checksums in the header: " + strings.Join(bad, "; ")}
	}
	return sums, nil
}

// listNames quotes up to max names and counts the rest.
func listNames(names []string, max int) string {
	var b strings.Builder
	for i, n := range names {
		if i == max {
			fmt.Fprintf(&b, " and %d more", len(names)-max)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Quote(n))
	}
	return b.String()
}

// ChecksumError is a tensor whose stored bytes do not match the checksum
// its file's header names: a flipped bit, a truncated or mixed-up copy.
// It matches ErrChecksum. The loader (package ckpt) also reports a
// PyTorch tensor whose storage record's bytes differ from the CRC-32 its
// archive's zip directory records for them with it (Record set).
type ChecksumError struct {
	File   string // the file, as opened ("" when not opened from a path)
	Tensor string
	// Begin and End are the tensor's stored bytes: file offsets (for a
	// PyTorch tensor, its storage record's bytes).
	Begin, End int64
	Want, Got  uint32
	// Record is, for a PyTorch checkpoint, the zip record whose bytes were
	// checked ("archive/data/3"): Want and Got are then CRC-32s (IEEE
	// polynomial), not CRC-32Cs. Empty for a safetensors file.
	Record string
}

// Error names the file, the tensor, its bytes and both checksums.
func (e *ChecksumError) Error() string {
	file := ""
	if e.File != "" {
		file = e.File + ": "
	}
	if e.Record != "" {
		return fmt.Sprintf("torch: %stensor %q: checksum mismatch in its storage record %s, bytes %d to %d: the zip directory says crc32 %s, the data have %s (the file was damaged or changed after it was written)",
			file, e.Tensor, e.Record, e.Begin, e.End, FormatChecksum(e.Want), FormatChecksum(e.Got))
	}
	return fmt.Sprintf("safetensors: %stensor %q: checksum mismatch in bytes %d to %d: the header says crc32c %s, the data have %s (the file was damaged or changed after it was written)",
		file, e.Tensor, e.Begin, e.End, FormatChecksum(e.Want), FormatChecksum(e.Got))
}

// Is reports whether target is ErrChecksum.
func (e *ChecksumError) Is(target error) bool { return target == ErrChecksum }

// VerifyChecksum checks got, the CRC-32C of the tensor's stored bytes,
// against the checksum its file's header names: nil when they agree or
// the header names none, a *ChecksumError when they differ, ErrChecksum
// when the header's checksums are damaged.
func (t *Tensor) VerifyChecksum(got uint32) error {
	want, ok, err := t.Checksum()
	if err != nil || !ok {
		return err
	}
	if want != got {
		off := t.Offset()
		return &ChecksumError{File: t.f.path, Tensor: t.info.Name, Begin: off, End: off + t.info.ByteLen(), Want: want, Got: got}
	}
	return nil
}

// Checksum returns the checksum the header names for the tensor; ok is
// false when the header names none. A damaged set of checksums
// (Header.Checksums) is ErrChecksum.
func (t *Tensor) Checksum() (sum uint32, ok bool, err error) {
	sums, err := t.f.checksums()
	if err != nil {
		if e, isE := err.(*Error); isE {
			e2 := *e
			e2.File = t.f.path
			return 0, false, &e2
		}
		return 0, false, err
	}
	sum, ok = sums[t.info.Name]
	return sum, ok, nil
}

// Verify reads the tensor's stored bytes (from the mapping, or with pread
// in pieces through a reused buffer) and checks them against its
// checksum: nil when they agree or the header names none.
func (t *Tensor) Verify() error {
	if _, ok, err := t.Checksum(); err != nil || !ok {
		return err
	}
	n := t.ByteLen()
	var crc uint32
	const piece = 1 << 20
	buf := make([]byte, min(n, piece))
	for off := int64(0); off < n; off += piece {
		b := buf[:min(piece, n-off)]
		if _, err := t.ReadAt(b, off); err != nil {
			return err
		}
		crc = UpdateChecksum(crc, b)
	}
	return t.VerifyChecksum(crc)
}
