//go:build amd64 && !purego

package cpuid

import (
	"testing"

	"golang.org/x/sys/cpu"
)

// The words read here agree with what golang.org/x/sys/cpu reports of the
// same bits.
func TestAgreesWithXSysCPU(t *testing.T) {
	max, _, _, _ := CPUID(0, 0)
	if max < 1 {
		t.Fatalf("highest leaf %d", max)
	}
	_, _, ecx1, _ := CPUID(1, 0)
	if got := ecx1&(1<<20) != 0; got != cpu.X86.HasSSE42 {
		t.Errorf("SSE4.2: CPUID says %v, x/sys/cpu %v", got, cpu.X86.HasSSE42)
	}
	if got := ecx1&(1<<1) != 0; got != cpu.X86.HasPCLMULQDQ {
		t.Errorf("PCLMULQDQ: CPUID says %v, x/sys/cpu %v", got, cpu.X86.HasPCLMULQDQ)
	}
	if max >= 7 && ecx1&(1<<27) != 0 {
		_, ebx7, _, _ := CPUID(7, 0)
		avx2 := ebx7&(1<<5) != 0 && ecx1&(1<<28) != 0 && XGETBV0()&6 == 6
		if avx2 != cpu.X86.HasAVX2 {
			t.Errorf("AVX2 with the YMM state saved: CPUID says %v, x/sys/cpu %v", avx2, cpu.X86.HasAVX2)
		}
	}
}
