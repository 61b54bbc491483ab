package safetensors

import "slices"

// ChecksumRuns holds the CRC-32Cs of runs of one byte sequence read in
// pieces, in any order and by several readers: a run that meets another
// merges with it (CombineChecksums), so that once the runs cover a range
// it is one run whose CRC is the range's. The zero value is empty; it is
// not safe for concurrent use (its users hold a lock).
type ChecksumRuns struct {
	runs []checksumRun // sorted, disjoint, neighbours merged
}

type checksumRun struct {
	off, end int64
	crc      uint32
}

// Gaps appends to out the parts of [off, end) that no run covers, in
// order, as [begin, end) pairs: what a reader still has to sum.
func (r *ChecksumRuns) Gaps(off, end int64, out [][2]int64) [][2]int64 {
	for _, c := range r.runs {
		if c.end <= off {
			continue
		}
		if c.off >= end {
			break
		}
		if off < c.off {
			out = append(out, [2]int64{off, c.off})
		}
		off = max(off, c.end)
	}
	if off < end {
		out = append(out, [2]int64{off, end})
	}
	return out
}

// Add records crc as the CRC-32C of the bytes [off, end), merging the run
// with the runs it meets. It records nothing and reports false when a run
// already covers any of those bytes (another reader summed them first).
func (r *ChecksumRuns) Add(off, end int64, crc uint32) bool {
	i, _ := slices.BinarySearchFunc(r.runs, off, func(c checksumRun, off int64) int {
		if c.off < off {
			return -1
		}
		return 1
	})
	if (i > 0 && r.runs[i-1].end > off) || (i < len(r.runs) && r.runs[i].off < end) {
		return false
	}
	n := checksumRun{off: off, end: end, crc: crc}
	if i < len(r.runs) && r.runs[i].off == n.end {
		next := r.runs[i]
		n.crc = CombineChecksums(n.crc, next.crc, next.end-next.off)
		n.end = next.end
		r.runs = slices.Delete(r.runs, i, i+1)
	}
	if i > 0 && r.runs[i-1].end == n.off {
		prev := &r.runs[i-1]
		prev.crc = CombineChecksums(prev.crc, n.crc, n.end-n.off)
		prev.end = n.end
		return true
	}
	r.runs = slices.Insert(r.runs, i, n)
	return true
}

// Whole returns the CRC-32C of [off, end) when one run covers exactly
// those bytes.
func (r *ChecksumRuns) Whole(off, end int64) (uint32, bool) {
	if len(r.runs) == 1 && r.runs[0].off == off && r.runs[0].end == end {
		return r.runs[0].crc, true
	}
	return 0, false
}

// Reset forgets every run.
func (r *ChecksumRuns) Reset() { r.runs = r.runs[:0] }
