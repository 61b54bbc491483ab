//go:build !unix

package convert

// processRunning reports true where processes cannot be checked: a marker
// of this host is then taken over only once it is stale.
func processRunning(pid int) bool { return true }
