package safetensors

import (
	"encoding/binary"
	"runtime"
	"strings"
	"testing"
)

// A hostile header of nothing but '{' (or of many tiny objects) must not
// reserve tables far larger than the header itself.
func TestHostileHeaderAllocation(t *testing.T) {
	const n = 10_000_000
	for _, hdr := range []string{
		strings.Repeat("{", n),
		`{"a":{"dtype":"U8","shape":[],"data_offsets":[0,1],"x":[` + strings.Repeat("{},", n/3) + `{}]}}`,
	} {
		raw := make([]byte, 8+len(hdr))
		binary.LittleEndian.PutUint64(raw, uint64(len(hdr)))
		copy(raw[8:], hdr)
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		_, err := OpenBytes(raw)
		runtime.ReadMemStats(&m1)
		if err == nil {
			t.Fatal("hostile header accepted")
		}
		if got := m1.TotalAlloc - m0.TotalAlloc; got > 4*uint64(len(hdr)) {
			t.Errorf("parsing a %d-byte hostile header allocated %d bytes (%v)", len(hdr), got, err)
		}
	}
}
