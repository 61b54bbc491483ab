package testutil

import (
	"testing"
	"time"
)

// Deadline is how long Within waits before it calls a call a hang. Every
// call the tests guard answers in milliseconds.
const Deadline = 5 * time.Second

// Within calls fn in a goroutine and returns its error, failing t with
// t.Fatalf when fn has not returned after Deadline: what (the call, in
// words) hangs. The goroutine is then left blocked: a hang cannot be
// interrupted.
func Within(t testing.TB, what string, fn func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-time.After(Deadline):
		t.Fatalf("%s: no answer after %v: it hangs", what, Deadline)
		return nil
	}
}
