package convert_test

import (
	"errors"
	"regexp"
	"testing"

	"github.com/ckpt-go/ckpt/convert"
)

func TestErrorKinds(t *testing.T) {
	snake := regexp.MustCompile(`^[a-z]+(_[a-z]+)*$`)
	seen := map[string]bool{}
	for _, k := range convert.Kinds() {
		s := k.String()
		if !snake.MatchString(s) || seen[s] {
			t.Errorf("kind %d: name %q (snake_case, unique)", int(k), s)
		}
		seen[s] = true
		err := error(&convert.Error{Kind: k, Path: "dir", Tensor: "w"})
		if !errors.Is(err, k) {
			t.Errorf("%v does not match its kind", err)
		}
		for _, other := range convert.Kinds() {
			if other != k && errors.Is(err, other) {
				t.Errorf("%v matches %v", err, other)
			}
		}
	}
}
