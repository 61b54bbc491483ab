package convert

import (
	"cmp"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/quant"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/torch"
)

// buildTasks builds the tasks that write every tensor of c, from the
// loader's Items (c.items), in the source's order, each FP8 scale right
// after its weight.
func (r *runner) buildTasks(c *component) error {
	o := &r.opts
	entries := c.store.entries()
	sch := c.scheme
	unconsumed := map[string]bool{}
	for _, n := range sch.Unconsumed {
		unconsumed[n] = true
	}
	kept := map[string]bool{}
	for _, n := range sch.Kept {
		kept[n] = true
	}
	markers := map[string]bool{}
	for _, n := range sch.Markers {
		markers[n] = true
	}
	if err := r.checkSources(c); err != nil {
		return err
	}
	tensor := func(name string) (*partTensor, error) {
		t, err := c.store.tensor(name)
		if err != nil {
			return nil, &Error{Kind: ErrSource, Component: c.name, Tensor: name, Err: err}
		}
		return t, nil
	}
	newTask := func(kind taskKind, name string, to dtype.DType, shape []int64, src *partTensor, dec ckpt.Decision, action string, from dtype.DType) *task {
		t := &task{kind: kind, comp: c, spec: safetensors.TensorSpec{Name: name, DType: to, Shape: slices.Clone(shape)}, src: src}
		b, _ := t.spec.ByteLen()
		t.rep = &TensorReport{Component: c.name, Name: name, Shape: slices.Clone(shape), From: from, To: to, Action: action,
			Rule: dec.Rule, Elements: numElements(shape), Bytes: b}
		return t
	}
	var tasks []*task
	var keptWeights, goneWeights int
	var quantTasks []*task
	castErr := func(name, msg string) error {
		return &Error{Kind: ErrCast, Component: c.name, Tensor: name, Msg: msg}
	}
	scaled := func(d dtype.DType, name string, shape []int64) (bool, error) {
		if c.scale.Unscaled || !d.IsFloat() || d.Bits() > 8 || len(shape) != 2 || !strings.HasSuffix(name, ".weight") || numElements(shape) == 0 {
			return false, nil // an empty weight is cast: it has no values to scale
		}
		if d != dtype.F8_E4M3 && d != dtype.F8_E5M2 {
			return false, castErr(name, fmt.Sprintf("scaled quantization writes F8_E4M3 or F8_E5M2, not %s; Scale.Unscaled (--fp8-scale none) casts to %s without scales", d, d))
		}
		return true, nil
	}
	addQuant := func(t *task, elem dtype.DType) error {
		q, err := quant.NewFP8Quantizer(elem, t.spec.Shape, c.scale.Granularity, c.scale.Block)
		if err != nil {
			return castErr(t.spec.Name, err.Error())
		}
		t.q = q
		t.rows, t.cols = t.spec.Shape[0], t.spec.Shape[1]
		sname := t.spec.Name + c.format.scaleSuffix()
		st := &task{kind: kScale, comp: c, q: q, spec: safetensors.TensorSpec{Name: sname, DType: dtype.F32, Shape: q.ScaleShape()}}
		b, _ := st.spec.ByteLen()
		st.rep = &TensorReport{Component: c.name, Name: sname, Shape: q.ScaleShape(), From: dtype.F32, To: dtype.F32, Action: ActionScale,
			Rule: "scales of " + t.spec.Name, Elements: numElements(q.ScaleShape()), Bytes: b}
		t.rep.Scale, t.rep.ScaleTensor, t.rep.Narrowed = c.scale.reportString(), sname, true
		tasks = append(tasks, t, st)
		quantTasks = append(quantTasks, t)
		return nil
	}
	// addRelabel writes w's codes and scale values as they are stored,
	// under the names of c.format, the scale in the shape of c.scale's grid
	// (which covers the same blocks: see relabels).
	addRelabel := func(w *quant.Weight, src, scale *partTensor, dec ckpt.Decision) error {
		q, err := quant.NewFP8Quantizer(w.Elem, w.Shape, c.scale.Granularity, c.scale.Block)
		if err != nil {
			return castErr(w.Name, err.Error())
		}
		s := w.Scales[0]
		t := newTask(kCopy, w.Data.Name, w.Data.DType, w.Data.Shape, src, dec, ActionRelabel, w.Data.DType)
		sname := w.Name + c.format.scaleSuffix()
		t.rep.Scale, t.rep.ScaleTensor = c.scale.reportString(), sname
		st := newTask(kCopy, sname, dtype.F32, q.ScaleShape(), scale, ckpt.Decision{Rule: fmt.Sprintf("scales of %s: %s %s as stored", w.Name, s.Name, s.DType)}, ActionScale, s.DType)
		if s.DType != dtype.F32 {
			st.kind = kCast // exact: F16 and BF16 widen to F32
		}
		tasks = append(tasks, t, st)
		quantTasks = append(quantTasks, t)
		return nil
	}
	// notApplied counts FP8 weights that the policy keeps as stored
	// although scales were asked for; storedFP8 those whose dtype target is
	// their element type, copied as stored since nothing else was asked.
	var notApplied, storedFP8 int
	noTarget := !o.Policy.Default.IsSet() && len(o.Policy.Components) == 0 && len(o.Policy.Rules) == 0
	// dropped are the scales and markers of weights that leave their layout.
	var dropped []string
	// ties are the Items of tied names.
	var ties []*ckpt.Item
	// Activation scales and markers, decided last, in the source's order.
	var later []storedEntry
	for _, e := range entries {
		if markers[e.name] || kept[e.name] {
			later = append(later, e)
		}
	}
	// Each logical tensor as the loader decided it (its Item, made with
	// the final policy: openItems): the targets, the refusals of targets a
	// tensor cannot take and the layouts are the loader's; what is
	// convert's own is how it writes them (scaled FP8 quantization,
	// relabeled scales, the layout's other tensors).
	for _, it := range c.items {
		dec := it.Decision
		if w := it.Quant; w != nil {
			d, isD := dec.Target.DType()
			if !isD && noTarget && c.explicit && fp8Elem(w.Elem) {
				// Only scales were asked for: they apply to the
				// stored FP8 weights.
				d, isD = w.Elem, true
				dec.Rule = "no dtype target: " + c.request() + " for the stored " + w.Elem.String()
			}
			src := partSource(&it.Data, &r.rawPool)
			keep := !isD
			if keep && c.explicit && fp8Elem(w.Elem) {
				notApplied++
			}
			if isD && d == w.Elem {
				switch {
				case !c.explicit:
					keep = true
					storedFP8++
				case c.scale.Unscaled:
					// Dequantized and cast without scales, below.
				case relabels(w, c.format, c.scale):
					if err := addRelabel(w, src, partSource(&it.Scales[0], &r.rawPool), dec); err != nil {
						return err
					}
					goneWeights++
					continue
				default:
					if sc, err := scaled(d, w.Name, w.Shape); err != nil {
						return err
					} else if !sc {
						return castErr(w.Name, fmt.Sprintf("a %s weight of shape %v in layout %s cannot be requantized with %s scales: they apply to the 2-D P.weight of a linear layer; a rule %s=stored keeps it as stored", w.Elem, w.Shape, w.Layout, c.scale, w.Name))
					}
				}
			}
			if keep {
				keptWeights++
				tasks = append(tasks, newTask(kCopy, it.Data.Tensor, it.Data.DType, it.Data.Shape, src, dec, ActionCopy, it.Data.DType))
				for i := range it.Scales {
					s := &it.Scales[i]
					tasks = append(tasks, newTask(kCopy, s.Tensor, s.DType, s.Shape, partSource(s, &r.rawPool), ckpt.Decision{Rule: "scale of " + w.Name}, ActionCopy, s.DType))
				}
				continue
			}
			goneWeights++
			for _, s := range w.Scales {
				dropped = append(dropped, s.Name)
			}
			sc, err := scaled(d, w.Name, w.Shape)
			if err != nil {
				return err
			}
			kind, action := kDequant, ActionDequantize
			if sc {
				kind, action = kRequant, ActionRequantize
			}
			t := newTask(kind, w.Name, d, w.Shape, src, dec, action, w.Elem)
			t.w = w
			t.rep.Narrowed = true
			for i := range it.Scales {
				t.scales = append(t.scales, partSource(&it.Scales[i], &r.rawPool))
			}
			rows, cols := int64(1), int64(1)
			if len(w.Shape) > 0 {
				cols = w.Shape[len(w.Shape)-1]
				rows = numElements(w.Shape[:len(w.Shape)-1])
			}
			t.rows, t.cols = rows, cols
			if sc {
				if err := addQuant(t, d); err != nil {
					return err
				}
			} else {
				tasks = append(tasks, t)
			}
			continue
		}
		name, stored, shape := it.Data.Tensor, it.Data.DType, it.Data.Shape
		if name != it.Name {
			// A tied name, which reads another name's tensor: that
			// tensor is written once, under its own name, and the tie
			// is in the metadata (torch.AliasesKey), once checked
			// (checkTies).
			ties = append(ties, it)
			continue
		}
		if kept[name] {
			continue // with the layout's tensors, last
		}
		src := partSource(&it.Data, &r.rawPool)
		if unconsumed[name] {
			r.rep.Warnings = append(r.rep.Warnings, fmt.Sprintf("%s: %s looks like quantization data of a layout ckpt does not decode: copied as stored", c.label, name))
			tasks = append(tasks, newTask(kCopy, name, stored, shape, src, ckpt.Decision{Rule: "unknown layout: as stored"}, ActionCopy, stored))
			continue
		}
		if it.Action != ckpt.ActionConvert {
			tasks = append(tasks, newTask(kCopy, name, stored, shape, src, dec, ActionCopy, stored))
			continue
		}
		d := it.DType
		sc, err := scaled(d, name, shape)
		if err != nil {
			return err
		}
		if sc && stored.IsFloat() {
			t := newTask(kQuant, name, d, shape, src, dec, ActionQuantize, stored)
			if err := addQuant(t, d); err != nil {
				return err
			}
			continue
		}
		t := newTask(kCast, name, d, shape, src, dec, ActionCast, stored)
		t.narrow = !exact(stored, d)
		t.rep.Narrowed = t.narrow
		tasks = append(tasks, t)
	}
	if err := checkTies(c, ties, tasks, func(it *ckpt.Item, name string) (string, bool, error) {
		if unconsumed[it.Data.Tensor] || it.Action != ckpt.ActionConvert {
			return it.Data.DType.String() + " as stored", false, nil
		}
		sc, err := scaled(it.DType, name, it.Data.Shape)
		if sc && it.Data.DType.IsFloat() {
			return it.DType.String() + " with scales (" + c.scale.reportString() + ")", true, err
		}
		return it.DType.String() + " (cast from " + it.Data.DType.String() + ")", false, err
	}); err != nil {
		return err
	}
	if storedFP8 > 0 {
		r.rep.Warnings = append(r.rep.Warnings, fmt.Sprintf("%s: %d weights already stored as scaled FP8 (%s) are copied with their scales as stored: set Scale or ScaleFormat (--fp8-scale, --scale-format) to requantize or relabel them", cmp.Or(c.name, "weights"), storedFP8, sch.Layout))
	}
	if notApplied > 0 {
		r.rep.Warnings = append(r.rep.Warnings, fmt.Sprintf("%s: %d scaled FP8 weights kept as stored by the policy (a target \"stored\"): the requested %s does not apply to them", cmp.Or(c.name, "weights"), notApplied, c.request()))
	}
	c.newQ = len(quantTasks) > 0
	sourceQ := len(sch.Weights) > 0
	c.dropQ = sourceQ && keptWeights == 0
	if c.newQ && keptWeights > 0 {
		return &Error{Kind: ErrCast, Component: c.name, Msg: fmt.Sprintf("%d weights stay in the source's %s layout while others would be quantized anew: one component cannot declare both; dequantize or requantize them all", keptWeights, sch.Layout)}
	}
	// Activation scales and markers belong to the layout: copied as
	// stored while a weight stays in it, dropped when none does.
	for _, e := range later {
		if keptWeights == 0 && goneWeights > 0 {
			dropped = append(dropped, e.name)
			continue
		}
		src, err := tensor(e.name)
		if err != nil {
			return err
		}
		tasks = append(tasks, newTask(kCopy, e.name, e.dtype, e.shape, src, ckpt.Decision{Rule: "belongs to the " + sch.Layout.String() + " layout: as stored"}, ActionCopy, e.dtype))
	}
	for _, t := range tasks {
		r.sizeTask(t)
	}
	c.tasks = tasks
	c.byName = make(map[string]*task, len(tasks))
	for _, t := range tasks {
		if c.byName[t.spec.Name] != nil {
			return &Error{Kind: ErrCast, Component: c.name, Tensor: t.spec.Name, Msg: "two output tensors would have this name"}
		}
		c.byName[t.spec.Name] = t
	}
	if len(tasks) == 0 {
		return &Error{Kind: ErrSource, Component: c.name, Msg: "no tensors to write"}
	}
	for _, d := range dropped {
		r.rep.Dropped = append(r.rep.Dropped, qualified(c.name, d))
	}
	var unscaledNarrow int
	for _, t := range tasks {
		if (t.kind == kCast || t.kind == kDequant) && t.spec.DType.Bits() <= 8 && t.spec.DType.IsFloat() {
			unscaledNarrow++
		}
	}
	if unscaledNarrow > 0 {
		r.rep.Warnings = append(r.rep.Warnings, fmt.Sprintf("%s: %d tensors cast to 8-bit or narrower floats without scales: values beyond the type's range saturate or overflow and small ones flush to zero (see their numerics)", cmp.Or(c.name, "weights"), unscaledNarrow))
	}

	// Metadata: the source's, without a quantization that no longer
	// applies, with the new one and the provenance.
	meta := c.store.metadata()
	if meta == nil {
		meta = map[string]string{}
	}
	meta = r.sourceMetadata(c, meta)
	if c.newQ || c.dropQ {
		delete(meta, MetaQuantizationConfig)
		delete(meta, "_quantization_metadata")
	}
	if _, ok := meta["format"]; !ok {
		meta["format"] = "pt"
	}
	meta[MetaSource] = filepath.Base(filepath.Clean(r.src))
	meta[MetaPolicy] = r.policyString()
	if c.newQ {
		elem := quantTasks[0].spec.DType
		for _, t := range quantTasks[1:] {
			if t.spec.DType != elem {
				return &Error{Kind: ErrCast, Component: c.name, Tensor: t.spec.Name, Msg: fmt.Sprintf("FP8 weights of two element types (%s and %s) in one component: one quantization_config cannot declare both", elem, t.spec.DType)}
			}
		}
		c.qconfig = quantizationConfig(c.format, c.scale, elem, ignoreList(tasks))
		meta[MetaQuantizationConfig] = string(c.qconfig)
		meta[MetaScale] = c.scale.String() + " " + c.format.String()
	} else if q, ok := meta[MetaQuantizationConfig]; ok && !c.dropQ {
		c.qconfig = []byte(q)
	}
	c.meta = meta
	return nil
}

// ignoreList returns the linear modules the quantization leaves alone, for
// the config's ignore list: modules whose 2-D weight is a linear layer's
// (or an output head's) and is not quantized with scales, modules whose
// weight is stored in FP8 without scales (a reader would look for them),
// and lm_head.
func ignoreList(tasks []*task) []string {
	set := map[string]bool{"lm_head": true}
	for _, t := range tasks {
		name := t.spec.Name
		if t.kind == kQuant || t.kind == kRequant || t.kind == kScale || t.rep.Action == ActionRelabel || !strings.HasSuffix(name, ".weight") {
			continue
		}
		module := strings.TrimSuffix(name, ".weight")
		last := module[strings.LastIndexByte(module, '.')+1:]
		fp8 := t.spec.DType.Bits() == 8 && t.spec.DType.IsFloat()
		if fp8 || (len(t.spec.Shape) == 2 && (ckpt.LinearWeight(name, t.spec.Shape) || last == "lm_head" || last == "embed_out")) {
			set[module] = true
		}
	}
	return sortedKeys(set)
}

// sizeTask sets how a task is cut into pieces: elements for copies and
// casts (multiples of 8, so that sub-byte dtypes stay on byte boundaries),
// rows for the others (multiples of 8 and of the quantizer's row
// alignment), about ChunkBytes of source or staging data each.
func (r *runner) sizeTask(t *task) {
	t.outBits = int64(t.spec.DType.Bits())
	switch t.kind {
	case kScale:
		return
	case kCopy, kCast:
		t.units = numElements(t.spec.Shape)
		bits := max(t.outBits, int64(t.src.DType().Bits()))
		if t.narrow {
			// Smaller pieces for a measured cast, as when each piece was
			// staged whole for the measure (it is staged castBlock
			// elements at a time now): pieces of twice the size measured
			// slower (twice the system time) in bench/convert.sh.
			bits = max(bits, 32)
			if t.src.DType() == dtype.F64 || t.spec.DType.Bits() > 32 {
				bits = 64
			}
			bits *= 2
		}
		t.per = max(r.chunk*8/bits/8*8, 8)
		return
	}
	t.units = t.rows
	align := int64(8)
	if t.q != nil && t.q.RowAlign() > 1 {
		align = lcm(8, t.q.RowAlign())
	}
	staging := int64(4) // float32 rows
	if t.kind == kDequant {
		staging = 16 // float64 values and their decoded rounding
	}
	rows := r.chunk / max(t.cols*staging, 1)
	t.per = max(rows/align*align, align)
}

func lcm(a, b int64) int64 {
	x, y := a, b
	for y != 0 {
		x, y = y, x%y
	}
	return a / x * b
}

func numElements(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	return n
}

func qualified(comp, name string) string {
	if comp == "" {
		return name
	}
	return comp + "/" + name
}

// policyString writes the policy as the CLI's flags spell it.
func (r *runner) policyString() string {
	p := &r.opts.Policy
	var parts []string
	if p.Default.IsSet() {
		parts = append(parts, "--dtype "+p.Default.String())
	}
	for _, k := range sortedKeys(p.Components) {
		parts = append(parts, "--component "+k+"="+p.Components[k].String())
	}
	for _, ru := range p.Rules {
		parts = append(parts, "--keep "+ru.String())
	}
	if len(parts) == 0 {
		return "as stored"
	}
	return strings.Join(parts, " ")
}

// checkTies refuses the ties that the output cannot keep: a tied name is
// written once, as its kept tensor, so both must become the same (the
// loader's Items: the policy may give them different targets), and that
// may not be a weight quantized with scales (a scaled layout names each
// of its tensors by its own name, so the loader refuses a tie to one).
// becomes says what the Item becomes written under name, and whether
// that is a scaled quantization. The report lists each tie with its kept
// tensor's task (TensorReport.Tied).
func checkTies(c *component, ties []*ckpt.Item, tasks []*task, becomes func(it *ckpt.Item, name string) (string, bool, error)) error {
	if len(ties) == 0 {
		return nil
	}
	byName := make(map[string]*ckpt.Item, len(c.items))
	for _, it := range c.items {
		byName[it.Name] = it
	}
	for _, tie := range ties {
		kept := byName[tie.Data.Tensor]
		if kept == nil {
			return &Error{Kind: ErrSource, Component: c.name, Tensor: tie.Name, Msg: fmt.Sprintf("tied to %s, which the source does not list", tie.Data.Tensor)}
		}
		tb, _, err := becomes(tie, tie.Name)
		if err != nil {
			return err
		}
		kb, scaled, err := becomes(kept, kept.Name)
		if err != nil {
			return err
		}
		switch {
		case tb != kb:
			return &Error{Kind: ErrCast, Component: c.name, Tensor: tie.Name, Msg: fmt.Sprintf(
				"it is tied to %s (%s), which would become %s (%s) while %s would become %s (%s): a tie is written once and cannot hold both; give both names the same target",
				kept.Name, torch.AliasesKey, kb, kept.Decision.Rule, tie.Name, tb, tie.Decision.Rule)}
		case scaled:
			return &Error{Kind: ErrCast, Component: c.name, Tensor: tie.Name, Msg: fmt.Sprintf(
				"it is tied to %s (%s), and both would become %s: a scaled layout names each weight's scales by its own name, so a tie cannot stand for one; cast them without scales (Scale.Unscaled, --fp8-scale none) or keep them as stored",
				kept.Name, torch.AliasesKey, kb)}
		}
		for _, t := range tasks {
			if t.spec.Name == kept.Name {
				t.rep.Tied = append(t.rep.Tied, tie.Name)
			}
		}
	}
	return nil
}
