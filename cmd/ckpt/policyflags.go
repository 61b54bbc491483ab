package main

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/shard"
)

// dtypePolicyHelp explains the dtype policy flags that plan, get and
// convert share.
const dtypePolicyHelp = `The dtype policy: --keep rules are tried first, in order, and the first
whose pattern matches a tensor decides; then the --preset's rules; then the
tensor's --component target; then --dtype; with none of them, the stored
dtype. A target D is a dtype name as "ckpt dtypes" lists it (F32, bf16,
torch.float8_e4m3fn, ...), "stored" (as stored: a scaled low-precision
weight stays quantized) or "quantized" (scaled weights kept narrow with
their scales). Integer, bool and complex tensors are never cast by
--component or --dtype, only by a --keep rule that matches them. A weight
stored in a scaled low-precision layout (DeepSeek FP8 blocks,
compressed-tensors, ModelOpt, MXFP4, ...) is dequantized when its target
is a float dtype other than its element type.

Patterns match dotted names part by part: "norm" is that part anywhere
("blocks.0.norm.weight", not "layernorm.weight"), "*" is one part, "**" any
number of parts, "ln_*" or "norm[0-9]" match within one part:
"blocks.*.attn.**=BF16", "**.bias=F32". "COMPONENT/PATTERN=D" limits a rule
to one component of a pipeline.`

// policyHelp explains the flags that plan and get share: the dtype
// policy, tensor parallelism and integrity.
const policyHelp = dtypePolicyHelp + `

Tensor parallelism: --rank R --world N makes this process rank R of N, and
each --split PATTERN=DIM (repeatable; the first that matches decides)
splits the matching tensors along dimension DIM, 0 for column-parallel
weights (q/k/v, gate and up projections), 1 for row-parallel ones (o_proj,
down_proj); the others are replicated. A rank gets its part of every split
tensor and reads only that part's bytes: a dimension of size n gives the
first n mod N ranks one index more (numpy.array_split). A quantized
weight's part must fall on its scale blocks unless it is dequantized and
split along dimension 0.

Integrity: files written by ckpt name a CRC-32C of every tensor's bytes.
--verify present (the default) checks every tensor of such files as it is
read, and a damaged one fails with the file, the tensor and its bytes;
--verify always also refuses files that name no checksums; --verify never
checks nothing. A rank's part of a tensor is checked only with always,
which then reads the rest of the tensor too. PyTorch files are checked
against the CRC-32 their archive records for each storage: a tensor whose
bytes are its whole storage as read, a view of part of a storage
(transposed, or from a big-endian archive) only with always, which then
reads the storage too. The plan's "verify" line says what will be
checked.`

// policyFlags are the flags that choose what a load produces: the variant
// and the dtype policy, and how files are read.
type policyFlags struct {
	variant    string
	dtype      targetFlag
	components componentFlags
	rules      ruleFlags
	preset     string
	read       string
	verify     string
	workers    int
	saturate   bool
	scales     bool
	staging    sizeFlag
	follow     *bool
	rank       int
	world      int
	splits     splitFlags
}

func (p *policyFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&p.variant, "variant", "", "precision variant `V` of a folder or pipeline (e.g. bf16, fp8); empty for untagged weights")
	fs.Var(&p.dtype, "dtype", "default target `D` of every tensor: a dtype, \"stored\" or \"quantized\"")
	fs.Var(&p.components, "component", "target of one component, `NAME=D` (repeatable)")
	fs.Var(&p.rules, "keep", "per-tensor rule `PATTERN=D` or COMPONENT/PATTERN=D, tried in order before everything else (repeatable)")
	fs.StringVar(&p.preset, "preset", "", "add the rules of preset `NAME` after the --keep rules: keep-norms-f32 (norms and biases stay F32)")
	fs.StringVar(&p.read, "read", "auto", "read strategy `MODE`: auto (mmap on local filesystems, pread on network ones), mmap or pread")
	fs.StringVar(&p.verify, "verify", "present", "check tensors against the checksums their files name, `MODE`: present (files that name them), always (also refuse files that do not) or never")
	fs.IntVar(&p.workers, "workers", 0, "the `N` goroutines that read and convert (0: one per CPU)")
	fs.BoolVar(&p.saturate, "saturate", false, "narrowing casts saturate to ±max instead of overflowing to Inf/NaN")
	fs.Var(&p.staging, "staging", "transient memory `SIZE` a load may use above the resident bytes for staging and worker buffers (default 64MiB, at least 1MiB)")
	p.follow = followFlag(fs)
	fs.BoolVar(&p.scales, "scale-tensors", false, "also list the scale tensors that scaled layouts consume, under their stored names")
	fs.IntVar(&p.rank, "rank", -1, "load as rank `R` of --world (tensor parallelism; with --split)")
	fs.IntVar(&p.world, "world", 0, "the `N` ranks that split the tensors --split names")
	fs.Var(&p.splits, "split", "split the tensors that match, `PATTERN=DIM` or COMPONENT/PATTERN=DIM, along dimension DIM across the ranks (repeatable)")
}

// options turns the flags into loader options; a bad value is a usage
// error.
func (p *policyFlags) options() ([]ckpt.Option, error) {
	// The dtype flags, --verify and --saturate make one policy.
	policy := ckpt.Policy{Default: p.dtype.t, Rules: p.rules, Saturate: p.saturate}
	if len(p.components) > 0 {
		policy.Components = make(map[string]ckpt.Target, len(p.components))
		for _, c := range p.components {
			policy.Components[c.name] = c.t
		}
	}
	switch p.preset {
	case "":
	case "keep-norms-f32":
		policy.Rules = append(policy.Rules, ckpt.KeepNormsAndBiasesF32()...)
	default:
		return nil, usageError{msg: fmt.Sprintf("--preset %q: the presets are keep-norms-f32", p.preset)}
	}
	var err error
	if policy.Verify, err = parseVerify("verify", p.verify); err != nil {
		return nil, err
	}
	// Open refuses a bad read strategy (ErrOption: a usage error).
	opts := []ckpt.Option{ckpt.WithVariant(p.variant), ckpt.WithPolicy(policy), ckpt.WithReadStrategy(p.read)}
	if p.workers < 0 {
		return nil, usageError{msg: fmt.Sprintf("--workers %d: must be 0 (one per CPU) or more", p.workers)}
	}
	opts = append(opts, ckpt.WithWorkers(p.workers))
	if p.scales {
		opts = append(opts, ckpt.WithScaleTensors())
	}
	if p.follow != nil && *p.follow {
		opts = append(opts, ckpt.WithFollowSymlinks())
	}
	if p.staging.set {
		if p.staging.n < 1<<20 {
			return nil, usageError{msg: fmt.Sprintf("--staging %d bytes: at least 1MiB", p.staging.n)}
		}
		opts = append(opts, ckpt.WithStaging(p.staging.n))
	}
	switch {
	case p.world == 0 && (p.rank >= 0 || len(p.splits) > 0):
		return nil, usageError{msg: "--rank and --split need --world N"}
	case p.world == 0:
	case p.world < 0:
		return nil, usageError{msg: fmt.Sprintf("--world %d: must be 1 or more", p.world)}
	case p.rank < 0:
		return nil, usageError{msg: "--world needs --rank R (0 ≤ R < N)"}
	case p.rank >= p.world:
		return nil, usageError{msg: fmt.Sprintf("--rank %d: must be less than --world %d", p.rank, p.world)}
	default:
		opts = append(opts, ckpt.WithRank(p.rank, p.world, p.splits...))
	}
	return opts, nil
}

// parseVerify parses --verify: a Verify as its String spells it.
func parseVerify(flag, s string) (ckpt.Verify, error) {
	for _, v := range []ckpt.Verify{ckpt.VerifyPresent, ckpt.VerifyAlways, ckpt.VerifyNever} {
		if strings.EqualFold(strings.TrimSpace(s), v.String()) {
			return v, nil
		}
	}
	return 0, usageError{msg: fmt.Sprintf("--%s %q: present, always or never", flag, s)}
}

// splitFlags collects repeated --split PATTERN=DIM flags, in order.
type splitFlags []ckpt.Split

func (f *splitFlags) String() string {
	parts := make([]string, len(*f))
	for i, s := range *f {
		parts[i] = s.String()
	}
	return strings.Join(parts, ",")
}

func (f *splitFlags) Set(s string) error {
	sp, err := ckpt.ParseSplit(s)
	if err != nil {
		return err
	}
	*f = append(*f, sp)
	return nil
}

// openModel opens path with the options; an option the model rejects (a
// component it does not have, a malformed variant name or pattern, a split
// the tensors do not allow) is a usage error.
func openModel(path string, opts []ckpt.Option) (*ckpt.Model, error) {
	m, err := ckpt.Open(path, opts...)
	if err != nil {
		if errors.Is(err, ckpt.ErrOption) {
			return nil, usageError{msg: err.Error()}
		}
		return nil, err
	}
	return m, nil
}

// targetFlag is a flag holding one target.
type targetFlag struct {
	t   ckpt.Target
	set bool
}

func (f *targetFlag) String() string { return f.t.String() }

func (f *targetFlag) Set(s string) error {
	t, err := ckpt.ParseTarget(s)
	if err != nil {
		return errors.New(targetError(s))
	}
	f.t, f.set = t, true
	return nil
}

// targetError explains a target that does not parse, without the wrapped
// error's list of every dtype spelling.
func targetError(s string) string {
	return fmt.Sprintf("%q is not a dtype (see \"ckpt dtypes\"), \"stored\" or \"quantized\"", s)
}

type componentTarget struct {
	name string
	t    ckpt.Target
}

// componentFlags collects repeated --component NAME=D flags.
type componentFlags []componentTarget

func (f *componentFlags) String() string {
	parts := make([]string, len(*f))
	for i, c := range *f {
		parts[i] = c.name + "=" + c.t.String()
	}
	return strings.Join(parts, ",")
}

func (f *componentFlags) Set(s string) error {
	name, d, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return fmt.Errorf("%q is not NAME=D", s)
	}
	t, err := ckpt.ParseTarget(d)
	if err != nil {
		return errors.New(targetError(d))
	}
	*f = append(*f, componentTarget{name: name, t: t})
	return nil
}

// ruleFlags collects repeated --keep PATTERN=D flags, in order.
type ruleFlags []ckpt.Rule

func (f *ruleFlags) String() string {
	parts := make([]string, len(*f))
	for i, r := range *f {
		parts[i] = r.String()
	}
	return strings.Join(parts, ",")
}

func (f *ruleFlags) Set(s string) error {
	r, err := ckpt.ParseRule(s)
	if err != nil {
		var le *ckpt.Error
		if errors.As(err, &le) && le.Kind == ckpt.ErrTarget {
			_, d, _ := strings.Cut(s, "=")
			return errors.New(targetError(d))
		}
		return err
	}
	*f = append(*f, r)
	return nil
}

// sizeFlag is a byte size: a number of bytes, or a number with a binary
// (KiB, MiB, GiB, TiB) or decimal (KB, MB, GB, TB) unit.
type sizeFlag struct {
	n   int64
	set bool
	// none is the word that disables the size (-1), "" for none.
	none string
}

func (f *sizeFlag) String() string {
	if !f.set {
		return ""
	}
	if f.n < 0 {
		return f.none
	}
	return strconv.FormatInt(f.n, 10)
}

func (f *sizeFlag) Set(s string) error {
	if f.none != "" && strings.EqualFold(strings.TrimSpace(s), f.none) {
		f.n, f.set = -1, true
		return nil
	}
	n, err := shard.ParseSize(s)
	if err != nil {
		return fmt.Errorf("%q is not a size: bytes, or a number with KiB, MiB, GiB, TiB (binary) or KB, MB, GB, TB (decimal)", s)
	}
	if n == 0 {
		return errors.New("0 bytes: nothing fits")
	}
	f.n, f.set = n, true
	return nil
}
