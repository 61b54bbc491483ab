package convert

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/shapes"
	"github.com/ckpt-go/ckpt/internal/srcfs"
	"github.com/ckpt-go/ckpt/quant"
	"github.com/ckpt-go/ckpt/torch"
)

// torchNames are the PyTorch weights files a component folder may hold,
// in the order they are preferred.
var torchNames = []string{
	"pytorch_model.bin.index.json", "pytorch_model.bin",
	"diffusion_pytorch_model.bin.index.json", "diffusion_pytorch_model.bin",
}

// torchPath returns the PyTorch checkpoint a source path stands for: a
// .bin, .pt, .pth or .ckpt file, a *.bin.index.json index, or a component
// folder with no safetensors weights but one of torchNames ("" for none).
func (r *runner) torchPath() string {
	p := r.src
	if !srcfs.Of(nil).IsFolder(p) {
		l := strings.ToLower(p)
		for _, ext := range []string{".bin", ".pt", ".pth", ".ckpt", ".bin.index.json", ".pt.index.json"} {
			if strings.HasSuffix(l, ext) {
				return p
			}
		}
		return ""
	}
	if _, err := os.Stat(filepath.Join(p, "model_index.json")); err == nil {
		return "" // a pipeline: the loader's
	}
	ents, err := os.ReadDir(p)
	if err != nil {
		return ""
	}
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".safetensors") {
			return "" // safetensors weights: the loader's
		}
	}
	for _, n := range torchNames {
		if _, err := os.Stat(filepath.Join(p, n)); err == nil {
			return filepath.Join(p, n)
		}
	}
	return ""
}

// openTorch opens a PyTorch source (nil sources when it is not one).
// Nothing of the pickle is executed (see package torch): a forbidden
// global fails here, before anything is written.
func (r *runner) openTorch() ([]srcComponent, func(), error) {
	path := r.torchPath()
	if path == "" {
		return nil, func() {}, nil
	}
	if r.opts.SourceVariant != "" {
		return nil, nil, &Error{Kind: ErrOption, Field: "SourceVariant", Msg: "a PyTorch checkpoint has no precision variants to choose from"}
	}
	dir := filepath.Dir(path)
	var topts []torch.Option
	if r.source().Follow() {
		topts = append(topts, torch.WithSymlinkRoot("/"))
	}
	ck, err := torch.Open(path, topts...)
	if err != nil {
		return nil, nil, &Error{Kind: ErrSource, Path: path, Err: err}
	}
	closer := func() { ck.Close() }
	st := &torchStore{ck: ck}
	var stored []quant.Stored
	for _, e := range st.entries() {
		stored = append(stored, quant.Stored{Name: e.name, DType: e.dtype, Shape: e.shape})
	}
	var qsrc quant.Sources
	if qsrc.ConfigJSON, err = r.readConfig(filepath.Join(dir, "config.json")); err != nil {
		closer()
		return nil, nil, err
	}
	if qsrc.HFQuantConfig, err = r.readConfig(filepath.Join(dir, "hf_quant_config.json")); err != nil {
		closer()
		return nil, nil, err
	}
	scheme, err := quant.Detect(stored, qsrc)
	if err != nil {
		closer()
		return nil, nil, &Error{Kind: ErrSource, Path: path, Err: err}
	}
	label := filepath.Base(dir)
	if abs, err := filepath.Abs(dir); err == nil {
		label = filepath.Base(abs)
	}
	return []srcComponent{{label: label, dir: dir, naming: torchNaming(filepath.Base(path)), store: st, scheme: scheme}}, closer, nil
}

// torchNaming returns the safetensors name of a PyTorch weights file:
// pytorch_model[-0000k-of-0000n].bin (and its index) become
// model.safetensors, diffusion_pytorch_model.bin
// diffusion_pytorch_model.safetensors, X.pt X.safetensors.
func torchNaming(base string) string {
	stem := base
	for _, ext := range []string{".bin.index.json", ".pt.index.json", ".bin", ".pt", ".pth", ".ckpt"} {
		if strings.HasSuffix(strings.ToLower(stem), ext) {
			stem = stem[:len(stem)-len(ext)]
			break
		}
	}
	if m := shardRE.FindStringSubmatch(stem); m != nil && m[3] == "" {
		stem = m[1]
		if m[2] != "" {
			stem += "." + m[2]
		}
	}
	if stem == "pytorch_model" || strings.HasPrefix(stem, "pytorch_model.") {
		stem = "model" + strings.TrimPrefix(stem, "pytorch_model")
	}
	return stem + ".safetensors"
}

// torchStore is a PyTorch checkpoint.
type torchStore struct {
	ck *torch.Checkpoint
}

func (s *torchStore) entries() []storedEntry {
	files, _ := s.files()
	var out []storedEntry
	for name, t := range s.ck.Tensors() {
		out = append(out, storedEntry{name: name, dtype: t.DType(), shape: t.Shape(), file: slices.Index(files, t.File())})
	}
	return out
}

// files returns the archives that hold the tensors, sorted (the shards of
// an index by their names, pytorch_model-0000k-of-0000n.bin), and the
// index the checkpoint was opened with.
func (s *torchStore) files() ([]string, string) {
	var files []string
	for _, t := range s.ck.Tensors() {
		if !slices.Contains(files, t.File()) {
			files = append(files, t.File())
		}
	}
	slices.Sort(files)
	index := ""
	if strings.HasSuffix(s.ck.Path(), ".json") {
		index = s.ck.Path()
	}
	return files, index
}

func (s *torchStore) tensor(name string) (srcTensor, error) {
	t, err := s.ck.Tensor(name)
	if err != nil {
		return nil, err
	}
	n, err := shapes.Elements(t.Shape())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &torchTensor{t: t, n: n}, nil
}

// metadata is the checkpoint's non-tensor values under their dotted names
// and its tied names under torch.AliasesKey, as torch.WriteSafetensors
// writes them.
func (s *torchStore) metadata() map[string]string {
	m := s.ck.Metadata()
	if m == nil {
		m = map[string]string{}
	}
	if a := s.ck.Aliases(); len(a) > 0 {
		b, _ := json.Marshal(a)
		m[torch.AliasesKey] = string(b)
	}
	return m
}

// torchTensor reads a PyTorch tensor whole, on first use, and gives it out
// piece by piece: an archive record is not read in parts, so a tensor of
// a PyTorch source is in memory while its pieces are converted, and freed
// once every piece is.
type torchTensor struct {
	t       *torch.Tensor
	n       int64 // elements
	mu      sync.Mutex
	buf     []byte
	evicted int64
}

func (x *torchTensor) DType() dtype.DType { return x.t.DType() }

func (x *torchTensor) NumElements() int64 { return x.n }

func (x *torchTensor) load() ([]byte, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.buf == nil {
		b := make([]byte, x.t.ByteLen())
		if err := x.t.ReadTo(b); err != nil {
			return nil, err
		}
		x.buf, x.evicted = b, 0
	}
	return x.buf, nil
}

func (x *torchTensor) Bytes() ([]byte, error) { return x.load() }

func (x *torchTensor) ConvertElementsTo(to dtype.DType, dst []byte, first int64, opts dtype.Options) (dtype.Stats, error) {
	b, err := x.load()
	if err != nil {
		return dtype.Stats{}, err
	}
	from := x.DType()
	tb, fb := int64(to.Bits()), int64(from.Bits())
	n := int64(len(dst)) * 8 / tb
	start, end := first*fb/8, (first*fb+n*fb+7)/8
	if first < 0 || end > int64(len(b)) {
		return dtype.Stats{}, fmt.Errorf("elements [%d, +%d) outside the tensor's %d", first, n, x.NumElements())
	}
	if to == from {
		copy(dst, b[start:end])
		return dtype.Stats{Elements: n}, nil
	}
	return dtype.Convert(dst, to, b[start:end], from, opts)
}

// Evict counts the elements done; the buffer goes when all are.
func (x *torchTensor) Evict(first, n int64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.buf == nil {
		return
	}
	x.evicted += n
	if x.evicted >= x.NumElements() {
		x.buf, x.evicted = nil, 0
	}
}
