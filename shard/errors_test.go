package shard

import (
	"errors"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/internal/testutil"
)

func TestKindNames(t *testing.T) {
	ks := testutil.Kinds[ErrorKind](kindNames[:])
	testutil.CheckKinds(t, ks, func(k ErrorKind) error { return &Error{Kind: k, Path: "p"} })
	if ErrorKind(0).String() != "unknown" || ErrorKind(999).String() != "unknown" {
		t.Error("out-of-range kinds")
	}
	if ks[len(ks)-1] != ErrNotRegular {
		t.Errorf("the kinds end with %v, want not_regular_file", ks[len(ks)-1])
	}
}

// failure is what a test expects of an error: its kind and, for a general
// kind, the check its message names.
type failure struct {
	kind ErrorKind
	what string
}

func (f failure) String() string { return f.kind.String() + " (" + f.what + ")" }

// matches reports whether err is of f's kind and names f's check.
func (f failure) matches(err error) bool {
	return errors.Is(err, f.kind) && strings.Contains(err.Error(), f.what)
}

// The checks behind the general kinds, as their messages name them.
var (
	indexTooLarge          = failure{ErrInvalidIndex, ": index too large: "}
	indexInvalidJSON       = failure{ErrInvalidIndex, ": invalid JSON"}
	indexMissingWeightMap  = failure{ErrInvalidIndex, ": missing weight_map: "}
	indexInvalidWeightMap  = failure{ErrInvalidIndex, ": invalid weight_map: "}
	indexDuplicateTensor   = failure{ErrInvalidIndex, ": duplicate tensor: "}
	indexInvalidMetadata   = failure{ErrInvalidIndex, ": invalid metadata: "}
	invalidShardName       = failure{ErrInvalidIndex, ": invalid shard name: "}
	tensorMissingFromShard = failure{ErrInvalidIndex, ": tensor missing from shard: "}
	unsupportedPath        = failure{ErrInvalidArgument, ": unsupported path: "}
	invalidSize            = failure{ErrInvalidArgument, ": invalid size: "}
	invalidVariant         = failure{ErrInvalidArgument, ": invalid variant: "}
	duplicateTensor        = failure{ErrInvalidArgument, ": duplicate tensor"}
	invalidTensor          = failure{ErrInvalidArgument, ": invalid tensor"}
)
