package variant

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
		if e := (&Error{Kind: k}); !errors.Is(e, k) {
			t.Errorf("%s: errors.Is broken", s)
		}
	}
	if len(seen) != int(ErrPlanChanged) {
		t.Errorf("%d kinds, last is %d", len(seen), ErrPlanChanged)
	}
}
