package ckpt

import (
	"cmp"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/sysmem"
	"github.com/ckpt-go/ckpt/variant"
)

// Plan is what loading will do, computed from headers before anything is
// read: per component the files, every tensor's dtype decision with the
// rule that made it, the quantization layout, the read strategy, and the
// bytes.
//
// Resident bytes are what stays in memory after loading: mapped bytes
// (zero-copy views of the files' mappings) plus owned bytes (buffers of
// converted, dequantized or pread tensors). The peak adds the transient
// staging and worker buffers of the load itself (at most the staging
// allowance, 64 MiB by default, see WithStaging), and, for a PyTorch view
// that is not contiguous (a transposed weight), the storage its part
// spans, which the load reads once into memory for its pieces (one per
// worker, the largest ones). A plan fits when
// PeakBytes ≤ BudgetBytes. Loading never holds two full copies of a tensor:
// a converted tensor is written once, from the mapping or from a bounded
// staging buffer, straight into its own output.
//
// String renders a plan for people; encoding/json renders it for programs
// (json.MarshalIndent(p, "", "  ") is what `ckpt plan --json` prints).
type Plan struct {
	Path       string           `json:"path"`
	Variant    string           `json:"variant,omitempty"`
	Components []*ComponentPlan `json:"components"`
	// TotalMappedBytes, TotalOwnedBytes and TotalResidentBytes add up the
	// components.
	TotalMappedBytes   int64 `json:"total_mapped_bytes"`
	TotalOwnedBytes    int64 `json:"total_owned_bytes"`
	TotalResidentBytes int64 `json:"total_resident_bytes"`
	// StagingBytes is the transient memory of the load beyond the resident
	// bytes: worker and staging buffers, and gathered PyTorch views.
	StagingBytes int64 `json:"staging_bytes"`
	// PeakBytes = TotalResidentBytes + StagingBytes.
	PeakBytes int64 `json:"peak_bytes"`
	// BudgetBytes is the budget the plan is checked against (-1: none).
	BudgetBytes int64 `json:"budget_bytes"`
	// BudgetSource says where the budget comes from: "--budget", or the
	// memory this process can get (MemAvailable, a cgroup limit).
	BudgetSource string `json:"budget_source"`
	// Fits reports PeakBytes ≤ BudgetBytes (always true without a budget).
	Fits bool `json:"fits"`
	// Shortfall is PeakBytes − BudgetBytes when the plan does not fit.
	Shortfall int64 `json:"shortfall_bytes,omitempty"`
	// Advice says what would fit when the plan does not (empty otherwise).
	Advice  string `json:"advice,omitempty"`
	Workers int    `json:"workers"`
	// Warnings gathers the resolution's warnings and the components'.
	Warnings []string `json:"warnings,omitempty"`
	// TotalStoredBytes adds up the components' stored bytes, and
	// TotalReadBytes the bytes this rank reads of them (see ReadBytes).
	TotalStoredBytes int64 `json:"total_stored_bytes"`
	TotalReadBytes   int64 `json:"total_read_bytes"`
	// Rank is the rank option (WithRank), nil without one.
	Rank *RankPlan `json:"rank,omitempty"`
	// Verify says what the load verifies by checksum.
	Verify VerifyPlan `json:"verify"`
}

// RankPlan is the rank option a plan was made under.
type RankPlan struct {
	Rank   int      `json:"rank"`
	World  int      `json:"world"`
	Splits []string `json:"splits"`
}

// ComponentPlan is the plan of one component.
type ComponentPlan struct {
	Name    string `json:"name"`
	Dir     string `json:"dir"`
	Variant string `json:"variant,omitempty"`
	Layout  string `json:"layout,omitempty"`
	// Format is the format of Files: "safetensors", or "pytorch" for a
	// PyTorch checkpoint (a file given to Open, or a folder's PyTorch
	// weights; package variant's FormatSafetensors and FormatPyTorch).
	Format  string             `json:"format,omitempty"`
	Files   []string           `json:"files"`
	Ignored []variant.Ignored  `json:"ignored,omitempty"`
	Target  string             `json:"target,omitempty"` // the component's target, when set
	Quant   QuantizationReport `json:"quantization"`
	// ReadStrategy is "mmap" or "pread"; ReadStrategyReason says why.
	ReadStrategy       string `json:"read_strategy"`
	ReadStrategyReason string `json:"read_strategy_reason"`
	MappedBytes        int64  `json:"mapped_bytes"`
	OwnedBytes         int64  `json:"owned_bytes"`
	ResidentBytes      int64  `json:"resident_bytes"`
	// StoredBytes is the size of the component's tensor data as stored.
	StoredBytes int64 `json:"stored_bytes"`
	// ReadBytes is what a load reads of it: the stored bytes, or with a
	// rank option (WithRank) this rank's parts of the split tensors and
	// the replicated tensors whole. Views count as read.
	ReadBytes int64 `json:"read_bytes"`
	// Alternatives gives the resident bytes the component would need under
	// other uniform targets ("F32", "BF16", "F8_E4M3", "stored"), for the
	// refusal message and for choosing a policy.
	Alternatives []Alternative `json:"alternatives,omitempty"`
	Tensors      []TensorPlan  `json:"tensors"`
	Warnings     []string      `json:"warnings,omitempty"`
}

// QuantizationReport says which scaled low-precision layout a component
// uses and what was left unexplained.
type QuantizationReport struct {
	Layout  string `json:"layout"`
	Source  string `json:"source,omitempty"`
	Weights int    `json:"weights"`
	// Unconsumed lists stored tensors that look like scales (*_scale*,
	// *_blocks) but that no layout consumed: an unknown layout, reported
	// rather than guessed. They load as ordinary tensors.
	Unconsumed []string `json:"unconsumed_scales,omitempty"`
	// Unsupported lists declared layouts that ckpt does not decode (for
	// example quant_method "gptq"): their tensors load as stored.
	Unsupported []string `json:"unsupported,omitempty"`
	// Kept lists activation and KV-cache scales returned as plain tensors.
	Kept []string `json:"kept_scales,omitempty"`
}

// Alternative is the resident size of a component under one uniform
// target.
type Alternative struct {
	Target        string `json:"target"`
	ResidentBytes int64  `json:"resident_bytes"`

	use usage // for the advice's peak
}

// TensorPlan is the decision for one logical tensor.
type TensorPlan struct {
	Name   string  `json:"name"`
	Stored string  `json:"stored"`
	Shape  []int64 `json:"shape"`
	DType  string  `json:"dtype"` // the dtype it loads as
	// Action is "view" (zero-copy), "read" (pread copy), "convert",
	// "dequantize" or "quantized" (kept narrow with its scales).
	Action string `json:"action"`
	Rule   string `json:"rule"`
	Bytes  int64  `json:"bytes"`
	// Scales names the scale tensors of a quantized weight.
	Scales []string `json:"scales,omitempty"`
	// StoredBytes is the size of the whole tensor as stored (data plus
	// scales for a quantized weight), and ReadBytes what a load reads of
	// it: all of it, or this rank's part when a rank option splits it.
	StoredBytes int64 `json:"stored_bytes"`
	ReadBytes   int64 `json:"read_bytes"`
	// Split is the part of the tensor this rank loads (WithRank); nil when
	// no split matches it (it is replicated). Shape is then the part's.
	Split *SliceInfo `json:"split,omitempty"`
	// Ranges are the byte ranges of the files read for the tensor, listed
	// with a rank option only.
	Ranges []TensorRead `json:"ranges,omitempty"`
	// Verify says how a load verifies the tensor's stored bytes against
	// the checksums its file names (the least verified of its
	// stored tensors: "checksum", "not verified: rank part", "refused: no
	// checksums", ...), and VerifyReadBytes what it reads only to verify
	// them (the rest of a rank's part, with VerifyAlways). A view handed
	// out unverified says "checksum, when read" (ViewCheckOnRead).
	Verify          string `json:"verify"`
	VerifyReadBytes int64  `json:"verify_read_bytes,omitempty"`
}

// VerifyPlan says what a load verifies against the checksums the files
// name (see Policy.Verify).
type VerifyPlan struct {
	// Policy is the policy's Verify: "present", "always" or "never".
	Policy string `json:"policy"`
	// Tensors are the logical tensors verified (every stored tensor they
	// read: data and scales), and Bytes the stored bytes of those stored
	// tensors.
	Tensors int   `json:"tensors"`
	Bytes   int64 `json:"bytes"`
	// ReadBytes is what the load reads only to verify: the rest of the
	// tensors of rank parts, the storage records of PyTorch views
	// (VerifyAlways).
	ReadBytes int64 `json:"read_bytes,omitempty"`
	// PassBytes are the bytes of zero-copy views the load verifies, which
	// it reads only for that: a pass over the mapping by its workers
	// before it returns them, about the time of one read of those bytes
	// from memory (from the disk, their first read). They are counted in
	// Bytes too.
	PassBytes int64 `json:"pass_bytes,omitempty"`
	// OnReadBytes are the bytes of zero-copy views the load hands out
	// unverified, to be verified as they are read (ViewCheckOnRead:
	// Tensor.Chunks, Check). They are counted in Bytes too.
	OnReadBytes int64 `json:"on_read_bytes,omitempty"`
	// Unverified counts the tensors not verified, and Why how many for
	// each reason (TensorPlan.Verify): "not verified: rank part", "not
	// verified: a view of its storage" (a PyTorch view), "not verified: no
	// checksums", "not verified: never".
	Unverified int            `json:"unverified"`
	Why        map[string]int `json:"why,omitempty"`
	// Refused counts the tensors a load refuses with ErrChecksum: in
	// files without checksums under VerifyAlways, or whose checksums are
	// damaged. A load of the model fails before anything is read.
	Refused int `json:"refused,omitempty"`
}

// String writes the summary line of a plan: "verify (present): 123
// tensors (4.1 GiB) by checksum, 2 not (rank part: 2)".
func (v *VerifyPlan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "verify (%s): %d tensors (%s) by checksum", v.Policy, v.Tensors, sysmem.FormatSize(v.Bytes))
	if v.ReadBytes > 0 {
		fmt.Fprintf(&b, ", reading %s more to verify rank parts and views", sysmem.FormatSize(v.ReadBytes))
	}
	if v.PassBytes > 0 {
		fmt.Fprintf(&b, "; %s of zero-copy views read once before the load returns them", sysmem.FormatSize(v.PassBytes))
	}
	if v.OnReadBytes > 0 {
		fmt.Fprintf(&b, "; %s of zero-copy views handed out unverified, verified as they are read (Tensor.Chunks) or checked", sysmem.FormatSize(v.OnReadBytes))
	}
	if v.Unverified > 0 || v.Refused > 0 {
		var why []string
		for _, k := range slices.Sorted(maps.Keys(v.Why)) {
			why = append(why, fmt.Sprintf("%s: %d", strings.TrimPrefix(k, "not verified: "), v.Why[k]))
		}
		fmt.Fprintf(&b, ", %d not (%s)", v.Unverified+v.Refused, strings.Join(why, ", "))
	}
	if v.Refused > 0 {
		fmt.Fprintf(&b, "; a load REFUSES %d of them (ErrChecksum)", v.Refused)
	}
	return b.String()
}

// Plan computes the plan. It reads nothing beyond what Open read.
func (m *Model) Plan() (*Plan, error) {
	if err := m.checkOpen(); err != nil {
		return nil, err
	}
	p := &Plan{Path: m.path, Variant: m.cfg.variant, Workers: m.workers(), BudgetBytes: -1,
		Verify: VerifyPlan{Policy: m.cfg.policy.Verify.String()}}
	if m.pipeline != nil {
		p.Warnings = append(p.Warnings, m.pipeline.Warnings...)
	}
	for _, c := range m.comps {
		cp := &ComponentPlan{
			Name:               c.name,
			Dir:                c.dir,
			Files:              slices.Clone(c.files),
			ReadStrategy:       c.strategy.string(),
			ReadStrategyReason: c.why,
			Quant: QuantizationReport{
				Layout:      c.scheme.Layout.String(),
				Source:      c.scheme.Source,
				Weights:     len(c.scheme.Weights),
				Unconsumed:  slices.Clone(c.scheme.Unconsumed),
				Unsupported: slices.Clone(c.scheme.Unsupported),
				Kept:        slices.Clone(c.scheme.Kept),
			},
		}
		cp.Format = variant.FormatSafetensors
		if torchOf(c.ck) != nil {
			cp.Format = variant.FormatPyTorch
		}
		if t, ok := m.cfg.policy.Components[c.name]; ok {
			cp.Target = t.String()
		}
		if c.vplan != nil {
			cp.Variant, cp.Layout = c.vplan.Variant, c.vplan.Layout
			cp.Ignored = slices.Clone(c.vplan.Ignored)
			cp.Warnings = append(cp.Warnings, c.vplan.Warnings...)
		}
		cp.Warnings = append(cp.Warnings, c.ck.warnings()...)
		if len(c.scheme.Unconsumed) > 0 {
			cp.Warnings = append(cp.Warnings, fmt.Sprintf("%d tensors look like scales but no known layout consumed them (loaded as ordinary tensors): %s",
				len(c.scheme.Unconsumed), strings.Join(firstN(c.scheme.Unconsumed, 5), ", ")))
		}
		for _, u := range c.scheme.Unsupported {
			cp.Warnings = append(cp.Warnings, "unsupported quantization (loaded as stored, not dequantized): "+u)
		}
		cp.Tensors = make([]TensorPlan, 0, len(c.entries))
		var it Item // one for every tensor in turn: the plan keeps none
		shapes := dims{n: len(c.entries)}
		for _, e := range c.entries {
			if err := m.fillItem(&it, c, e, false); err != nil {
				return nil, err
			}
			tp := it.plan(m.cfg.rank.set, &shapes)
			cp.Tensors = append(cp.Tensors, tp)
			p.Verify.add(&it, tp)
			cp.MappedBytes += e.mapped
			cp.OwnedBytes += e.owned
			cp.StoredBytes += e.storedBytes()
			cp.ReadBytes += e.inBytes
		}
		cp.ResidentBytes = cp.MappedBytes + cp.OwnedBytes
		cp.Alternatives = m.alternatives(c)
		p.Components = append(p.Components, cp)
		p.TotalMappedBytes += cp.MappedBytes
		p.TotalOwnedBytes += cp.OwnedBytes
		p.TotalStoredBytes += cp.StoredBytes
		p.TotalReadBytes += cp.ReadBytes
		for _, w := range cp.Warnings {
			if !strings.Contains(w, c.name) {
				w = c.name + ": " + w // say which component
			}
			if !slices.Contains(p.Warnings, w) {
				p.Warnings = append(p.Warnings, w)
			}
		}
	}
	if rc := m.cfg.rank; rc.set {
		p.Rank = &RankPlan{Rank: rc.rank, World: rc.world, Splits: []string{}}
		for _, s := range rc.splits {
			p.Rank.Splits = append(p.Rank.Splits, s.String())
		}
	}
	p.TotalResidentBytes = p.TotalMappedBytes + p.TotalOwnedBytes
	_, p.PeakBytes = m.peak()
	p.StagingBytes = p.PeakBytes - p.TotalResidentBytes
	p.BudgetBytes, p.BudgetSource = m.budget()
	p.Fits = p.BudgetBytes < 0 || p.PeakBytes <= p.BudgetBytes
	if !p.Fits {
		p.Shortfall = p.PeakBytes - p.BudgetBytes
		p.Advice = m.advice(p)
	}
	return p, nil
}

// budget returns the budget in bytes (-1: none) and where it comes from.
func (m *Model) budget() (int64, string) {
	switch {
	case m.cfg.budgetSet && m.cfg.budget < 0:
		return -1, "no budget (disabled)"
	case m.cfg.budgetSet:
		return m.cfg.budget, "budget option"
	}
	av, err := sysmem.Detect()
	if r := m.cfg.memRoots; r != nil {
		av, err = sysmem.DetectFrom(r[0], r[1])
	}
	if av.Bytes >= 0 && (err == nil || av.Bytes > 0) {
		return av.Bytes, "available to this process: " + av.Source
	}
	return -1, "unknown (available memory could not be read)"
}

// peak returns the resident bytes and the peak of a load, as Plan computes
// them, without building the plan.
func (m *Model) peak() (resident, peak int64) { return m.peakOf(m.usages()) }

// usages returns each component's usage under its decisions.
func (m *Model) usages() []usage {
	us := make([]usage, len(m.comps))
	for i, c := range m.comps {
		us[i] = m.usageOf(c, c.entries)
	}
	return us
}

// usage is what one component's load needs: resident bytes, and what its
// pieces of work need in transient memory.
type usage struct {
	resident  int64
	perWorker int64 // the largest scratch one worker needs for it
	pieces    int64 // pieces of work
	// gathers are the largest memories of PyTorch views gathered for
	// their pieces (torchGather), at most one per worker, largest first:
	// each worker reads one tensor at a time, and a tensor's gathered
	// bytes go once its pieces have read them, so that at most that many
	// are held at once.
	gathers []int64
}

// addGather counts a view gathered into b bytes, keeping the workers
// largest.
func (u *usage) addGather(b int64, workers int) {
	if b <= 0 || workers <= 0 {
		return
	}
	i, _ := slices.BinarySearchFunc(u.gathers, b, func(x, y int64) int { return cmp.Compare(y, x) })
	if i >= workers {
		return
	}
	u.gathers = slices.Insert(u.gathers, i, b)
	if len(u.gathers) > workers {
		u.gathers = u.gathers[:workers]
	}
}

// usageOf computes a component's usage for entries (its own, or the
// alternative decisions of a refusal's advice).
func (m *Model) usageOf(c *modelComponent, entries []*entry) usage {
	var u usage
	for _, e := range entries {
		u.add(m, c, e)
	}
	return u
}

// add counts the entry e of the component c.
func (u *usage) add(m *Model, c *modelComponent, e *entry) {
	u.resident += e.mapped + e.owned
	// Verifying: a pass over the views, and the rest of rank parts'
	// tensors read through the staging buffers (verify.go).
	if e.vsum && e.mapped > 0 {
		u.pieces += (e.mapped + chunkBytes - 1) / chunkBytes
	}
	if e.vextra > 0 {
		u.pieces += (e.vextra + chunkBytes - 1) / chunkBytes
		if c.strategy == readPread || !m.src.IsOS() {
			u.perWorker = max(u.perWorker, min(e.vextra, chunkBytes))
		}
	}
	u.addGather(c.gatherBytes(e), m.workers())
	switch {
	case e.act == ActionView || e.act == ActionQuantized && c.strategy != readPread:
		return // nothing to read or convert
	case c.strategy == readPread:
		// A pread piece is read into a scratch buffer of its size.
		u.perWorker = max(u.perWorker, min(e.inBytes, chunkBytes))
	case e.act == ActionDequantize:
		u.perWorker = max(u.perWorker, dequantScratch)
	}
	u.pieces += max((e.outBytes+chunkBytes-1)/chunkBytes, 1)
}

// peakOf adds up the components' usages: resident bytes, plus the staging
// of the workers, plus the rows a worker reads to dequantize a piece.
func (m *Model) peakOf(us []usage) (resident, peak int64) {
	var all usage
	for _, u := range us {
		all.resident += u.resident
		all.perWorker = max(all.perWorker, u.perWorker)
		all.pieces += u.pieces
		for _, g := range u.gathers {
			all.addGather(g, m.workers())
		}
	}
	peak = all.resident
	if all.pieces > 0 {
		peak += m.stagingBytes(all.perWorker, all.pieces)
	}
	// PyTorch views gathered for their pieces, beyond the staging
	// allowance: a view's pieces need the storage they span at once.
	for _, g := range all.gathers {
		peak += g
	}
	// A dequantized weight not read from views of the mapping is read
	// piece by piece, a piece's rows per worker (partStaging).
	return all.resident, peak + m.partStaging()*int64(m.workers())
}

// dequantScratch bounds the scratch one worker's dequantization uses
// (package quant computes 2048 float64 values at a time).
const dequantScratch = 2048 * 8

// workerOverhead is what a load goroutine costs beyond its scratch: its
// stack and bookkeeping.
const workerOverhead = 64 << 10

// workers is the number of load goroutines.
func (m *Model) workers() int {
	if m.cfg.workers > 0 {
		return m.cfg.workers
	}
	return runtime.GOMAXPROCS(0)
}

// chunkBytes is the unit of work of a load: a piece of one tensor's output.
const chunkBytes = 4 << 20

// stagingBytes is the transient memory of a load: per worker that has a
// piece to do, its scratch (a chunk-sized pread buffer, dequantization
// scratch; nothing when converting straight from a mapping) and its
// overhead, capped by the staging allowance (the load runs fewer workers
// rather than exceed it). A remote source's ranged reads may use the whole
// allowance.
func (m *Model) stagingBytes(perWorker, pieces int64) int64 {
	if m.rangeFS() != nil {
		return m.cfg.staging
	}
	w := min(int64(m.workers()), pieces)
	return min(w*(perWorker+workerOverhead), m.cfg.staging)
}

// uniformTargets are the targets a refusal message compares.
var uniformTargets = []Target{To(dtype.F32), To(dtype.BF16), To(dtype.F8_E4M3), AsStored}

// alternatives computes a component's resident bytes under each uniform
// target (rules still apply first, as they would).
func (m *Model) alternatives(c *modelComponent) []Alternative {
	var out []Alternative
	for _, t := range uniformTargets {
		pol := Policy{Default: t, Rules: m.cfg.policy.Rules, NarrowLinearOnly: m.cfg.policy.NarrowLinearOnly}
		var u usage
		var x entry // each tensor decided again in turn
		ok := true
		var rt ruleTexts
		for _, e := range c.entries {
			x = entry{name: e.name, stored: e.stored, shape: e.shape, inBytes: e.inBytes, q: e.q, sl: e.sl, vsum: e.vsum, vextra: e.vextra}
			x.dec = pol.decide(&rt, c.name, e.name, e.stored, e.q != nil, e.shape)
			if x.resolve(c.strategy) != nil || x.resolveSlice(c.strategy) != nil {
				ok = false
				break
			}
			u.add(m, c, &x)
		}
		if ok {
			out = append(out, Alternative{Target: t.String(), ResidentBytes: u.resident, use: u})
		}
	}
	return out
}

// advice explains a refusal: what each large component needs as chosen and
// under the alternatives that are smaller, and which single change fits.
func (m *Model) advice(p *Plan) string {
	var parts []string
	for _, cp := range p.Components {
		chosen := cp.Target
		if chosen == "" {
			chosen = "stored"
			if m.cfg.policy.Default.IsSet() {
				chosen = m.cfg.policy.Default.String()
			}
		}
		s := fmt.Sprintf("%s needs %s as %s", cp.Name, sysmem.FormatSize(cp.ResidentBytes), describeTarget(chosen, cp))
		var smaller []string
		for _, a := range cp.Alternatives {
			if a.ResidentBytes < cp.ResidentBytes {
				smaller = append(smaller, fmt.Sprintf("%s as %s", sysmem.FormatSize(a.ResidentBytes), describeTarget(a.Target, cp)))
			}
		}
		if len(smaller) > 0 {
			s += " and " + strings.Join(smaller, " and ")
		}
		parts = append(parts, s)
	}
	msg := strings.Join(parts, "; ") + fmt.Sprintf("; budget %s", sysmem.FormatSize(p.BudgetBytes))
	// A single component change that fits.
	var fixes []string
	for _, cp := range p.Components {
		for _, a := range cp.Alternatives {
			if a.ResidentBytes >= cp.ResidentBytes {
				continue
			}
			if m.peakWith(cp.Name, a.use) <= p.BudgetBytes {
				fixes = append(fixes, fmt.Sprintf("%s as %s", cp.Name, describeTarget(a.Target, cp)))
			}
		}
	}
	if len(fixes) > 0 {
		msg += "; would fit: " + strings.Join(fixes, ", or ")
	} else {
		msg += "; no single component target fits: choose smaller targets for several components, a narrower variant, or a larger budget"
	}
	return msg
}

// peakWith is the load's peak with one component's usage replaced.
func (m *Model) peakWith(component string, u usage) int64 {
	us := make([]usage, len(m.comps))
	for i, c := range m.comps {
		if c.name == component {
			us[i] = u
		} else {
			us[i] = m.usageOf(c, c.entries)
		}
	}
	_, peak := m.peakOf(us)
	return peak
}

// describeTarget names a target for messages: "stored" becomes the stored
// dtypes ("stored (F8_E4M3)").
func describeTarget(t string, cp *ComponentPlan) string {
	if t != "stored" {
		return t
	}
	seen := map[string]bool{}
	var ds []string
	for _, tp := range cp.Tensors {
		d := strings.Fields(tp.Stored)[0]
		if !seen[d] {
			seen[d] = true
			ds = append(ds, d)
		}
	}
	if len(ds) > 3 {
		ds = append(ds[:3], "…")
	}
	return "stored (" + strings.Join(ds, ", ") + ")"
}

// String renders the plan for people: a summary, then each component.
func (p *Plan) String() string {
	var b strings.Builder
	for _, c := range p.Components {
		fmt.Fprintf(&b, "%s: %d tensors, %s stored, %s resident (%s mapped, %s owned), read by %s (%s)\n",
			c.Name, len(c.Tensors), sysmem.FormatSize(c.StoredBytes), sysmem.FormatSize(c.ResidentBytes), sysmem.FormatSize(c.MappedBytes), sysmem.FormatSize(c.OwnedBytes),
			c.ReadStrategy, c.ReadStrategyReason)
		if p.Rank != nil {
			fmt.Fprintf(&b, "  rank %d of %d reads %s of %s stored\n", p.Rank.Rank, p.Rank.World, sysmem.FormatSize(c.ReadBytes), sysmem.FormatSize(c.StoredBytes))
		}
		if c.Quant.Layout != "none" && c.Quant.Layout != "" {
			fmt.Fprintf(&b, "  quantization: %s (%s), %d weights\n", c.Quant.Layout, c.Quant.Source, c.Quant.Weights)
		}
	}
	fmt.Fprintf(&b, "total: %s resident + %s staging = %s peak; budget %s (%s): ",
		sysmem.FormatSize(p.TotalResidentBytes), sysmem.FormatSize(p.StagingBytes), sysmem.FormatSize(p.PeakBytes), budgetText(p.BudgetBytes), p.BudgetSource)
	if p.Fits {
		b.WriteString("fits\n")
	} else {
		fmt.Fprintf(&b, "does NOT fit, %s short\n  %s\n", sysmem.FormatSize(p.Shortfall), p.Advice)
	}
	b.WriteString(p.Verify.String() + "\n")
	return b.String()
}

func budgetText(n int64) string {
	if n < 0 {
		return "none"
	}
	return sysmem.FormatSize(n)
}

func firstN(s []string, n int) []string {
	if len(s) <= n {
		return s
	}
	return append(slices.Clone(s[:n]), fmt.Sprintf("… (%d more)", len(s)-n))
}

// refuse checks the plan against the budget.
func (p *Plan) refuse() error {
	if p.Fits {
		return nil
	}
	peak, budget := sysmem.FormatSize(p.PeakBytes), sysmem.FormatSize(p.BudgetBytes)
	if peak == budget {
		// Rounded alike: say the bytes.
		peak, budget = fmt.Sprintf("%s (%d bytes)", peak, p.PeakBytes), fmt.Sprintf("%s (%d bytes)", budget, p.BudgetBytes)
	}
	return &BudgetError{Plan: p, Msg: fmt.Sprintf("the load needs %s at its peak and the budget is %s (%s): %s short. %s",
		peak, budget, p.BudgetSource, sysmem.FormatSize(p.Shortfall), p.Advice)}
}
