package safetensors

import (
	"math/rand/v2"
	"testing"
)

// Runs added in a random order, some overlapping runs already there, end
// as one run with the CRC of the whole; Gaps names what is missing.
func TestChecksumRuns(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	b := make([]byte, 3000)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	for trial := range 100 {
		var cr ChecksumRuns
		for {
			gaps := cr.Gaps(0, int64(len(b)), nil)
			if len(gaps) == 0 {
				break
			}
			g := gaps[r.IntN(len(gaps))]
			off := g[0] + r.Int64N(g[1]-g[0])
			end := off + 1 + r.Int64N(g[1]-off)
			if r.IntN(4) == 0 && off > 0 {
				off-- // may overlap the run before: refused unless it is a gap
			}
			ok := cr.Add(off, end, Checksum(b[off:end]))
			if overlaps := off < g[0]; ok == overlaps {
				t.Fatalf("trial %d: Add(%d, %d) = %v, gap %v", trial, off, end, ok, g)
			}
		}
		if got, ok := cr.Whole(0, int64(len(b))); !ok || got != Checksum(b) {
			t.Fatalf("trial %d: whole %08x %v, want %08x", trial, got, ok, Checksum(b))
		}
		if _, ok := cr.Whole(0, 10); ok {
			t.Fatal("Whole of a part of the run")
		}
	}
}
