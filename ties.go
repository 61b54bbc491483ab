package ckpt

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/ckpt-go/ckpt/quant"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/torch"
)

// Tied names: a name that is the same tensor as another (tied weights,
// such as an embedding and an output projection) loads as a tensor of its
// own that reads the bytes of the tensor it ties to. A PyTorch checkpoint
// has ties where two names view one storage the same way
// (torch.Checkpoint.Aliases); a safetensors file, which cannot store one
// tensor twice, records them in its metadata under torch.AliasesKey (as
// torch.WriteSafetensors and package convert write them: see
// torch.ParseAliases). Both become a tiedStore: the component's stored
// tensors, then each tied name reading its kept tensor, so that entries,
// Items, Load, Plan and the executors see it as any other tensor. Its
// storedTensor is the kept tensor itself (its name, dtype, shape, bytes
// and checksum): Contents lists the kept tensor once, and convert writes
// it once, the ties in the metadata.

// tiedStore is a component's stored tensors followed by its tied names.
type tiedStore struct {
	tensorStore          // the stored tensors
	names       []string // the tied names, sorted
	kept        []int    // each tied name's kept tensor: its position in the stored tensors
	pos         map[string]int
	ties        map[string]string
	from        map[string]string // the file that records each tie
}

// tieSource is a store whose tensors may be tied: ties returns the tied
// names (tied name → kept name) and, for each, the file that records the
// tie (for errors).
type tieSource interface {
	ties() (ties, from map[string]string, err error)
}

// tie adds the tied names of s's ties to s, checked against its tensors:
// each kept name must be a stored tensor, no tied name may be one. It
// returns s itself when s has no ties.
func tie(s tensorStore) (tensorStore, error) {
	src, ok := s.(tieSource)
	if !ok {
		return s, nil
	}
	ties, from, err := src.ties()
	if err != nil || len(ties) == 0 {
		return s, err
	}
	fail := func(tied, msg string) error {
		return &Error{Kind: ErrResolve, Path: from[tied], Tensor: tied,
			Msg: fmt.Sprintf("tie (%s): %s", torch.AliasesKey, msg), Err: torch.ErrInvalidFormat}
	}
	t := &tiedStore{tensorStore: s, names: slices.Sorted(maps.Keys(ties)), pos: make(map[string]int, len(ties)), ties: ties, from: from}
	want := make(map[string]int, len(ties)) // kept name → position, -1 until found
	for _, tied := range t.names {
		kept := ties[tied]
		switch _, chain := ties[kept]; {
		case s.has(tied):
			return nil, fail(tied, "the tied name is also a stored tensor")
		case chain:
			return nil, fail(tied, fmt.Sprintf("it ties to %q, itself a tied name (a tie names a stored tensor directly)", kept))
		case !s.has(kept):
			return nil, fail(tied, fmt.Sprintf("it ties to %q, which is no tensor of the checkpoint", kept))
		}
		want[kept] = -1
	}
	for i := range s.count() {
		if info, _ := s.at(i); want[info.Name] == -1 {
			want[info.Name] = i
		}
	}
	for i, tied := range t.names {
		t.pos[tied] = s.count() + i
		t.kept = append(t.kept, want[ties[tied]])
	}
	return t, nil
}

// stored is the number of stored tensors: the first ones of Len.
func (t *tiedStore) stored() int { return t.tensorStore.count() }

// keptAt returns the position of the kept tensor of the i-th tensor when
// that is a tied name, else i.
func (t *tiedStore) keptAt(i int) int {
	if n := t.stored(); i >= n {
		return t.kept[i-n]
	}
	return i
}

func (t *tiedStore) count() int { return t.stored() + len(t.names) }

func (t *tiedStore) at(i int) (safetensors.TensorInfo, int) {
	info, file := t.tensorStore.at(t.keptAt(i))
	if i >= t.stored() {
		info.Name = t.names[i-t.stored()]
	}
	return info, file
}

func (t *tiedStore) info(name string) (safetensors.TensorInfo, string, bool) {
	kept, tied := t.ties[name]
	if !tied {
		return t.tensorStore.info(name)
	}
	info, file, ok := t.tensorStore.info(kept)
	info.Name = name
	return info, file, ok
}

func (t *tiedStore) has(name string) bool {
	_, tied := t.ties[name]
	return tied || t.tensorStore.has(name)
}

func (t *tiedStore) checksummed(name string) bool {
	if kept, tied := t.ties[name]; tied {
		name = kept
	}
	return t.tensorStore.checksummed(name)
}

func (t *tiedStore) checksummedAt(i int) bool { return t.tensorStore.checksummedAt(t.keptAt(i)) }

func (t *tiedStore) viewed(name string) (int64, bool) {
	if kept, tied := t.ties[name]; tied {
		name = kept
	}
	return t.tensorStore.viewed(name)
}

// metadata is the stored tensors' metadata with the ties under
// torch.AliasesKey, as torch.FormatAliases writes them.
func (t *tiedStore) metadata() map[string]string {
	m := t.tensorStore.metadata()
	if m == nil {
		m = map[string]string{}
	}
	m[torch.AliasesKey] = torch.FormatAliases(t.ties)
	return m
}

// warnings are the stored tensors' but package shard's about shards
// that record different ties: shard keeps one shard's value of a
// metadata key, where tie takes the union of every shard's ties.
func (t *tiedStore) warnings() []string {
	differ := fmt.Sprintf("metadata %q is ", torch.AliasesKey)
	return slices.DeleteFunc(t.tensorStore.warnings(), func(w string) bool { return strings.HasPrefix(w, differ) })
}

func (t *tiedStore) tensor(name string) (storedTensor, error) {
	if i, tied := t.pos[name]; tied {
		return t.tensorAt(i)
	}
	return t.tensorStore.tensor(name)
}

func (t *tiedStore) tensorAt(i int) (storedTensor, error) { return t.tensorStore.tensorAt(t.keptAt(i)) }

// storedLen is the number of s's stored tensors, its tied names aside.
func storedLen(s tensorStore) int {
	if t, ok := s.(*tiedStore); ok {
		return t.stored()
	}
	return s.count()
}

// ties reads the ties that the files' metadata records: the union of
// every file's (a shard may record ties to tensors of any shard), a tied
// name tied to two tensors being an error naming both files.
func (s shardStore) ties() (ties, from map[string]string, err error) {
	for i, f := range s.files() {
		v, ok := s.FileMetadata(i)[torch.AliasesKey]
		if !ok {
			continue
		}
		got, err := torch.ParseAliases(v)
		if err != nil {
			e := &Error{Kind: ErrResolve, Path: f, Err: err}
			if te, ok := err.(*torch.Error); ok {
				e.Tensor = te.Tensor
			}
			return nil, nil, e
		}
		if ties == nil {
			ties, from = map[string]string{}, map[string]string{}
		}
		for _, tied := range slices.Sorted(maps.Keys(got)) {
			kept := got[tied]
			if old, dup := ties[tied]; dup && old != kept {
				return nil, nil, &Error{Kind: ErrResolve, Path: f, Tensor: tied, Err: torch.ErrInvalidFormat,
					Msg: fmt.Sprintf("tie (%s): it ties to %q here but to %q in %s", torch.AliasesKey, kept, old, from[tied])}
			}
			ties[tied], from[tied] = kept, f
		}
	}
	return ties, from, nil
}

// checkLayout refuses a tie to a tensor of the scaled low-precision
// layout sch (a quantized weight's data or scales, a marker, an
// activation scale): the layout names each of its tensors by its own
// name, so a tie cannot stand for one.
func (t *tiedStore) checkLayout(sch *quant.Scheme) error {
	for _, tied := range t.names {
		kept := t.ties[tied]
		if sch.Consumed(kept) || slices.Contains(sch.Kept, kept) {
			return &Error{Kind: ErrResolve, Path: t.from[tied], Tensor: tied, Err: torch.ErrUnsupported,
				Msg: fmt.Sprintf("tie (%s): it ties to %q, a tensor of the %s layout, which names each of its tensors by its own name", torch.AliasesKey, kept, sch.Layout)}
		}
	}
	return nil
}
