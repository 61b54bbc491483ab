package torch

import (
	"errors"
	"io"
	"testing"

	"github.com/ckpt-go/ckpt/internal/testutil"
)

func TestErrorKinds(t *testing.T) {
	testutil.CheckKinds(t, Kinds(), func(k ErrorKind) error { return &Error{Kind: k} })
}

func TestErrorFormat(t *testing.T) {
	e := &Error{Kind: ErrForbiddenGlobal, File: "m.pt", Record: "m/data.pkl", Tensor: "a.b", Global: "posix system", Msg: "refused", Err: io.EOF}
	if got, want := e.Error(), `torch: m.pt: m/data.pkl: tensor "a.b": global "posix system": refused: EOF`; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if got := (&Error{Kind: ErrTensorBounds}).Error(); got != "torch: tensor bounds" {
		t.Errorf("got %s", got)
	}
	if !errors.Is(e, io.EOF) || errors.Is(e, ErrLimit) {
		t.Error("Is/Unwrap")
	}
	if ErrLimit.Error() != "torch: limit" {
		t.Error(ErrLimit.Error())
	}
}
