package variant

import (
	"testing"

	"github.com/ckpt-go/ckpt/internal/testutil"
)

func TestKindNames(t *testing.T) {
	testutil.CheckKinds(t, Kinds(), func(k ErrorKind) error { return &Error{Kind: k} })
	if n := len(Kinds()); n != int(ErrNotRegular) {
		t.Errorf("%d kinds, last is %d", n, ErrNotRegular)
	}
}
