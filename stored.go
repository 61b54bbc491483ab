package ckpt

import (
	"io"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/shard"
)

// The stored tensors of a component, as the loader reads them: the
// tensors of a set of safetensors files (package shard) or of a PyTorch
// checkpoint (package torch, torch.go). Everything above (entries, Items
// and their Parts, Load, verification, Contents) reads through these two
// interfaces; only the mapping (zero-copy views, the batches of small
// tensors, dropping read pages) and ranged requests are safetensors'
// alone, and fileOf says whether a stored tensor has them.

// storedTensor is one stored tensor: its name, dtype and shape, and its
// contiguous row-major little-endian bytes. *safetensors.Tensor is one as
// it is.
type storedTensor interface {
	Name() string
	DType() dtype.DType
	Shape() []int64
	// ByteLen is the size of its bytes.
	ByteLen() int64
	// Offset is where its bytes start in its file (for a PyTorch view
	// that is gathered or byte-swapped: where its storage starts).
	Offset() int64
	// ReadAt reads its bytes [off, off+len(b)), as io.ReaderAt.
	ReadAt(b []byte, off int64) (int, error)
	// Bytes returns all its bytes: a view of the mapping where its file
	// is mapped (fileOf), else a copy.
	Bytes() ([]byte, error)
	// Checksum is the CRC-32C its file names for it (ok false: none;
	// err: the file's checksums are damaged), and VerifyChecksum compares
	// a CRC of its bytes with it (a *safetensors.ChecksumError). A
	// PyTorch tensor names none; a load verifies it against its storage
	// record's CRC-32 instead (claimOf).
	Checksum() (crc uint32, ok bool, err error)
	VerifyChecksum(crc uint32) error
}

// checked is what a tensor check reads and verifies: a stored tensor's
// bytes, or the storage record a PyTorch view views (torchRecord).
type checked interface {
	Name() string
	ReadAt(b []byte, off int64) (int, error)
	// VerifyChecksum compares the CRC of all its bytes with the claim's
	// (a *safetensors.ChecksumError when they differ).
	VerifyChecksum(crc uint32) error
}

// claim is the checksum a file names for a stored tensor, as a load
// verifies it: a safetensors header's CRC-32C of the tensor's bytes
// (safetensors.ChecksumPrefix), or the CRC-32 (IEEE polynomial) that a
// PyTorch archive's zip directory records for the storage record the
// tensor views.
type claim struct {
	// of is what the CRC covers, size its bytes: the tensor itself, or
	// (view) the storage record of a PyTorch tensor whose bytes are not
	// the record's (part of its storage, a strided view, a big-endian
	// archive's: torch.Tensor.RecordCRC).
	of   checked
	size int64
	view bool
	// ieee: a CRC-32 of the IEEE polynomial, else a CRC-32C.
	ieee bool
}

// claimOf returns st's claim: ok is false when its file names none, err
// says that its file's checksums are damaged.
func claimOf(st storedTensor) (cl claim, ok bool, err error) {
	var t torchTensor
	switch x := st.(type) {
	case torchTensor:
		t = x
	case *torchGather:
		t = x.torchTensor
	default:
		_, ok, err = st.Checksum()
		return claim{of: st, size: st.ByteLen()}, ok, err
	}
	if _, whole := t.RecordCRC(); whole {
		return claim{of: st, size: st.ByteLen(), ieee: true}, true, nil
	}
	_, _, n := t.Record()
	return claim{of: torchRecord{t}, size: n, view: true, ieee: true}, true, nil
}

// readFull reads st's bytes from off into b: all of them, or an error
// (io.ErrUnexpectedEOF past its end).
func readFull(st storedTensor, b []byte, off int64) error {
	n, err := st.ReadAt(b, off)
	if n == len(b) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// fileOf returns the path of the file st lives in (a path of the model's
// file system), and the safetensors file when it is one (nil for a
// PyTorch archive, which is never mapped nor read with ranged requests).
func fileOf(st storedTensor) (string, *safetensors.File) {
	switch t := st.(type) {
	case *safetensors.Tensor:
		return t.File().Path(), t.File()
	case *torchGather:
		return t.File(), nil
	}
	return st.(torchTensor).File(), nil
}

// filePath returns the path of the file st lives in.
func filePath(st storedTensor) string {
	p, _ := fileOf(st)
	return p
}

// mappedFile returns the safetensors file st lives in when it is mapped,
// else nil.
func mappedFile(st storedTensor) *safetensors.File {
	if _, f := fileOf(st); f != nil && f.Mapped() {
		return f
	}
	return nil
}

// tensorStore is the stored tensors of one component, in order: by
// position (at, tensorAt) and by name. info's Begin orders a file's
// tensors; the other fields are the tensor's.
type tensorStore interface {
	count() int
	at(i int) (info safetensors.TensorInfo, file int)
	info(name string) (info safetensors.TensorInfo, file string, ok bool)
	has(name string) bool
	// checksummed reports whether the tensor's file names a checksum
	// for it (by name, or by position).
	checksummed(name string) bool
	checksummedAt(i int) bool
	// viewed returns, for a tensor whose checksum covers not its own
	// bytes but the storage record it views (a PyTorch view: claimOf),
	// the record's size.
	viewed(name string) (record int64, ok bool)
	// files are the weights files, in order; index is the index file
	// that lists them ("" for a single file).
	files() []string
	index() string
	metadata() map[string]string
	warnings() []string
	tensor(name string) (storedTensor, error)
	tensorAt(i int) (storedTensor, error)
	close() error
}

// shardStore is the tensors of safetensors files.
type shardStore struct{ *shard.Checkpoint }

func (s shardStore) count() int { return s.Len() }

func (s shardStore) at(i int) (safetensors.TensorInfo, int) { return s.At(i) }

func (s shardStore) info(name string) (safetensors.TensorInfo, string, bool) { return s.Info(name) }

func (s shardStore) has(name string) bool { return s.Has(name) }

func (s shardStore) checksummed(name string) bool { return s.Checksummed(name) }

func (s shardStore) checksummedAt(i int) bool { return s.ChecksummedAt(i) }

func (s shardStore) viewed(string) (int64, bool) { return 0, false }

func (s shardStore) files() []string { return s.Files() }

func (s shardStore) metadata() map[string]string { return s.Metadata() }

func (s shardStore) warnings() []string { return s.Warnings() }

func (s shardStore) close() error { return s.Close() }

func (s shardStore) index() string {
	if ix := s.Index(); ix != nil {
		return ix.Path
	}
	return ""
}

func (s shardStore) tensor(name string) (storedTensor, error) {
	t, err := s.Tensor(name)
	if err != nil {
		return nil, err
	}
	return t, nil
}

func (s shardStore) tensorAt(i int) (storedTensor, error) {
	t, err := s.TensorAt(i)
	if err != nil {
		return nil, err
	}
	return t, nil
}
