package shard

import (
	"errors"
	"fmt"
	"io/fs"
	"iter"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/ckpt-go/ckpt/internal/srcfs"
	"github.com/ckpt-go/ckpt/safetensors"
)

// Option configures Open.
type Option func(*openConfig)

type openConfig struct {
	openOpts []safetensors.OpenOption
	src      srcfs.FS // where the files are, and the symlink rule
}

func buildConfig(opts []Option) openConfig {
	var c openConfig
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return c
}

// WithFollowSymlinks is the one opt-in to symbolic links that lead out of
// their folder. By default every file a folder resolves to (here: each
// shard of an index; in package variant also the index, the single weights
// file, model_index.json and component folders) must, its links evaluated,
// lie inside that folder, or it is refused with ErrInsecurePath. With this
// option such links may lead anywhere. What they lead to must still be a
// regular file (ErrNotRegular otherwise), and index entries must still be
// bare file names.
//
// It exists for the Hugging Face cache, whose snapshot folders
// (models--org--name/snapshots/REV/) hold symlinks to ../../blobs/SHA.
func WithFollowSymlinks() Option {
	return func(c *openConfig) { c.src = c.src.Following(true) }
}

// WithFS makes Open, ResolveFile and ReadIndexFS read the files of fsys
// instead of the operating system's: paths are then fs.FS names
// (slash-separated, unrooted; see fs.ValidPath), an index's shards are
// looked up beside it in fsys, and shards are opened with
// safetensors.OpenFS (a file that implements io.ReaderAt, as package
// remote's do, is read on demand; see OpenFS). An fs.FS has no symbolic
// links: WithFollowSymlinks has nothing to allow there. A nil fsys is the
// operating system's.
func WithFS(fsys fs.FS) Option {
	return func(c *openConfig) { c.src = c.src.WithFS(fsys) }
}

// WithSource sets where the files are and whether links may leave their
// folder, as one value, replacing what WithFS and WithFollowSymlinks set
// before it. It is how the module's own packages (the root package,
// variant, convert, integrity) pass the source their entry point built;
// srcfs.FS is internal, so other programs use WithFS and
// WithFollowSymlinks.
func WithSource(src srcfs.FS) Option {
	return func(c *openConfig) { c.src = src }
}

// ResolveFile applies the symlink rule of WithFollowSymlinks to the file or
// folder at path, a name inside the folder filepath.Dir(path): it returns
// path with its symbolic links evaluated, or an *Error of kind
// ErrInsecurePath naming path when they lead out of that folder and opts do
// not include WithFollowSymlinks. A missing file, a dangling link or a loop
// give filepath.EvalSymlinks' error (matching fs.ErrNotExist for the first
// two). ResolveFile does not open anything; package variant uses it for
// every file it resolves a folder to.
func ResolveFile(path string, opts ...Option) (string, error) {
	cfg := buildConfig(opts)
	return cfg.resolve(path, "")
}

// resolve is ResolveFile; the error names shard when it is set, path
// otherwise.
func (cfg *openConfig) resolve(path, shard string) (string, error) {
	dir := cfg.src.Dir(path)
	real, inside, err := cfg.src.Resolve(path)
	if err != nil {
		return "", err
	}
	if !inside && !cfg.src.Follow() {
		e := &Error{Kind: ErrInsecurePath, Path: path, Shard: shard,
			Msg: fmt.Sprintf("symlink leads to %s, outside %s (WithFollowSymlinks allows it)", real, dir)}
		if shard != "" {
			e.Path = ""
		}
		return "", e
	}
	return real, nil
}

// WithOpenOptions passes options to safetensors.Open for every shard.
func WithOpenOptions(opts ...safetensors.OpenOption) Option {
	return func(c *openConfig) { c.openOpts = append(c.openOpts, opts...) }
}

// Checkpoint is one logical checkpoint made of one or more safetensors
// files: a sharded set described by an index, or a single file. Every
// tensor is looked up by name across all shards.
//
// Open validates the whole set from the shards' headers; the shards
// themselves are opened lazily, on the first access to one of their
// tensors, and stay open until Close. A Checkpoint is safe for concurrent
// use by several goroutines.
type Checkpoint struct {
	path     string
	index    *Index // nil for a single file
	shards   []*shardFile
	single   *safetensors.Header // a single file's header: its index and order serve as lookup and names
	pos      map[string]int32    // for an index: shard name -> position in shards
	names    []string            // for an index
	order    []entry             // for an index: where names[i] is
	meta     map[string]string
	warnings []string
	unmapped []string
	cfg      openConfig

	mu     sync.RWMutex // guards closed; held for reading while a tensor is handed out
	closed bool

	errMu   sync.Mutex
	iterErr error
}

// entry locates a tensor: its shard, and its position in that shard's
// header (8 bytes, so that the name map stays small for large checkpoints).
type entry struct {
	shard int32
	idx   int32
}

type shardFile struct {
	name   string // as the index spells it
	path   string
	header *safetensors.Header
	mapped []bool // for an index: which of header.Tensors the index maps to this shard
	sums   bool   // the header names checksums (some metadata key is one)

	mu sync.Mutex
	f  *safetensors.File
}

// Open opens a checkpoint: path is either a shard index
// (*.safetensors.index*.json, or any name ending in ".json") or a single
// safetensors file. For an index, before returning it checks that every
// shard is a bare file name in the index's folder (symlinks may not lead out
// of it, see WithFollowSymlinks), that every shard exists, is a regular
// file and has a valid header, and that every mapped tensor is in its
// shard's header. A tensor that is also present in another shard is taken
// from the mapped one, with a warning; tensors in shards that the index does
// not map are reported in Warnings and Unmapped and are not part of the
// checkpoint. A folder is refused with ErrInvalidArgument: resolve it with
// package variant first.
//
// path itself, named by the caller, is followed through its symbolic links
// wherever they lead (shards are then looked up beside path, not beside
// the link's target); it must be a regular file (ErrNotRegular). No file is
// opened in a way that blocks: a FIFO or a device is refused before it is
// read.
func Open(path string, opts ...Option) (*Checkpoint, error) {
	c := &Checkpoint{path: path, cfg: buildConfig(opts)}
	if strings.HasSuffix(path, ".json") {
		if err := c.openIndex(); err != nil {
			return nil, err
		}
		return c, nil
	}
	st, err := c.cfg.src.Stat(path) // stat never blocks; the open below checks again
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, &Error{Kind: ErrMissingShard, Path: path, Err: err}
		}
		return nil, &Error{Kind: ErrInvalidShard, Path: path, Err: err}
	}
	if st.IsDir() {
		return nil, &Error{Kind: ErrInvalidArgument, Path: path, Msg: "unsupported path: a folder, not an index or safetensors file (resolve folders with package variant)"}
	}
	h, err := c.cfg.readHeader(path)
	if err != nil {
		return nil, shardErr(path, "", err)
	}
	c.shards = []*shardFile{{name: c.cfg.src.Base(path), path: path, header: h, sums: namesChecksums(h)}}
	c.single = h
	c.meta = maps.Clone(h.Metadata)
	return c, nil
}

func (c *Checkpoint) openIndex() error {
	ix, err := readIndex(c.cfg.src, c.path)
	if err != nil {
		return err
	}
	c.index = ix
	c.warnings = append(c.warnings, ix.Warnings...)
	dir := c.cfg.src.Dir(c.path)
	c.pos = make(map[string]int32, len(ix.shards))
	for i, name := range ix.shards { // what ix.Shards returns
		p := c.cfg.src.Join(dir, name)
		real, err := c.resolveShard(name, p)
		if err != nil {
			return err
		}
		h, err := c.cfg.readHeader(real)
		if err != nil {
			return shardErr(c.path, name, err)
		}
		c.shards = append(c.shards, &shardFile{name: name, path: p, header: h, mapped: make([]bool, len(h.Tensors)), sums: namesChecksums(h)})
		c.pos[name] = int32(i)
	}

	// Every mapped tensor must be in its shard. The index knows each
	// entry's shard (no lookup by name), and writers list a shard's
	// tensors in the index's (name) order, so that the tensor after the
	// previous one found is tried before the shard's name index.
	next := make([]int, len(c.shards)) // per shard: the position after the last tensor found
	for i, name := range ix.order {
		s := c.shards[ix.shardOf[i]]
		idx, ok := next[ix.shardOf[i]], true
		if idx >= len(s.header.Tensors) || s.header.Tensors[idx].Name != name {
			idx, ok = s.header.Index(name)
		}
		if !ok {
			msg := "the index maps it to this shard, whose header does not have it"
			var others []string
			for _, o := range c.shards {
				if _, ok := o.header.Lookup(name); ok {
					others = append(others, o.name)
				}
			}
			if len(others) > 0 {
				msg += fmt.Sprintf(" (it is in %s: the index names the wrong shard)", strings.Join(others, ", "))
			}
			return &Error{Kind: ErrInvalidIndex, Path: c.path, Shard: s.name, Tensor: name, Msg: "tensor missing from shard: " + msg}
		}
		s.mapped[idx] = true
		next[ix.shardOf[i]] = idx + 1
	}

	// Duplicates and unmapped tensors, in shard order, and the logical
	// order: shard by shard, in data order (each header is sorted by
	// offset), tensors at the same offset (empty ones) by name.
	var total int64
	c.names = make([]string, 0, len(ix.order))
	c.order = make([]entry, 0, len(ix.order))
	for si, s := range c.shards {
		var unmapped []string
		run, runBegin := len(c.names), int64(-1) // tensors of c.names at offset runBegin
		for j, ti := range s.header.Tensors {
			if !s.mapped[j] {
				// Not mapped to this shard: to none, or to another one
				// (a header has no name twice).
				if other, ok := ix.WeightMap[ti.Name]; !ok {
					unmapped = append(unmapped, ti.Name)
				} else {
					c.warnings = append(c.warnings, fmt.Sprintf("tensor %q is in %s and %s; taking it from %s as the index says",
						ti.Name, s.name, other, other))
				}
				continue
			}
			total += ti.End - ti.Begin
			if ti.Begin != runBegin {
				c.sortNames(run)
				run, runBegin = len(c.names), ti.Begin
			}
			c.names = append(c.names, ti.Name)
			c.order = append(c.order, entry{shard: int32(si), idx: int32(j)})
		}
		c.sortNames(run)
		if len(unmapped) > 0 {
			c.unmapped = append(c.unmapped, unmapped...)
			c.warnings = append(c.warnings, fmt.Sprintf("%s has %d tensor(s) the index does not map, not loaded: %s",
				s.name, len(unmapped), abbreviate(unmapped, 5)))
		}
	}
	if ix.TotalSize != 0 && ix.TotalSize != total {
		c.warnings = append(c.warnings, fmt.Sprintf("metadata.total_size is %d but the mapped tensors hold %d bytes", ix.TotalSize, total))
	}

	// Metadata: union of the shards' __metadata__, first shard wins;
	// checksums belong to their file (Checksummed).
	c.meta = make(map[string]string)
	from := make(map[string]string)
	for _, s := range c.shards {
		keys := slices.Sorted(maps.Keys(s.header.Metadata))
		for _, k := range keys {
			if safetensors.IsChecksumKey(k) {
				continue
			}
			v := s.header.Metadata[k]
			if old, ok := c.meta[k]; ok {
				if old != v {
					c.warnings = append(c.warnings, fmt.Sprintf("metadata %q is %q in %s but %q in %s; keeping %q",
						k, old, from[k], v, s.name, old))
				}
				continue
			}
			c.meta[k] = v
			from[k] = s.name
		}
	}
	return nil
}

// sortNames sorts the names from position from on, with their entries
// (tensors at one offset: empty ones, ordered by name).
func (c *Checkpoint) sortNames(from int) {
	names, order := c.names[from:], c.order[from:]
	if len(names) < 2 {
		return
	}
	perm := make([]int, len(names))
	for i := range perm {
		perm[i] = i
	}
	slices.SortFunc(perm, func(a, b int) int { return strings.Compare(names[a], names[b]) })
	sn, so := slices.Clone(names), slices.Clone(order)
	for i, p := range perm {
		names[i], order[i] = sn[p], so[p]
	}
}

// resolveShard checks that the shard file p (named name in the index)
// exists and that its links stay in the index's folder (unless
// WithFollowSymlinks), and returns the path its links lead to.
func (c *Checkpoint) resolveShard(name, p string) (string, error) {
	if _, err := c.cfg.src.Lstat(p); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", &Error{Kind: ErrMissingShard, Path: c.path, Shard: name,
				Msg: fmt.Sprintf("not found in %s", c.cfg.src.Dir(p))}
		}
		return "", &Error{Kind: ErrInvalidShard, Path: c.path, Shard: name, Err: err}
	}
	real, err := c.cfg.resolve(p, name)
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			e.Path = c.path
			return "", e
		}
		if errors.Is(err, fs.ErrNotExist) {
			return "", &Error{Kind: ErrMissingShard, Path: c.path, Shard: name, Msg: "dangling symlink", Err: err}
		}
		return "", &Error{Kind: ErrInvalidShard, Path: c.path, Shard: name, Err: err}
	}
	return real, nil
}

// namesChecksums reports whether some metadata key of h is a checksum's.
func namesChecksums(h *safetensors.Header) bool {
	for k := range h.Metadata {
		if safetensors.IsChecksumKey(k) {
			return true
		}
	}
	return false
}

// readHeader reads the header of the safetensors file at path.
func (cfg *openConfig) readHeader(path string) (*safetensors.Header, error) {
	if fsys := cfg.src.FS(); fsys != nil {
		return safetensors.ReadHeaderFS(fsys, path)
	}
	return safetensors.ReadHeaderFile(path)
}

// shardErr wraps an error of package safetensors about the file of shard
// (or the single file path when shard is ""): ErrNotRegular keeps its kind,
// anything else is ErrInvalidShard.
func shardErr(path, shard string, err error) error {
	kind := ErrInvalidShard
	if errors.Is(err, safetensors.ErrNotRegular) {
		kind = ErrNotRegular
	}
	return &Error{Kind: kind, Path: path, Shard: shard, Err: err}
}

func abbreviate(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:n], ", ") + fmt.Sprintf(", and %d more", len(names)-n)
}

// Path returns the path Open was given.
func (c *Checkpoint) Path() string { return c.path }

// Index returns the parsed index, or nil for a single file.
func (c *Checkpoint) Index() *Index { return c.index }

// Len returns the number of tensors.
func (c *Checkpoint) Len() int {
	if c.single != nil {
		return len(c.single.Tensors)
	}
	return len(c.names)
}

// nameAt returns the i-th name in Names order.
func (c *Checkpoint) nameAt(i int) string {
	if c.single != nil {
		return c.single.Tensors[i].Name
	}
	return c.names[i]
}

// lookup locates the tensor called name. For an index there is no map of
// its own: the index's weight map names the shard, whose header's name
// index gives the position (only the one when there is a single shard),
// and the shard's mapped flags keep to what Open validated.
func (c *Checkpoint) lookup(name string) (entry, bool) {
	if c.single != nil {
		i, ok := c.single.Index(name)
		return entry{idx: int32(i)}, ok
	}
	var si int32
	if len(c.shards) > 1 {
		var ok bool
		if si, ok = c.pos[c.index.WeightMap[name]]; !ok {
			return entry{}, false
		}
	}
	s := c.shards[si]
	i, ok := s.header.Index(name)
	if !ok || !s.mapped[i] {
		return entry{}, false
	}
	// A header holds fewer than 2^31 tensors (MaxHeaderSize), an index
	// fewer than 2^31 shards.
	return entry{shard: si, idx: int32(i)}, true
}

// Names returns the tensor names: shard by shard (in file name order), and
// within a shard in data order.
func (c *Checkpoint) Names() []string {
	out := make([]string, c.Len())
	for i := range out {
		out[i] = c.nameAt(i)
	}
	return out
}

// At returns the i-th tensor in Names order (0 ≤ i < Len) without a lookup
// by name: its description and the position of its file in Files. It is
// how a reader walks a large checkpoint.
func (c *Checkpoint) At(i int) (info safetensors.TensorInfo, file int) {
	if c.single != nil {
		return c.single.Tensors[i], 0
	}
	e := c.order[i]
	return c.shards[e.shard].header.Tensors[e.idx], int(e.shard)
}

// Checksummed reports whether the header of the file holding the tensor
// name names a checksum for it (safetensors.ChecksumPrefix).
func (c *Checkpoint) Checksummed(name string) bool {
	e, ok := c.lookup(name)
	return ok && c.checksummed(e, name)
}

// ChecksummedAt is Checksummed of the i-th tensor in Names order (the
// position At describes), without looking the name up. It panics when i
// is out of range, as a slice does.
func (c *Checkpoint) ChecksummedAt(i int) bool {
	e := c.entryAt(i)
	return c.checksummed(e, c.shards[e.shard].header.Tensors[e.idx].Name)
}

func (c *Checkpoint) checksummed(e entry, name string) bool {
	s := c.shards[e.shard]
	if !s.sums {
		return false
	}
	_, has := s.header.Metadata[safetensors.ChecksumPrefix+name]
	return has
}

// Has reports whether the checkpoint has a tensor called name.
func (c *Checkpoint) Has(name string) bool {
	_, ok := c.lookup(name)
	return ok
}

// Info returns a tensor's description and the path of its file, without
// opening any shard.
func (c *Checkpoint) Info(name string) (info safetensors.TensorInfo, file string, ok bool) {
	e, ok := c.lookup(name)
	if !ok {
		return safetensors.TensorInfo{}, "", false
	}
	s := c.shards[e.shard]
	return s.header.Tensors[e.idx], s.path, true
}

// Metadata returns the shards' __metadata__ merged (a key with different
// values in different shards keeps the first shard's value, with a
// warning), without the checksum keys, which describe their own file
// (Checksummed; safetensors.ChecksumPrefix). The map is a copy.
func (c *Checkpoint) Metadata() map[string]string { return maps.Clone(c.meta) }

// FileMetadata returns the __metadata__ of the i-th file of Files, as its
// header has it (checksum keys included), without opening the file. The
// map is a copy. It panics when i is out of range, as a slice does.
func (c *Checkpoint) FileMetadata(i int) map[string]string {
	return maps.Clone(c.shards[i].header.Metadata)
}

// Files returns the paths of the checkpoint's safetensors files, sorted.
func (c *Checkpoint) Files() []string {
	out := make([]string, len(c.shards))
	for i, s := range c.shards {
		out[i] = s.path
	}
	return out
}

// Warnings returns what Open noticed but tolerated: tensors present in two
// shards, unmapped tensors, conflicting metadata, index oddities.
func (c *Checkpoint) Warnings() []string { return slices.Clone(c.warnings) }

// Unmapped returns the tensors found in shard headers that the index does
// not map. They are not part of the checkpoint.
func (c *Checkpoint) Unmapped() []string { return slices.Clone(c.unmapped) }

// Tensor returns the named tensor, opening its shard if needed. An unknown
// name gives an *Error of kind ErrTensorNotFound.
func (c *Checkpoint) Tensor(name string) (*safetensors.Tensor, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return nil, &Error{Kind: ErrClosed, Path: c.path, Tensor: name}
	}
	e, ok := c.lookup(name)
	if !ok {
		return nil, &Error{Kind: ErrTensorNotFound, Path: c.path, Tensor: name}
	}
	return c.tensor(e, name)
}

// TensorAt returns the i-th tensor in Names order (the position At
// describes), opening its shard if needed, as Tensor does without looking
// the name up. It panics when i is out of range, as a slice does.
func (c *Checkpoint) TensorAt(i int) (*safetensors.Tensor, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	e := c.entryAt(i)
	name := c.shards[e.shard].header.Tensors[e.idx].Name
	if c.closed {
		return nil, &Error{Kind: ErrClosed, Path: c.path, Tensor: name}
	}
	return c.tensor(e, name)
}

// entryAt locates the i-th tensor in Names order.
func (c *Checkpoint) entryAt(i int) entry {
	if c.single != nil {
		_ = c.single.Tensors[i] // out of range: panic here
		return entry{idx: int32(i)}
	}
	return c.order[i]
}

// tensor returns the view of the tensor e (called name), opening its
// shard if needed. The caller holds c.mu for reading.
func (c *Checkpoint) tensor(e entry, name string) (*safetensors.Tensor, error) {
	s := c.shards[e.shard]
	f, err := c.open(s)
	if err != nil {
		return nil, err
	}
	var t *safetensors.Tensor
	if f.Header() == s.header { // opened WithHeader: the position lookup found holds
		t, err = f.TensorAt(int(e.idx))
	} else {
		t, err = f.Tensor(name)
	}
	if err != nil {
		return nil, &Error{Kind: ErrInvalidShard, Path: c.path, Shard: s.name, Tensor: name, Err: err}
	}
	return t, nil
}

// open opens a shard on first use. The caller holds c.mu for reading.
func (c *Checkpoint) open(s *shardFile) (*safetensors.File, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f != nil {
		return s.f, nil
	}
	path := s.path
	if c.index != nil {
		// The folder may have changed since Open validated it: a shard
		// replaced by a symlink leaving the folder is refused here too,
		// and what is opened is what was checked.
		real, err := c.resolveShard(s.name, s.path)
		if err != nil {
			return nil, err
		}
		path = real
	}
	// Reuse the header parsed by Open: safetensors compares the file's
	// size and header bytes with it instead of parsing them again.
	opts := append(slices.Clip(c.cfg.openOpts), safetensors.WithHeader(s.header))
	var f *safetensors.File
	var err error
	if fsys := c.cfg.src.FS(); fsys != nil {
		f, err = safetensors.OpenFS(fsys, path, opts...)
	} else {
		f, err = safetensors.Open(path, opts...)
	}
	if errors.Is(err, safetensors.ErrFileChanged) {
		return nil, &Error{Kind: ErrInvalidShard, Path: c.path, Shard: s.name, Msg: "the file changed since the checkpoint was opened", Err: err}
	}
	if err != nil {
		return nil, shardErr(c.path, s.name, err)
	}
	s.f = f
	return f, nil
}

// Tensors iterates over all tensors in Names order, opening shards as it
// reaches them. If a shard cannot be opened the iteration stops; Err then
// returns the error.
func (c *Checkpoint) Tensors() iter.Seq2[string, *safetensors.Tensor] {
	return func(yield func(string, *safetensors.Tensor) bool) {
		c.setErr(nil)
		for i := range c.Len() {
			name := c.nameAt(i)
			t, err := c.TensorAt(i)
			if err != nil {
				c.setErr(err)
				return
			}
			if !yield(name, t) {
				return
			}
		}
	}
}

// All iterates over all tensors in Names order, yielding an error (and a nil
// tensor) for a tensor whose shard cannot be opened.
func (c *Checkpoint) All() iter.Seq2[*safetensors.Tensor, error] {
	return func(yield func(*safetensors.Tensor, error) bool) {
		for i := range c.Len() {
			if !yield(c.TensorAt(i)) {
				return
			}
		}
	}
}

func (c *Checkpoint) setErr(err error) {
	c.errMu.Lock()
	c.iterErr = err
	c.errMu.Unlock()
}

// Err returns the error that ended the most recent Tensors iteration early,
// or nil.
func (c *Checkpoint) Err() error {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	return c.iterErr
}

// Close closes every shard that was opened. Tensors obtained earlier must
// not be read afterwards. Close is idempotent.
func (c *Checkpoint) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	var errs []error
	for _, s := range c.shards {
		s.mu.Lock()
		if s.f != nil {
			if err := s.f.Close(); err != nil {
				errs = append(errs, &Error{Kind: ErrInvalidShard, Path: c.path, Shard: s.name, Err: err})
			}
			s.f = nil
		}
		s.mu.Unlock()
	}
	return errors.Join(errs...)
}
