package convert

// SetHook sets the test hook called at each step of a save; the returned
// function restores the previous one.
func SetHook(f func(step string)) (restore func()) {
	old := hook
	hook = f
	return func() { hook = old }
}

// SetFreeSpace replaces the free-space probe.
func SetFreeSpace(f func(path string) (uint64, bool, error)) (restore func()) {
	old := freeSpace
	freeSpace = f
	return func() { freeSpace = old }
}

// SetExchange replaces the atomic folder swap (to test the fallback).
func SetExchange(f func(a, b string) error) (restore func()) {
	old := exchangeFunc
	exchangeFunc = f
	return func() { exchangeFunc = old }
}

// ErrExchangeUnsupported is what exchange returns where it cannot swap.
var ErrExchangeUnsupported = errExchangeUnsupported
