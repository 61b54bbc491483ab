//go:build amd64 && !purego

package fpkern

import "golang.org/x/sys/cpu"

// hasAVX tells whether the vector code can run: AVX with the YMM state
// enabled by the OS (golang.org/x/sys/cpu checks both).
var hasAVX = cpu.X86.HasAVX

// toOddAVX processes whole blocks of 4 and returns the elements done.
//
//go:noescape
func toOddAVX(dst, x []float32, s, r float64) int

// measureState is what measureAVX carries in and out: four lanes of each
// running value, and the largest relative error so far.
type measureState struct {
	sse, ss, maxAbs [4]float64
	maxRel          float64
}

// measureAVX compares whole blocks of 4 from the start and returns the
// elements done: it stops before a block with a NaN or infinite value or
// a relative error above st.maxRel.
//
//go:noescape
func measureAVX(x, y []float32, s float64, st *measureState) int

func toOddVec(dst, x []float32, s float64) int {
	if !hasAVX || len(x) < 4 {
		return 0
	}
	return toOddAVX(dst, x, s, 1/s)
}

func measureVec(x, y []float32, s float64, a *Acc) int {
	if !hasAVX || len(x) < 4 {
		measureGo(x, y, s, a)
		return len(x)
	}
	st := measureState{maxRel: a.MaxRel}
	n := measureAVX(x, y, s, &st)
	for i := range 4 {
		a.SumSqErr += st.sse[i]
		a.SumSq += st.ss[i]
		a.MaxAbs = max(a.MaxAbs, st.maxAbs[i])
	}
	if n < len(x) && len(x)-n < 4 {
		measureGo(x[n:], y[n:], s, a) // the tail
		return len(x)
	}
	return n
}

// absMaxAVX returns the largest finite magnitude of whole blocks of 8 from
// the start, and the elements done.
//
//go:noescape
func absMaxAVX(x []float32) (float32, int)

func absMaxVec(x []float32) (float32, int) {
	if !hasAVX || len(x) < 8 {
		return 0, 0
	}
	return absMaxAVX(x)
}
