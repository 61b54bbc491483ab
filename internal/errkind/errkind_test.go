package errkind

import (
	"slices"
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

func TestAll(t *testing.T) {
	if got := All[kind](names); !slices.Equal(got, []kind{1, 2}) {
		t.Errorf("All = %v", got)
	}
	if got := All[kind](nil); len(got) != 0 {
		t.Errorf("All(nil) = %v", got)
	}
}
