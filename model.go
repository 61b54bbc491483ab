package ckpt

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/srcfs"
	"github.com/ckpt-go/ckpt/quant"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/shard"
	"github.com/ckpt-go/ckpt/variant"
)

// Model is a checkpoint opened for loading: one or more components (a
// pipeline's transformer, text encoder, VAE, ...; a single file, index or
// component folder is a model with one component), the dtype policy, and
// what was detected from headers and configs. Open reads only headers,
// indexes and config files; tensor data is read by Load, LoadTensor and
// the Items' Produce and Parts. A Model is safe for concurrent use; Close releases the files.
type Model struct {
	path     string
	name     string   // path as a name of src
	src      srcfs.FS // where the files are: the operating system or an fs.FS
	ownsFS   bool     // src was opened for a location: Close closes it
	cfg      config
	pipeline *variant.PipelinePlan // nil for a file
	comps    []*modelComponent

	mu     sync.Mutex
	closed bool
}

// modelComponent is one component of a Model with its resolved files, detected
// quantization layout and per-tensor decisions.
type modelComponent struct {
	name     string
	dir      string
	vplan    *variant.Plan // nil when opened from a file
	ck       tensorStore
	scheme   *quant.Scheme
	files    []string
	entries  []*entry          // logical tensors in file order, sorted by entryOrder
	weights  map[string]*entry // the quantized weights by logical name (the others are found by position, entry)
	strategy readStrategy
	why      string // why this read strategy
}

// entry is one logical tensor of a component.
type entry struct {
	name     string
	shape    []int64
	begin    int64 // data offset in its file, for ordering
	inBytes  int64 // stored bytes read (data plus scales for quantized weights)
	q        *quant.Weight
	sl       *slice // the part a load reads: &whole, or the rank's part of a split tensor
	whole    slice  // the whole tensor as a part (kept here: one allocation less per tensor)
	dec      Decision
	outBytes int64 // bytes of the result (data only for quantized)
	mapped   int64 // bytes that stay zero-copy views
	owned    int64 // bytes of owned memory
	vextra   int64 // bytes read only to verify (the rest of a part's tensors)
	pos      int   // position in the model's load order (Names, Load's tensors)
	fileIdx  int32
	at       int32       // position of its stored (data) tensor in the component's tensors (tensorStore.At); -1 unknown
	stored   dtype.DType // stored dtype (a quantized weight's element type)
	out      dtype.DType
	act      Action
	vsum     bool // some stored tensor the part reads is verified (from the checksum keys Open saw)
	// The stored tensors the entry reads, once looked up
	// (modelComponent.stored): its data tensor, and a quantized weight's
	// scales.
	st     atomic.Value // a storedTensor
	scales atomic.Pointer[[]storedTensor]
}

// entryOrder is the order of a component's entries: by file, by data
// offset, then by name (tensors at one offset are empty ones, or a
// quantized weight and its consumed data tensor).
func entryOrder(a, b *entry) int {
	return cmp.Or(cmp.Compare(a.fileIdx, b.fileIdx), cmp.Compare(a.begin, b.begin), strings.Compare(a.name, b.name))
}

// maxConfigSize bounds config.json and hf_quant_config.json.
const maxConfigSize = 16 << 20

// Open opens path for loading. path is a path of the operating system, a
// name of the fs.FS given with WithFS, or a location SCHEME://... of a
// registered source (source.Register; importing package remote registers
// s3:// and https://). It is a single safetensors file, a shard
// index (*.safetensors.index*.json), a component folder (resolved with
// package variant: current and legacy naming, sharded or single, the
// variant chosen by WithVariant) or a pipeline root holding
// model_index.json (every component with weights). Only headers, indexes
// and the components' config.json and hf_quant_config.json are read.
//
// It may also be a PyTorch checkpoint, read with package torch (which
// executes nothing of its pickle; its errors are wrapped, so that
// errors.Is(err, torch.ErrForbiddenGlobal) holds): a file named *.bin,
// *.pt, *.pth or *.ckpt, an index *.bin.index.json or *.pt.index.json, or
// a component folder or pipeline component whose only weights for the
// variant are PyTorch ones (pytorch_model*.bin, diffusion_pytorch_model*.bin,
// their indexes and shards, resolved by package variant's rules for
// safetensors weights: variants, fallbacks and refusals alike; safetensors
// weights for the variant win, and the two are never mixed). Its pickle is
// read and checked whole by Open. Tied
// names (two names of one view of a storage) load as two tensors of the
// same values. Its tensors are read with pread, never mapped (a view may
// be gathered from its storage, or byte-swapped), and verified against
// the CRC-32 the archive records for each storage record: a tensor whose
// bytes are its whole record's as it is read, a view of its storage only
// with VerifyAlways, which reads the record (verify.go).
//
// Tied names load as tensors of their own that read the bytes of the
// tensor they tie to (its dtype, shape and checksum): a PyTorch
// checkpoint's, and those a safetensors file records in its metadata
// under torch.AliasesKey (as torch.WriteSafetensors and package convert
// write them; in a shard set, the union of every shard's, each naming a
// tensor of any shard). A recorded tie must parse (torch.ParseAliases),
// name a stored tensor that no scaled layout consumes or keeps, and not
// be a stored tensor's name itself; else Open fails with ErrResolve
// naming the file and the tied name (errors.Is torch.ErrInvalidFormat,
// or torch.ErrUnsupported for a tie to a layout's tensor). Contents
// lists the tensor once, the ties in its Metadata.
//
// Open applies the policy to every tensor (see Plan) and detects scaled
// low-precision layouts from tensor names and configs (package quant).
// Errors: *Error of kind ErrResolve (wrapping the variant, shard, source
// or quant error, or naming the config file), ErrTarget or ErrOption.
func Open(path string, opts ...Option) (*Model, error) {
	m := &Model{path: path, cfg: config{staging: defaultStaging}}
	for _, o := range opts {
		if err := o(&m.cfg); err != nil {
			return nil, err
		}
	}
	if m.cfg.variant != "" && !variant.ValidName(m.cfg.variant) {
		return nil, &Error{Kind: ErrOption, Msg: fmt.Sprintf("variant %q must match ^[A-Za-z0-9_]+$", m.cfg.variant)}
	}
	if err := m.openSource(); err != nil {
		return nil, err
	}
	// A name ending in .safetensors or .json is a file (shard.Open says
	// what is wrong when it is not); anything else that is a folder is
	// resolved with package variant. Errors come typed from those packages.
	var err error
	if m.src.IsFolder(m.name) {
		err = m.openDir()
	} else {
		err = m.openFile()
	}
	if err != nil {
		m.Close()
		return nil, err
	}
	for name := range m.cfg.policy.Components {
		if m.component(name) == nil {
			m.Close()
			return nil, &Error{Kind: ErrOption, Component: name, Msg: "no such component; the model has " + strings.Join(m.Components(), ", ")}
		}
	}
	for _, r := range m.cfg.policy.Rules {
		if r.Component != "" && m.component(r.Component) == nil {
			m.Close()
			return nil, &Error{Kind: ErrOption, Component: r.Component, Pattern: r.Pattern.String(), Msg: "rule names no component of the model"}
		}
	}
	pos := 0
	for _, c := range m.comps {
		if err := m.decide(c); err != nil {
			m.Close()
			return nil, err
		}
		for _, e := range c.entries {
			e.pos = pos
			pos++
		}
	}
	return m, nil
}

func (m *Model) openFile() error {
	dir := m.src.Dir(m.name)
	if variant.IsPyTorchName(m.name) {
		if m.cfg.variant != "" {
			return &Error{Kind: ErrOption, Path: m.path, Msg: "a PyTorch checkpoint file has no precision variants to choose from (WithVariant chooses among a folder's files)"}
		}
		c, err := m.openTorch(m.name, dir, m.folderName(dir), false)
		if err != nil {
			return err
		}
		m.comps = []*modelComponent{c}
		return m.setup(c)
	}
	strategy, why := m.chooseStrategy(dir)
	ck, err := shard.Open(m.name, m.shardOptions(strategy)...)
	if err != nil {
		return &Error{Kind: ErrResolve, Path: m.path, Err: err}
	}
	c := &modelComponent{name: m.folderName(dir), dir: dir, ck: shardStore{ck}, strategy: strategy, why: why}
	m.comps = []*modelComponent{c}
	return m.setup(c)
}

// folderName is the name of the component of a file given to Open: the
// base name of its folder.
func (m *Model) folderName(dir string) string {
	if abs, err := m.src.Abs(dir); err == nil {
		return m.src.Base(abs)
	}
	return m.src.Base(dir)
}

// openDir opens the components package variant resolves the folder to: a
// plan of safetensors files through package shard, a plan of PyTorch files
// (a component with no safetensors weights for the variant) through
// package torch.
func (m *Model) openDir() error {
	vopts := []variant.Option{variant.WithSource(m.src), variant.WithShardOptions(m.cfg.shardOptions...)}
	pp, err := variant.Resolve(m.name, m.cfg.variant, vopts...)
	if err != nil {
		return &Error{Kind: ErrResolve, Path: m.path, Err: err}
	}
	m.pipeline = pp
	for _, p := range pp.Components {
		if p.Error != nil {
			return &Error{Kind: ErrResolve, Path: p.Dir, Component: p.Component, Err: p.Err()}
		}
	}
	for _, p := range pp.Components {
		if p.Format == variant.FormatPyTorch {
			c, err := m.openTorch(p.Entry(), p.Dir, p.Component, true)
			if err != nil {
				return err
			}
			c.vplan = p
			m.comps = append(m.comps, c)
			// The index's shards as package torch opened them (a single
			// file is the one asked for, maybe through a link).
			if err := p.CheckFiles(c.ck.files()); p.Index != "" && err != nil {
				return &Error{Kind: ErrResolve, Path: p.Dir, Component: p.Component, Err: err}
			}
			if err := m.setup(c); err != nil {
				return err
			}
			continue
		}
		strategy, why := m.chooseStrategy(p.Dir)
		// The plan adds these to the shard options it resolved with; with
		// none, it hands over the checkpoint resolution opened.
		ck, err := p.Open(m.readOptions(strategy)...)
		if err != nil {
			return &Error{Kind: ErrResolve, Path: p.Dir, Component: p.Component, Err: err}
		}
		c := &modelComponent{name: p.Component, dir: p.Dir, vplan: p, ck: shardStore{ck}, strategy: strategy, why: why}
		m.comps = append(m.comps, c)
		if err := m.setup(c); err != nil {
			return err
		}
	}
	return nil
}

// shardOptions are the options the component's files are opened with: with
// the pread strategy, local files are not mapped at all (reads go through
// pread, never through page faults on a mapping).
func (m *Model) shardOptions(strategy readStrategy) []shard.Option {
	return append(m.sourceOptions(), m.readOptions(strategy)...)
}

// readOptions are the shard options the read strategy adds to the model's
// own: with pread, local files are opened without a mapping.
func (m *Model) readOptions(strategy readStrategy) []shard.Option {
	if strategy == readPread && m.src.FS() == nil {
		return []shard.Option{shard.WithOpenOptions(safetensors.WithReadAt())}
	}
	return nil
}

// setup reads the component's configs, detects its quantization layout and
// builds its logical tensors in file order.
func (m *Model) setup(c *modelComponent) error {
	var err error
	if c.ck, err = tie(c.ck); err != nil {
		return inComponent(err, c.name)
	}
	c.files = c.ck.files()
	src := quant.Sources{Metadata: c.ck.metadata(), ReadTensor: func(name string) ([]byte, error) {
		// Small marker tensors (ComfyUI's P.comfy_quant JSON) only.
		info, _, ok := c.ck.info(name)
		if !ok {
			return nil, fmt.Errorf("no tensor %q", name)
		}
		if n := info.ByteLen(); n > quant.MaxMarkerBytes {
			return nil, fmt.Errorf("tensor %q is %d bytes, more than a marker's %d", name, n, quant.MaxMarkerBytes)
		}
		t, err := c.ck.tensor(name)
		if err != nil {
			return nil, err
		}
		b := make([]byte, t.ByteLen())
		return b, readFull(t, b, 0)
	}}
	if src.ConfigJSON, err = m.readConfig(m.src.Join(c.dir, "config.json")); err != nil {
		return &Error{Kind: ErrResolve, Component: c.name, Msg: "config", Err: err}
	}
	if src.HFQuantConfig, err = m.readConfig(m.src.Join(c.dir, "hf_quant_config.json")); err != nil {
		return &Error{Kind: ErrResolve, Component: c.name, Msg: "config", Err: err}
	}
	n := c.ck.count()
	stored := make([]quant.Stored, n)
	for i := range n {
		info, _ := c.ck.at(i)
		stored[i] = quant.Stored{Name: info.Name, DType: info.DType, Shape: info.Shape}
	}
	// The layout is the stored tensors' (tied names aside), and a tie is
	// no tensor of it: a layout names each of its tensors by its own name.
	ns := storedLen(c.ck)
	c.scheme, err = quant.Detect(stored[:ns], src)
	if err != nil {
		return &Error{Kind: ErrResolve, Component: c.name, Err: err}
	}
	if t, ok := c.ck.(*tiedStore); ok {
		if err := t.checkLayout(c.scheme); err != nil {
			return inComponent(err, c.name)
		}
	}
	// plain reports whether the stored tensor name is an entry of its own:
	// not consumed by a quantized weight, or a scale kept as a tensor.
	var scaleOf map[string]bool
	plain := func(name string) bool {
		if !c.scheme.Consumed(name) {
			return true
		}
		if !m.cfg.keepScales {
			return false
		}
		if scaleOf == nil {
			scaleOf = make(map[string]bool)
			for _, w := range c.scheme.Weights {
				for _, s := range w.Scales {
					scaleOf[s.Name] = true
				}
			}
		}
		return scaleOf[name]
	}
	// The entries in one allocation (they are many and small).
	block := make([]entry, 0, n+len(c.scheme.Weights))
	c.entries = make([]*entry, 0, n+len(c.scheme.Weights))
	add := func() *entry {
		block = block[:len(block)+1]
		p := &block[len(block)-1]
		c.entries = append(c.entries, p)
		return p
	}
	var dataAt map[string]int // stored position of each weight's data tensor
	if len(c.scheme.Weights) > 0 {
		dataAt = make(map[string]int, len(c.scheme.Weights))
		for _, w := range c.scheme.Weights {
			dataAt[w.Data.Name] = -1
		}
		for i, s := range stored {
			if _, ok := dataAt[s.Name]; ok {
				dataAt[s.Name] = i
			}
		}
	}
	for i, s := range stored {
		if !plain(s.Name) {
			continue
		}
		info, fi := c.ck.at(i)
		in, _ := s.DType.ByteLen(numElements(s.Shape))
		// Field by field into the zero entry: a whole entry copied in
		// costs a bulk write barrier while the collector runs.
		e := add()
		e.name, e.stored, e.shape, e.fileIdx, e.begin, e.at, e.inBytes = s.Name, s.DType, s.Shape, int32(fi), info.Begin, int32(i), in
	}
	c.weights = make(map[string]*entry, len(c.scheme.Weights))
	for _, w := range c.scheme.Weights {
		// A logical name may be its own data tensor's (consumed), not that
		// of another entry.
		if c.weights[w.Name] != nil || c.ck.has(w.Name) && plain(w.Name) {
			return &Error{Kind: ErrResolve, Component: c.name, Tensor: w.Name, Msg: "quant: a dequantized weight's name is also a stored tensor"}
		}
		at, fi, begin := -1, 0, int64(0)
		if i := dataAt[w.Data.Name]; i >= 0 {
			info, f := c.ck.at(i)
			at, fi, begin = i, f, info.Begin
		}
		in, _ := w.Data.DType.ByteLen(numElements(w.Data.Shape))
		for _, s := range w.Scales {
			b, _ := s.DType.ByteLen(numElements(s.Shape))
			in += b
		}
		e := add()
		*e = entry{name: w.Name, stored: w.Elem, shape: w.Shape, fileIdx: int32(fi), begin: begin, at: int32(at), inBytes: in, q: w}
		c.weights[w.Name] = e
	}
	slices.SortFunc(c.entries, entryOrder)
	if c.why == "" {
		c.strategy, c.why = m.chooseStrategy(c.dir)
	}
	return nil
}

// decide applies the policy to every tensor of c.
func (m *Model) decide(c *modelComponent) error {
	if err := m.split(c); err != nil {
		return err
	}
	var rt ruleTexts
	for _, e := range c.entries {
		e.dec = m.cfg.policy.decide(&rt, c.name, e.name, e.stored, e.q != nil, e.shape)
		err := e.resolve(c.strategy)
		if err == nil {
			err = e.resolveSlice(c.strategy)
		}
		m.planVerify(c, e)
		if err != nil {
			var le *Error
			if errors.As(err, &le) {
				le.Component = c.name
			}
			return err
		}
	}
	return nil
}

// resolve turns the decision into an action and byte counts.
func (e *entry) resolve(strategy readStrategy) error {
	n := numElements(e.shape)
	t := e.dec.Target
	d, isDType := t.DType()
	if isDType && !d.Valid() {
		return &Error{Kind: ErrTarget, Tensor: e.name, Msg: fmt.Sprintf("unknown dtype %v (%s)", d, e.dec.Rule)}
	}
	keep := func() {
		e.out = e.stored
		if strategy == readPread {
			e.act = ActionRead
			e.owned = e.inBytes
		} else {
			e.act = ActionView
			e.mapped = e.inBytes
		}
	}
	switch {
	case e.q != nil && (!isDType || d == e.q.Elem):
		keep()
		e.act = map[Action]Action{ActionView: ActionQuantized, ActionRead: ActionQuantized}[e.act]
		e.outBytes, _ = e.q.Data.DType.ByteLen(numElements(e.q.Data.Shape))
		return nil
	case e.q != nil:
		if !d.IsFloat() {
			return &Error{Kind: ErrTarget, Tensor: e.name, Msg: fmt.Sprintf("a quantized %s weight dequantizes to a float dtype, not %s (%s)", e.q.Elem, d, e.dec.Rule)}
		}
		e.out, e.act = d, ActionDequantize
	case !isDType || d == e.stored:
		keep()
		e.outBytes = e.inBytes
		return nil
	default:
		if e.stored.Kind() == dtype.KindComplex && d.Kind() != dtype.KindComplex {
			return &Error{Kind: ErrTarget, Tensor: e.name, Msg: fmt.Sprintf("complex %s cannot become %s (%s)", e.stored, d, e.dec.Rule)}
		}
		e.out, e.act = d, ActionConvert
	}
	b, err := e.out.ByteLen(n)
	if err != nil {
		return &Error{Kind: ErrTarget, Tensor: e.name, Msg: fmt.Sprintf("%d elements do not fill whole bytes of %s (%s)", n, e.out, e.dec.Rule), Err: err}
	}
	e.outBytes, e.owned = b, b
	return nil
}

func numElements(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	return n
}

// readConfig reads a small JSON config file of a component folder under
// the folder's symlink rule (shard.ResolveFile) and the regular-file check
// (safeopen); a missing file is (nil, nil).
func (m *Model) readConfig(path string) ([]byte, error) {
	real, err := shard.ResolveFile(path, m.sourceOptions()...)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	b, err := m.src.ReadFile(real, maxConfigSize)
	if err != nil {
		return nil, err
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil {
		return nil, fmt.Errorf("%s: not a JSON object: %w", path, err)
	}
	return b, nil
}

// Components returns the components' names, sorted.
func (m *Model) Components() []string {
	out := make([]string, len(m.comps))
	for i, c := range m.comps {
		out[i] = c.name
	}
	return out
}

func (m *Model) component(name string) *modelComponent {
	for _, c := range m.comps {
		if c.name == name {
			return c
		}
	}
	return nil
}

// Names returns the logical tensor names in load order: "NAME" for a model
// with one component, "COMPONENT/NAME" for a pipeline. Dequantized weights
// appear under their logical names (P.weight, or P for MXFP4 P_blocks);
// the scale tensors they consume do not appear (see WithScaleTensors).
func (m *Model) Names() []string {
	var out []string
	for _, c := range m.comps {
		for _, e := range c.entries {
			out = append(out, m.qualify(c.name, e.name))
		}
	}
	return out
}

// qualify names a tensor of a component as Names, Weights.All and lookups
// spell it: bare in a model with one component, COMPONENT/NAME otherwise.
func (m *Model) qualify(component, name string) string {
	if len(m.comps) == 1 {
		return name
	}
	return component + "/" + name
}

// lookup finds a tensor by "COMPONENT/NAME" or by a bare NAME that only one
// component has.
func (m *Model) lookup(name string) (*modelComponent, *entry, error) {
	if comp, rest, ok := strings.Cut(name, "/"); ok {
		if c := m.component(comp); c != nil {
			if e := c.entry(rest); e != nil {
				return c, e, nil
			}
		}
	}
	var fc *modelComponent
	var fe *entry
	var in []string
	for _, c := range m.comps {
		if e := c.entry(name); e != nil {
			fc, fe = c, e
			in = append(in, c.name)
		}
	}
	switch len(in) {
	case 0:
		return nil, nil, &Error{Kind: ErrNotFound, Path: m.path, Tensor: name, Msg: "no such tensor"}
	case 1:
		return fc, fe, nil
	}
	return nil, nil, &Error{Kind: ErrOption, Path: m.path, Tensor: name, Msg: "ambiguous: in components " + strings.Join(in, ", ") + "; name it as COMPONENT/NAME"}
}

// entry returns the component's logical tensor called name, nil if none: a
// quantized weight by its logical name, any other tensor by the position
// of its stored tensor (the checkpoint's lookup), in the entries' order.
func (c *modelComponent) entry(name string) *entry {
	if e := c.weights[name]; e != nil {
		return e
	}
	info, file, ok := c.ck.info(name)
	if !ok {
		return nil
	}
	key := entry{name: name, fileIdx: int32(slices.Index(c.files, file)), begin: info.Begin}
	if i, found := slices.BinarySearchFunc(c.entries, &key, entryOrder); found {
		return c.entries[i]
	}
	return nil // consumed by a quantized weight
}

// Close releases the files. Weights loaded from the model that hold
// zero-copy views must not be used after Close.
func (m *Model) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	var first error
	for _, c := range m.comps {
		if c.ck != nil {
			if err := c.ck.close(); err != nil && first == nil {
				first = err
			}
		}
	}
	if err := m.closeSource(); err != nil && first == nil {
		first = err
	}
	return first
}

func (m *Model) checkOpen() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return &Error{Kind: ErrClosed, Path: m.path, Msg: "model is closed"}
	}
	return nil
}

// loaded returns e's stored (data) tensor once stored looked it up, else
// nil.
func (e *entry) loaded() storedTensor {
	st, _ := e.st.Load().(storedTensor)
	return st
}

// stored returns the stored tensors e reads: its data tensor, and a
// quantized weight's scales in order. They are looked up on first use and
// kept (repeated loads of a model look nothing up again).
func (c *modelComponent) stored(e *entry) (storedTensor, []storedTensor, error) {
	st := e.loaded()
	if st == nil {
		var err error
		switch {
		case e.at >= 0:
			st, err = c.ck.tensorAt(int(e.at))
		case e.q != nil:
			st, err = c.ck.tensor(e.q.Data.Name)
		default:
			st, err = c.ck.tensor(e.name)
		}
		if err != nil {
			return nil, nil, &Error{Kind: ErrRead, Tensor: e.name, Err: err}
		}
		e.st.Store(st)
	}
	if e.q == nil || len(e.q.Scales) == 0 {
		return st, nil, nil
	}
	if p := e.scales.Load(); p != nil {
		return st, *p, nil
	}
	scales := make([]storedTensor, 0, len(e.q.Scales))
	for _, s := range e.q.Scales {
		sc, err := c.ck.tensor(s.Name)
		if err != nil {
			return nil, nil, &Error{Kind: ErrRead, Tensor: s.Name, Err: err}
		}
		scales = append(scales, sc)
	}
	e.scales.Store(&scales)
	return st, scales, nil
}
