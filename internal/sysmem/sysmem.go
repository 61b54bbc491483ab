// Package sysmem tells the loader how much memory this process can really
// allocate and what kind of file system holds a checkpoint.
//
// Memory: Detect reads MemAvailable from /proc/meminfo and the memory limit
// of this process's cgroup (v2 or v1), and takes the smaller, so that a
// container's limit is honoured: a plan that says "fits" must not end in the
// OOM killer. The figure is the default budget of a load.
//
// File system: FileSystem reports the statfs type of a path and whether it is
// a network (or user-space) file system, where mmap page faults are 10–50×
// slower than large sequential reads, so the loader reads there with pread in
// large chunks instead of mmap.
//
// Sizes given by users ("24GiB", "24GB") are parsed by shard.ParseSize;
// FormatSize writes them back in binary units.
package sysmem

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Available is the memory this process can still allocate, and where the
// figure comes from.
//
// A value of -1 in any field means unknown. Bytes is -1 only when neither
// MemAvailable nor a cgroup limit is known (on a system other than Linux, for
// example); callers then treat the budget as unlimited and should say so.
// Bytes may be 0: the cgroup is full.
type Available struct {
	// Bytes is the smaller of MemAvailable and CgroupLimit (the known ones):
	// the default budget of a load. -1 when both are unknown.
	Bytes int64
	// Source says in human words where Bytes comes from, for the plan: e.g.
	// "MemAvailable 21.3 GiB" or "cgroup v2 /job memory.max 8.0 GiB −
	// memory.current 1.2 GiB = 6.8 GiB (MemAvailable 21.3 GiB)". Values that
	// were ignored because they were corrupt are listed at its end.
	Source string
	// MemAvailable is the kernel's estimate of the memory available for new
	// allocations without swapping (page cache it can drop included), from
	// /proc/meminfo; -1 when unknown.
	MemAvailable int64
	// MemTotal is the machine's memory from /proc/meminfo; -1 when unknown.
	MemTotal int64
	// CgroupLimit is the headroom of the tightest cgroup on this process's
	// path: its limit minus its usage, never below 0; -1 when no level has a
	// limit ("max", unlimited, or no cgroup at all).
	CgroupLimit int64
}

// Error reports a file that exists but could not be read (permission
// denied, an I/O error). Missing files are not errors. It wraps the
// underlying error, so errors.Is(err, fs.ErrPermission) works.
type Error struct {
	Path string // the file
	Err  error  // why it could not be read
}

// Error returns "sysmem: read PATH: ERR".
func (e *Error) Error() string { return "sysmem: read " + e.Path + ": " + e.Err.Error() }

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// maxFile bounds what is read of one /proc or cgroup file: the real ones are
// a few KiB, and a fake or hostile root must not make us allocate more.
const maxFile = 1 << 20

// v1Unlimited: a cgroup v1 limit at or above this (1 EiB) means "no limit".
// The kernel writes PAGE_COUNTER_MAX pages, 9223372036854771712 with 4 KiB
// pages and other values near MaxInt64 with other page sizes.
const v1Unlimited = 1 << 60

// DetectFrom is Detect with the files read under other roots, for tests and
// for tools that inspect another mount: procRoot holds meminfo and
// self/cgroup (like /proc), cgroupRoot is the cgroup mount (like
// /sys/fs/cgroup): the unified v2 hierarchy, or v1 with a memory/ folder for
// the memory controller.
//
// The cgroup is found from self/cgroup: the memory controller's line
// ("N:memory:/path", or memory among other controllers) when cgroupRoot has a
// memory/ folder and no cgroup.controllers file (v1, including the hybrid
// layout with v2 at unified/), else the unified line ("0::/path", v2). From that folder up to the mount root, every level with
// a numeric limit counts; the tightest headroom wins. A path that does not
// exist under the mount (a container without a cgroup namespace sees its host
// path but has its own cgroup mounted at the root) is walked up the same way,
// so the container's limits at the mount root still count. Without
// self/cgroup the mount root alone is read.
//
// v2: a level's limit is the smaller of memory.max and memory.high. Above
// memory.high the kernel does not OOM-kill but throttles the cgroup and
// reclaims hard, so a load sized past it would crawl; it is treated as a
// limit. v1: memory.limit_in_bytes, where values of 1 EiB and more
// (9223372036854771712) mean unlimited.
//
// Usage is memory.current (v2) or memory.usage_in_bytes (v1), less the
// inactive page cache of memory.stat (inactive_file, or v1's
// total_inactive_file) that the kernel drops before it OOM-kills: the same
// "working set" the kubelet evicts on. MemAvailable counts droppable cache as
// available too, so the two figures agree. A level whose usage is unknown
// counts its whole limit.
//
// Missing files and folders are not errors: what is known is used. A corrupt
// number is ignored and named in Source. The error is non-nil (an *Error)
// only when a file exists but cannot be read; the Available returned with it
// is still built from the other files, so a caller may use it and report the
// error.
func DetectFrom(procRoot, cgroupRoot string) (Available, error) {
	d := detector{}
	a := Available{Bytes: -1, MemAvailable: -1, MemTotal: -1, CgroupLimit: -1}

	a.MemAvailable, a.MemTotal = d.meminfo(filepath.Join(procRoot, "meminfo"))
	lvl := d.cgroup(filepath.Join(procRoot, "self", "cgroup"), cgroupRoot)
	if lvl != nil {
		a.CgroupLimit = lvl.headroom
	}

	mem := "MemAvailable " + FormatSize(a.MemAvailable)
	switch {
	case lvl != nil && (a.MemAvailable < 0 || lvl.headroom < a.MemAvailable):
		a.Bytes = lvl.headroom
		a.Source = lvl.describe()
		if a.MemAvailable >= 0 {
			a.Source += " (" + mem + ")"
		}
	case a.MemAvailable >= 0:
		a.Bytes = a.MemAvailable
		a.Source = mem
		if lvl != nil {
			a.Source += " (" + lvl.describe() + ")"
		}
	default:
		a.Source = "unknown: no MemAvailable in " + filepath.Join(procRoot, "meminfo") + " and no cgroup memory limit"
	}
	if len(d.ignored) > 0 {
		a.Source += "; ignored " + strings.Join(d.ignored, ", ")
	}
	return a, d.err
}

// detector gathers the first read error and the ignored values of one
// DetectFrom call.
type detector struct {
	err     error
	ignored []string
}

// read returns the contents of path, or ok=false when it does not exist or
// cannot be read (the latter is recorded as the call's error). A path that
// cannot exist (a file as a folder, a name longer than the system allows:
// /proc/self/cgroup is read as hostile) counts as missing.
func (d *detector) read(path string) (string, bool) {
	f, err := os.Open(path)
	if err == nil {
		var b []byte
		b, err = io.ReadAll(io.LimitReader(f, maxFile))
		f.Close()
		if err == nil {
			return string(b), true
		}
	}
	if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) && !errors.Is(err, syscall.ENAMETOOLONG) && d.err == nil {
		d.err = &Error{Path: path, Err: err}
	}
	return "", false
}

// number parses a non-negative decimal count read from path; a corrupt one
// is recorded as ignored.
func (d *detector) number(path, s string) (int64, bool) {
	s = strings.TrimSpace(s)
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		d.ignore(path, s)
		return 0, false
	}
	if n > math.MaxInt64 {
		n = math.MaxInt64
	}
	return int64(n), true
}

// ignore records a corrupt value, quoted and cut to a readable length.
func (d *detector) ignore(path, value string) {
	if len(value) > 40 {
		value = value[:40] + "…"
	}
	d.ignored = append(d.ignored, fmt.Sprintf("%s %q", path, value))
}

// meminfo returns MemAvailable and MemTotal of a meminfo file in bytes
// (-1 for each one unknown or corrupt).
func (d *detector) meminfo(path string) (avail, total int64) {
	avail, total = -1, -1
	s, ok := d.read(path)
	if !ok {
		return avail, total
	}
	for _, line := range strings.Split(s, "\n") {
		field, rest, found := strings.Cut(line, ":")
		if !found || field != "MemAvailable" && field != "MemTotal" {
			continue
		}
		num, unit, _ := strings.Cut(strings.TrimSpace(rest), " ")
		n, err := strconv.ParseInt(num, 10, 64)
		mult := int64(1)
		if strings.TrimSpace(unit) == "kB" {
			mult = 1024
		} else if strings.TrimSpace(unit) != "" {
			err = errors.New("unit")
		}
		if err != nil || n < 0 || n > math.MaxInt64/mult {
			d.ignore(path+" "+field, strings.TrimSpace(rest))
			continue
		}
		if field == "MemAvailable" {
			avail = n * mult
		} else {
			total = n * mult
		}
	}
	return avail, total
}

// level is the headroom of one cgroup folder with a limit.
type level struct {
	version   int    // 1 or 2
	path      string // the cgroup path, "/a/b"
	limitName string // "memory.max", "memory.high" or "memory.limit_in_bytes"
	usageName string // "memory.current" or "memory.usage_in_bytes"; "" when unknown
	limit     int64
	usage     int64 // -1 when unknown
	inactive  int64 // reclaimable page cache subtracted from usage; 0 if none
	headroom  int64 // limit − (usage − inactive), at least 0
}

// describe writes the level for Source, e.g. "cgroup v2 /job memory.max
// 8.0 GiB − memory.current 1.2 GiB = 6.8 GiB".
func (l *level) describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "cgroup v%d %s %s %s", l.version, l.path, l.limitName, FormatSize(l.limit))
	if l.usage < 0 {
		b.WriteString(" (usage unknown)")
		return b.String()
	}
	fmt.Fprintf(&b, " − %s %s", l.usageName, FormatSize(l.usage))
	if l.inactive > 0 {
		fmt.Fprintf(&b, " + inactive_file %s", FormatSize(l.inactive))
	}
	fmt.Fprintf(&b, " = %s", FormatSize(l.headroom))
	return b.String()
}

// cgroup finds this process's cgroup from the self/cgroup file and returns
// its tightest level, or nil when no level has a limit.
func (d *detector) cgroup(selfPath, root string) *level {
	v1Path, v2Path := "/", "/"
	v1Found, v2Found := false, false
	if s, ok := d.read(selfPath); ok {
		for _, line := range strings.Split(s, "\n") {
			id, rest, ok1 := strings.Cut(strings.TrimSpace(line), ":")
			ctrls, path, ok2 := strings.Cut(rest, ":")
			// A path with a NUL byte cannot name a file (the kernel never
			// writes one): ignore the line like any other malformed one.
			if !ok1 || !ok2 || !strings.HasPrefix(path, "/") || strings.ContainsRune(path, 0) {
				continue
			}
			if id == "0" && ctrls == "" {
				v2Path, v2Found = path, true
			}
			for _, c := range strings.Split(ctrls, ",") {
				if c == "memory" {
					v1Path, v1Found = path, true
				}
			}
		}
		if !v1Found && !v2Found {
			return nil // a cgroup file that names no memory cgroup
		}
	} else {
		v1Found, v2Found = true, true // no self/cgroup: read the mount root
	}
	if v1Found && isV1(root) {
		return d.walk(1, filepath.Join(root, "memory"), v1Path)
	}
	if v2Found {
		return d.walk(2, root, v2Path)
	}
	return nil
}

// isV1 reports whether root is a cgroup v1 mount with the memory
// controller: a memory/ folder, and no cgroup.controllers file (which marks
// the unified v2 hierarchy, where "memory" would be a child cgroup's name).
func isV1(root string) bool {
	st, err := os.Stat(filepath.Join(root, "memory"))
	if err != nil || !st.IsDir() {
		return false
	}
	_, err = os.Stat(filepath.Join(root, "cgroup.controllers"))
	return errors.Is(err, fs.ErrNotExist)
}

// walk reads every level from root+cgPath up to root and returns the one
// with the least headroom, or nil when none has a limit.
func (d *detector) walk(version int, root, cgPath string) *level {
	// Clean as an absolute path first, so that ".." cannot climb above root.
	cgPath = filepath.ToSlash(filepath.Clean("/" + cgPath))
	var best *level
	for {
		if l := d.level(version, root, cgPath); l != nil && (best == nil || l.headroom < best.headroom) {
			best = l
		}
		if cgPath == "/" {
			return best
		}
		cgPath = filepath.ToSlash(filepath.Dir(cgPath))
	}
}

// level reads one cgroup folder; nil when it has no numeric limit.
func (d *detector) level(version int, root, cgPath string) *level {
	dir := filepath.Join(root, filepath.FromSlash(cgPath))
	l := &level{version: version, path: cgPath, usage: -1}
	limit := func(name string) {
		p := filepath.Join(dir, name)
		s, ok := d.read(p)
		if !ok || strings.TrimSpace(s) == "max" {
			return
		}
		n, ok := d.number(p, s)
		if !ok || (version == 1 && n >= v1Unlimited) {
			return
		}
		if l.limitName == "" || n < l.limit {
			l.limitName, l.limit = name, n
		}
	}
	usageName, statKey := "memory.current", "inactive_file"
	if version == 1 {
		limit("memory.limit_in_bytes")
		usageName, statKey = "memory.usage_in_bytes", "total_inactive_file"
	} else {
		limit("memory.max")
		limit("memory.high")
	}
	if l.limitName == "" {
		return nil
	}
	p := filepath.Join(dir, usageName)
	if s, ok := d.read(p); ok {
		if n, ok := d.number(p, s); ok {
			l.usage, l.usageName = n, usageName
		}
	}
	used := max(l.usage, 0)
	if l.usage > 0 {
		l.inactive = d.stat(filepath.Join(dir, "memory.stat"), statKey, "inactive_file")
		if l.inactive > l.usage {
			l.inactive = 0 // inconsistent: trust the usage alone
		}
		used -= l.inactive
	}
	l.headroom = max(l.limit-used, 0)
	return l
}

// stat returns the first of keys found in a memory.stat file, or 0.
func (d *detector) stat(path string, keys ...string) int64 {
	s, ok := d.read(path)
	if !ok {
		return 0
	}
	vals := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(line, " "); ok {
			vals[k] = v
		}
	}
	for _, k := range keys {
		if v, ok := vals[k]; ok {
			if n, ok := d.number(path+" "+k, v); ok {
				return n
			}
			return 0
		}
	}
	return 0
}

// FormatSize writes a byte count in binary units with one decimal ("21.3
// GiB", "512 B"), the form of Available.Source; "unknown" when n < 0. It
// is for people: the rounded figure is not meant to be parsed back.
func FormatSize(n int64) string {
	if n < 0 {
		return "unknown"
	}
	if n < 1024 {
		return strconv.FormatInt(n, 10) + " B"
	}
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	v := float64(n) / 1024
	i := 0
	for v >= 1023.95 && i < len(units)-1 {
		v /= 1024
		i++
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + " " + units[i]
}
