package convert

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ckpt-go/ckpt/internal/setwrite"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/shard"
)

// Check validates a save before it happens: the tensors' names, dtypes
// and shapes as Save would be given them (specs carry no data), the
// options, and the target folder dir (it or its nearest existing parent is
// a folder where a file can be created, the checkpoint's name is free or
// Overwrite is set, and the file system has room for the checkpoint's
// files). It applies exactly the rules of Save, which checks the same
// things again, so a training program that calls Check at step 0 with the
// specs of its parameters and optimizer state knows that the save at the
// end of the run will not fail on them.
//
// Check returns nil or every problem it found at once, as an errors.Join of
// *Error values; each names the tensor or option concerned and matches its
// kind with errors.Is (ErrInvalid for a tensor or the metadata, its
// message saying which check; ErrOption, ErrTarget, ErrExists,
// ErrNoSpace).
// Check creates a probe folder to test that the target is writable and
// removes it; it changes nothing else. For a location of a registered sink
// (s3://...) it lists the location and checks the name, writing nothing
// (write permission and room are not probed there).
func Check(dir string, specs []safetensors.TensorSpec, opts SaveOptions) error {
	p, errs := newPlan(dir, specs, nil, &opts)
	if p != nil && isRemote(dir) {
		errs = append(errs, p.checkTargetSink()...)
	} else if p != nil {
		errs = append(errs, p.checkTarget()...)
	}
	return errors.Join(errs...)
}

// A plan is a validated save: what will be written where.
type plan struct {
	dir      string // the target folder, as given
	name     string // the checkpoint folder's name in dir
	prefix   string
	maxShard int64
	specs    []safetensors.TensorSpec // copies: the caller may reuse its shapes
	metadata map[string]string        // what goes into every shard
	files    int64                    // bytes of the files (headers, data, index, manifest)
	data     int64                    // bytes of tensor data
	opts     SaveOptions
}

// DefaultPrefix is the file name prefix of the shards Save writes:
// model.safetensors, or model-00001-of-0000N.safetensors with
// model.safetensors.index.json, as transformers names them.
const DefaultPrefix = "model"

// Metadata keys that Save writes into every shard's __metadata__.
const (
	// MetaStep holds SaveOptions.Step in decimal.
	MetaStep = "step"
	// MetaEpoch holds SaveOptions.Epoch, formatted by
	// strconv.FormatFloat(epoch, 'g', -1, 64).
	MetaEpoch = "epoch"
	// MetaFormat is "pt" unless the caller's metadata sets it:
	// transformers refuses a safetensors file whose __metadata__ lacks it
	// ("Incompatible safetensors file").
	MetaFormat = "format"
)

var (
	checkpointNameRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.=+-]*$`)
	maxNameLen       = 255
)

// newPlan validates specs and options. lens are the data lengths of the
// tensors (nil for Check, which has no data). It returns every problem;
// the plan is nil when the options are unusable.
func newPlan(dir string, specs []safetensors.TensorSpec, lens []int, opts *SaveOptions) (*plan, []error) {
	var errs []error
	p := &plan{dir: dir, opts: *opts, prefix: opts.Prefix, maxShard: opts.MaxShardSize, name: opts.Name}
	bad := func(field, msg string) {
		errs = append(errs, &Error{Kind: ErrOption, Path: dir, Field: field, Msg: msg})
	}
	if dir == "" {
		errs = append(errs, &Error{Kind: ErrTarget, Field: "dir", Msg: "no target folder given"})
	}
	if p.name == "" {
		p.name = "checkpoint-" + strconv.FormatInt(opts.Step, 10)
	}
	if len(p.name) > maxNameLen || !checkpointNameRE.MatchString(p.name) || p.name == manifestName {
		bad("Name", fmt.Sprintf("%q is not a bare folder name of at most %d bytes matching %s", p.name, maxNameLen, checkpointNameRE))
	}
	if p.prefix == "" {
		p.prefix = DefaultPrefix
	}
	// shard.WriteFrom checks the prefix before anything else and, given no
	// tensors, stops before touching the disk: the one source of its rule.
	if _, err := shard.WriteFrom(context.Background(), dir, p.prefix, "", nil, nil, nil); errors.Is(err, shard.ErrInvalidPrefix) {
		bad("Prefix", err.(*shard.Error).Msg)
	}
	switch {
	case p.maxShard == 0:
		p.maxShard = shard.DefaultMaxShardSize
	case p.maxShard < 0:
		bad("MaxShardSize", fmt.Sprintf("%d is negative", p.maxShard))
	}
	if opts.KeepLast < 0 {
		bad("KeepLast", fmt.Sprintf("%d is negative (0 keeps every checkpoint)", opts.KeepLast))
	}
	if opts.IfRunning != WaitForPrevious && opts.IfRunning != RefusePrevious {
		bad("IfRunning", fmt.Sprintf("unknown value %d", int(opts.IfRunning)))
	}
	if math.IsNaN(opts.Epoch) || math.IsInf(opts.Epoch, 0) {
		bad("Epoch", fmt.Sprintf("%v is not finite", opts.Epoch))
	}

	p.metadata = map[string]string{MetaFormat: "pt"}
	for k, v := range opts.Metadata {
		switch {
		case k == MetaStep || k == MetaEpoch:
			errs = append(errs, &Error{Kind: ErrInvalid, Path: dir, Field: "metadata " + k, Msg: "set by Save from SaveOptions." + map[string]string{MetaStep: "Step", MetaEpoch: "Epoch"}[k]})
		case !utf8.ValidString(k) || !utf8.ValidString(v):
			errs = append(errs, &Error{Kind: ErrInvalid, Path: dir, Field: fmt.Sprintf("metadata %q", k), Msg: "not valid UTF-8"})
		default:
			p.metadata[k] = v
		}
	}
	p.metadata[MetaStep] = strconv.FormatInt(opts.Step, 10)
	p.metadata[MetaEpoch] = strconv.FormatFloat(opts.Epoch, 'g', -1, 64)

	if len(specs) == 0 {
		errs = append(errs, &Error{Kind: ErrOption, Path: dir, Field: "tensors", Msg: "a checkpoint needs at least one tensor"})
	}
	p.specs = make([]safetensors.TensorSpec, len(specs))
	sizes := make([]int64, len(specs))
	seen := make(map[string]bool, len(specs))
	clean := true
	for i, s := range specs {
		p.specs[i] = safetensors.TensorSpec{Name: s.Name, DType: s.DType, Shape: append([]int64(nil), s.Shape...)}
		if err := checkTensorName(s.Name); err != "" {
			errs = append(errs, &Error{Kind: ErrInvalid, Path: dir, Tensor: s.Name, Msg: "name: " + err})
			clean = false
		} else if seen[s.Name] {
			errs = append(errs, &Error{Kind: ErrInvalid, Path: dir, Tensor: s.Name, Msg: "duplicate: two tensors have this name"})
			clean = false
		}
		seen[s.Name] = true
		if !s.DType.Valid() {
			errs = append(errs, &Error{Kind: ErrInvalid, Path: dir, Tensor: s.Name,
				Msg: fmt.Sprintf("dtype: dtype %d is neither built in nor registered (dtype.Register)", uint16(s.DType))})
			clean = false
			continue
		}
		n, err := s.ByteLen()
		if err != nil {
			errs = append(errs, &Error{Kind: ErrInvalid, Path: dir, Tensor: s.Name, Msg: fmt.Sprintf("shape: %s%v", s.DType, s.Shape), Err: err})
			clean = false
			continue
		}
		sizes[i] = n
		if lens != nil && int64(lens[i]) != n {
			errs = append(errs, &Error{Kind: ErrInvalid, Path: dir, Tensor: s.Name,
				Msg: fmt.Sprintf("data length: data has %d bytes, %s%v needs %d", lens[i], s.DType, s.Shape, n)})
		}
		if p.data > math.MaxInt64-n {
			errs = append(errs, &Error{Kind: ErrInvalid, Path: dir, Tensor: s.Name, Msg: "shape: the checkpoint's size overflows int64"})
			clean = false
			continue
		}
		p.data += n
	}
	for _, k := range slices.Sorted(maps.Keys(opts.Metadata)) {
		// A checksum is a claim about a tensor's data, checked by the
		// writer of the shard that holds it.
		if name, ok := strings.CutPrefix(k, safetensors.ChecksumPrefix); ok && !seen[name] {
			errs = append(errs, &Error{Kind: ErrInvalid, Path: dir, Field: fmt.Sprintf("metadata %q", k), Msg: "a checksum for a tensor that is not saved"})
		}
	}
	if len(errs) > 0 && !clean || p.maxShard <= 0 {
		return p, errs
	}
	// Headers and file sizes, shard by shard, packed as shard.WriteFrom
	// packs them: greedily, in the given order.
	groups := setwrite.Pack(sizes, p.maxShard)
	p.files = p.data + manifestReserve
	for gi, g := range groups {
		gs := make([]safetensors.TensorSpec, len(g))
		for j, i := range g {
			gs[j] = p.specs[i]
		}
		n, err := setwrite.HeaderLen(gs, p.metadata)
		if err != nil {
			what := "header"
			var se *safetensors.Error
			if errors.As(err, &se) && se.Kind != safetensors.ErrHeaderTooLarge {
				what = "metadata"
			}
			errs = append(errs, &Error{Kind: ErrInvalid, Path: dir, Field: fmt.Sprintf("shard %d of %d", gi+1, len(groups)), Msg: what, Err: err})
			continue
		}
		p.files += n
	}
	if len(groups) > 1 {
		// The index: one line per tensor, about its name and a shard name.
		for _, s := range p.specs {
			p.files += int64(len(s.Name)) + int64(len(p.prefix)) + 40
		}
	}
	return p, errs
}

// manifestReserve is what the space check counts for checkpoint.json and
// the folder entries.
const manifestReserve = 64 << 10

// checkTensorName returns why the format (or ckpt's writers) refuse name,
// or "".
func checkTensorName(name string) string {
	switch {
	case name == "":
		return "empty name"
	case name == safetensors.MetadataKey:
		return "the name __metadata__ is reserved for the header's metadata"
	case !utf8.ValidString(name):
		return "not valid UTF-8"
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return fmt.Sprintf("control character %U in the name", r)
		}
	}
	return ""
}

// checkTarget checks the target folder: that the checkpoint's name is free
// (or Overwrite is set and it holds a checkpoint), that a folder can be
// created in dir or its nearest existing parent, and that the file system
// there has room for the checkpoint's files.
func (p *plan) checkTarget() []error {
	var errs []error
	if p.dir == "" {
		return nil
	}
	base, err := existingBase(p.dir)
	if err != nil {
		return []error{err}
	}
	if base == p.dir {
		if err := p.checkName(); err != nil {
			errs = append(errs, err)
		}
	}
	tok, err := randomToken()
	if err != nil {
		return append(errs, &Error{Kind: ErrTarget, Path: p.dir, Msg: "naming the probe folder", Err: err})
	}
	probe := filepath.Join(base, ".ckpt-probe-"+tok)
	if err := os.Mkdir(probe, 0o700); err != nil {
		return append(errs, &Error{Kind: ErrTarget, Path: p.dir, Msg: "cannot create a folder in " + base, Err: err})
	}
	if err := os.Remove(probe); err != nil {
		errs = append(errs, &Error{Kind: ErrTarget, Path: p.dir, Msg: "cannot remove the probe folder " + probe, Err: err})
	}
	if err := p.checkSpace(base); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// checkName refuses a name that is taken, unless Overwrite is set and the
// folder is a checkpoint that Save wrote.
func (p *plan) checkName() error {
	final := filepath.Join(p.dir, p.name)
	st, err := os.Lstat(final)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return &Error{Kind: ErrTarget, Path: final, Err: err}
	}
	if !p.opts.Overwrite {
		return &Error{Kind: ErrExists, Path: final, Msg: "a checkpoint of this name exists (SaveOptions.Overwrite replaces it)"}
	}
	if !st.IsDir() {
		return &Error{Kind: ErrExists, Path: final, Msg: "exists and is not a folder: Overwrite replaces only checkpoints that Save wrote"}
	}
	if _, err := readManifest(final); err != nil {
		return &Error{Kind: ErrExists, Path: final, Msg: "exists and is not a checkpoint that Save wrote (no readable " + manifestName + "): Overwrite replaces only those", Err: err}
	}
	return nil
}

// checkSpace compares the free space of the file system holding path with
// the checkpoint's size.
func (p *plan) checkSpace(path string) error {
	free, ok, err := freeSpace(path)
	if err != nil {
		return &Error{Kind: ErrTarget, Path: path, Msg: "statfs", Err: err}
	}
	if ok && uint64(p.files) > free {
		return &Error{Kind: ErrNoSpace, Path: p.dir,
			Msg: fmt.Sprintf("the checkpoint needs %d bytes, the file system has %d free", p.files, free)}
	}
	return nil
}

// existingBase returns dir when it is a folder, else its nearest existing
// parent; a file in the way is ErrTarget.
func existingBase(dir string) (string, error) {
	d := dir
	for {
		st, err := os.Stat(d)
		switch {
		case err == nil && st.IsDir():
			return d, nil
		case err == nil:
			return "", &Error{Kind: ErrTarget, Path: dir, Msg: d + " is not a folder"}
		case !errors.Is(err, fs.ErrNotExist):
			return "", &Error{Kind: ErrTarget, Path: dir, Err: err}
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", &Error{Kind: ErrTarget, Path: dir, Msg: "no existing parent folder"}
		}
		d = parent
	}
}

// freeSpace returns the bytes available to this user on the file system
// holding path, and false where the platform cannot tell. Tests replace it
// to simulate a full disk.
var freeSpace = statfsFree

// randomToken returns 12 random hex digits for hidden folder names.
func randomToken() (string, error) {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}
