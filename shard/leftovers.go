package shard

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ckpt-go/ckpt/internal/atomicfile"
	"github.com/ckpt-go/ckpt/internal/setname"
)

// Kinds of Leftover.
const (
	// LeftoverTemporary is a hidden ".NAME.tmp-DIGITS" file of a save that
	// never finished.
	LeftoverTemporary = "temporary"
	// LeftoverBackup is a hidden ".NAME.old-TOKEN" backup that earlier
	// versions of Write made while switching sets.
	LeftoverBackup = "backup"
	// LeftoverLock is the ".PREFIX[.V].safetensors.lock" file of a killed
	// save (no live process holds it).
	LeftoverLock = "lock"
	// LeftoverUnreferenced is a shard that no index of its set names.
	LeftoverUnreferenced = "unreferenced"
	// LeftoverShadowed is an index next to a single file of the same set:
	// readers that prefer single files load one, the others the other.
	LeftoverShadowed = "shadowed"
)

// Leftover is a file that an interrupted save seems to have left in a
// folder. Nothing loads it, but it takes space, and a shadowed index means
// that readers disagree on which set to load.
type Leftover struct {
	// Name is the file's name in the folder.
	Name string `json:"name"`
	// Set is the set the file belongs to, named by its single-file name
	// PREFIX[.V].safetensors (for a temporary file of another file, that
	// file's name).
	Set string `json:"set"`
	// Kind is one of the Leftover* constants.
	Kind string `json:"kind"`
	// Reason says why the file is a leftover.
	Reason string `json:"reason"`
}

// Leftovers lists the files that interrupted saves left: in the folder
// path, for every set in it, or, when path is a file (a single file, a
// shard or an index), in its folder for that file's set. Files of a set
// whose lock a live save holds are not reported: they are that save's.
// The next Write of a set removes its leftovers; Leftovers changes nothing.
func Leftovers(path string) ([]Leftover, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	dir, only := path, ""
	if !st.IsDir() {
		dir, only = filepath.Dir(path), filepath.Base(path)
		if s, ok := setname.Parse(only); ok {
			only = s.Target()
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	type set struct {
		single  string
		indexes []string
		shards  []string
		swapped map[string]bool // shards under a swap name
	}
	sets := map[string]*set{}
	var out []Leftover
	live := map[string]bool{}
	held := func(target string) bool {
		v, ok := live[target]
		if !ok {
			v = atomicfile.Held(dir, target)
			live[target] = v
		}
		return v
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		name := e.Name()
		if target, ok := atomicfile.TempTarget(name); ok && strings.HasSuffix(target, ".safetensors") {
			// The temporary of a file that is not of any set (written by
			// safetensors.Save under another name).
			if _, isSet := setname.ParseVisible(target); !isSet {
				if (only == "" || only == target) && !held(target) {
					out = append(out, Leftover{name, target, LeftoverTemporary, "temporary file of a save of " + target + " that did not finish"})
				}
				continue
			}
		}
		s, ok := setname.Parse(name)
		if !ok {
			continue
		}
		key := s.Target()
		if only != "" && key != only {
			continue
		}
		switch s.Role {
		case setname.Temp:
			if !held(key) {
				out = append(out, Leftover{name, key, LeftoverTemporary, "temporary file of a save that did not finish"})
			}
			continue
		case setname.Backup:
			if !held(key) {
				out = append(out, Leftover{name, key, LeftoverBackup, "backup of a previous set, left by a save that did not finish"})
			}
			continue
		case setname.Lock:
			if !held(key) {
				out = append(out, Leftover{name, key, LeftoverLock, "lock file of a save that did not finish"})
			}
			continue
		}
		st := sets[key]
		if st == nil {
			st = &set{}
			sets[key] = st
		}
		switch {
		case s.Role == setname.Single:
			st.single = name
		case s.IsIndex():
			st.indexes = append(st.indexes, name)
		default:
			st.shards = append(st.shards, name)
			if s.Role == setname.SwapShard {
				if st.swapped == nil {
					st.swapped = map[string]bool{}
				}
				st.swapped[name] = true
			}
		}
	}
	for key, st := range sets {
		if held(key) {
			continue
		}
		if st.single != "" {
			for _, ix := range st.indexes {
				out = append(out, Leftover{ix, key, LeftoverShadowed,
					fmt.Sprintf("%s exists too: readers that prefer single files load it, others load this index (a save between the two was interrupted)", st.single)})
			}
		}
		referenced := map[string]bool{}
		readable := true
		for _, ix := range st.indexes {
			idx, err := ReadIndex(filepath.Join(dir, ix))
			if err != nil {
				readable = false // an invalid index is reported as such, not its shards
				break
			}
			for _, s := range idx.Shards() {
				referenced[s] = true
			}
		}
		if !readable {
			continue
		}
		for _, sh := range st.shards {
			if referenced[sh] {
				continue
			}
			reason := "no index of its set names it"
			switch {
			case len(st.indexes) == 0 && st.single != "":
				reason = "its set has no index, only the single file " + st.single
			case len(st.indexes) == 0:
				reason = "its set has no index and no single file"
			}
			if st.swapped[sh] {
				reason += "; a swap-named shard of a save that did not finish"
			}
			out = append(out, Leftover{sh, key, LeftoverUnreferenced, reason})
		}
	}
	slices.SortFunc(out, func(a, b Leftover) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
