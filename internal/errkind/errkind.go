// Package errkind holds what the error-kind types of ckpt's packages share:
// an integer kind numbered from 1 whose snake_case name is looked up in a
// table indexed by kind.
package errkind

// Name returns names[k], or "unknown" when k is not a kind of the table
// (k < 1 or k >= len(names)).
func Name[K ~int](names []string, k K) string {
	if k > 0 && int(k) < len(names) {
		return names[k]
	}
	return "unknown"
}
