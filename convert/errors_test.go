package convert_test

import (
	"testing"

	"github.com/ckpt-go/ckpt/convert"
	"github.com/ckpt-go/ckpt/internal/testutil"
)

func TestErrorKinds(t *testing.T) {
	testutil.CheckKinds(t, convert.Kinds(), func(k convert.ErrorKind) error {
		return &convert.Error{Kind: k, Path: "dir", Tensor: "w"}
	})
}
