//go:build !linux

package convert

// exchange cannot swap folders atomically on this platform: Save moves the
// old folder aside instead.
func exchange(a, b string) error { return errExchangeUnsupported }
