package convert

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/sysmem"
)

// Report says what Run wrote and what each narrowing did to the values.
type Report struct {
	// Source and Dest are the paths Run was given.
	Source string `json:"source"`
	Dest   string `json:"dest"`
	// Variant is the output's precision variant ("" for untagged files).
	Variant string `json:"variant,omitempty"`
	// Components are the weights sets written, one per component.
	Components []ComponentReport `json:"components"`
	// Tensors has one entry per tensor written (scale tensors included),
	// in the order of the source.
	Tensors []TensorReport `json:"tensors"`
	// Copied lists the non-weight files copied (configs, tokenizers, ...),
	// relative to Dest; Skipped the files of the source folder that were
	// neither converted nor copied, with the reason (weights of other
	// formats or variants, a quantization config that no longer applies).
	// The weights files Run converted are in neither.
	Copied  []string      `json:"copied,omitempty"`
	Skipped []SkippedFile `json:"skipped,omitempty"`
	// Dropped lists stored tensors of the source that the output does not
	// have: scales and markers of weights that were dequantized, and
	// activation scales that only such weights used.
	Dropped []string `json:"dropped,omitempty"`
	// BytesRead is the tensor data read from the source (twice for weights
	// that FP8 scales are computed for); BytesWritten the tensor data
	// written.
	BytesRead    int64 `json:"bytes_read"`
	BytesWritten int64 `json:"bytes_written"`
	// Summary adds up the numerics of the narrowed tensors.
	Summary Summary `json:"summary"`
	// Verified is true when Options.Verify read every tensor back and
	// found what was written.
	Verified bool `json:"verified"`
	// Warnings are what the caller should know: unscaled casts to narrow
	// types, tensors of unknown layouts copied as stored, tensors too
	// large to stream, ...
	Warnings []string `json:"warnings,omitempty"`
}

// ComponentReport describes one weights set written.
type ComponentReport struct {
	// Name is the component's name (its folder's name).
	Name string `json:"name"`
	// Dir is the folder the set was written to.
	Dir string `json:"dir"`
	// Files are the safetensors files written, Index the index file ("" for
	// a single file), both relative to Dir.
	Files []string `json:"files"`
	Index string   `json:"index,omitempty"`
	// Config is the config.json written beside the weights ("" when none
	// was): the source's, with its quantization_config replaced or removed.
	Config string `json:"config,omitempty"`
	// Quantization is the quantization_config the weights carry in their
	// __metadata__ (and Config), null when they have none.
	Quantization json.RawMessage `json:"quantization_config,omitempty"`
	// SourceCRC32C is the CRC-32C of each source weights file that names
	// checksums, by base name, as the output's provenance metadata
	// records it (MetaSourceCRC32C).
	SourceCRC32C map[string]string `json:"source_crc32c,omitempty"`
}

// SkippedFile is a file of the source folder that Run did not copy.
type SkippedFile struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// Actions of TensorReport.
const (
	ActionCopy       = "copy"       // the stored bytes, as they are
	ActionCast       = "cast"       // a plain dtype conversion (no scales)
	ActionQuantize   = "quantize"   // to FP8 with scales
	ActionScale      = "scale"      // the scales of a quantized weight
	ActionDequantize = "dequantize" // a scaled low-precision weight to a float dtype
	ActionRequantize = "requantize" // a scaled weight dequantized and quantized anew
	ActionRelabel    = "relabel"    // a scaled FP8 weight's codes as stored, its scales under another format's names
)

// TensorReport is what happened to one tensor. The numerics fields are
// set for narrowed tensors (Narrowed): casts that some value of the source
// dtype does not survive, quantization and dequantization. They compare
// every output value with the source's, in the same pass that writes it.
type TensorReport struct {
	Component string      `json:"component,omitempty"`
	Name      string      `json:"name"`
	Shape     []int64     `json:"shape"`
	From      dtype.DType `json:"from"`
	To        dtype.DType `json:"to"`
	// Action is one of the Action constants.
	Action string `json:"action"`
	// Scale is the granularity of a quantized weight ("tensor", "channel",
	// "block:128") and ScaleTensor the name of its scale tensor.
	Scale       string `json:"scale,omitempty"`
	ScaleTensor string `json:"scale_tensor,omitempty"`
	// Tied are the names tied to this tensor, written as it, once (the
	// ties recorded under torch.AliasesKey).
	Tied []string `json:"tied,omitempty"`
	// Rule says which level of the policy decided, as the loader's plan
	// says it.
	Rule     string `json:"rule"`
	Elements int64  `json:"elements"`
	Bytes    int64  `json:"bytes"`
	Narrowed bool   `json:"narrowed"`
	// NaN and Inf count the outputs that are NaN or infinite where the
	// source value was finite.
	NaN int64 `json:"nan"`
	Inf int64 `json:"inf"`
	// Overflow counts finite source values beyond the target's range,
	// whatever they became (Inf, NaN, or ±max when saturating); Saturated
	// the values clamped to ±max; Underflow the nonzero values flushed to
	// zero.
	Overflow  int64 `json:"overflow"`
	Saturated int64 `json:"saturated"`
	Underflow int64 `json:"underflow"`
	// MaxAbs is the largest finite source magnitude; MaxAbsErr and
	// MaxRelErr the largest |x − y| and |x − y| / |x| over the elements
	// whose source x and output y are both finite (y is q × scale for a
	// quantized weight).
	MaxAbs    float64 `json:"max_abs"`
	MaxAbsErr float64 `json:"max_abs_err"`
	MaxRelErr float64 `json:"max_rel_err"`
	// RMSRelErr is the relative RMS error sqrt(Σ(x − y)² / Σx²) over the
	// same elements: what the rounding does to the tensor as a whole (a
	// few values flushed to zero make MaxRelErr 100% but barely move it).
	RMSRelErr float64 `json:"rms_rel_err"`

	crc      uint32  // of the bytes written, for Verify
	sse, ssq float64 // Σ(x − y)², Σx²
}

// Lossy reports whether some value overflowed, saturated, was flushed to
// zero or became NaN or Inf.
func (t *TensorReport) Lossy() bool {
	return t.NaN+t.Inf+t.Overflow+t.Saturated+t.Underflow > 0
}

// Key returns "COMPONENT/NAME" in a pipeline, NAME otherwise.
func (t *TensorReport) Key() string {
	if t.Component == "" {
		return t.Name
	}
	return t.Component + "/" + t.Name
}

// Summary adds up the numerics of the narrowed tensors.
type Summary struct {
	Tensors   int   `json:"tensors"`
	Narrowed  int   `json:"narrowed"`
	Quantized int   `json:"quantized"`
	NaN       int64 `json:"nan"`
	Inf       int64 `json:"inf"`
	Overflow  int64 `json:"overflow"`
	Saturated int64 `json:"saturated"`
	Underflow int64 `json:"underflow"`
	// MaxAbsErr, MaxRelErr and MaxRMSRelErr are the largest over all
	// narrowed tensors.
	MaxAbsErr    float64 `json:"max_abs_err"`
	MaxRelErr    float64 `json:"max_rel_err"`
	MaxRMSRelErr float64 `json:"max_rms_rel_err"`
	// Worst names the narrowed tensors with the largest relative RMS
	// errors (at most 5), then every tensor where a value overflowed or
	// became NaN or Inf, by key.
	Worst []string `json:"worst,omitempty"`
}

// summarize fills r.Summary from r.Tensors.
func (r *Report) summarize() {
	s := Summary{Tensors: len(r.Tensors)}
	for i := range r.Tensors {
		t := &r.Tensors[i]
		if t.Action == ActionQuantize || t.Action == ActionRequantize {
			s.Quantized++
		}
		if !t.Narrowed {
			continue
		}
		s.Narrowed++
		s.NaN += t.NaN
		s.Inf += t.Inf
		s.Overflow += t.Overflow
		s.Saturated += t.Saturated
		s.Underflow += t.Underflow
		s.MaxAbsErr = max(s.MaxAbsErr, t.MaxAbsErr)
		s.MaxRelErr = max(s.MaxRelErr, t.MaxRelErr)
		s.MaxRMSRelErr = max(s.MaxRMSRelErr, t.RMSRelErr)
	}
	seen := map[string]bool{}
	for _, t := range r.Worst(5) {
		s.Worst = append(s.Worst, t.Key())
		seen[t.Key()] = true
	}
	for i := range r.Tensors {
		t := &r.Tensors[i]
		if t.Narrowed && t.NaN+t.Inf+t.Overflow > 0 && !seen[t.Key()] {
			s.Worst = append(s.Worst, t.Key())
			seen[t.Key()] = true
		}
	}
	r.Summary = s
}

// Worst returns the n narrowed tensors that lost the most, worst first:
// those that produced NaN or Inf or overflowed come before the others (the
// FP16-activation trap is the first thing to see), then the largest
// relative RMS errors, then the largest relative errors. Tensors that lost
// nothing are left out.
func (r *Report) Worst(n int) []TensorReport {
	var out []TensorReport
	for _, t := range r.Tensors {
		if t.Narrowed && (t.MaxRelErr > 0 || t.MaxAbsErr > 0 || t.Lossy()) {
			out = append(out, t)
		}
	}
	broken := func(t TensorReport) int64 { return t.NaN + t.Inf + t.Overflow }
	slices.SortStableFunc(out, func(a, b TensorReport) int {
		return cmp.Or(cmp.Compare(broken(b), broken(a)), cmp.Compare(b.RMSRelErr, a.RMSRelErr), cmp.Compare(b.MaxRelErr, a.MaxRelErr), cmp.Compare(b.MaxAbsErr, a.MaxAbsErr))
	})
	return out[:min(n, len(out))]
}

// String renders the report for people: what was written, the numerics
// summary with the worst tensors, and the warnings.
func (r *Report) String() string {
	var b strings.Builder
	for _, c := range r.Components {
		name := c.Name
		if name == "" {
			name = "weights"
		}
		fmt.Fprintf(&b, "%s: %s in %s", name, strings.Join(c.Files, ", "), c.Dir)
		if c.Index != "" {
			fmt.Fprintf(&b, " (index %s)", c.Index)
		}
		b.WriteByte('\n')
	}
	if len(r.Copied) > 0 {
		fmt.Fprintf(&b, "copied %d other files\n", len(r.Copied))
	}
	if len(r.Skipped) > 0 {
		var names []string
		for _, s := range r.Skipped[:min(len(r.Skipped), 3)] {
			names = append(names, s.Path)
		}
		if n := len(r.Skipped) - len(names); n > 0 {
			names = append(names, fmt.Sprintf("%d more", n))
		}
		files := "files"
		if len(r.Skipped) == 1 {
			files = "file"
		}
		fmt.Fprintf(&b, "left out %d %s not converted or copied: %s (the JSON report says why)\n", len(r.Skipped), files, strings.Join(names, ", "))
	}
	if len(r.Dropped) > 0 {
		fmt.Fprintf(&b, "dropped %d scale or marker tensors of weights no longer quantized\n", len(r.Dropped))
	}
	actions := map[string]int{}
	for _, t := range r.Tensors {
		actions[t.Action]++
	}
	var parts []string
	for _, a := range []string{ActionCopy, ActionCast, ActionQuantize, ActionScale, ActionDequantize, ActionRequantize, ActionRelabel} {
		if actions[a] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", actions[a], a))
		}
	}
	fmt.Fprintf(&b, "%d tensors (%s), %s read, %s written\n", len(r.Tensors), strings.Join(parts, ", "),
		sysmem.FormatSize(r.BytesRead), sysmem.FormatSize(r.BytesWritten))
	s := r.Summary
	if s.Narrowed == 0 {
		b.WriteString("numerics: nothing narrowed: every value is exact\n")
	} else {
		fmt.Fprintf(&b, "numerics: %d narrowed tensors: rms rel error up to %s, max rel error %s, max abs error %s", s.Narrowed, fmtPercent(s.MaxRMSRelErr), fmtPercent(s.MaxRelErr), fmtFloat(s.MaxAbsErr))
		var lost []string
		for _, c := range []struct {
			n    int64
			what string
		}{{s.NaN, "NaN produced"}, {s.Inf, "Inf produced"}, {s.Overflow, "overflowed"}, {s.Saturated, "saturated"}, {s.Underflow, "flushed to zero"}} {
			if c.n > 0 {
				lost = append(lost, fmt.Sprintf("%d %s", c.n, c.what))
			}
		}
		if len(lost) > 0 {
			fmt.Fprintf(&b, "; %s", strings.Join(lost, ", "))
		}
		b.WriteByte('\n')
		worst := r.Worst(5)
		if len(worst) > 0 {
			b.WriteString("worst tensors:\n")
		}
		for _, t := range worst {
			fmt.Fprintf(&b, "  %s: %s -> %s %s, rms rel %s, max rel %s, max abs %s", t.Key(), t.From, t.To, t.Action, fmtPercent(t.RMSRelErr), fmtPercent(t.MaxRelErr), fmtFloat(t.MaxAbsErr))
			if t.Lossy() {
				fmt.Fprintf(&b, " (%s)", lossString(&t))
			}
			b.WriteByte('\n')
		}
	}
	if r.Verified {
		b.WriteString("verified: every tensor read back as written\n")
	}
	for _, w := range r.Warnings {
		fmt.Fprintf(&b, "warning: %s\n", w)
	}
	return b.String()
}

func lossString(t *TensorReport) string {
	var parts []string
	for _, c := range []struct {
		n    int64
		what string
	}{{t.NaN, "NaN"}, {t.Inf, "Inf"}, {t.Overflow, "overflow"}, {t.Saturated, "saturated"}, {t.Underflow, "to zero"}} {
		if c.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c.n, c.what))
		}
	}
	return strings.Join(parts, ", ")
}

func fmtFloat(v float64) string {
	if v == 0 {
		return "0"
	}
	return fmt.Sprintf("%.3g", v)
}

func fmtPercent(v float64) string {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return fmt.Sprint(v)
	}
	return fmt.Sprintf("%.3g%%", 100*v)
}
