package variant

import (
	"github.com/ckpt-go/ckpt/internal/errkind"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/shard"
)

// ErrorKind classifies resolution failures. Each kind is an error, so
// callers can test with errors.Is(err, variant.ErrVariantNotFound).
type ErrorKind int

// The kinds of Error; String gives the stable snake_case name used in
// PlanError.Kind.
const (
	// ErrInvalidVariant: the variant name does not match ^[A-Za-z0-9_]+$.
	ErrInvalidVariant ErrorKind = iota + 1
	// ErrReadDir: the folder is missing, not a folder or unreadable.
	ErrReadDir
	// ErrNoWeights: the folder has no safetensors weights under any of the
	// recognized names.
	ErrNoWeights
	// ErrVariantNotFound: a variant was asked for and the folder has no
	// weights tagged with it (the message says whether untagged weights
	// exist).
	ErrVariantNotFound
	// ErrUntaggedNotFound: no variant was asked for and the folder has only
	// variant-tagged weights (the message lists them).
	ErrUntaggedNotFound
	// ErrAmbiguousPrefix: weights for the requested variant exist under
	// both prefixes ("model" and "diffusion_pytorch_model").
	ErrAmbiguousPrefix
	// ErrVariantMismatch: an index for one variant maps tensors to shards
	// of another (a V index naming untagged shards, or the reverse).
	ErrVariantMismatch
	// ErrForeignShard: an index maps tensors to a file that is not a
	// weights file of the component's prefix.
	ErrForeignShard
	// ErrInvalidIndex: the chosen index is not a valid shard index.
	ErrInvalidIndex
	// ErrInsecurePath: an index names a path instead of a bare file, a
	// file or component folder is a symlink that leads out of its folder
	// (see shard.WithFollowSymlinks), or model_index.json lists a component
	// name that is a path.
	ErrInsecurePath
	// ErrMissingShard: an index names a shard that does not exist.
	ErrMissingShard
	// ErrTensorMissingFromShard: an index maps a tensor to a shard that
	// does not have it.
	ErrTensorMissingFromShard
	// ErrInvalidWeights: a weights file is not a valid safetensors file.
	ErrInvalidWeights
	// ErrModelIndexMissing: a pipeline root has no model_index.json.
	ErrModelIndexMissing
	// ErrModelIndexInvalid: model_index.json is not a valid JSON object.
	ErrModelIndexInvalid
	// ErrComponentMissing: model_index.json lists a component whose folder
	// does not exist.
	ErrComponentMissing
	// ErrNoComponentHasVariant: no component of a pipeline has weights for
	// the requested variant.
	ErrNoComponentHasVariant
	// ErrMissingIndex: shards exist but neither an index nor a single file.
	ErrMissingIndex
	// ErrPlanChanged: Plan.Open found files other than the planned ones
	// (the folder changed after resolution).
	ErrPlanChanged
	// ErrNotRegular: a weights file, an index or model_index.json is not a
	// regular file once its symbolic links are followed (a FIFO, a device,
	// a socket). It is refused before anything is read, without blocking.
	ErrNotRegular
)

var kindNames = [...]string{
	ErrInvalidVariant:         "invalid_variant",
	ErrReadDir:                "read_dir",
	ErrNoWeights:              "no_weights",
	ErrVariantNotFound:        "variant_not_found",
	ErrUntaggedNotFound:       "untagged_not_found",
	ErrAmbiguousPrefix:        "ambiguous_prefix",
	ErrVariantMismatch:        "variant_mismatch",
	ErrForeignShard:           "foreign_shard",
	ErrInvalidIndex:           "invalid_index",
	ErrInsecurePath:           "insecure_path",
	ErrMissingShard:           "missing_shard",
	ErrTensorMissingFromShard: "tensor_missing_from_shard",
	ErrInvalidWeights:         "invalid_weights",
	ErrModelIndexMissing:      "model_index_missing",
	ErrModelIndexInvalid:      "model_index_invalid",
	ErrComponentMissing:       "component_missing",
	ErrNoComponentHasVariant:  "no_component_has_variant",
	ErrMissingIndex:           "missing_index",
	ErrPlanChanged:            "plan_changed",
	ErrNotRegular:             "not_regular_file",
}

// String returns the kind's snake_case name.
func (k ErrorKind) String() string { return errkind.Name(kindNames[:], k) }

// Kinds returns every ErrorKind, in declaration order (for documentation
// and exhaustive tests).
func Kinds() []ErrorKind { return errkind.All[ErrorKind](kindNames[:]) }

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
