package ckpt

import (
	"fmt"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/srcfs"
	"github.com/ckpt-go/ckpt/shard"
)

// Option configures Open.
type Option func(*config) error

type config struct {
	variant    string
	policy     Policy
	budget     int64 // 0: default (what the process can get); < 0 never
	budgetSet  bool
	workers    int
	progress   func(Progress)
	strategy   readStrategy
	keepScales bool
	staging    int64
	viewCheck  ViewCheck
	// src is where the files are (WithFS; nil: the operating system or
	// the location's scheme) and the symlink rule (WithFollowSymlinks):
	// the one value Open passes down to package variant and package shard.
	src  srcfs.FS
	rank rankConfig
	// memRoots, when set (tests only), are the proc and cgroup folders the
	// default budget is read from instead of this machine's.
	memRoots *[2]string
	// onRead, when set (tests only), is told every range a load reads of a
	// stored tensor, and every view of one it hands out.
	onRead func(st storedTensor, off, n int64)
	// shardOptions, when set (tests only), are added to the options every
	// file is resolved and opened with (a read mode without a mapping).
	shardOptions []shard.Option
}

// WithVariant selects a precision variant ("bf16", "fp16", ...) of the
// weights of a folder or pipeline, resolved by package variant; "" (the
// default) selects the untagged weights.
func WithVariant(v string) Option {
	return func(c *config) error { c.variant = v; return nil }
}

// WithPolicy sets the whole dtype policy (NarrowLinearOnly included; the
// same value convert.Options.Policy takes), replacing what WithDType,
// WithComponentDType and WithRules set before it.
func WithPolicy(p Policy) Option {
	return func(c *config) error {
		c.policy = Policy{Default: p.Default, Rules: append([]Rule(nil), p.Rules...), NarrowLinearOnly: p.NarrowLinearOnly, Verify: p.Verify, Saturate: p.Saturate}
		if len(p.Components) > 0 {
			c.policy.Components = make(map[string]Target, len(p.Components))
			for k, v := range p.Components {
				c.policy.Components[k] = v
			}
		}
		return nil
	}
}

// WithVerify chooses which tensors' checksums the load checks (the
// policy's Verify; VerifyPresent by default).
func WithVerify(v Verify) Option {
	return func(c *config) error { c.policy.Verify = v; return nil }
}

// WithDType sets the default target of every component (the lowest level
// of the policy).
func WithDType(t Target) Option {
	return func(c *config) error { c.policy.Default = t; return nil }
}

// WithComponentDType sets the target of one component. A component name
// that the model does not have is an error of kind ErrOption from Open.
func WithComponentDType(component string, t Target) Option {
	return func(c *config) error {
		if c.policy.Components == nil {
			c.policy.Components = make(map[string]Target)
		}
		c.policy.Components[component] = t
		return nil
	}
}

// WithRules appends per-tensor rules to the policy, after those already
// set. The first matching rule decides.
func WithRules(rules ...Rule) Option {
	return func(c *config) error { c.policy.Rules = append(c.policy.Rules, rules...); return nil }
}

// WithBudget sets the memory budget in bytes: loading refuses, before
// allocating anything, when the plan's peak exceeds it. 0 restores the
// default, which is what this process can really get (the smaller of
// MemAvailable and the cgroup's limit minus its usage); a negative budget
// disables the check.
func WithBudget(bytes int64) Option {
	return func(c *config) error { c.budget, c.budgetSet = bytes, bytes != 0; return nil }
}

// WithWorkers bounds the goroutines that read and convert tensors (0, the
// default, means GOMAXPROCS).
func WithWorkers(n int) Option {
	return func(c *config) error {
		if n < 0 {
			return &Error{Kind: ErrOption, Msg: fmt.Sprintf("workers %d < 0", n)}
		}
		c.workers = n
		return nil
	}
}

// Progress reports how far long work on a model is — a load, an
// executor's upload, a conversion — in bytes done out of the total.
type Progress struct {
	// Phase names the work: "load" (Load; Done and Total count bytes of
	// loaded output), "upload" (an executor's UploadModel; bytes read),
	// and a conversion's "scales" (the pass that finds FP8 scales; bytes
	// of source read), "write" (bytes of output written) and "verify"
	// (bytes read back); Tensor.Check and Weights.Check report "verify"
	// (bytes of views read).
	Phase       string
	Done, Total int64
	// Component and Tensor name the piece just finished (a conversion of
	// a model that is no pipeline leaves Component empty).
	Component, Tensor string
}

// WithProgress sets a callback that Load calls after each finished piece of
// work (from one goroutine at a time, with Done increasing). It must be
// quick; it must not call back into the Model.
func WithProgress(f func(Progress)) Option {
	return func(c *config) error { c.progress = f; return nil }
}

// readStrategy says how tensor bytes are read from local files (see
// WithReadStrategy).
type readStrategy int

const (
	readAuto  readStrategy = iota // mmap on local filesystems, pread on network ones
	readMmap                      // map the files: as-stored tensors are zero-copy views
	readPread                     // pread in large chunks into owned memory
)

// string returns "auto", "mmap" or "pread", as WithReadStrategy takes it.
func (s readStrategy) string() string {
	switch s {
	case readMmap:
		return "mmap"
	case readPread:
		return "pread"
	}
	return "auto"
}

// WithReadStrategy says how tensor bytes are read from local files:
// "auto" (the default, also "") maps them on local filesystems and reads
// them with pread on network ones (NFS, CIFS/SMB, FUSE, Lustre, ...),
// where page faults on a mapping are 10–50× slower than large sequential
// reads; "mmap" maps them (tensors loaded as stored are zero-copy views);
// "pread" reads them with pread in large chunks into owned memory. Any
// other value is an error of kind ErrOption from Open. The plan says
// which strategy each component is read with, and why.
func WithReadStrategy(s string) Option {
	return func(c *config) error {
		for _, rs := range []readStrategy{readAuto, readMmap, readPread} {
			if s == rs.string() || s == "" {
				c.strategy = rs
				return nil
			}
		}
		return &Error{Kind: ErrOption, Msg: fmt.Sprintf("read strategy %q is not auto, mmap or pread", s)}
	}
}

// WithScaleTensors also returns the scale tensors that scaled
// low-precision layouts consume (weight_scale, weight_scale_inv, ...) as
// ordinary tensors under their stored names. By default they are consumed:
// applied when dequantizing, attached to the weight when it stays
// quantized, and not listed otherwise.
func WithScaleTensors() Option {
	return func(c *config) error { c.keepScales = true; return nil }
}

// WithStaging sets the transient memory a load may use above the resident
// bytes for staging and worker buffers (default 64 MiB). The plan's peak is
// the resident bytes plus this.
func WithStaging(bytes int64) Option {
	return func(c *config) error {
		if bytes < 1<<20 {
			return &Error{Kind: ErrOption, Msg: fmt.Sprintf("staging %d bytes < 1 MiB", bytes)}
		}
		c.staging = bytes
		return nil
	}
}

// WithFollowSymlinks lets the files a folder resolves to (shards, indexes,
// single weights files, configs) be symbolic links that leave the folder.
// Without it they are refused (ErrResolve wrapping ErrInsecurePath). It is
// what a Hugging Face cache needs, where snapshots/REV/* link into
// ../../blobs.
func WithFollowSymlinks() Option {
	return func(c *config) error { c.src = c.src.Following(true); return nil }
}

const defaultStaging = 64 << 20

func (c *config) convertOptions() dtype.Options {
	return dtype.Options{Saturate: c.policy.Saturate, Workers: 1}
}
