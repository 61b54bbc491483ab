package ckpt

import (
	"slices"
	"strings"
	"sync"

	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/shard"
	"github.com/ckpt-go/ckpt/torch"
)

// PyTorch checkpoints: Open reads them through package torch (which never
// executes the pickle) as a component whose stored tensors are the
// checkpoint's, so that everything built on the Model works for them as
// for safetensors files. They name no checksum per tensor, but their zip
// archive records a CRC-32 of every storage record: a load verifies a
// tensor whose bytes are its record's as it reads them, and with
// VerifyAlways a view of its storage by reading the record (verify.go).
// They are read with pread, never mapped: a view may be gathered from its
// storage, or byte-swapped.

// openTorch opens the PyTorch file or index name as the component label
// of the folder dir it is in. A file of a component folder follows the
// folder's symlink rule (shard.ResolveFile); an index's shards follow it
// too (torch.WithSymlinkRoot).
func (m *Model) openTorch(name, dir, label string, inFolder bool) (*modelComponent, error) {
	var ck *torch.Checkpoint
	var err error
	if fsys := m.src.FS(); fsys != nil {
		ck, err = torch.OpenFS(fsys, name)
	} else {
		if inFolder {
			if _, err = shard.ResolveFile(name, m.sourceOptions()...); err != nil {
				return nil, &Error{Kind: ErrResolve, Path: name, Component: label, Err: err}
			}
		}
		// Opened by the name the folder gives it, not where its link
		// leads: an index's shards are beside the index's name (in the
		// Hugging Face cache, links in the snapshot folder, whose targets
		// are blobs named by their hashes).
		var opts []torch.Option
		if m.src.Follow() {
			opts = append(opts, torch.WithSymlinkRoot("/"))
		}
		ck, err = torch.Open(name, opts...)
	}
	if err != nil {
		return nil, &Error{Kind: ErrResolve, Path: name, Component: label, Err: err}
	}
	return &modelComponent{name: label, dir: dir, ck: newTorchStore(ck), strategy: readPread,
		why: "PyTorch checkpoint: read into owned memory (its tensors may be gathered from their storage or byte-swapped, so its files are never mapped)"}, nil
}

// torchStore is the tensors of a PyTorch checkpoint. Its tied names (the
// same view of one storage as another, torch.Checkpoint.Aliases) are
// added by tie, as a safetensors file's are (ties.go).
type torchStore struct {
	ck    *torch.Checkpoint
	infos []safetensors.TensorInfo // the tensors
	file  []int                    // each tensor's file
	pos   map[string]int
	paths []string
}

// torchOf returns the PyTorch checkpoint whose tensors s is (under its
// tied names, when it has ties), nil for safetensors files.
func torchOf(s tensorStore) *torchStore {
	if t, ok := s.(*tiedStore); ok {
		s = t.tensorStore
	}
	ts, _ := s.(*torchStore)
	return ts
}

func newTorchStore(ck *torch.Checkpoint) *torchStore {
	s := &torchStore{ck: ck, pos: map[string]int{}}
	names := ck.Names()
	fileOf := map[string]int{}
	for _, n := range names {
		t, _ := ck.Tensor(n) // every name of Names is a tensor
		if _, ok := fileOf[t.File()]; !ok {
			fileOf[t.File()] = 0
			s.paths = append(s.paths, t.File())
		}
	}
	slices.Sort(s.paths) // the shards of an index by their names, -0000k-of-0000n
	for i, f := range s.paths {
		fileOf[f] = i
	}
	for _, n := range names {
		t, _ := ck.Tensor(n)
		s.pos[n] = len(s.infos)
		s.infos = append(s.infos, safetensors.TensorInfo{Name: n, DType: t.DType(), Shape: t.Shape(), Begin: t.Offset(), End: t.Offset() + t.ByteLen()})
		s.file = append(s.file, fileOf[t.File()])
	}
	return s
}

// ties are the checkpoint's tied names, each recorded by the file of the
// tensor it ties to. A non-tensor value named like torch.AliasesKey, the
// key under which the ties are listed, is refused as
// torch.WriteSafetensors refuses it.
func (s *torchStore) ties() (ties, from map[string]string, err error) {
	if _, dup := s.ck.Metadata()[torch.AliasesKey]; dup {
		return nil, nil, &Error{Kind: ErrResolve, Path: s.ck.Path(), Err: &torch.Error{Kind: torch.ErrUnsupported, File: s.ck.Path(),
			Msg: "duplicate name: a non-tensor value is named " + torch.AliasesKey + ", the metadata key of the tied names"}}
	}
	ties = s.ck.Aliases()
	from = make(map[string]string, len(ties))
	for tied, kept := range ties {
		if i, ok := s.pos[kept]; ok {
			from[tied] = s.paths[s.file[i]]
		}
	}
	return ties, from, nil
}

func (s *torchStore) count() int { return len(s.infos) }

func (s *torchStore) at(i int) (safetensors.TensorInfo, int) { return s.infos[i], s.file[i] }

func (s *torchStore) info(name string) (safetensors.TensorInfo, string, bool) {
	i, ok := s.pos[name]
	if !ok {
		return safetensors.TensorInfo{}, "", false
	}
	return s.infos[i], s.paths[s.file[i]], true
}

func (s *torchStore) has(name string) bool { _, ok := s.pos[name]; return ok }

// checksummed is true: the archive records a CRC-32 of every storage
// record (a tensor is verified against its record's: claimOf).
func (s *torchStore) checksummed(string) bool { return true }

func (s *torchStore) checksummedAt(int) bool { return true }

// viewed returns the size of the storage record that the named tensor
// views when its bytes are not the record's (a view: claimOf).
func (s *torchStore) viewed(name string) (int64, bool) {
	t, err := s.ck.Tensor(name)
	if err != nil {
		return 0, false
	}
	if _, whole := t.RecordCRC(); whole {
		return 0, false
	}
	_, _, n := t.Record()
	return n, true
}

func (s *torchStore) files() []string { return slices.Clone(s.paths) }

func (s *torchStore) index() string {
	if strings.HasSuffix(s.ck.Path(), ".json") {
		return s.ck.Path()
	}
	return ""
}

// metadata is the checkpoint's non-tensor values (tie adds its tied names
// under torch.AliasesKey: what torch.WriteSafetensors writes).
func (s *torchStore) metadata() map[string]string { return s.ck.Metadata() }

func (s *torchStore) warnings() []string { return nil }

func (s *torchStore) tensor(name string) (storedTensor, error) {
	t, err := s.ck.Tensor(name)
	if err != nil {
		return nil, err
	}
	return torchTensor{t}, nil
}

func (s *torchStore) tensorAt(i int) (storedTensor, error) { return s.tensor(s.infos[i].Name) }

func (s *torchStore) close() error { return s.ck.Close() }

// torchTensor is a tensor of a PyTorch checkpoint: its bytes are read with
// ReadAt (and Bytes, a copy). It names no CRC-32C (Checksum); a load
// verifies it against its storage record's CRC-32 (claimOf): its own bytes
// when they are the record's, else the record's (torchRecord).
type torchTensor struct{ *torch.Tensor }

func (torchTensor) Checksum() (uint32, bool, error) { return 0, false, nil }

// VerifyChecksum compares got, the CRC-32 of the tensor's bytes, with its
// storage record's, when the tensor's bytes are the record's
// (torch.Tensor.RecordCRC).
func (t torchTensor) VerifyChecksum(got uint32) error {
	if _, whole := t.RecordCRC(); !whole {
		return &safetensors.Error{Kind: safetensors.ErrChecksum, File: t.File(), Tensor: t.Name(),
			Msg: "internal error: a view's bytes are not its storage record's, which its CRC-32 covers"}
	}
	return recordMismatch(t.Tensor, got)
}

// torchRecord is the storage record a PyTorch view views, as a check reads
// (as stored) and verifies it against the CRC-32 the archive's zip
// directory records for it.
type torchRecord struct{ torchTensor }

// ReadAt reads the record's stored bytes.
func (r torchRecord) ReadAt(b []byte, off int64) (int, error) { return r.ReadRecordAt(b, off) }

// VerifyChecksum compares got, the CRC-32 of the record's bytes, with the
// directory's.
func (r torchRecord) VerifyChecksum(got uint32) error { return recordMismatch(r.Tensor, got) }

// recordMismatch is the error of got, a CRC-32 of t's storage record's
// bytes, that differs from the one its archive records: a
// *safetensors.ChecksumError naming the file, the tensor, the record and
// its bytes (nil when they agree).
func recordMismatch(t *torch.Tensor, got uint32) error {
	want, _ := t.RecordCRC()
	if got == want {
		return nil
	}
	rec, off, n := t.Record()
	return &safetensors.ChecksumError{File: t.File(), Tensor: t.Name(), Begin: off, End: off + n, Want: want, Got: got, Record: rec}
}

// torchGather is a PyTorch tensor as one reader reads its part (one load,
// one Part): in pieces, from several goroutines, in any order. A view
// that is not contiguous (transposed, strided) has pieces that each span
// most of its storage (a few rows of a transposed weight): read piece by
// piece, the storage would be read again for every piece. So the first
// ReadAt reads the part's range of the tensor once into memory
// (torch.Tensor.Gather: the storage the range spans, or its own bytes
// where reading them line by line costs less), every ReadAt serves its
// piece from there, and the memory goes as soon as the need bytes the
// reader reads have been served. A reader that stops early leaves the
// memory to the garbage collector with the torchGather. A contiguous
// view, of either byte order, reads exactly its own bytes, and is read as
// it is.
type torchGather struct {
	torchTensor
	off, n int64 // the range of the tensor's bytes the part lies in
	need   int64 // the bytes the reader reads
	mu     sync.Mutex
	g      *torch.Gathered // nil: not read, or every byte served
	served int64           // bytes served from g
}

// gathered returns st as one reader that reads the selection sel of its
// bytes, in pieces, reads it: a torchGather for a PyTorch view that is not
// contiguous, else st.
func gathered(st storedTensor, sel strided) storedTensor {
	t, ok := st.(torchTensor)
	if !ok || t.Contiguous() || sel.total() == 0 {
		return st
	}
	off, n := selRange(sel)
	return &torchGather{torchTensor: t, off: off, n: n, need: sel.total()}
}

// selRange returns the range of bytes [off, off+n) the selection lies in.
func selRange(sel strided) (off, n int64) {
	return sel.first, (sel.count-1)*sel.stride + sel.n
}

// ReadAt serves b from the part's gathered bytes, reading them on the
// first call (the others wait for them), and drops them once need bytes
// were served (a reader that reads the part again reads it once more).
func (t *torchGather) ReadAt(b []byte, off int64) (int, error) {
	t.mu.Lock()
	if t.g == nil {
		g, err := t.Tensor.Gather(t.off, t.n)
		if err != nil {
			t.mu.Unlock()
			return 0, err
		}
		t.g, t.served = g, 0
	}
	g := t.g
	t.mu.Unlock()
	n, err := g.ReadAt(b, off)
	t.mu.Lock()
	if t.g == g {
		if t.served += int64(n); t.served >= t.need {
			t.g = nil
		}
	}
	t.mu.Unlock()
	return n, err
}

// gatherBytes is the memory a load holds to read e's part of its data
// tensor: torch.Tensor.GatherBytes of the part's range where it is a
// PyTorch view read through a torchGather, else 0.
func (c *modelComponent) gatherBytes(e *entry) int64 {
	s := torchOf(c.ck)
	if s == nil || e.sl == nil || e.sl.data.total() == 0 {
		return 0
	}
	name := e.name
	if e.q != nil {
		name = e.q.Data.Name
	}
	t, err := s.ck.Tensor(name)
	if err != nil || t.Contiguous() {
		return 0
	}
	return t.GatherBytes(selRange(e.sl.data))
}
