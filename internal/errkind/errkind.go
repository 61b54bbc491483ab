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

// All returns every kind of the table, 1 to len(names)-1, in order.
func All[K ~int](names []string) []K {
	out := make([]K, 0, max(len(names)-1, 0))
	for k := K(1); int(k) < len(names); k++ {
		out = append(out, k)
	}
	return out
}
