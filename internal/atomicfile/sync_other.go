//go:build !unix

package atomicfile

// isSyncUnsupported: directory fsync is not available on this platform, so
// every error from it is tolerated.
func isSyncUnsupported(err error) bool { return true }
