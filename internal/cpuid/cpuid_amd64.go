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
