package testutil

import (
	"testing"
	"time"
)

// Turns times runs alternatives of one operation taking turns in each of
// b.N iterations — which goes first rotates, so that all of them see the
// same machine — after one untimed warm run of each (it = -1), and
// reports the first alternative's ns/op and MB/s (n bytes a run). setup,
// when not nil, runs before each run of alternative i, untimed (dropping
// the page cache, say). It returns each alternative's total time, for
// the ratios the caller reports (Ratio).
func Turns(b *testing.B, n int64, runs int, setup func(i int), run func(i, it int)) []time.Duration {
	b.Helper()
	for i := range runs {
		if setup != nil {
			setup(i)
		}
		run(i, -1)
	}
	took := make([]time.Duration, runs)
	b.ResetTimer()
	for it := range b.N {
		for k := range runs {
			i := (it + k) % runs
			if setup != nil {
				setup(i)
			}
			start := time.Now()
			run(i, it)
			took[i] += time.Since(start)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(took[0].Nanoseconds())/float64(b.N), "ns/op")
	b.ReportMetric(float64(n)*float64(b.N)/took[0].Seconds()/1e6, "MB/s")
	return took
}

// Ratio reports the time of alternative i over that of alternative j
// (Turns' totals) as the metric unit.
func Ratio(b *testing.B, took []time.Duration, i, j int, unit string) {
	b.ReportMetric(float64(took[i])/float64(took[j]), unit)
}
