//go:build !linux

package safetensors

// prefault is advice that only Linux takes (prefault_linux.go).
func prefault([]byte) {}
