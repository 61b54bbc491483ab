package convert

import (
	"cmp"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/shard"
)

// srcTensor is a stored tensor of a source, read piece by piece.
// *safetensors.Tensor is one; PyTorch tensors are wrapped (torch.go).
type srcTensor interface {
	DType() dtype.DType
	NumElements() int64
	// ConvertElementsTo converts elements [first, first+len) (multiples of
	// 8 unless the range ends at the tensor's end) into dst.
	ConvertElementsTo(to dtype.DType, dst []byte, first int64, opts dtype.Options) (dtype.Stats, error)
	// Evict drops the source pages of elements [first, first+n) from the
	// resident set (or the tensor's buffer, once all is read).
	Evict(first, n int64)
	// Bytes returns the whole stored tensor (a view of a mapping).
	Bytes() ([]byte, error)
}

// storedEntry is one stored tensor of a component, in file order.
type storedEntry struct {
	name  string
	dtype dtype.DType
	shape []int64
	file  int // the number of the file that holds it, in srcStore.files' order
}

// srcStore is the stored tensors of one component of a source.
type srcStore interface {
	// entries lists the stored tensors in the order of the files.
	entries() []storedEntry
	// files returns the paths of the weights files the tensors are read
	// from, sorted (storedEntry.file numbers them), and of the index that
	// lists them ("" for none).
	files() (shards []string, index string)
	tensor(name string) (srcTensor, error)
	metadata() map[string]string
}

// shardStore is a component opened by the loader.
type shardStore struct{ ck *shard.Checkpoint }

func (s shardStore) entries() []storedEntry {
	files := s.ck.Files()
	fileIdx := map[string]int{}
	for i, f := range files {
		fileIdx[f] = i
		fileIdx[filepath.Base(f)] = i
	}
	type loc struct {
		e     storedEntry
		begin int64
	}
	var ls []loc
	for _, n := range s.ck.Names() {
		info, f, ok := s.ck.Info(n)
		if !ok {
			continue
		}
		fi, ok := fileIdx[f]
		if !ok {
			fi = fileIdx[filepath.Base(f)]
		}
		ls = append(ls, loc{storedEntry{n, info.DType, info.Shape, fi}, info.Begin})
	}
	slices.SortFunc(ls, func(a, b loc) int {
		return cmp.Or(cmp.Compare(a.e.file, b.e.file), cmp.Compare(a.begin, b.begin), strings.Compare(a.e.name, b.e.name))
	})
	out := make([]storedEntry, len(ls))
	for i, l := range ls {
		out[i] = l.e
	}
	return out
}

func (s shardStore) files() ([]string, string) {
	index := ""
	if ix := s.ck.Index(); ix != nil {
		index = ix.Path
	}
	return s.ck.Files(), index
}

func (s shardStore) tensor(name string) (srcTensor, error) { return s.ck.Tensor(name) }
func (s shardStore) metadata() map[string]string           { return s.ck.Metadata() }
