package shard

import (
	"errors"
	"regexp"
	"testing"
)

func TestKindNames(t *testing.T) {
	seen := map[string]bool{}
	snake := regexp.MustCompile(`^[a-z]+(_[a-z]+)*$`)
	for _, k := range Kinds() {
		s := k.String()
		if !snake.MatchString(s) || seen[s] {
			t.Errorf("kind %d: %q", k, s)
		}
		seen[s] = true
		e := &Error{Kind: k, Path: "p"}
		if !errors.Is(e, k) || (k != ErrClosed && errors.Is(e, ErrClosed)) {
			t.Errorf("%s: errors.Is broken", s)
		}
	}
	if ErrorKind(0).String() != "unknown" || ErrorKind(999).String() != "unknown" {
		t.Error("out-of-range kinds")
	}
}
