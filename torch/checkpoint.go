package torch

import (
	"fmt"
	"io"
	"io/fs"
	"iter"
	"maps"
	"math/big"
	"math/bits"
	"strconv"
	"strings"
	"sync/atomic"
)

// Checkpoint is an opened PyTorch checkpoint: one zip archive or the shards
// of an index, read and checked in full by Open. Its tensors are views read
// on demand. A Checkpoint is safe for concurrent use until Close.
type Checkpoint struct {
	path    string
	files   []*shardFile
	tensors []*Tensor          // kept tensors, in checkpoint order
	byName  map[string]*Tensor // kept tensors and aliases
	aliases map[string]string  // alias -> kept name
	meta    map[string]string
	closed  atomic.Bool
}

// shardFile is one archive of a checkpoint.
type shardFile struct {
	path   string // for errors: the file, or NewReader's name
	ar     *archive
	closer io.Closer // nil for NewReader
}

// Option configures Open.
type Option func(*config)

type config struct {
	symlinkRoot string
	fsys        fs.FS // OpenFS's file system; nil: the operating system's
}

// WithSymlinkRoot lets the shards of an index be symbolic links that
// resolve inside dir, instead of inside the index's own folder (for the
// Hugging Face cache, whose snapshot files link into ../../blobs).
func WithSymlinkRoot(dir string) Option {
	return func(c *config) { c.symlinkRoot = dir }
}

// Open opens a PyTorch checkpoint: a zip archive written by torch.save
// (pytorch_model.bin, .pt, .pth; whatever its name) or a sharded set
// through its index (a path ending in ".json", such as
// pytorch_model.bin.index.json). It reads every data.pkl through the
// restricted unpickler and checks every tensor against its storage record
// before returning: a forbidden global, a malformed pickle or archive, or a
// tensor out of bounds fails here, before any data is read or written.
// The files stay open until Close.
func Open(path string, opts ...Option) (*Checkpoint, error) {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	return cfg.open(path)
}

// OpenFS is Open for the file or index name of fsys (a slash-separated
// name, see fs.ValidPath): the files must implement io.ReaderAt, as those
// of os.DirFS, testing/fstest.MapFS and package remote's file systems do.
// A file that is not regular is refused (before it is opened when fsys
// implements fs.StatFS), and an index's shards are bare names in its
// folder; an fs.FS has no symbolic links, so WithSymlinkRoot changes
// nothing.
func OpenFS(fsys fs.FS, name string, opts ...Option) (*Checkpoint, error) {
	if fsys == nil {
		return nil, &Error{Kind: ErrInvalidArgument, File: name, Msg: "nil file system"}
	}
	cfg := config{fsys: fsys}
	for _, o := range opts {
		o(&cfg)
	}
	return cfg.open(name)
}

// open opens a checkpoint file or, for a name ending in ".json", an index.
func (cfg config) open(path string) (*Checkpoint, error) {
	if strings.HasSuffix(path, ".json") {
		return cfg.openIndex(path)
	}
	r, size, err := cfg.openRegular(path)
	if err != nil {
		return nil, err
	}
	c := &Checkpoint{path: path}
	part, err := c.load(path, r, size, r)
	if err != nil {
		r.Close()
		return nil, err
	}
	if err := c.finish([]*loaded{part}); err != nil {
		r.Close()
		return nil, err
	}
	return c, nil
}

// NewReader reads a PyTorch zip checkpoint of the given size through r;
// name is used in errors only. Like Open, it reads and checks the whole
// pickle and every tensor's bounds first. Close does not close r.
func NewReader(r io.ReaderAt, size int64, name string) (*Checkpoint, error) {
	if r == nil || size < 0 {
		return nil, &Error{Kind: ErrInvalidArgument, File: name, Msg: "nil reader or negative size"}
	}
	c := &Checkpoint{path: name}
	part, err := c.load(name, r, size, nil)
	if err != nil {
		return nil, err
	}
	if err := c.finish([]*loaded{part}); err != nil {
		return nil, err
	}
	return c, nil
}

// Path returns the path given to Open, or NewReader's name.
func (c *Checkpoint) Path() string { return c.path }

// Len returns the number of tensors Tensors yields (aliases not counted).
func (c *Checkpoint) Len() int { return len(c.tensors) }

// Names returns the names of the tensors, in checkpoint order (aliases
// not included).
func (c *Checkpoint) Names() []string {
	out := make([]string, len(c.tensors))
	for i, t := range c.tensors {
		out[i] = t.name
	}
	return out
}

// Tensors yields each tensor once, with its name, in checkpoint order:
// the order of the pickle's dicts, shard after shard (in the order the
// index first names them). A name that is a tie of an earlier tensor (the
// same view of the same storage) is not yielded: see Aliases.
func (c *Checkpoint) Tensors() iter.Seq2[string, *Tensor] {
	return func(yield func(string, *Tensor) bool) {
		for _, t := range c.tensors {
			if !yield(t.name, t) {
				return
			}
		}
	}
}

// Tensor returns the tensor of that name. An alias resolves to the tensor
// it ties to, whose Name is the kept one.
func (c *Checkpoint) Tensor(name string) (*Tensor, error) {
	t, ok := c.byName[name]
	if !ok {
		return nil, &Error{Kind: ErrTensorNotFound, File: c.path, Tensor: name, Msg: "no tensor of that name"}
	}
	return t, nil
}

// Aliases returns the tied names: each name whose tensor is the same view
// (storage, dtype, offset, shape, strides) as an earlier one maps to that
// earlier, kept name. PyTorch state dicts tie, for example, an embedding
// and an output projection. The map is a copy; nil when there are none.
func (c *Checkpoint) Aliases() map[string]string { return maps.Clone(c.aliases) }

// Metadata returns the non-tensor values of the checkpoint as text under
// their dotted names: ints and floats as Python's repr writes them
// ("3", "0.0003"), strings as they are, True, False, None; a dtype as
// "torch.float16"; an empty dict, list or tuple as "{}", "[]" or "()".
// The map is a copy; nil when there are none.
func (c *Checkpoint) Metadata() map[string]string { return maps.Clone(c.meta) }

// Close closes the files Open opened. Reading a tensor afterwards fails
// with ErrClosed. Calling Close again returns nil.
func (c *Checkpoint) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	var first error
	for _, sf := range c.files {
		if sf.closer != nil {
			if err := sf.closer.Close(); err != nil && first == nil {
				first = &Error{Kind: ErrIO, File: sf.path, Msg: "close", Err: err}
			}
		}
	}
	return first
}

// loaded is one archive, read and checked: its tensors (ties included,
// under all their names) and non-tensor values, in order.
type loaded struct {
	sf      *shardFile
	tensors []*Tensor
	meta    []entry
}

// entry is a flattened value: a tensor or a scalar's text.
type entry struct {
	name string
	t    *tensorObj
	text string
}

// load reads the archive at r: its pickle, the flattened tensors and
// values, and every tensor checked against its storage record.
func (c *Checkpoint) load(path string, r io.ReaderAt, size int64, closer io.Closer) (*loaded, error) {
	ar, err := openArchive(r, size)
	if err != nil {
		return nil, withFile(err, path, "")
	}
	data, err := ar.pickle()
	if err != nil {
		return nil, withFile(err, path, ar.pkl)
	}
	root, _, err := unpickle(data, defaultLimits)
	if err != nil {
		return nil, withFile(err, path, ar.pkl)
	}
	entries, err := flatten(root, maxFlatten)
	if err != nil {
		return nil, withFile(err, path, ar.pkl)
	}
	sf := &shardFile{path: path, ar: ar, closer: closer}
	part := &loaded{sf: sf}
	for _, e := range entries {
		if e.t == nil {
			part.meta = append(part.meta, e)
			continue
		}
		t, err := c.newTensor(sf, e.name, e.t)
		if err != nil {
			return nil, err
		}
		part.tensors = append(part.tensors, t)
	}
	return part, nil
}

// newTensor checks a tensor's view against its storage record and returns
// it.
func (c *Checkpoint) newTensor(sf *shardFile, name string, o *tensorObj) (*Tensor, error) {
	record := sf.ar.prefix + "data/" + o.st.key
	fail := func(kind ErrorKind, msg string) error {
		return &Error{Kind: kind, File: sf.path, Record: record, Tensor: name, Msg: msg}
	}
	if o.unsupported != "" {
		return nil, fail(ErrUnsupported, "unsupported value: "+o.unsupported)
	}
	isz := int64(o.dt.Bits() / 8)
	ssz := int64(o.st.dt.Bits() / 8)
	storeBytes, ok := mul(o.st.numel, ssz)
	if !ok {
		return nil, fail(ErrInvalidFormat, fmt.Sprintf("storage size: storage of %d elements of %s overflows", o.st.numel, o.st.typ))
	}
	recOff, err := sf.ar.storageRecord(o.st.key, storeBytes)
	if err != nil {
		return nil, withFile(err, sf.path, "")
	}
	if o.offset < 0 {
		return nil, fail(ErrInvalidFormat, fmt.Sprintf("tensor bounds: negative storage offset %d", o.offset))
	}
	numel, last := int64(1), o.offset // last: the highest element index of the view
	for i := range o.shape {
		if o.shape[i] < 0 || o.stride[i] < 0 {
			return nil, fail(ErrInvalidFormat, fmt.Sprintf("tensor bounds: size %v, stride %v: negative", o.shape, o.stride))
		}
		if numel, ok = mul(numel, o.shape[i]); !ok {
			return nil, fail(ErrInvalidFormat, fmt.Sprintf("tensor bounds: size %v overflows", o.shape))
		}
	}
	if numel > 0 {
		for i := range o.shape {
			step, ok := mul(o.shape[i]-1, o.stride[i])
			if !ok {
				return nil, fail(ErrInvalidFormat, fmt.Sprintf("tensor bounds: size %v, stride %v overflow", o.shape, o.stride))
			}
			if last, ok = add(last, step); !ok {
				return nil, fail(ErrInvalidFormat, fmt.Sprintf("tensor bounds: size %v, stride %v overflow", o.shape, o.stride))
			}
		}
	} else {
		last = o.offset - 1 // nothing is read; the offset may be the storage's end
	}
	end, ok := mul(last+1, isz) // bytes of the storage the view reaches
	if !ok || end > storeBytes {
		return nil, fail(ErrInvalidFormat, fmt.Sprintf("tensor bounds: offset %d, size %v, stride %v in elements of %s reach past the storage's %d bytes",
			o.offset, o.shape, o.stride, o.dt, storeBytes))
	}
	size, ok := mul(numel, isz)
	if !ok || size > storeBytes {
		return nil, fail(ErrInvalidFormat, fmt.Sprintf("tensor bounds: size %v has more elements than the storage's %d bytes hold: an expanded or overlapping view, refused so that no copy outgrows the file",
			o.shape, storeBytes))
	}
	t := &Tensor{c: c, sf: sf, name: name, dt: o.dt, shape: o.shape, stride: o.stride, offset: o.offset,
		size: size, storage: o.st.key, rec: sf.ar.records[record]}
	t.contig = contiguous(o.shape, o.stride)
	t.base = recOff + o.offset*isz
	if numel > 0 {
		t.extent = (last - o.offset + 1) * isz
	}
	return t, nil
}

// contiguous reports whether strides are the row-major ones for shape
// (dimensions of size 1 may have any stride; an empty tensor is).
func contiguous(shape, stride []int64) bool {
	want := int64(1)
	for i := len(shape) - 1; i >= 0; i-- {
		if shape[i] == 0 {
			return true
		}
		if shape[i] != 1 && stride[i] != want {
			return false
		}
		want *= shape[i]
	}
	return true
}

func mul(a, b int64) (int64, bool) {
	if a < 0 || b < 0 {
		return 0, false
	}
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > 1<<63-1 {
		return 0, false
	}
	return int64(lo), true
}

func add(a, b int64) (int64, bool) {
	s := a + b
	if (s > a) != (b > 0) {
		return 0, false
	}
	return s, true
}

// finish merges the loaded archives: names unique across them, ties found
// within each, metadata collected.
func (c *Checkpoint) finish(parts []*loaded) error {
	c.byName = make(map[string]*Tensor)
	seen := make(map[string]string) // name -> file, for tensors and values alike
	claim := func(name, file string) error {
		if prev, dup := seen[name]; dup {
			where := ""
			if prev != file {
				where = " (also in " + prev + ")"
			}
			return &Error{Kind: ErrUnsupported, File: file, Tensor: name, Msg: "duplicate name: two values have this name" + where}
		}
		seen[name] = file
		return nil
	}
	for _, p := range parts {
		c.files = append(c.files, p.sf)
		kept := make(map[string]*Tensor) // view key -> first tensor of that view
		for _, t := range p.tensors {
			if err := claim(t.name, p.sf.path); err != nil {
				return err
			}
			k := viewKey(t)
			if first, ok := kept[k]; ok {
				if c.aliases == nil {
					c.aliases = make(map[string]string)
				}
				c.aliases[t.name] = first.name
				c.byName[t.name] = first
				continue
			}
			kept[k] = t
			c.tensors = append(c.tensors, t)
			c.byName[t.name] = t
		}
		for _, e := range p.meta {
			if err := claim(e.name, p.sf.path); err != nil {
				return err
			}
			if c.meta == nil {
				c.meta = make(map[string]string)
			}
			c.meta[e.name] = e.text
		}
	}
	return nil
}

// viewKey identifies a view within one archive.
func viewKey(t *Tensor) string {
	var b strings.Builder
	b.WriteString(t.storage)
	fmt.Fprintf(&b, "\x00%d\x00%d", t.dt, t.offset)
	for i := range t.shape {
		fmt.Fprintf(&b, "\x00%d:%d", t.shape[i], t.stride[i])
	}
	return b.String()
}

// flatten walks the unpickled object and returns its tensors and scalar
// values under dotted names, in order. The top level must be a dict (a
// state dict, or a training checkpoint holding one). Dicts and lists nest
// with a dot ("model.enc.weight", "optimizer.param_groups.0.lr"). maxVisits
// bounds the walk, so that a pickle of shared containers cannot make it
// exponential.
func flatten(root any, maxVisits int) ([]entry, error) {
	d, ok := root.(*pyDict)
	if !ok {
		return nil, &Error{Kind: ErrUnsupported, Msg: fmt.Sprintf("unsupported value: the checkpoint holds a %s, not a dict of tensors (a state dict)", typeName(root))}
	}
	f := &flattener{max: maxVisits, onPath: make(map[any]bool)}
	if err := f.walk("", d, 0); err != nil {
		return nil, err
	}
	return f.out, nil
}

// Bounds on flattening: container nesting, the length of one dotted name,
// the bytes of all names together (names are built by concatenation, so a
// pickle of shared containers with long keys could otherwise make them
// outgrow the input by far).
const (
	maxFlatten   = 1 << 22 // values visited
	maxNesting   = 256
	maxNameLen   = 4096
	maxNameBytes = 64 << 20
)

type flattener struct {
	out       []entry
	visits    int
	max       int
	nameBytes int
	onPath    map[any]bool // containers being walked: a second visit is a cycle
}

func (f *flattener) walk(name string, v any, depth int) error {
	f.visits++
	if f.visits > f.max {
		return &Error{Kind: ErrUnsupported, Msg: fmt.Sprintf("limit: more than %d values to flatten", f.max)}
	}
	if depth > maxNesting {
		return &Error{Kind: ErrUnsupported, Msg: fmt.Sprintf("limit: %.200q: containers nested more than %d deep", name, maxNesting)}
	}
	if len(name) > maxNameLen {
		return &Error{Kind: ErrUnsupported, Msg: fmt.Sprintf("limit: %.200q...: a name longer than %d bytes", name, maxNameLen)}
	}
	if f.nameBytes += len(name); f.nameBytes > maxNameBytes {
		return &Error{Kind: ErrUnsupported, Msg: fmt.Sprintf("limit: names longer than %d bytes in all", maxNameBytes)}
	}
	join := func(k string) string {
		if depth == 0 {
			return k
		}
		return name + "." + k
	}
	enter := func(p any) error {
		if f.onPath[p] {
			return &Error{Kind: ErrUnsupported, Msg: fmt.Sprintf("unsupported value: %q: a container that contains itself", name)}
		}
		f.onPath[p] = true
		return nil
	}
	switch v := v.(type) {
	case *tensorObj:
		if name == "" {
			return &Error{Kind: ErrUnsupported, Msg: "unsupported value: a tensor with an empty name"}
		}
		f.out = append(f.out, entry{name: name, t: v})
	case *pyDict:
		if len(v.keys) == 0 && depth > 0 {
			f.out = append(f.out, entry{name: name, text: "{}"})
			return nil
		}
		if err := enter(v); err != nil {
			return err
		}
		for i, k := range v.keys {
			ks, ok := scalarText(k)
			if !ok {
				return &Error{Kind: ErrUnsupported, Msg: fmt.Sprintf("unsupported value: %q: dict key of type %s", name, typeName(k))}
			}
			if err := f.walk(join(ks), v.vals[i], depth+1); err != nil {
				return err
			}
		}
		delete(f.onPath, v)
	case *pyList:
		if len(v.items) == 0 {
			f.out = append(f.out, entry{name: name, text: "[]"})
			return nil
		}
		if err := enter(v); err != nil {
			return err
		}
		for i, x := range v.items {
			if err := f.walk(join(strconv.Itoa(i)), x, depth+1); err != nil {
				return err
			}
		}
		delete(f.onPath, v)
	case pyTuple:
		if len(v) == 0 {
			f.out = append(f.out, entry{name: name, text: "()"})
			return nil
		}
		for i, x := range v {
			if err := f.walk(join(strconv.Itoa(i)), x, depth+1); err != nil {
				return err
			}
		}
	case *pyGlobal:
		if v.kind != gDType {
			return &Error{Kind: ErrUnsupported, Global: v.spelled, Msg: fmt.Sprintf("unsupported value: %q: the value is a class or function, not data", name)}
		}
		f.out = append(f.out, entry{name: name, text: "torch." + strings.TrimPrefix(v.spelled, "torch ")})
	case string, int64, *big.Int, float64, bool, pyNone:
		s, _ := scalarText(v)
		f.out = append(f.out, entry{name: name, text: s})
	default:
		return &Error{Kind: ErrUnsupported, Msg: fmt.Sprintf("unsupported value: %q: a %s value has no text form for the metadata", name, typeName(v))}
	}
	return nil
}
