//go:build amd64 && !purego

package dtype

import "testing"

// The summing kernels are wired where the CPU can run them, and only for
// the pairs they convert: otherwise TestConvertSum would pass through the
// stepping path alone.
func TestSumKernelWired(t *testing.T) {
	for _, from := range Builtins() {
		for _, to := range Builtins() {
			want := hasVPCLMULQDQ && to == F32 && (from == BF16 || from == F16 && hasF16C)
			if got := archSumKernel(from, to) != nil; got != want {
				t.Errorf("%v→%v: summing kernel %v, want %v", from, to, got, want)
			}
		}
	}
	if !hasVPCLMULQDQ {
		t.Log("this CPU has no VPCLMULQDQ: the summing kernels do not run here")
	}
}
