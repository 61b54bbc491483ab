// Package cpuid reads the x86 CPU's feature words directly, for the few
// features golang.org/x/sys/cpu does not report (F16C; VPCLMULQDQ without
// AVX-512): the one place the repository's assembly kernels (package dtype,
// internal/crc32c) get them from. It has code on amd64 only, and none with
// the purego build tag.
package cpuid
