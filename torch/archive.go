package torch

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/klauspost/compress/zip"
)

// legacyMagic is the LONG1 opcode and value of the magic number
// (0x1950a86a20f9469cfc6c) that the pre-1.6 format pickles first.
var legacyMagic = []byte{0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19}

// legacyMsg is the advice given for the pre-1.6 format.
const legacyMsg = "legacy format: the pre-1.6 PyTorch format; re-save with torch.save(..., _use_new_zipfile_serialization=True)"

// maxSmallRecord bounds the small text records read whole (byteorder).
const maxSmallRecord = 64

// archive is an opened PyTorch zip archive: its records by name and where
// data.pkl is.
type archive struct {
	r       io.ReaderAt
	local   bool // r is a file of the operating system: a read is a system call, not a request
	size    int64
	records map[string]*zip.File
	files   []*zip.File      // the records in the zip directory's order
	dataOff map[string]int64 // where the storage records' bytes start, found at Open (storageRecord)
	prefix  string           // the folder of data.pkl, with its slash ("archive/"), or ""
	pkl     string           // the data.pkl record's name
	big     bool             // the byteorder record says "big"
}

// openArchive reads the zip directory of a PyTorch checkpoint, finds
// data.pkl and reads the byteorder record. It refuses the legacy formats.
func openArchive(r io.ReaderAt, size int64) (*archive, error) {
	head := make([]byte, min(size, 512))
	if n, err := r.ReadAt(head, 0); err != nil && !(errors.Is(err, io.EOF) && n == len(head)) {
		return nil, &Error{Kind: ErrIO, Msg: "read", Err: err}
	}
	if err := checkLegacy(head); err != nil {
		return nil, err
	}
	zr, err := zip.NewReader(r, size)
	if err != nil && !errors.Is(err, zip.ErrInsecurePath) { // names are only looked up, never used as paths
		return nil, &Error{Kind: ErrInvalidFormat, Msg: "invalid archive: not a readable zip archive", Err: err}
	}
	_, local := r.(*os.File)
	a := &archive{r: r, local: local, size: size, records: make(map[string]*zip.File, len(zr.File)), dataOff: make(map[string]int64)}
	var pkls []string
	depth := -1
	for _, f := range zr.File {
		if _, dup := a.records[f.Name]; dup {
			return nil, &Error{Kind: ErrInvalidFormat, Record: f.Name, Msg: "invalid archive: the record appears twice"}
		}
		a.records[f.Name] = f
		a.files = append(a.files, f)
		if f.Name != "data.pkl" && !strings.HasSuffix(f.Name, "/data.pkl") {
			continue
		}
		switch d := strings.Count(f.Name, "/"); {
		case depth < 0 || d < depth:
			depth, pkls = d, []string{f.Name}
		case d == depth:
			pkls = append(pkls, f.Name)
		}
	}
	switch len(pkls) {
	case 0:
		return nil, &Error{Kind: ErrInvalidFormat, Msg: "invalid archive: no data.pkl record: not a PyTorch checkpoint"}
	case 1:
	default:
		return nil, &Error{Kind: ErrInvalidFormat, Msg: fmt.Sprintf("invalid archive: %d data.pkl records (%s, %s): which one is the checkpoint is ambiguous", len(pkls), pkls[0], pkls[1])}
	}
	a.pkl = pkls[0]
	a.prefix = strings.TrimSuffix(a.pkl, "data.pkl")
	if err := a.readByteOrder(); err != nil {
		return nil, err
	}
	return a, nil
}

// checkLegacy refuses the formats before the zip archive: a pickle stream
// that starts with PyTorch's magic number (1.5 and earlier, or
// _use_new_zipfile_serialization=False), and the tar archive of 0.1.
func checkLegacy(head []byte) error {
	if bytes.HasPrefix(head, []byte("PK")) {
		return nil
	}
	if len(head) > 0 && head[0] == 0x80 {
		if bytes.Contains(head[:min(len(head), 32)], legacyMagic) {
			return &Error{Kind: ErrUnsupported, Msg: legacyMsg}
		}
		return &Error{Kind: ErrInvalidFormat, Msg: "invalid archive: a bare pickle, not a PyTorch zip archive"}
	}
	if len(head) >= 262 && string(head[257:262]) == "ustar" {
		return &Error{Kind: ErrUnsupported, Msg: "legacy format: tar (PyTorch 0.1); re-save with a current torch.save"}
	}
	return nil // zip.NewReader decides
}

func (a *archive) readByteOrder() error {
	name := a.prefix + "byteorder"
	f, ok := a.records[name]
	if !ok {
		return nil // before PyTorch 1.10: written on little-endian machines
	}
	b, err := a.readSmall(f, maxSmallRecord)
	if err != nil {
		return err
	}
	switch string(b) {
	case "little":
	case "big":
		a.big = true
	default:
		return &Error{Kind: ErrInvalidFormat, Record: name, Msg: fmt.Sprintf("byte order: byteorder is %q, not \"little\" or \"big\"", b)}
	}
	return nil
}

// readSmall reads a whole record of at most limit bytes (decompressing and
// checking its CRC), never allocating more than limit+1 bytes whatever its
// header says.
func (a *archive) readSmall(f *zip.File, limit int64) ([]byte, error) {
	if f.UncompressedSize64 > uint64(limit) {
		return nil, &Error{Kind: ErrUnsupported, Record: f.Name, Msg: fmt.Sprintf("limit: %d bytes, more than the %d accepted", f.UncompressedSize64, limit)}
	}
	if f.Flags&1 != 0 {
		return nil, &Error{Kind: ErrInvalidFormat, Record: f.Name, Msg: "invalid archive: encrypted record"}
	}
	rc, err := f.Open()
	if err != nil {
		return nil, &Error{Kind: ErrInvalidFormat, Record: f.Name, Msg: "invalid archive: cannot open the record", Err: err}
	}
	defer rc.Close()
	var buf bytes.Buffer
	if f.Method == zip.Store && f.UncompressedSize64 <= uint64(a.size) {
		buf.Grow(int(f.UncompressedSize64)) // <= limit, and within the file
	}
	n, err := buf.ReadFrom(io.LimitReader(rc, limit+1))
	if err != nil {
		return nil, &Error{Kind: ErrInvalidFormat, Record: f.Name, Msg: "invalid archive: cannot read the record", Err: err}
	}
	if n > limit {
		return nil, &Error{Kind: ErrUnsupported, Record: f.Name, Msg: fmt.Sprintf("limit: more than the %d bytes accepted", limit)}
	}
	return buf.Bytes(), nil
}

// pickle returns the bytes of data.pkl.
func (a *archive) pickle() ([]byte, error) {
	return a.readSmall(a.records[a.pkl], MaxPickleSize)
}

// storageRecord locates the bytes of a storage in the archive: a stored
// (uncompressed, unencrypted) record data/<key> beside data.pkl, holding
// exactly n bytes that lie inside the archive. It returns the offset of
// the first byte, and keeps it (dataOffset): a record is checked once,
// when its storage is first met.
func (a *archive) storageRecord(key string, n int64) (int64, error) {
	name := a.prefix + "data/" + key
	if off, ok := a.dataOff[name]; ok {
		return off, nil
	}
	f, ok := a.records[name]
	if !ok {
		return 0, &Error{Kind: ErrInvalidFormat, Record: name, Msg: fmt.Sprintf("missing record: storage %q has no record", key)}
	}
	if f.Flags&1 != 0 {
		return 0, &Error{Kind: ErrInvalidFormat, Record: name, Msg: "invalid archive: encrypted record"}
	}
	if f.Method != zip.Store {
		return 0, &Error{Kind: ErrUnsupported, Record: name,
			Msg: fmt.Sprintf("compressed record: method %d; torch.save stores tensor data uncompressed", f.Method)}
	}
	if f.UncompressedSize64 != uint64(n) || f.CompressedSize64 != uint64(n) {
		return 0, &Error{Kind: ErrInvalidFormat, Record: name,
			Msg: fmt.Sprintf("storage size: record holds %d bytes, the pickle gives storage %q %d", f.UncompressedSize64, key, n)}
	}
	off, err := f.DataOffset()
	if err != nil {
		return 0, &Error{Kind: ErrInvalidFormat, Record: name, Msg: "invalid archive: unreadable local header", Err: err}
	}
	if !a.within(off, uint64(n)) {
		return 0, &Error{Kind: ErrInvalidFormat, Record: name, Msg: fmt.Sprintf("invalid archive: %d bytes at offset %d run past the end of the archive (%d bytes)", n, off, a.size)}
	}
	a.dataOff[name] = off
	return off, nil
}

// dataOffset returns where f's bytes start: the offset storageRecord
// found, or for a record that holds no storage the one its local header
// gives (a read).
func (a *archive) dataOffset(f *zip.File) (int64, error) {
	if off, ok := a.dataOff[f.Name]; ok {
		return off, nil
	}
	return f.DataOffset()
}

// within reports whether n bytes from offset off lie inside the archive.
func (a *archive) within(off int64, n uint64) bool {
	return off >= 0 && off <= a.size && n <= uint64(a.size-off)
}
