package convert

import (
	"errors"
	"io/fs"
	"testing"

	"github.com/ckpt-go/ckpt/internal/testutil"
)

func TestErrorKinds(t *testing.T) {
	kinds := testutil.Kinds[ErrorKind](kindNames[:])
	testutil.CheckKinds(t, kinds, func(k ErrorKind) error {
		return &Error{Kind: k, Path: "dir", Tensor: "w"}
	})
	for _, k := range kinds {
		if got := errors.Is(&Error{Kind: k}, fs.ErrExist); got != (k == ErrExists) {
			t.Errorf("errors.Is(error of kind %s, fs.ErrExist) = %v", k, got)
		}
	}
}
