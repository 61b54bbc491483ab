package ckpt

import (
	"errors"
	"io"
	"io/fs"
	"regexp"
	"testing"
)

// Each condition is a distinct sentinel named "ckpt: NAME" (NAME in
// snake_case), and an *Error of one kind matches that kind and no other.
func TestErrorKinds(t *testing.T) {
	kinds := []error{ErrOption, ErrTarget, ErrResolve, ErrBudget, ErrNotFound, ErrRead, ErrClosed}
	name := regexp.MustCompile(`^ckpt: [a-z]+(_[a-z]+)*$`)
	seen := map[string]bool{}
	for _, k := range kinds {
		if !name.MatchString(k.Error()) || seen[k.Error()] {
			t.Errorf("kind %q is not a distinct ckpt: snake_case name", k)
		}
		seen[k.Error()] = true
		e := &Error{Kind: k}
		if e.Error() != k.Error() {
			t.Errorf("an *Error of kind %q reads %q", k, e)
		}
		for _, o := range kinds {
			if got := errors.Is(e, o); got != (o == k) {
				t.Errorf("errors.Is(error of kind %q, %q) = %v", k, o, got)
			}
		}
	}
	if (&Error{Msg: "no kind"}).Error() != "ckpt: no kind" || errors.Is(&Error{}, ErrOption) {
		t.Error("an *Error without a kind")
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
