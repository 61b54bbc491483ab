package convert

import (
	"maps"
	"slices"
	"sync"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/dtype"
)

// storedEntry is one stored tensor of a component, in file order.
type storedEntry struct {
	name  string
	dtype dtype.DType
	shape []int64
	file  int // the number of the file that holds it, in loaderStore.files' order
}

// loaderStore is the stored tensors of one component of the source,
// opened by the loader (ckpt.Open: safetensors files or a PyTorch
// checkpoint): every stored tensor is read through the loader's Part of
// it, which reads through the model's own file system and verifies the
// bytes against the checksums their file names as the policy's Verify
// decides — the one reading path of the loader, with nothing read beside
// it.
type loaderStore struct {
	c      *ckpt.Contents
	byName map[string]int
	pool   *sync.Pool // raw buffers of converting reads
}

func newLoaderStore(c *ckpt.Contents, pool *sync.Pool) *loaderStore {
	s := &loaderStore{c: c, byName: make(map[string]int, len(c.Tensors)), pool: pool}
	for i := range c.Tensors {
		s.byName[c.Tensors[i].Tensor] = i
	}
	return s
}

// entries lists the stored tensors in the order of the files.
func (s *loaderStore) entries() []storedEntry {
	out := make([]storedEntry, len(s.c.Tensors))
	for i := range s.c.Tensors {
		p := &s.c.Tensors[i]
		out[i] = storedEntry{name: p.Tensor, dtype: p.DType, shape: p.Shape, file: slices.Index(s.c.Files, p.File)}
	}
	return out
}

// files returns the paths of the weights files the tensors are read from
// (storedEntry.file numbers them), and of the index that lists them (""
// for none).
func (s *loaderStore) files() ([]string, string) { return s.c.Files, s.c.Index }

func (s *loaderStore) tensor(name string) (*partTensor, error) {
	i, ok := s.byName[name]
	if !ok {
		return nil, &ckpt.Error{Kind: ckpt.ErrNotFound, Tensor: name, Msg: "no stored tensor of that name"}
	}
	return partSource(&s.c.Tensors[i], s.pool), nil
}

// partSource reads a loader Part (of an Item or of Model.Contents) as a
// source tensor, converting through buffers of pool.
func partSource(p *ckpt.Part, pool *sync.Pool) *partTensor {
	return &partTensor{p: p, n: numElements(p.Shape), pool: pool}
}

// metadata is the files' metadata (a PyTorch checkpoint's: its
// non-tensor values, and its tied names under torch.AliasesKey).
func (s *loaderStore) metadata() map[string]string { return maps.Clone(s.c.Metadata) }

// part returns the loader's Part of a stored tensor.
func (s *loaderStore) part(name string) *ckpt.Part {
	if i, ok := s.byName[name]; ok {
		return &s.c.Tensors[i]
	}
	return nil
}

// partTensor is a stored tensor of a source, read piece by piece through
// its loader Part: its stored bytes, then converted here (the Part
// verifies what it reads, and the read that completes the tensor returns
// a mismatch). The loader reads with pread into the caller's buffers, so
// no page of the source stays mapped.
type partTensor struct {
	p    *ckpt.Part
	n    int64
	pool *sync.Pool
}

func (t *partTensor) DType() dtype.DType { return t.p.DType }
func (t *partTensor) NumElements() int64 { return t.n }

// Bytes returns the whole stored tensor.
func (t *partTensor) Bytes() ([]byte, error) {
	b := make([]byte, t.p.Size())
	if err := t.read(b, 0); err != nil {
		return nil, err
	}
	return b, nil
}

// read reads the stored bytes [off, off+len(b)) of the tensor.
func (t *partTensor) read(b []byte, off int64) error {
	_, err := t.p.ReadAt(b, off)
	return err
}

// ConvertElementsTo converts elements [first, first+len) (multiples of 8
// unless the range ends at the tensor's end) into dst.
func (t *partTensor) ConvertElementsTo(to dtype.DType, dst []byte, first int64, opts dtype.Options) (dtype.Stats, error) {
	from := t.p.DType
	fb, tb := int64(from.Bits()), int64(to.Bits())
	off := first * fb / 8
	if to == from {
		return dtype.Stats{}, t.read(dst, off)
	}
	n := int64(len(dst)) * 8 / tb
	rb := t.raw((n*fb + 7) / 8)
	defer t.pool.Put(rb)
	if err := t.read(*rb, off); err != nil {
		return dtype.Stats{}, err
	}
	st, err := dtype.Convert(dst, to, *rb, from, opts)
	if err != nil {
		return st, &ckpt.Error{Kind: ckpt.ErrRead, Path: t.p.File, Tensor: t.p.Tensor, Msg: "convert " + from.String() + " to " + to.String(), Err: err}
	}
	return st, nil
}

// raw returns a buffer of n bytes from the pool.
func (t *partTensor) raw(n int64) *[]byte {
	if b, ok := t.pool.Get().(*[]byte); ok && int64(cap(*b)) >= n {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n)
	return &b
}
