package ckpt

import (
	"slices"
	"strings"

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

// torchStore is the tensors of a PyTorch checkpoint. Its tied names (the
// same view of one storage as another, torch.Checkpoint.Aliases) are
// added by tie, as a safetensors file's are (ties.go).
type torchStore struct {
	ck    *torch.Checkpoint
	infos []safetensors.TensorInfo // the tensors
	file  []int                    // each tensor's file
	pos   map[string]int
	files []string
}

func newTorchStore(ck *torch.Checkpoint) *torchStore {
	s := &torchStore{ck: ck, pos: map[string]int{}}
	names := ck.Names()
	fileOf := map[string]int{}
	for _, n := range names {
		t, _ := ck.Tensor(n) // every name of Names is a tensor
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
			from[tied] = s.files[s.file[i]]
		}
	}
	return ties, from, nil
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

// Metadata is the checkpoint's non-tensor values (tie adds its tied names
// under torch.AliasesKey: what torch.WriteSafetensors writes).
func (s *torchStore) Metadata() map[string]string { return s.ck.Metadata() }

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
