package variant

import (
	"testing"

	"github.com/ckpt-go/ckpt/internal/testutil"
)

func TestKindNames(t *testing.T) {
	ks := testutil.Kinds[ErrorKind](kindNames[:])
	testutil.CheckKinds(t, ks, func(k ErrorKind) error { return &Error{Kind: k} })
	if n := len(ks); n != int(ErrNotRegular) {
		t.Errorf("%d kinds, last is %d", n, ErrNotRegular)
	}
}
