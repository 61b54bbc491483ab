package variant

import (
	"github.com/ckpt-go/ckpt/internal/errkind"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/shard"
)

// ErrorKind classifies resolution failures. Each kind is an error, so
// callers can test with errors.Is(err, variant.ErrVariantNotFound). The
// general kinds leave the detail to the message, which names the check that
// failed ("ambiguous prefix", "variant mismatch", "read dir", ...).
type ErrorKind int

// The kinds of Error; String gives the stable snake_case name used in
// PlanError.Kind.
const (
	// ErrInvalidArgument: the variant name does not match ^[A-Za-z0-9_]+$
	// ("invalid variant"), the folder to resolve is a file ("a file, not a
	// folder"), or Plan.Open was asked to open a PyTorch plan.
	ErrInvalidArgument ErrorKind = iota + 1
	// ErrNoWeights: there are no weights to resolve. The message names the
	// check: the folder is missing or unreadable ("read dir"); it has no
	// safetensors or PyTorch weights under any of the
	// recognized names; a pipeline root has no model_index.json ("model index
	// missing"); model_index.json lists a component whose folder does not
	// exist, or a plan has no such component ("component missing").
	ErrNoWeights
	// ErrVariantNotFound: the folder has no weights of the variant asked
	// for (the message says whether untagged weights exist); with no
	// variant asked for, it has only variant-tagged weights ("untagged not
	// found", the message lists them); no component of a pipeline has
	// weights for the requested variant ("no component has variant").
	ErrVariantNotFound
	// ErrInvalidLayout: the folder's files do not form one valid set of
	// weights. The message names the check, or the kind of the wrapped
	// *shard.Error (invalid_index, invalid_shard, ...): weights for the
	// requested variant under both prefixes ("model" and
	// "diffusion_pytorch_model": ambiguous prefix); an index for one variant
	// mapping tensors to shards of another (variant mismatch); an index
	// mapping tensors to a file that is not a weights file of the
	// component's prefix (foreign shard); an invalid index or weights file;
	// a model_index.json that is not a valid JSON object (model index
	// invalid); shards without an index or a single file (missing index);
	// files other than the planned ones at Plan.Open (plan changed: the
	// folder changed after resolution).
	ErrInvalidLayout
	// ErrInsecurePath: an index names a path instead of a bare file, a
	// file or component folder is a symlink that leads out of its folder
	// (see shard.WithFollowSymlinks), or model_index.json lists a component
	// name that is a path.
	ErrInsecurePath
	// ErrMissingShard: an index names a shard that does not exist.
	ErrMissingShard
	// ErrNotRegular: a weights file, an index or model_index.json is not a
	// regular file once its symbolic links are followed (a FIFO, a device,
	// a socket). It is refused before anything is read, without blocking.
	ErrNotRegular
)

var kindNames = [...]string{
	ErrInvalidArgument: "invalid_argument",
	ErrNoWeights:       "no_weights",
	ErrVariantNotFound: "variant_not_found",
	ErrInvalidLayout:   "invalid_layout",
	ErrInsecurePath:    "insecure_path",
	ErrMissingShard:    "missing_shard",
	ErrNotRegular:      "not_regular_file",
}

// String returns the kind's snake_case name.
func (k ErrorKind) String() string { return errkind.Name(kindNames[:], k) }

// Error makes a kind usable as an errors.Is target.
func (k ErrorKind) Error() string { return "variant: " + k.String() }

// Error is the error type of this package. It names the folder and, where
// one is concerned, the file (relative to Dir) and tensor.
type Error struct {
	Kind   ErrorKind
	Dir    string // the component or pipeline folder
	File   string // the file concerned, relative to Dir
	Tensor string // the tensor concerned
	Msg    string
	Err    error // the underlying error (often a *shard.Error)
}

// Error formats the kind, the folder, file and tensor, and the cause.
func (e *Error) Error() string {
	m := errkind.NewMessage("variant").Add(e.Kind.String()).Add(e.Dir).Quote("", e.File).Quote("tensor", e.Tensor)
	cause := e.Err
	if se, ok := e.Err.(*shard.Error); ok {
		// A wrapped shard error: give its details without repeating the
		// kind and path.
		if k := se.Kind.String(); k != e.Kind.String() {
			m.Add(k)
		}
		m.Quote("shard", se.Shard)
		if e.Tensor == "" {
			m.Quote("tensor", se.Tensor)
		}
		m.Add(se.Msg)
		cause = se.Err
	}
	return m.Add(e.Msg).Err(cause).String()
}

// Is reports whether target is e's kind.
//
// Conditions that several packages share are one value each: ErrInsecurePath
// and ErrMissingShard errors also match shard's, and ErrNotRegular ones
// safetensors.ErrNotRegular, whichever package found them.
func (e *Error) Is(target error) bool {
	if k, ok := target.(ErrorKind); ok {
		return k == e.Kind
	}
	switch e.Kind {
	case ErrInsecurePath:
		return target == shard.ErrInsecurePath
	case ErrMissingShard:
		return target == shard.ErrMissingShard
	case ErrNotRegular:
		return target == safetensors.ErrNotRegular
	}
	return false
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }
