//go:build amd64 && !purego

package cpuid

// CPUID executes the CPUID instruction with EAX = leaf and ECX = sub.
//
//go:noescape
func CPUID(leaf, sub uint32) (eax, ebx, ecx, edx uint32)

// XGETBV0 returns the low word of XCR0, the state components the operating
// system saves (bits 1 and 2: XMM and YMM registers).
//
//go:noescape
func XGETBV0() (eax uint32)

// HasVPCLMULQDQ reports whether the CPU has VPCLMULQDQ (CPUID leaf 7, ECX
// bit 10): carry-less multiplication on YMM (and, with AVX-512, ZMM)
// registers. x/sys/cpu reports it only along with AVX-512, and CPUs
// without AVX-512 have it too (AMD Zen 3, Intel Alder Lake).
func HasVPCLMULQDQ() bool {
	if max, _, _, _ := CPUID(0, 0); max < 7 {
		return false
	}
	_, _, ecx, _ := CPUID(7, 0)
	return ecx&(1<<10) != 0
}
