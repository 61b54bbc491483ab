package testutil

import (
	"testing"
	"time"
)

// Within returns what fn returns, and fails t when fn has not returned
// after 5 s: what (the call, in words) hangs.
func Within(t testing.TB, what string, fn func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-time.After(5 * time.Second):
		t.Fatalf("%s hangs", what)
		return nil
	}
}
