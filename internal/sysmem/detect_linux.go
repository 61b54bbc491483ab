//go:build linux

package sysmem

// Detect reads /proc/meminfo, /proc/self/cgroup and /sys/fs/cgroup of this
// machine: DetectFrom("/proc", "/sys/fs/cgroup"). See DetectFrom for what is
// read and how the figure is chosen.
func Detect() (Available, error) {
	return DetectFrom("/proc", "/sys/fs/cgroup")
}
