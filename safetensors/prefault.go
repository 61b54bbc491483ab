package safetensors

import "github.com/ckpt-go/ckpt/internal/pagecache"

// prefaultMin is the smallest output that prefault maps ahead: below it,
// the calls cost more than the few page faults they save.
const prefaultMin = 64 << 10

// prefault maps the pages of b, a new output that the caller is about to
// overwrite whole, in one call instead of a page fault every 4 KiB, when
// its memory is fresh from the system (a new process's heap, or pages the
// runtime gave back): its last page is not resident. Memory already in use
// is left alone (walking it again costs more than nothing).
func prefault(b []byte) {
	if len(b) >= prefaultMin && !pagecache.LastPageResident(b) {
		pagecache.Populate(b, true)
	}
}
