package ckpt

import (
	"errors"
	"io"
	"io/fs"
	"testing"

	"github.com/ckpt-go/ckpt/internal/testutil"
)

func TestErrorKinds(t *testing.T) {
	ks := testutil.Kinds[ErrorKind](kindNames[:])
	testutil.CheckKinds(t, ks, func(k ErrorKind) error { return &Error{Kind: k} })
	if len(ks) != int(ErrClosed) || ErrorKind(0).String() != "unknown" {
		t.Errorf("kinds %v", ks)
	}
}

// The message names the kind, then what the error concerns, then the case
// and the cause.
func TestErrorFormat(t *testing.T) {
	for _, c := range []struct {
		err  *Error
		want string
	}{
		{&Error{Kind: ErrOption, Pattern: "a.[x", Msg: `part "[x": syntax error`}, `ckpt: option: pattern "a.[x": part "[x": syntax error`},
		{&Error{Kind: ErrOption, Msg: "empty pattern"}, `ckpt: option: empty pattern`},
		{&Error{Kind: ErrResolve, Path: "m", Component: "vae", Msg: "config", Err: io.ErrUnexpectedEOF}, `ckpt: resolve: m: component "vae": config: unexpected EOF`},
		{&Error{Kind: ErrOption, Component: "unet", Tensor: "w", Msg: "split: half a byte"}, `ckpt: option: component "unet": tensor "w": split: half a byte`},
	} {
		if got := c.err.Error(); got != c.want {
			t.Errorf("got %q, want %q", got, c.want)
		}
	}
	closed := &Error{Kind: ErrClosed}
	if !errors.Is(closed, fs.ErrClosed) || errors.Is(&Error{Kind: ErrRead}, fs.ErrClosed) {
		t.Error("only ErrClosed matches fs.ErrClosed")
	}
	if b := (&BudgetError{Msg: "2 B short"}); !errors.Is(b, ErrBudget) || errors.Is(b, ErrOption) || b.Error() != "ckpt: budget: 2 B short" {
		t.Errorf("BudgetError %v", b)
	}
}
