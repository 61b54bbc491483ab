package errkind

import (
	"errors"
	"testing"
)

type kind int

var names = []string{1: "first", 2: "second"}

func TestName(t *testing.T) {
	for k, want := range map[kind]string{-1: "unknown", 0: "unknown", 1: "first", 2: "second", 3: "unknown"} {
		if got := Name(names, k); got != want {
			t.Errorf("Name(%d) = %q, want %q", k, got, want)
		}
	}
}

func TestMessage(t *testing.T) {
	for _, c := range []struct {
		m    *Message
		want string
	}{
		{NewMessage("pkg"), "pkg: "},
		{NewMessage("pkg").Add("kind"), "pkg: kind"},
		{NewMessage("pkg").Add("").Quote("tensor", "").Err(nil).Add("kind"), "pkg: kind"},
		{NewMessage("pkg").Add("kind").Add("a/b").Quote("tensor", "w\"1").Quote("", "f").Add("msg").Err(errors.New("cause")),
			`pkg: kind: a/b: tensor "w\"1": "f": msg: cause`},
	} {
		if got := c.m.String(); got != c.want {
			t.Errorf("got %q, want %q", got, c.want)
		}
	}
}
