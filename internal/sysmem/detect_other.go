//go:build !linux

package sysmem

// Detect knows no memory figure outside Linux: it returns Bytes,
// MemAvailable and CgroupLimit -1 (unknown) and a nil error. Callers treat
// an unknown budget as no limit and say so in their plan.
func Detect() (Available, error) {
	return Available{
		Bytes:        -1,
		Source:       "unknown: memory detection needs Linux (/proc/meminfo, cgroups)",
		MemAvailable: -1,
		MemTotal:     -1,
		CgroupLimit:  -1,
	}, nil
}
