package convert

import "testing"

// A tensor that produced Inf (an F16 activation that overflowed) is named
// first among the worst, before tensors with larger rounding errors.
func TestWorstPutsOverflowFirst(t *testing.T) {
	r := &Report{Tensors: []TensorReport{
		{Name: "w.rounded", Narrowed: true, RMSRelErr: 0.02, MaxRelErr: 0.04, MaxAbsErr: 1e-3},
		{Name: "act.overflowed", Narrowed: true, Inf: 3, Overflow: 3, RMSRelErr: 0.0001, MaxRelErr: 0.001, MaxAbsErr: 1e-5},
		{Name: "exact", Narrowed: true},
	}}
	w := r.Worst(5)
	if len(w) != 2 || w[0].Name != "act.overflowed" || w[1].Name != "w.rounded" {
		t.Fatalf("worst: %+v", w)
	}
}
