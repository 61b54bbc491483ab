package shard

import (
	"testing"

	"github.com/ckpt-go/ckpt/internal/testutil"
)

func TestKindNames(t *testing.T) {
	testutil.CheckKinds(t, Kinds(), func(k ErrorKind) error { return &Error{Kind: k, Path: "p"} })
	if ErrorKind(0).String() != "unknown" || ErrorKind(999).String() != "unknown" {
		t.Error("out-of-range kinds")
	}
	if ks := Kinds(); ks[len(ks)-1] != ErrNotRegular {
		t.Errorf("Kinds() ends with %v, want not_regular_file", ks[len(ks)-1])
	}
}
