package ckpt

import (
	"encoding/json"
	"maps"
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
// for safetensors files. They carry no checksums (a load verifies nothing
// of them, and VerifyAlways refuses them) and are read with pread, never
// mapped: a view may be gathered from its storage, or byte-swapped.

// torchExts are the endings of the names of PyTorch checkpoint files and
// indexes that Open reads with package torch.
var torchExts = []string{".bin", ".pt", ".pth", ".ckpt", ".bin.index.json", ".pt.index.json"}

// torchWeights are the PyTorch weights files a component folder may hold,
// in the order they are preferred.
var torchWeights = []string{
	"pytorch_model.bin.index.json", "pytorch_model.bin",
	"diffusion_pytorch_model.bin.index.json", "diffusion_pytorch_model.bin",
}

// isTorchFile reports whether name is named like a PyTorch checkpoint
// file or index.
func isTorchFile(name string) bool {
	l := strings.ToLower(name)
	return slices.ContainsFunc(torchExts, func(ext string) bool { return strings.HasSuffix(l, ext) })
}

// torchIn returns the PyTorch weights of the component folder dir (one of
// torchWeights): "" when the folder holds safetensors weights, which win,
// or is a pipeline root, or holds none of them.
func (m *Model) torchIn(dir string) string {
	ents, err := m.src.ReadDir(dir)
	if err != nil {
		return ""
	}
	have := make(map[string]bool, len(ents))
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".safetensors") || e.Name() == "model_index.json" {
			return ""
		}
		have[e.Name()] = true
	}
	for _, n := range torchWeights {
		if have[n] {
			return m.src.Join(dir, n)
		}
	}
	return ""
}

// openTorch opens the PyTorch file or index name as the model's one
// component, named after the folder dir it is in. A file of a component
// folder follows the folder's symlink rule (shard.ResolveFile); an index's
// shards follow it too (torch.WithSymlinkRoot).
func (m *Model) openTorch(name, dir string, inFolder bool) error {
	if m.cfg.variant != "" {
		return &Error{Kind: ErrOption, Path: m.path, Msg: "a PyTorch checkpoint has no precision variants to choose from (WithVariant)"}
	}
	var ck *torch.Checkpoint
	var err error
	if fsys := m.src.FS(); fsys != nil {
		ck, err = torch.OpenFS(fsys, name)
	} else {
		real := name
		if inFolder {
			if real, err = shard.ResolveFile(name, m.sourceOptions()...); err != nil {
				return &Error{Kind: ErrResolve, Path: name, Err: err}
			}
		}
		var opts []torch.Option
		if m.src.Follow() {
			opts = append(opts, torch.WithSymlinkRoot("/"))
		}
		ck, err = torch.Open(real, opts...)
	}
	if err != nil {
		return &Error{Kind: ErrResolve, Path: name, Err: err}
	}
	label := m.src.Base(dir)
	if abs, err := m.src.Abs(dir); err == nil {
		label = m.src.Base(abs)
	}
	c := &modelComponent{name: label, dir: dir, ck: newTorchStore(ck), strategy: readPread,
		why: "PyTorch checkpoint: read into owned memory (its tensors may be gathered from their storage or byte-swapped, so its files are never mapped)"}
	m.comps = []*modelComponent{c}
	return m.setup(c)
}

// torchStore is the tensors of a PyTorch checkpoint. A tied name (the
// same view of one storage as another, torch.Checkpoint.Aliases) is a
// tensor of its own here, reading the bytes of the tensor it ties to:
// the loader loads both names.
type torchStore struct {
	ck    *torch.Checkpoint
	infos []safetensors.TensorInfo // the tensors, tied names after the others
	file  []int                    // each tensor's file
	pos   map[string]int
	files []string
	meta  map[string]string
}

func newTorchStore(ck *torch.Checkpoint) *torchStore {
	s := &torchStore{ck: ck, pos: map[string]int{}}
	aliases := ck.Aliases()
	names := ck.Names()
	names = append(names, slices.Sorted(maps.Keys(aliases))...)
	fileOf := map[string]int{}
	for _, n := range names {
		t, _ := ck.Tensor(n) // every name of Names and Aliases is a tensor
		if _, ok := fileOf[t.File()]; !ok {
			fileOf[t.File()] = 0
			s.files = append(s.files, t.File())
		}
	}
	slices.Sort(s.files) // the shards of an index by their names, -0000k-of-0000n
	for i, f := range s.files {
		fileOf[f] = i
	}
	for _, n := range names {
		t, _ := ck.Tensor(n)
		s.pos[n] = len(s.infos)
		s.infos = append(s.infos, safetensors.TensorInfo{Name: n, DType: t.DType(), Shape: t.Shape(), Begin: t.Offset(), End: t.Offset() + t.ByteLen()})
		s.file = append(s.file, fileOf[t.File()])
	}
	s.meta = ck.Metadata()
	if len(aliases) > 0 {
		if s.meta == nil {
			s.meta = map[string]string{}
		}
		b, _ := json.Marshal(aliases)
		s.meta[torch.AliasesKey] = string(b)
	}
	return s
}

func (s *torchStore) Len() int { return len(s.infos) }

func (s *torchStore) At(i int) (safetensors.TensorInfo, int) { return s.infos[i], s.file[i] }

func (s *torchStore) Info(name string) (safetensors.TensorInfo, string, bool) {
	i, ok := s.pos[name]
	if !ok {
		return safetensors.TensorInfo{}, "", false
	}
	return s.infos[i], s.files[s.file[i]], true
}

func (s *torchStore) Has(name string) bool { _, ok := s.pos[name]; return ok }

// Checksummed is false: a PyTorch file names no checksums.
func (s *torchStore) Checksummed(string) bool { return false }

func (s *torchStore) ChecksummedAt(int) bool { return false }

func (s *torchStore) Files() []string { return slices.Clone(s.files) }

func (s *torchStore) index() string {
	if strings.HasSuffix(s.ck.Path(), ".json") {
		return s.ck.Path()
	}
	return ""
}

// Metadata is the checkpoint's non-tensor values and, under
// torch.AliasesKey, its tied names as JSON: what torch.WriteSafetensors
// writes.
func (s *torchStore) Metadata() map[string]string { return maps.Clone(s.meta) }

func (s *torchStore) Warnings() []string { return nil }

func (s *torchStore) tensor(name string) (storedTensor, error) {
	t, err := s.ck.Tensor(name)
	if err != nil {
		return nil, err
	}
	return torchTensor{t}, nil
}

func (s *torchStore) tensorAt(i int) (storedTensor, error) { return s.tensor(s.infos[i].Name) }

func (s *torchStore) Close() error { return s.ck.Close() }

// torchTensor is a tensor of a PyTorch checkpoint: its bytes are read with
// ReadAt (and Bytes, a copy); it has no checksum.
type torchTensor struct{ *torch.Tensor }

func (torchTensor) Checksum() (uint32, bool, error) { return 0, false, nil }

func (t torchTensor) VerifyChecksum(uint32) error {
	return &safetensors.Error{Kind: safetensors.ErrChecksum, File: t.File(), Tensor: t.Name(), Msg: "a PyTorch file names no checksums"}
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
	s, ok := c.ck.(*torchStore)
	if !ok || e.sl == nil || e.sl.data.total() == 0 {
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
