package integrity

import (
	"errors"
	"strconv"
	"strings"

	"github.com/ckpt-go/ckpt/internal/errkind"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/shard"
)

// Kind classifies a Problem: what is wrong with the checkpoint, as the
// "kind" of each problem in `ckpt verify --json` names it. It is a field
// of the report, not an error condition: a caller reading a Report
// compares Problem.Kind; a caller holding an error tests the conditions
// that packages share (safetensors.ErrChecksum, shard.ErrInsecurePath, …),
// which Problem.Is matches.
type Kind int

// The kinds of problem.
const (
	// InvalidHeader: a safetensors file whose header does not parse
	// (a flipped bit in the header or its padding, a file cut inside its
	// header, not a safetensors file): one problem naming the file.
	InvalidHeader Kind = iota + 1
	// Truncated: a file shorter than its header says.
	Truncated
	// TrailingBytes: a file longer than its header says.
	TrailingBytes
	// ChecksumMismatch: a tensor whose stored bytes differ from the
	// checksum its file's header names (it also matches
	// safetensors.ErrChecksum, and unwraps to a
	// *safetensors.ChecksumError); in a PyTorch file, a record whose
	// bytes differ from the CRC-32 its zip archive records, or whose local
	// header disagrees with the directory: one problem for each tensor
	// that views the record's storage (or one naming the file when none
	// does), its Range the record's bytes (it unwraps to a
	// *torch.RecordError).
	ChecksumMismatch
	// DamagedChecksums: the checksums in a header are damaged (see
	// safetensors.Header.Checksums); it also matches
	// safetensors.ErrChecksum.
	DamagedChecksums
	// NoChecksums: a file without checksums (a PyTorch file never has
	// them), when RequireChecksums was given.
	NoChecksums
	// InvalidIndex: a shard index that does not parse or validate.
	InvalidIndex
	// MissingShard: an index names a shard file that is not there.
	MissingShard
	// TensorMissingFromShard: a tensor the index names is not in the
	// shard it names (in another one, or in none).
	TensorMissingFromShard
	// UnmappedTensor: a shard holds a tensor its index does not name
	// (loaders ignore it).
	UnmappedTensor
	// DuplicateTensor: a tensor held by two shards of one index.
	DuplicateTensor
	// TotalSizeMismatch: an index's metadata.total_size differs from the bytes
	// of the tensors it names.
	TotalSizeMismatch
	// BlobMismatch: a file of a Hugging Face hub cache snapshot whose
	// blob's content does not hash to the name the hub stored it under.
	BlobMismatch
	// InsecurePath: a file that is a symbolic link leading out of its
	// folder, not followed without FollowSymlinks (the rule of
	// shard.ErrInsecurePath), or an index naming a shard by a path.
	InsecurePath
	// NotRegular: a FIFO, device, socket or folder where a file is
	// expected; refused without blocking (it also matches
	// safetensors.ErrNotRegular).
	NotRegular
	// InvalidModelIndex: a pipeline's model_index.json that cannot be
	// read.
	InvalidModelIndex
	// MissingComponent: a component model_index.json lists whose
	// folder is missing or not a bare folder name.
	MissingComponent
	// NoWeights: a folder with no safetensors or PyTorch weights file or
	// index to verify.
	NoWeights
	// IO: reading a file failed (or it changed size while it was
	// read).
	IO
	// NotWritable: Checksum cannot write the checkpoint there (a hub
	// cache snapshot, a location without a sink, a file system given with
	// WithFS).
	NotWritable
	// InvalidArchive: a PyTorch checkpoint that package torch refuses to
	// open: a zip archive without its directory (a truncated copy ends
	// before it), a damaged directory or data.pkl, a storage record that
	// is missing, too short or runs past the end of the file, a tensor out
	// of its storage's bounds; also what it cannot read (a forbidden
	// global, the legacy format). One problem naming the file (and the
	// record or tensor, when the refusal names one).
	InvalidArchive

	numKinds // keep last
)

var kindNames = [...]string{
	InvalidHeader:          "invalid_header",
	Truncated:              "truncated",
	TrailingBytes:          "trailing_bytes",
	ChecksumMismatch:       "checksum_mismatch",
	DamagedChecksums:       "damaged_checksums",
	NoChecksums:            "no_checksums",
	InvalidIndex:           "invalid_index",
	MissingShard:           "missing_shard",
	TensorMissingFromShard: "tensor_missing_from_shard",
	UnmappedTensor:         "unmapped_tensor",
	DuplicateTensor:        "duplicate_tensor",
	TotalSizeMismatch:      "total_size_mismatch",
	BlobMismatch:           "blob_hash_mismatch",
	InsecurePath:           "insecure_path",
	NotRegular:             "not_regular_file",
	InvalidModelIndex:      "invalid_model_index",
	MissingComponent:       "missing_component",
	NoWeights:              "no_weights",
	IO:                     "io",
	NotWritable:            "not_writable",
	InvalidArchive:         "invalid_archive",
}

// String returns the kind's snake_case name, e.g. "checksum_mismatch".
// These names are stable; tools read them in JSON output.
func (k Kind) String() string { return errkind.Name(kindNames[:], k) }

// MarshalText writes the kind's name.
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText reads a kind's name.
func (k *Kind) UnmarshalText(b []byte) error {
	for i, n := range kindNames {
		if i > 0 && n == string(b) {
			*k = Kind(i)
			return nil
		}
	}
	return errors.New("integrity: unknown problem kind " + strconv.Quote(string(b)))
}

// Range is a byte range of a file: offsets Begin (included) to End
// (excluded).
type Range struct {
	Begin int64 `json:"begin"`
	End   int64 `json:"end"`
}

// Problem is one thing wrong with a checkpoint. It is an error: its
// message is one line naming the file (relative to the location
// verified, slash-separated), the tensor and the byte range where they
// apply, and errors.Is matches the condition other packages share that it
// is, if any (see Is).
type Problem struct {
	Kind Kind `json:"kind"`
	// File is the file concerned, relative to the location verified
	// (its folder, or the folder of the file or index verified).
	File string `json:"file"`
	// Tensor is the tensor concerned, if any.
	Tensor string `json:"tensor,omitempty"`
	// Range is the tensor's stored bytes (file offsets) for a checksum
	// mismatch, and the part of the file concerned for a truncated file
	// or trailing bytes.
	Range *Range `json:"range,omitempty"`
	// Message is the whole line: file, tensor, range and what is wrong.
	Message string `json:"message"`
	// Err is the underlying error, if any (a *safetensors.ChecksumError
	// for a checksum mismatch of a safetensors file, a *torch.RecordError
	// for one of a PyTorch file, a *torch.Error for InvalidArchive).
	Err error `json:"-"`
}

// Error returns the message.
func (p *Problem) Error() string { return p.Message }

// Is reports whether target is the condition other packages name that p
// is: safetensors.ErrChecksum for a checksum mismatch or damaged
// checksums, safetensors.ErrNotRegular for NotRegular,
// shard.ErrInsecurePath for InsecurePath, shard.ErrMissingShard for
// MissingShard.
func (p *Problem) Is(target error) bool {
	switch p.Kind {
	case ChecksumMismatch, DamagedChecksums:
		return target == safetensors.ErrChecksum
	case NotRegular:
		return target == safetensors.ErrNotRegular
	case InsecurePath:
		return target == shard.ErrInsecurePath
	case MissingShard:
		return target == shard.ErrMissingShard
	}
	return false
}

// Unwrap returns the underlying error.
func (p *Problem) Unwrap() error { return p.Err }

// newProblem builds a problem whose message is "FILE: tensor "T": msg"
// (the tensor part only when tensor is set).
func newProblem(kind Kind, file, tensor string, rng *Range, msg string) *Problem {
	var b strings.Builder
	b.WriteString(file)
	b.WriteString(": ")
	if tensor != "" {
		b.WriteString("tensor ")
		b.WriteString(strconv.Quote(tensor))
		b.WriteString(": ")
	}
	b.WriteString(msg)
	return &Problem{Kind: kind, File: file, Tensor: tensor, Range: rng, Message: b.String()}
}

// ProblemsError is the error of a checkpoint that has problems: Checksum
// returns it when it refuses to write. errors.Is matches the conditions
// any of its problems match (safetensors.ErrChecksum when one is a
// checksum mismatch); errors.As finds the first *Problem.
type ProblemsError struct {
	Location string
	Problems []*Problem
}

// Error names the location and its first problems.
func (e *ProblemsError) Error() string {
	var b strings.Builder
	b.WriteString("integrity: ")
	b.WriteString(e.Location)
	b.WriteString(": ")
	b.WriteString(strconv.Itoa(len(e.Problems)))
	if len(e.Problems) == 1 {
		b.WriteString(" problem: ")
	} else {
		b.WriteString(" problems: ")
	}
	for i, p := range e.Problems {
		if i == 3 {
			b.WriteString("; and " + strconv.Itoa(len(e.Problems)-3) + " more")
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(p.Message)
	}
	return b.String()
}

// Unwrap returns the problems, for errors.Is and errors.As.
func (e *ProblemsError) Unwrap() []error {
	out := make([]error, len(e.Problems))
	for i, p := range e.Problems {
		out[i] = p
	}
	return out
}
