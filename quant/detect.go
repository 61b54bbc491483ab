package quant

import (
	"cmp"
	"encoding/json"
	"hash/maphash"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/shapes"
)

// Detect finds the scaled low-precision layout of one component from its
// stored tensors (names, dtypes and shapes, from the headers) and its
// configuration texts, never from file names.
//
// The config is looked for in this order, and the first one found decides:
// config.json's quantization_config (or compression_config),
// hf_quant_config.json, the safetensors __metadata__ "quantization_config"
// JSON text, then ComfyUI's __metadata__ "_quantization_metadata",
// P.comfy_quant tensors or scaled_fp8 marker. Without any of them only
// layouts that the tensors alone make unambiguous are recognized: MXFP4
// (U8 P_blocks [..., G, 16] with P_scales [..., G]) and block FP8 with
// P.weight_scale_inv when the shapes determine the block size; block FP8
// whose block size the shapes leave open is an ErrInvalidLayout error
// ("block size unknown") rather than a guess.
//
// Modules a config leaves unquantized (ignore, exclude_modules,
// modules_to_not_convert) stay plain. A config that declares a layout ckpt
// does not decode is reported in Scheme.Unsupported, and tensors that look
// like scales but were consumed by no rule in Scheme.Unconsumed; with no
// layout at all the Scheme's Layout is None and every tensor is plain.
//
// Malformed scales are *Error values of kind ErrInvalidLayout naming the
// tensor, their message saying which check failed: a missing scale, an
// orphan scale (without its data), the wrong scale shape, a scale dtype
// that is not a float, a block size that does not divide as declared or
// that nothing determines (block size unknown), two tensors claiming one
// weight (conflict), a tensor that contradicts the config (mismatch). An
// unreadable config is ErrConfig. Detect checks every weight it returns, so Dequantize of a
// detected Weight fails only on wrong byte lengths.
func Detect(tensors []Stored, src Sources) (*Scheme, error) {
	cfg, err := findConfig(src)
	if err != nil {
		return nil, err
	}
	if cfg == nil && plainNames(tensors, src) {
		// Nothing any layout reads: every tensor is plain, and the names
		// need neither the map nor the sorted list below (a checkpoint of
		// many small tensors opens without them).
		if err := uniqueNames(tensors); err != nil {
			return nil, err
		}
		return &Scheme{}, nil
	}
	d := &detector{
		byName:  make(map[string]Stored, len(tensors)),
		logical: map[string]bool{},
		used:    map[string]bool{},
		s:       &Scheme{},
	}
	d.names = make([]string, 0, len(tensors))
	for _, t := range tensors {
		d.byName[t.Name] = t
		if len(d.byName) == len(d.names) { // the name was there: the map did not grow
			return nil, layoutErr("conflict", t.Name, "tensor name appears twice")
		}
		d.names = append(d.names, t.Name)
	}
	slices.Sort(d.names)

	if cfg != nil {
		d.s.Source = cfg.source
		err = d.fromConfig(cfg)
	} else {
		var found bool
		found, err = d.comfy(src)
		if err == nil && !found {
			err = d.fromNames()
		}
	}
	if err != nil {
		return nil, err
	}
	d.finish()
	return d.s, nil
}

// plainNames reports whether, without a config, no tensor name is one
// that a layout detected from names would read: no ComfyUI metadata and no
// name that looks like a scale or a marker (looksLikeScale covers every
// name the rules below start from: P_blocks, P.weight_scale_inv,
// P.scale_weight, scaled_fp8, P.comfy_quant, the kept activation scales).
func plainNames(tensors []Stored, src Sources) bool {
	if _, ok := src.Metadata["_quantization_metadata"]; ok {
		return false
	}
	for _, t := range tensors {
		if looksLikeScale(t.Name) {
			return false
		}
	}
	return true
}

// uniqueNames reports a tensor name that appears twice (an ErrInvalidLayout conflict), by
// hashes of the names, comparing the names only where two hashes meet.
func uniqueNames(tensors []Stored) error {
	seed := maphash.MakeSeed()
	seen := make(map[uint64]int, len(tensors))
	var clash map[uint64][]int // further names under a hash already seen
	for i, t := range tensors {
		h := maphash.String(seed, t.Name)
		j, ok := seen[h]
		if !ok {
			seen[h] = i
			continue
		}
		if tensors[j].Name == t.Name {
			return layoutErr("conflict", t.Name, "tensor name appears twice")
		}
		if clash == nil {
			clash = map[uint64][]int{}
		}
		for _, k := range clash[h] {
			if tensors[k].Name == t.Name {
				return layoutErr("conflict", t.Name, "tensor name appears twice")
			}
		}
		clash[h] = append(clash[h], i)
	}
	return nil
}

type detector struct {
	byName   map[string]Stored
	names    []string        // sorted
	logical  map[string]bool // logical names of the weights found
	used     map[string]bool // consumed stored tensors
	s        *Scheme
	declared Layout              // the layout the config declares, for a Scheme without weights
	tails    map[string][]string // dot-separated tails of the *.weight names -> names, built when needed
}

func (d *detector) unsupported(what string) {
	d.s.Unsupported = append(d.s.Unsupported, what)
}

// withSuffix returns the sorted names that end in suffix.
func (d *detector) withSuffix(suffix string) []string {
	var out []string
	for _, n := range d.names {
		if strings.HasSuffix(n, suffix) {
			out = append(out, n)
		}
	}
	return out
}

// isModule reports whether some stored tensor lives under the module name m.
func (d *detector) isModule(m string) bool {
	p := m + "."
	i := sort.SearchStrings(d.names, p)
	return i < len(d.names) && strings.HasPrefix(d.names[i], p)
}

func (d *detector) marker(name string) {
	d.used[name] = true
	d.s.Markers = append(d.s.Markers, name)
}

// add records a weight, refusing a logical name or stored tensor that is
// already taken.
func (d *detector) add(w *Weight) error {
	if other, ok := d.byName[w.Name]; ok && other.Name != w.Data.Name {
		return layoutErr("conflict", w.Data.Name, "its logical name "+quote(w.Name)+" is also a stored tensor")
	}
	if d.logical[w.Name] {
		return layoutErr("conflict", w.Data.Name, "logical name "+quote(w.Name)+" claimed twice")
	}
	parts := []string{w.Data.Name}
	for _, s := range w.Scales {
		parts = append(parts, s.Name)
	}
	for _, p := range parts {
		if d.used[p] {
			return layoutErr("conflict", p, "consumed by two weights")
		}
	}
	for _, p := range parts {
		d.used[p] = true
	}
	d.logical[w.Name] = true
	d.s.Weights = append(d.s.Weights, w)
	return nil
}

func (d *detector) fromConfig(cfg *qconfig) error {
	m, _ := cfg.obj.str("quant_method")
	d.s.QuantMethod = m
	switch cfg.method {
	case "fp8":
		return d.fp8(cfg.obj)
	case "compressed-tensors":
		return d.compressedTensors(cfg.obj)
	case "modelopt":
		return d.modelOpt(cfg.obj)
	case "fbgemm_fp8":
		return d.fbgemm(cfg.obj)
	case "mxfp4":
		return d.mxfp4Config(cfg.obj)
	case "":
		d.unsupported(cfg.source + " without quant_method")
	default:
		d.unsupported("quant_method " + quote(m))
	}
	return nil
}

// hfIgnore reads transformers' modules_to_not_convert (and AutoFP8's
// ignored_layers).
func (d *detector) hfIgnore(q object) (*matcher, error) {
	var all []string
	for _, k := range []string{"modules_to_not_convert", "ignored_layers"} {
		l, err := q.strs(k)
		if err != nil {
			return nil, err
		}
		all = append(all, l...)
	}
	d.s.Ignore = all
	return newMatcher(all, matchHF, q.field("modules_to_not_convert"))
}

// fp8 handles quant_method "fp8": DeepSeek-style block FP8
// (weight_scale_inv), and per-tensor or per-channel weight_scale (AutoFP8).
func (d *detector) fp8(q object) error {
	d.declared = DeepSeekFP8Block
	ign, err := d.hfIgnore(q)
	if err != nil {
		return err
	}
	block, ok, err := q.block2("weight_block_size")
	if err != nil {
		return err
	}
	if !ok {
		block = [2]int64{128, 128} // transformers' FineGrainedFP8Config default
	}
	for _, name := range d.withSuffix(".weight") {
		t := d.byName[name]
		if !isFP8(t.DType) {
			continue
		}
		p := strings.TrimSuffix(name, ".weight")
		_, hasInv := d.byName[p+".weight_scale_inv"]
		_, hasSc := d.byName[p+".weight_scale"]
		if ign.match(p) {
			if hasInv || hasSc {
				return layoutErr("mismatch", name, "stored quantized with scales, but the config leaves module "+quote(p)+" unquantized")
			}
			continue
		}
		switch {
		case hasInv && hasSc:
			return layoutErr("conflict", p+".weight_scale", "both weight_scale and weight_scale_inv scale "+quote(name))
		case hasInv:
			d.s.BlockSize = block
			err = d.fp8Weight(DeepSeekFP8Block, t, t.DType, p+".weight_scale_inv", RoleScaleInv, grid{kind: gBlock, b: block})
		case hasSc:
			err = d.fp8Weight(FP8Scaled, t, t.DType, p+".weight_scale", RoleScale, grid{kind: gTensorOrChannel})
		default:
			err = layoutErr("missing scale", name, "FP8 weight without "+p+".weight_scale_inv")
		}
		if err != nil {
			return err
		}
	}
	return d.orphans([]string{".weight_scale_inv", ".weight_scale"}, []string{".weight"})
}

// orphans fails on a scale (a name ending in one of scaleSuffixes) whose
// data tensor (the same prefix with one of dataSuffixes) is not stored.
func (d *detector) orphans(scaleSuffixes, dataSuffixes []string) error {
	for _, ss := range scaleSuffixes {
		for _, n := range d.withSuffix(ss) {
			if d.used[n] {
				continue
			}
			p := strings.TrimSuffix(n, ss)
			found := false
			for _, ds := range dataSuffixes {
				if _, ok := d.byName[p+ds]; ok {
					found = true
				}
			}
			if !found {
				return layoutErr("orphan scale", n, "no "+p+dataSuffixes[0]+" to scale")
			}
		}
	}
	return nil
}

// fbgemm handles quant_method "fbgemm_fp8": row-wise FP8.
func (d *detector) fbgemm(q object) error {
	d.declared = FBGEMMFP8
	ign, err := d.hfIgnore(q)
	if err != nil {
		return err
	}
	if ub, ok, err := q.num("activation_scale_ub"); err != nil {
		return err
	} else if ok {
		d.s.ActivationScaleUB = ub
	}
	for _, name := range d.withSuffix(".weight") {
		t := d.byName[name]
		if !isFP8(t.DType) {
			continue
		}
		p := strings.TrimSuffix(name, ".weight")
		if ign.match(p) {
			if _, ok := d.byName[p+".weight_scale"]; ok {
				return layoutErr("mismatch", name, "stored quantized with scales, but the config leaves module "+quote(p)+" unquantized")
			}
			continue
		}
		if err := d.fp8Weight(FBGEMMFP8, t, t.DType, p+".weight_scale", RoleScale, grid{kind: gChannel}); err != nil {
			return err
		}
	}
	return d.orphans([]string{".weight_scale"}, []string{".weight"})
}

// fp8Weight records the FP8 weight data with its one scale.
func (d *detector) fp8Weight(layout Layout, data Stored, elem dtype.DType, scaleName, role string, g grid) error {
	sc, ok := d.byName[scaleName]
	if !ok {
		return layoutErr("missing scale", data.Name, "no "+scaleName)
	}
	if err := checkScaleDType(sc, false); err != nil {
		return err
	}
	blk, err := scaleBlock(data.Name, data.Shape, sc, g)
	if err != nil {
		return err
	}
	return d.add(&Weight{
		Name: data.Name, Shape: slices.Clone(data.Shape), Elem: elem, Layout: layout,
		Data:   clone(data),
		Scales: []Scale{{Role: role, Stored: clone(sc), Block: blk}},
	})
}

// fp4Packed records an NVFP4 weight: packed U8 data [out, in/2] named
// dataName, the group scale (one per g values of a row) and a per-tensor
// second scale.
func (d *detector) fp4Packed(layout Layout, logicalName string, data Stored, g int64, scaleName, secondName, secondRole string) error {
	if data.DType != dtype.U8 || len(data.Shape) != 2 {
		return layoutErr("data shape", data.Name, "packed FP4 data must be U8 [out, in/2], got "+data.DType.String()+" "+shapeString(data.Shape))
	}
	if data.Shape[1] > math.MaxInt64/2 {
		return layoutErr("data shape", data.Name, "shape "+shapeString(data.Shape)+" overflows when unpacked")
	}
	logical := []int64{data.Shape[0], 2 * data.Shape[1]}
	if _, err := shapes.Elements(logical); err != nil {
		return layoutErr("data shape", data.Name, err.Error())
	}
	sc, ok := d.byName[scaleName]
	if !ok {
		return layoutErr("missing scale", data.Name, "no "+scaleName)
	}
	s2, ok := d.byName[secondName]
	if !ok {
		return layoutErr("missing scale", data.Name, "no "+secondName)
	}
	for _, s := range []Stored{sc, s2} {
		if err := checkScaleDType(s, false); err != nil {
			return err
		}
	}
	b1, err := scaleBlock(data.Name, logical, sc, grid{kind: gGroup, b: [2]int64{1, g}})
	if err != nil {
		return err
	}
	b2, err := scaleBlock(data.Name, logical, s2, grid{kind: gTensor})
	if err != nil {
		return err
	}
	return d.add(&Weight{
		Name: logicalName, Shape: logical, Elem: dtype.F4, Layout: layout,
		Data: clone(data),
		Scales: []Scale{
			{Role: RoleScale, Stored: clone(sc), Block: b1},
			{Role: secondRole, Stored: clone(s2), Block: b2},
		},
	})
}

// ---- compressed-tensors ----

type ctGroup struct {
	name      string
	names     []string         // targets that are not regular expressions: module or class names
	exact     map[string]bool  // the names that are modules of the checkpoint
	class     bool             // some name is not a module: a class name such as "Linear"
	res       []*regexp.Regexp // the "re:" targets
	format    string
	hasArgs   bool // weights given
	bits      int64
	typ       string
	strategy  string
	groupSize int64
	block     [2]int64
	hasBlock  bool
}

func (d *detector) compressedTensors(q object) error {
	d.declared = CompressedTensorsFP8
	top, err := q.str("format")
	if err != nil {
		return err
	}
	ignore, err := q.strs("ignore")
	if err != nil {
		return err
	}
	d.s.Ignore = ignore
	ign, err := newMatcher(ignore, matchCT, q.field("ignore"))
	if err != nil {
		return err
	}
	groups, err := parseCTGroups(q)
	if err != nil {
		return err
	}
	for i := range groups {
		g := &groups[i]
		g.exact = map[string]bool{}
		for _, t := range g.names {
			if d.isModule(t) {
				g.exact[t] = true
			} else {
				g.class = true
			}
		}
	}
	if top == "nvfp4-pack-quantized" {
		d.declared = CompressedTensorsNVFP4
	}
	for _, name := range d.names {
		t := d.byName[name]
		var p string
		var fp4 bool
		switch {
		case strings.HasSuffix(name, ".weight_packed"):
			p, fp4 = strings.TrimSuffix(name, ".weight_packed"), true
		case strings.HasSuffix(name, ".weight") && isFP8(t.DType):
			p = strings.TrimSuffix(name, ".weight")
		default:
			continue
		}
		if ign.match(p) {
			if _, ok := d.byName[p+".weight_scale"]; ok {
				return layoutErr("mismatch", name, "stored quantized with scales, but the config ignores module "+quote(p))
			}
			continue
		}
		g, err := d.ctGroupFor(p, name, groups, fp4)
		if err != nil {
			return err
		}
		if g == nil { // a format ckpt does not decode; reported
			continue
		}
		format := cmp.Or(g.format, top)
		if fp4 {
			if format != "nvfp4-pack-quantized" {
				d.unsupported("config group " + quote(g.name) + ": format " + quote(format))
				continue
			}
			gs := cmp.Or(g.groupSize, 16)
			d.s.GroupSize = gs
			if err := d.fp4Packed(CompressedTensorsNVFP4, p+".weight", t, gs, p+".weight_scale", p+".weight_global_scale", RoleGlobalScale); err != nil {
				return err
			}
			if sh, ok := d.byName[p+".weight_shape"]; ok && !d.used[sh.Name] {
				d.marker(sh.Name)
			}
			continue
		}
		switch format {
		case "float-quantized", "naive-quantized", "":
		default:
			d.unsupported("config group " + quote(g.name) + ": format " + quote(format) + " with FP8 weights")
			continue
		}
		var gr grid
		switch g.strategy {
		case "tensor", "":
			gr = grid{kind: gTensor}
		case "channel":
			gr = grid{kind: gChannel}
		case "group":
			if g.groupSize == 0 {
				return configErr(q.field("config_groups."+g.name+".weights.group_size"), "strategy group without group_size", nil)
			}
			gr = grid{kind: gGroup, b: [2]int64{1, g.groupSize}}
		case "block":
			if g.hasBlock {
				gr = grid{kind: gBlock, b: g.block}
				d.s.BlockSize = g.block
			} else {
				gr = grid{kind: gBlockFromShape}
			}
		default:
			d.unsupported("config group " + quote(g.name) + ": weights strategy " + quote(g.strategy))
			continue
		}
		if err := d.fp8Weight(CompressedTensorsFP8, t, t.DType, p+".weight_scale", RoleScale, gr); err != nil {
			return err
		}
	}
	return d.orphans([]string{".weight_scale", ".weight_global_scale"}, []string{".weight", ".weight_packed"})
}

func parseCTGroups(q object) ([]ctGroup, error) {
	cg, ok, err := q.obj("config_groups")
	if err != nil || !ok {
		return nil, err
	}
	if len(cg.m) > maxPatterns {
		return nil, configErr(q.field("config_groups"), "more than "+strconv.Itoa(maxPatterns)+" groups", nil)
	}
	n := 0
	patterns := &n
	keys := make([]string, 0, len(cg.m))
	for k := range cg.m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out []ctGroup
	for _, k := range keys {
		o, ok, err := cg.obj(k)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		g := ctGroup{name: k}
		targets, err := o.strs("targets")
		if err != nil {
			return nil, err
		}
		for _, t := range targets {
			r, ok := strings.CutPrefix(t, "re:")
			if !ok {
				g.names = append(g.names, t)
				continue
			}
			if *patterns++; *patterns > maxPatterns {
				return nil, configErr(o.field("targets"), "more than "+strconv.Itoa(maxPatterns)+" patterns", nil)
			}
			re, err := regexp.Compile(`^(?:` + r + `)`)
			if err != nil {
				return nil, configErr(o.field("targets"), "pattern "+quote(t)+" does not compile", err)
			}
			g.res = append(g.res, re)
		}
		if g.format, err = o.str("format"); err != nil {
			return nil, err
		}
		w, ok, err := o.obj("weights")
		if err != nil {
			return nil, err
		}
		if ok {
			g.hasArgs = true
			if g.bits, _, err = w.size("num_bits"); err != nil {
				return nil, err
			}
			if g.typ, err = w.str("type"); err != nil {
				return nil, err
			}
			if g.strategy, err = w.str("strategy"); err != nil {
				return nil, err
			}
			if g.groupSize, _, err = w.size("group_size"); err != nil {
				return nil, err
			}
			if g.block, g.hasBlock, err = w.block2("block_structure"); err != nil {
				return nil, err
			}
		}
		out = append(out, g)
	}
	return out, nil
}

// ctGroupFor picks the config group that applies to module p, stored in
// tensor name: the most specific target (exact name, then regular
// expression, then a class name such as "Linear", which ckpt cannot check
// and takes to match; the first group by name among equals) that declares
// weights. Its weights must be of the stored form (8-bit float for FP8
// data, 4-bit float for packed data), else an ErrInvalidLayout mismatch. nil, nil: the
// group's weights are of a type ckpt does not decode (reported in
// Unsupported).
func (d *detector) ctGroupFor(p, name string, groups []ctGroup, fp4 bool) (*ctGroup, error) {
	type cand struct {
		g     *ctGroup
		level int
	}
	var cands []cand
	for i := range groups {
		g := &groups[i]
		best := 0
		switch {
		case g.exact[p]:
			best = 3
		case slices.ContainsFunc(g.res, func(re *regexp.Regexp) bool { return re.MatchString(p) }):
			best = 2
		case g.class:
			best = 1
		}
		if best > 0 {
			cands = append(cands, cand{g, best})
		}
	}
	slices.SortStableFunc(cands, func(a, b cand) int { return cmp.Compare(b.level, a.level) })
	if len(cands) == 0 {
		return nil, layoutErr("mismatch", name, "stored quantized, but no config_groups entry targets module "+quote(p))
	}
	for _, c := range cands {
		g := c.g
		if !g.hasArgs {
			continue // a group for activations only
		}
		if g.typ != "float" {
			d.unsupported("config group " + quote(g.name) + ": weights type " + quote(g.typ))
			return nil, nil
		}
		if (fp4 && g.bits == 4) || (!fp4 && g.bits == 8) {
			return g, nil
		}
		return nil, layoutErr("mismatch", name, "config group "+quote(g.name)+" declares "+strconv.FormatInt(g.bits, 10)+"-bit "+g.typ+" weights")
	}
	return nil, layoutErr("mismatch", name, "stored quantized, but no config_groups entry with weights targets module "+quote(p))
}

// ---- ModelOpt ----

func (d *detector) modelOpt(q object) error {
	d.declared = ModelOptFP8
	if sub, ok, err := q.obj("quantization"); err != nil {
		return err
	} else if ok {
		q = sub
	}
	algo, err := q.str("quant_algo")
	if err != nil {
		return err
	}
	d.s.QuantMethod = algo
	excl, err := q.strs("exclude_modules")
	if err != nil {
		return err
	}
	d.s.Ignore = excl
	ign, err := newMatcher(excl, matchGlob, q.field("exclude_modules"))
	if err != nil {
		return err
	}
	gs, _, err := q.size("group_size")
	if err != nil {
		return err
	}
	gs = cmp.Or(gs, 16)
	perLayer := map[string]int64{} // group sizes of MIXED_PRECISION layers
	switch strings.ToUpper(algo) {
	case "FP8", "FP8_PER_CHANNEL_PER_TOKEN":
	case "NVFP4":
		d.declared = ModelOptNVFP4
		d.s.GroupSize = gs
	case "MIXED_PRECISION":
		layers, ok, err := q.obj("quantized_layers")
		if err != nil {
			return err
		}
		if ok {
			for k := range layers.m {
				l, ok, err := layers.obj(k)
				if err != nil {
					return err
				}
				if !ok {
					continue
				}
				if g, ok, err := l.size("group_size"); err != nil {
					return err
				} else if ok {
					perLayer[k] = g
				}
			}
		}
	default:
		d.unsupported("quant_algo " + quote(algo))
		d.declared = None
		return nil
	}
	for _, name := range d.withSuffix(".weight") {
		t := d.byName[name]
		p := strings.TrimSuffix(name, ".weight")
		_, hasSc := d.byName[p+".weight_scale"]
		_, hasS2 := d.byName[p+".weight_scale_2"]
		fp4 := t.DType == dtype.U8 && (hasSc || hasS2 || d.declared == ModelOptNVFP4)
		if !isFP8(t.DType) && !fp4 {
			continue
		}
		if ign.match(p) {
			if hasSc {
				return layoutErr("mismatch", name, "stored quantized with scales, but exclude_modules leaves module "+quote(p)+" unquantized")
			}
			continue
		}
		if fp4 {
			g := cmp.Or(perLayer[p], gs)
			if err := d.fp4Packed(ModelOptNVFP4, name, t, g, p+".weight_scale", p+".weight_scale_2", RoleScale2); err != nil {
				return err
			}
			continue
		}
		if err := d.fp8Weight(ModelOptFP8, t, t.DType, p+".weight_scale", RoleScale, grid{kind: gTensorOrChannel}); err != nil {
			return err
		}
	}
	return d.orphans([]string{".weight_scale", ".weight_scale_2"}, []string{".weight"})
}

// ---- MXFP4 ----

func (d *detector) mxfp4Config(q object) error {
	d.declared = MXFP4
	ign, err := d.hfIgnore(q)
	if err != nil {
		return err
	}
	return d.mxfp4(ign, true)
}

// mxfp4 records the P_blocks / P_scales pairs. declared: a config says
// mxfp4, so a malformed pair is an error; otherwise only the unambiguous
// pattern (U8 [..., G, 16] blocks with their scales) is taken.
func (d *detector) mxfp4(ign *matcher, declared bool) error {
	for _, name := range d.withSuffix("_blocks") {
		b := d.byName[name]
		p := strings.TrimSuffix(name, "_blocks")
		sc, hasSc := d.byName[p+"_scales"]
		looks := b.DType == dtype.U8 && len(b.Shape) >= 2 && b.Shape[len(b.Shape)-1] == 16
		if !declared && !(looks && hasSc) {
			continue
		}
		if ign.match(p) || ign.match(module(p)) {
			if hasSc {
				return layoutErr("mismatch", name, "stored as MXFP4, but the config leaves "+quote(p)+" unconverted")
			}
			continue
		}
		if !hasSc {
			return layoutErr("missing scale", name, "no "+p+"_scales")
		}
		if !looks {
			return layoutErr("data shape", name, "MXFP4 blocks must be U8 [..., G, 16], got "+b.DType.String()+" "+shapeString(b.Shape))
		}
		if err := checkScaleDType(sc, true); err != nil {
			return err
		}
		lead := b.Shape[:len(b.Shape)-1]
		if !slices.Equal(sc.Shape, lead) {
			return layoutErr("scale shape", sc.Name, "shape "+shapeString(sc.Shape)+", want "+shapeString(lead)+" (one E8M0 scale per block of "+name+")")
		}
		g := lead[len(lead)-1]
		if g > math.MaxInt64/32 {
			return layoutErr("data shape", name, "shape "+shapeString(b.Shape)+" overflows when unpacked")
		}
		logical := append(slices.Clone(lead[:len(lead)-1]), g*32)
		if _, err := shapes.Elements(b.Shape); err != nil {
			return layoutErr("data shape", name, err.Error())
		}
		if _, err := shapes.Elements(logical); err != nil {
			return layoutErr("data shape", name, err.Error())
		}
		err := d.add(&Weight{
			Name: p, Shape: logical, Elem: dtype.F4, Layout: MXFP4,
			Data:   clone(b),
			Scales: []Scale{{Role: RoleE8M0, Stored: clone(sc), Block: [2]int64{1, 32}}},
		})
		if err != nil {
			return err
		}
	}
	if declared {
		return d.orphans([]string{"_scales"}, []string{"_blocks"})
	}
	return nil
}

// ---- no config ----

// fromNames recognizes the layouts the tensors alone make unambiguous.
func (d *detector) fromNames() error {
	if err := d.mxfp4(nil, false); err != nil {
		return err
	}
	for _, n := range d.withSuffix(".weight_scale_inv") {
		p := strings.TrimSuffix(n, ".weight_scale_inv")
		w, ok := d.byName[p+".weight"]
		if !ok || !isFP8(w.DType) {
			continue // reported in Unconsumed
		}
		if err := d.fp8Weight(DeepSeekFP8Block, w, w.DType, n, RoleScaleInv, grid{kind: gBlockFromShape}); err != nil {
			return err
		}
	}
	if len(d.s.Weights) > 0 {
		d.s.Source = srcTensorNames
	}
	return nil
}

// ---- ComfyUI ----

// comfy recognizes ComfyUI's scaled FP8 files. found is false when there is
// no ComfyUI marker at all.
func (d *detector) comfy(src Sources) (found bool, err error) {
	meta, hasMeta := src.Metadata["_quantization_metadata"]
	legacy := d.withSuffix("scaled_fp8")
	legacy = slices.DeleteFunc(legacy, func(n string) bool { return n != "scaled_fp8" && !strings.HasSuffix(n, ".scaled_fp8") })
	cq := d.withSuffix(".comfy_quant")
	if !hasMeta && len(legacy) == 0 && len(cq) == 0 {
		return false, nil
	}
	d.declared = ComfyScaledFP8
	for _, n := range legacy {
		d.marker(n)
	}
	for _, n := range cq {
		d.marker(n)
	}
	if !hasMeta && len(cq) == 0 {
		d.s.Source = srcScaledFP8
		return true, d.comfyLegacy()
	}
	layers := map[string]string{} // layer -> format ("" when unknown)
	d.s.Source = srcComfyTensors
	if hasMeta {
		d.s.Source = srcComfyMeta
		if err := parseComfyMeta(meta, layers); err != nil {
			return true, err
		}
	}
	for _, n := range cq {
		l := strings.TrimSuffix(n, ".comfy_quant")
		if _, ok := layers[l]; ok {
			continue
		}
		f, err := d.readComfyQuant(n, src.ReadTensor)
		if err != nil {
			return true, err
		}
		layers[l] = f
	}
	keys := make([]string, 0, len(layers))
	for k := range layers {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, l := range keys {
		if err := d.comfyLayer(l, layers[l]); err != nil {
			return true, err
		}
	}
	return true, nil
}

// comfyLegacy handles the scaled_fp8 layout: P.scale_weight scales an FP8
// P.weight; next to a wider weight it is a dummy and stays unconsumed.
func (d *detector) comfyLegacy() error {
	for _, n := range d.withSuffix(".scale_weight") {
		p := strings.TrimSuffix(n, ".scale_weight")
		w, ok := d.byName[p+".weight"]
		if !ok {
			return layoutErr("orphan scale", n, "no "+p+".weight to scale")
		}
		if !isFP8(w.DType) {
			continue
		}
		if err := d.fp8Weight(ComfyScaledFP8, w, w.DType, n, RoleScale, grid{kind: gTensor}); err != nil {
			return err
		}
	}
	return nil
}

// comfyLayer records layer l, whose format is f ("" when only the tensors
// tell).
func (d *detector) comfyLayer(l, f string) error {
	wname := l + ".weight"
	w, ok := d.byName[wname]
	if !ok {
		// Some tools write the layer names without the model's prefix:
		// take the one stored weight whose name ends in them.
		if d.tails == nil {
			d.tails = map[string][]string{}
			for _, n := range d.withSuffix(".weight") {
				for i := 0; i < len(n); i++ {
					if n[i] == '.' {
						d.tails[n[i+1:]] = append(d.tails[n[i+1:]], n)
					}
				}
			}
		}
		found := d.tails[wname]
		if len(found) != 1 {
			return layoutErr("mismatch", wname, "layer "+quote(l)+" is declared quantized but "+strconv.Itoa(len(found))+" stored weights match it")
		}
		wname = found[0]
		w = d.byName[wname]
	}
	p := strings.TrimSuffix(wname, ".weight")
	var elem dtype.DType
	switch f {
	case "float8_e4m3fn":
		elem = dtype.F8_E4M3
	case "float8_e5m2":
		elem = dtype.F8_E5M2
	case "":
		if _, ok := d.byName[p+".weight_scale"]; !ok || !isFP8(w.DType) {
			d.unsupported("layer " + quote(l) + ": comfy_quant not readable")
			return nil
		}
		elem = w.DType
	default:
		d.unsupported("layer " + quote(l) + ": comfy format " + quote(f))
		return nil
	}
	if w.DType != elem && w.DType != dtype.U8 {
		return layoutErr("mismatch", wname, "stored as "+w.DType.String()+", but its layer's format is "+f)
	}
	return d.fp8Weight(ComfyScaledFP8, w, elem, p+".weight_scale", RoleScale, grid{kind: gTensorOrChannel})
}

// parseComfyMeta reads __metadata__["_quantization_metadata"]: {"layers":
// {LAYER: {"format": F, ...} or F}}.
func parseComfyMeta(text string, layers map[string]string) error {
	top, err := parseObject([]byte(text), srcComfyMeta)
	if err != nil {
		return err
	}
	ls, ok, err := top.obj("layers")
	if err != nil {
		return err
	}
	if !ok {
		return configErr(top.field("layers"), "missing", nil)
	}
	for k, v := range ls.m {
		f, err := comfyFormat(v, ls.field(k))
		if err != nil {
			return err
		}
		layers[k] = f
	}
	return nil
}

// comfyFormat reads one layer's config: an object with a "format" string,
// or the format string itself.
func comfyFormat(v json.RawMessage, field string) (string, error) {
	var s string
	if json.Unmarshal(v, &s) == nil {
		return s, nil
	}
	o, err := parseObject(v, field)
	if err != nil {
		return "", err
	}
	f, err := o.str("format")
	if err != nil {
		return "", err
	}
	if f == "" {
		return "", configErr(o.field("format"), "missing", nil)
	}
	return f, nil
}

// readComfyQuant reads the format of a P.comfy_quant tensor (U8 JSON text);
// "" without a reader.
func (d *detector) readComfyQuant(name string, read func(string) ([]byte, error)) (string, error) {
	if read == nil {
		return "", nil
	}
	t := d.byName[name]
	n, err := shapes.Elements(t.Shape)
	if t.DType != dtype.U8 || len(t.Shape) > 1 || err != nil || n > MaxMarkerBytes {
		return "", configErr(name, "want a U8 vector of JSON text of at most "+strconv.Itoa(MaxMarkerBytes)+" bytes, got "+t.DType.String()+" "+shapeString(t.Shape), nil)
	}
	b, err := read(name)
	if err != nil {
		return "", configErr(name, "cannot read", err)
	}
	if int64(len(b)) != n {
		return "", configErr(name, "read "+strconv.Itoa(len(b))+" bytes, want "+strconv.FormatInt(n, 10), nil)
	}
	return comfyFormat(b, name)
}

// ---- result ----

func (d *detector) finish() {
	s := d.s
	slices.SortFunc(s.Weights, func(a, b *Weight) int { return strings.Compare(a.Name, b.Name) })
	s.Layout = d.declared
	for i, w := range s.Weights {
		if i == 0 {
			s.Layout = w.Layout
		} else if w.Layout != s.Layout {
			s.Layout = Mixed
		}
	}
	kept := map[string]bool{}
	if s.Layout != None {
		for _, n := range d.names {
			if keptNames[lastComponent(n)] && !d.used[n] {
				kept[n] = true
				s.Kept = append(s.Kept, n)
			}
		}
	}
	for _, n := range d.names {
		if !d.used[n] && !kept[n] && looksLikeScale(n) {
			s.Unconsumed = append(s.Unconsumed, n)
		}
	}
	slices.Sort(s.Markers)
	s.consumed = d.used
}

// ---- shapes and dtypes ----

type gridKind int

const (
	gTensor          gridKind = iota // one scale element
	gChannel                         // [out,1] or [out]
	gTensorOrChannel                 // either, by the scale's shape
	gBlock                           // [ceil(out/b0), ceil(in/b1)]
	gBlockFromShape                  // a block size the shapes must determine
	gGroup                           // [out, in/g], g dividing in
)

type grid struct {
	kind gridKind
	b    [2]int64
}

// view returns the two-dimensional view [R, C] of a logical shape: C the
// last dimension, R the product of the others (1, 1 for a scalar).
func view(shape []int64) (r, c int64, err error) {
	if _, err := shapes.Elements(shape); err != nil {
		return 0, 0, err
	}
	if len(shape) == 0 {
		return 1, 1, nil
	}
	r, err = shapes.Elements(shape[:len(shape)-1])
	return r, shape[len(shape)-1], err
}

func ceilDiv(n, b int64) int64 {
	q := n / b
	if n%b != 0 {
		q++
	}
	return q
}

// blockFromShape returns the block size b with ceil(n/b) == s: possible is
// false when none fits, unique false when several fit and they split n
// differently.
func blockFromShape(n, s int64) (b int64, possible, unique bool) {
	switch {
	case n == 0:
		return 1, s == 0, true
	case s <= 0 || s > n:
		return 0, false, false
	case s == 1:
		return n, true, true
	}
	lo := ceilDiv(n, s)
	if ceilDiv(n, lo) != s {
		return 0, false, false
	}
	hi := ceilDiv(n, s-1) - 1
	return lo, true, lo == hi
}

// scaleBlock checks the shape of scale sc of the data tensor named data
// (logical shape logical) against the grid g and returns Scale.Block.
func scaleBlock(data string, logical []int64, sc Stored, g grid) ([2]int64, error) {
	var zero [2]int64
	r, c, err := view(logical)
	if err != nil {
		return zero, layoutErr("data shape", data, err.Error())
	}
	n, err := shapes.Elements(sc.Shape)
	if err != nil {
		return zero, layoutErr("scale shape", sc.Name, err.Error())
	}
	kind := g.kind
	if kind == gTensorOrChannel {
		kind = gChannel
		if n == 1 {
			kind = gTensor
		}
	}
	bad := func(want string) ([2]int64, error) {
		return zero, layoutErr("scale shape", sc.Name, "shape "+shapeString(sc.Shape)+", want "+want+" for "+data+" "+shapeString(logical))
	}
	if kind != gTensor && len(logical) != 2 {
		return zero, layoutErr("data shape", data, "shape "+shapeString(logical)+": a per-channel, group or block scale needs a matrix")
	}
	switch kind {
	case gTensor:
		if n != 1 {
			return bad("one element ([] or [1])")
		}
		return [2]int64{max(r, 1), max(c, 1)}, nil
	case gChannel:
		if !slices.Equal(sc.Shape, []int64{r, 1}) && !slices.Equal(sc.Shape, []int64{r}) {
			return bad(shapeString([]int64{r, 1}))
		}
		return [2]int64{1, max(c, 1)}, nil
	case gBlock:
		want := []int64{ceilDiv(r, g.b[0]), ceilDiv(c, g.b[1])}
		if !slices.Equal(sc.Shape, want) {
			return bad(shapeString(want) + " (blocks of " + shapeString(g.b[:]) + ")")
		}
		return g.b, nil
	case gBlockFromShape:
		if len(sc.Shape) != 2 {
			return bad("two dimensions")
		}
		var b [2]int64
		for i, nn := range []int64{r, c} {
			bs, possible, unique := blockFromShape(nn, sc.Shape[i])
			if !possible {
				return bad("a whole number of blocks along each dimension")
			}
			if !unique {
				return zero, layoutErr("block size unknown", sc.Name, "no config states the block size and shape "+
					shapeString(sc.Shape)+" for "+data+" "+shapeString(logical)+" fits several; refusing to guess")
			}
			b[i] = bs
		}
		return b, nil
	case gGroup:
		gs := g.b[1]
		if c%gs != 0 {
			return zero, layoutErr("block size", data, "group size "+strconv.FormatInt(gs, 10)+" does not divide the "+
				strconv.FormatInt(c, 10)+" columns of "+shapeString(logical))
		}
		want := []int64{r, c / gs}
		if !slices.Equal(sc.Shape, want) {
			return bad(shapeString(want) + " (one per " + strconv.FormatInt(gs, 10) + " values of a row)")
		}
		return [2]int64{1, gs}, nil
	}
	return zero, nil
}

func isFP8(d dtype.DType) bool {
	switch d {
	case dtype.F8_E4M3, dtype.F8_E5M2, dtype.F8_E4M3FNUZ, dtype.F8_E5M2FNUZ:
		return true
	}
	return false
}

// scaleDTypeOK reports whether Dequantize can read scales of dtype d: the
// float types of 8 to 32 bits. F64 is refused: its product with a narrow
// value would not always be exact in float64.
func scaleDTypeOK(d dtype.DType) bool {
	switch d {
	case dtype.F32, dtype.BF16, dtype.F16, dtype.F8_E8M0:
		return true
	}
	return isFP8(d)
}

// checkScaleDType checks a scale's dtype: a float type Dequantize reads, or
// with e8m0 also U8 (the carrier of MXFP4's E8M0 scales).
func checkScaleDType(sc Stored, e8m0 bool) error {
	if e8m0 {
		if sc.DType == dtype.U8 || sc.DType == dtype.F8_E8M0 {
			return nil
		}
		return layoutErr("scale dtype", sc.Name, "dtype "+sc.DType.String()+", want U8 or F8_E8M0 (E8M0 exponents)")
	}
	if scaleDTypeOK(sc.DType) {
		return nil
	}
	if sc.DType.IsFloat() {
		return layoutErr("scale dtype", sc.Name, "dtype "+sc.DType.String()+" is not supported for scales (F32, BF16, F16 or an 8-bit float)")
	}
	return layoutErr("scale dtype", sc.Name, "dtype "+sc.DType.String()+" is not a float type")
}

func clone(s Stored) Stored {
	s.Shape = slices.Clone(s.Shape)
	return s
}

func shapeString(s []int64) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, d := range s {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(d, 10))
	}
	b.WriteByte(']')
	return b.String()
}

func quote(s string) string { return strconv.Quote(s) }
