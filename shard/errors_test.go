package shard

import (
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
type failure = testutil.Failure[ErrorKind]

// The checks behind the general kinds, as their messages name them.
var (
	indexTooLarge          = failure{Kind: ErrInvalidIndex, What: ": index too large: "}
	indexInvalidJSON       = failure{Kind: ErrInvalidIndex, What: ": invalid JSON"}
	indexMissingWeightMap  = failure{Kind: ErrInvalidIndex, What: ": missing weight_map: "}
	indexInvalidWeightMap  = failure{Kind: ErrInvalidIndex, What: ": invalid weight_map: "}
	indexDuplicateTensor   = failure{Kind: ErrInvalidIndex, What: ": duplicate tensor: "}
	indexInvalidMetadata   = failure{Kind: ErrInvalidIndex, What: ": invalid metadata: "}
	invalidShardName       = failure{Kind: ErrInvalidIndex, What: ": invalid shard name: "}
	tensorMissingFromShard = failure{Kind: ErrInvalidIndex, What: ": tensor missing from shard: "}
	unsupportedPath        = failure{Kind: ErrInvalidArgument, What: ": unsupported path: "}
	invalidSize            = failure{Kind: ErrInvalidArgument, What: ": invalid size: "}
	invalidVariant         = failure{Kind: ErrInvalidArgument, What: ": invalid variant: "}
	duplicateTensor        = failure{Kind: ErrInvalidArgument, What: ": duplicate tensor"}
	invalidTensor          = failure{Kind: ErrInvalidArgument, What: ": invalid tensor"}
)
