package safetensors

import (
	"encoding/binary"
	"math"
	"unsafe"
)

// littleEndian reports whether the host stores numbers little-endian like
// the safetensors format.
var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// fixEndian32 turns little-endian float32 bytes stored in s into host order.
func fixEndian32(s []float32) {
	if littleEndian {
		return
	}
	b := f32Bytes(s)
	for i := range s {
		s[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
}

// fixEndian64 turns little-endian float64 bytes stored in s into host order.
func fixEndian64(s []float64) {
	if littleEndian {
		return
	}
	b := f64Bytes(s)
	for i := range s {
		s[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
	}
}
