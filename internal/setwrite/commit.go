package setwrite

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/ckpt-go/ckpt/internal/setname"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/sink"
)

// Set is a shard set to write through a sink.Sink (Commit).
type Set struct {
	Sink            sink.Sink
	Dir             string // the set's folder in the sink ("." or "" for its root)
	Prefix, Variant string
	Specs           []safetensors.TensorSpec
	// Write streams a tensor's bytes into w.
	Write    func(s safetensors.TensorSpec, w io.Writer) error
	Metadata map[string]string
	Opts     []safetensors.WriteOption
	// MaxShard packs the tensors by size (Pack); ShardOf, when set,
	// places each in its shard instead (Assign).
	MaxShard int64
	ShardOf  func(name string) int
	// Replace lets the set replace one of the same prefix and variant in
	// the folder; without it such a folder is refused (StageExists).
	Replace bool
	// Locked says that the caller holds the set's lock (a folder's
	// ".PREFIX[.V].safetensors.lock"): no other writer of the set runs, so
	// the hidden files of the set (temporaries, backups) are leftovers of
	// killed writers, which Commit removes.
	Locked bool
	// Order, when set, is called once, before anything is written, with
	// the order in which the tensors' data will be asked for.
	Order func([]safetensors.TensorSpec)
	// At, when set, is called at steps of the commit ("shard" after each
	// shard, "indexed" after the switch), for tests.
	At func(step string)
}

// Result describes a committed set.
type Result struct {
	Files     []string          // the safetensors files, in shard order, relative to the set's folder
	Index     string            // the index file, "" for a single file
	WeightMap map[string]string // tensor -> its file
	Total     int64             // bytes of tensor data

	// Replaced are the files of the previous set (in any naming) that the
	// new one replaced or removed; Leftovers the hidden files of killed
	// writers removed; Warnings the cleanup that failed after the switch.
	Replaced, Leftovers, Warnings []string
}

// Stage is where Commit failed.
type Stage int

const (
	// StageSpec: a tensor's dtype and shape give no size, or the
	// metadata claims a checksum for a tensor not written; nothing was
	// done.
	StageSpec Stage = iota
	// StageList: the folder could not be listed; nothing was written.
	StageList
	// StageExists: the folder holds files of the set and Replace is not
	// set; nothing was written.
	StageExists
	// StageWrite: a new file could not be written (its data, or the
	// sink's writes); the new files were removed.
	StageWrite
	// StageCommit: a new file could not be put in place (its Close, the
	// index); the new files were removed and the previous set is
	// untouched.
	StageCommit
	// StageSwitch: the switch failed or was partial: the previous set's
	// entry point that shadows the new one could not be removed, or the
	// new entry point is in place but not durably. Unless InPlace, the
	// new files were removed and the previous set is untouched.
	StageSwitch
)

// Error is a failure of Commit. A failure of a conditional or exclusive
// write (another writer wrote or replaced the file meanwhile) matches
// fs.ErrExist.
type Error struct {
	Stage Stage
	Name  string   // the file concerned, relative to the set's folder ("" for the folder)
	Files []string // StageExists: the set's files found
	// InPlace reports a StageSwitch failure after the switch: the new
	// set is in place for some readers (Msg says which).
	InPlace bool
	Msg     string
	Err     error
}

func (e *Error) Error() string {
	s := e.Name
	if e.Msg != "" {
		s = strings.TrimPrefix(s+": "+e.Msg, ": ")
	}
	if e.Err != nil {
		s = strings.TrimPrefix(s+": "+e.Err.Error(), ": ")
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// Commit writes a shard set through a sink so that no reader ever sees
// part of it, whatever instant the writer is killed at: a reader that
// follows the index and one that prefers the single file each load the
// complete previous set or the complete new one.
//
//  1. The tensors are planned into files (Pack or Assign); the folder's
//     files of the set in any naming are listed (a set there without
//     Replace is refused). Under the lock, hidden temporaries of killed
//     writers are removed.
//  2. The shards are written, each made visible whole by its Close, under
//     names that no file has and no reader follows yet: their standard
//     names PREFIX[.V]-00001-of-0000N.safetensors when none of these
//     exists (and, without the lock, no file of the set exists: two
//     writers replacing a set at once never race for a shard's name),
//     else swap names PREFIX[.V]-00001-of-0000N.swap-TOKEN.safetensors.
//     Standard names are created exclusively.
//  3. The entry point, the index naming exactly these files (or the
//     single file, for a set of one shard), is written in one step: the
//     switch for the readers that follow it. It is created exclusively
//     where the folder had none, else, on a sink.Conditional, replacing
//     only the version seen before the shards were written: of two
//     writers at once, the second fails (an error matching fs.ErrExist),
//     its new files removed.
//  4. The previous set's other entry point (its single file when the new
//     set has an index, its index otherwise) is removed: the switch for
//     the readers that prefer it. If that fails and the new entry point
//     replaced no file, the new files are removed again (the previous set
//     is untouched); otherwise the error says which readers load which
//     set.
//  5. The rest of the previous set is removed: indexes, then shards
//     (those of an index that could not be removed are kept), then hidden
//     leftovers (under the lock). Failures are warnings.
//  6. On a sink.Linker (a folder), a set written under swap names moves to
//     its standard names: hard links, a second index switch, and the
//     removal of the swap names; where that fails the set keeps its swap
//     names, with a warning.
//
// On any failure before the switch, or cancellation, the file being
// written is aborted and the new files are removed: the previous set is
// untouched. A kill leaves files that no reader follows (shards without
// an index, or a previous entry point that shadows the new one for some
// readers), which the next Commit of the set removes.
func Commit(ctx context.Context, s *Set) (*Result, error) {
	c := &commit{Set: s, res: &Result{WeightMap: make(map[string]string, len(s.Specs))}}
	groups, err := c.plan()
	if err != nil {
		return nil, err
	}
	if err := c.list(); err != nil {
		return nil, err
	}
	n := len(groups)
	std := make([]string, n)
	for i := range groups {
		std[i] = setname.SingleName(s.Prefix, s.Variant)
		if n > 1 {
			std[i] = setname.ShardName(s.Prefix, s.Variant, i+1, n)
		}
	}
	if n > 1 {
		c.res.Index = setname.IndexName(s.Prefix, s.Variant)
	}
	token := ""
	if n > 1 && (slices.ContainsFunc(std, c.has) || (!s.Locked && len(c.visible) > 0)) {
		if token, err = randomToken(); err != nil {
			return nil, &Error{Stage: StageWrite, Msg: "making a swap name", Err: err}
		}
	}
	for _, f := range std {
		if token != "" {
			f = setname.SwapName(f, token)
		}
		c.res.Files = append(c.res.Files, f)
	}
	entry, shadow := c.res.Index, setname.SingleName(s.Prefix, s.Variant)
	if n == 1 {
		entry, shadow = shadow, setname.IndexName(s.Prefix, s.Variant)
	}
	// The entry point is replaced last: exclusive where the folder had
	// none, else (on a sink.Conditional) only while it is still the
	// version seen now.
	entryExcl, entryVersion, err := replacing(ctx, s.Sink, c.name(entry), c.has(entry))
	if err != nil {
		return nil, &Error{Stage: StageList, Name: entry, Msg: "reading the version of the file to replace", Err: err}
	}

	for gi, g := range groups {
		name := c.res.Files[gi]
		excl, version := token == "", ""
		if n == 1 {
			excl, version = entryExcl, entryVersion
		}
		if err := c.writeShard(ctx, name, g, excl, version); err != nil {
			if n == 1 && errors.Is(err, sink.ErrNotDurable) {
				return nil, c.notDurable(name, err)
			}
			return nil, c.fail(err)
		}
		if n > 1 || entryExcl { // a file that replaced one is not undone
			c.placed = append(c.placed, name)
		}
		for _, sp := range g {
			c.res.WeightMap[sp.Name] = name
		}
		c.at("shard")
	}
	if n == 1 {
		// The single file is the entry point: durable before the
		// previous set's files go.
		if err := c.barrier(ctx); err != nil {
			return nil, c.notDurable(c.res.Files[0], err)
		}
	} else if n > 1 {
		if err := ctx.Err(); err != nil {
			return nil, c.fail(&Error{Stage: StageWrite, Msg: "canceled", Err: err})
		}
		// The shards are durable before an index that names them.
		if err := c.barrier(ctx); err != nil {
			return nil, c.fail(&Error{Stage: StageWrite, Msg: "making the shards durable", Err: err})
		}
		if err := c.writeIndex(ctx, c.res.WeightMap, entryExcl, entryVersion); err != nil {
			if errors.Is(err, sink.ErrNotDurable) {
				return nil, c.notDurable(entry, err)
			}
			return nil, c.fail(&Error{Stage: StageCommit, Name: entry, Msg: "writing the index", Err: err})
		}
		if entryExcl {
			c.placed = append(c.placed, entry)
		}
		// The index is durable before the previous set's files go.
		if err := c.barrier(ctx); err != nil {
			return nil, c.notDurable(entry, err)
		}
	}
	c.at("indexed")
	ctx = context.WithoutCancel(ctx) // the switch is done: the cleanup finishes
	if err := c.switchOut(ctx, shadow, entry, !entryExcl); err != nil {
		return nil, err
	}
	keep := map[string]bool{entry: true}
	for _, f := range c.res.Files {
		keep[f] = true
	}
	c.removePrevious(ctx, keep)
	if token != "" {
		c.unswap(ctx, std)
	}
	if err := c.barrier(ctx); err != nil {
		c.warn("the removals of the previous set's files may not be durable: %v", err)
	}
	return c.res, nil
}

// barrier makes the sink's changes so far durable before the ones that
// must follow them (a sink.Syncer's Sync; other sinks' changes are
// durable when they return): one folder fsync for many renames, links and
// removals.
func (c *commit) barrier(ctx context.Context) error {
	if s, ok := c.Sink.(sink.Syncer); ok {
		return s.Sync(ctx)
	}
	return nil
}

// commit is the state of one Commit.
type commit struct {
	*Set
	res     *Result
	visible []file   // the set's files in the folder before the write
	hidden  []file   // its hidden files (temporaries, backups), under the lock
	placed  []string // new files in place before the switch, removed on failure
}

// file is a file of the set in the folder.
type file struct {
	Name string
	setname.File
}

func (c *commit) name(n string) string {
	if c.Dir == "" || c.Dir == "." {
		return n
	}
	return path.Join(c.Dir, n)
}

func (c *commit) has(n string) bool {
	return slices.ContainsFunc(c.visible, func(f file) bool { return f.Name == n })
}

func (c *commit) at(step string) {
	if c.At != nil {
		c.At(step)
	}
}

func (c *commit) warn(format string, args ...any) {
	c.res.Warnings = append(c.res.Warnings, fmt.Sprintf(format, args...))
}

// plan checks the tensors and groups them into files.
func (c *commit) plan() ([][]safetensors.TensorSpec, error) {
	sizes := make([]int64, len(c.Specs))
	for i, sp := range c.Specs {
		n, err := sp.ByteLen()
		if err != nil {
			return nil, &Error{Stage: StageSpec, Name: sp.Name, Err: err}
		}
		sizes[i], c.res.Total = n, c.res.Total+n
	}
	if k := CheckClaims(c.Metadata, c.Specs); k != "" {
		return nil, &Error{Stage: StageSpec, Name: k, Msg: "the metadata names a checksum for a tensor that is not written"}
	}
	var groups [][]int
	if c.ShardOf != nil {
		shardOf := make([]int, len(c.Specs))
		for i, sp := range c.Specs {
			shardOf[i] = c.ShardOf(sp.Name)
		}
		groups = Assign(shardOf)
	} else {
		groups = Pack(sizes, c.MaxShard)
	}
	specs := Split(c.Specs, groups)
	if c.Order != nil {
		order, err := Order(specs, c.Metadata, c.Opts...)
		if err != nil {
			return nil, &Error{Stage: StageSpec, Err: err}
		}
		c.Order(order)
	}
	return specs, nil
}

// members lists the files of the set of prefix and variant in the folder
// dir of fsys, in any naming: visible ones, and hidden ones (temporaries
// and backups of writers; not the lock). A folder that does not exist
// holds none.
func members(fsys fs.FS, dir, prefix, variant string) (visible, hidden []file, err error) {
	if dir == "" {
		dir = "."
	}
	es, err := fs.ReadDir(fsys, dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, err
	}
	for _, e := range es {
		sf, ok := setname.Parse(e.Name())
		if !ok || e.IsDir() || sf.Prefix != prefix || sf.Variant != variant || sf.Role == setname.Lock {
			continue
		}
		if f := (file{e.Name(), sf}); !f.Hidden() {
			visible = append(visible, f)
		} else {
			hidden = append(hidden, f)
		}
	}
	return visible, hidden, nil
}

// Existing returns the names of the visible files of the set of prefix
// and variant in the folder dir of fsys, in any naming: what Commit
// without Replace refuses.
func Existing(fsys fs.FS, dir, prefix, variant string) ([]string, error) {
	visible, _, err := members(fsys, dir, prefix, variant)
	names := make([]string, len(visible))
	for i, f := range visible {
		names[i] = f.Name
	}
	return names, err
}

// list finds the set's files in the folder and, under the lock, removes
// the temporaries of killed writers.
func (c *commit) list() error {
	visible, hidden, err := members(c.Sink.FS(), c.Dir, c.Prefix, c.Variant)
	if err != nil {
		return &Error{Stage: StageList, Msg: "listing the folder", Err: err}
	}
	c.visible = visible
	if c.Locked {
		c.hidden = hidden
	}
	if len(c.visible) > 0 && !c.Replace {
		files := make([]string, len(c.visible))
		for i, f := range c.visible {
			files[i] = f.Name
		}
		return &Error{Stage: StageExists, Files: files, Msg: "the folder holds files of the set"}
	}
	c.hidden = slices.DeleteFunc(c.hidden, func(f file) bool {
		if f.Role != setname.Temp {
			return false
		}
		if err := c.Sink.Remove(context.Background(), c.name(f.Name)); err != nil {
			c.warn("could not remove %s, left by an earlier save: %v", f.Name, err)
		} else {
			c.res.Leftovers = append(c.res.Leftovers, f.Name)
		}
		return true
	})
	return nil
}

// replacing returns how a file that replaces name in one step is
// created (sink.CreateIf): exclusively where there is none (exists is
// false, or it is gone by now), else, on a sink.Conditional, replacing
// only the version it has now.
func replacing(ctx context.Context, s sink.Sink, name string, exists bool) (exclusive bool, version string, err error) {
	if !exists {
		return true, "", nil
	}
	version, gone, err := sink.SeenVersion(ctx, s, name)
	return gone, version, err
}

// WriteFile writes one safetensors file of specs as name in the folder
// dir of s, replacing a file of that name in one step: exclusively where
// there was none, else, on a sink.Conditional, only while it is the
// version seen before the write (another writer's file meanwhile fails
// it with an error matching fs.ErrExist). Its errors are *Error.
func WriteFile(ctx context.Context, s sink.Sink, dir, name string, specs []safetensors.TensorSpec, write func(safetensors.TensorSpec, io.Writer) error, metadata map[string]string, opts ...safetensors.WriteOption) error {
	c := &commit{Set: &Set{Sink: s, Dir: dir, Write: write, Metadata: metadata, Opts: opts}}
	_, err := fs.Stat(s.FS(), c.name(name))
	excl, version, err := replacing(ctx, s, c.name(name), err == nil)
	if err != nil {
		return &Error{Stage: StageList, Name: name, Msg: "reading the version of the file to replace", Err: err}
	}
	return c.writeShard(ctx, name, specs, excl, version)
}

// writeShard streams one file of the set. The errors of its Close are
// StageCommit (nothing of it is in place, or, matching sink.ErrNotDurable,
// all of it), the others StageWrite.
func (c *commit) writeShard(ctx context.Context, name string, specs []safetensors.TensorSpec, exclusive bool, version string) error {
	f, err := sink.CreateIf(ctx, c.Sink, c.name(name), exclusive, version)
	if err != nil {
		return &Error{Stage: StageWrite, Name: name, Err: err}
	}
	if err := Stream(ctx, f, specs, c.Write, c.Metadata, c.Opts...); err != nil {
		f.Abort()
		return &Error{Stage: StageWrite, Name: name, Err: err}
	}
	if err := f.Close(); err != nil {
		if !errors.Is(err, sink.ErrNotDurable) {
			f.Abort()
		}
		return &Error{Stage: StageCommit, Name: name, Err: err}
	}
	return nil
}

// writeIndex writes the index naming the files of weightMap.
func (c *commit) writeIndex(ctx context.Context, weightMap map[string]string, exclusive bool, version string) error {
	b, err := IndexJSON(c.res.Total, weightMap)
	if err == nil {
		_, err = sink.WriteFile(ctx, c.Sink, c.name(c.res.Index), b, exclusive, version)
	}
	return err
}

// fail undoes a commit that failed before its switch: the new files in
// place are removed (no reader follows them), the entry point first.
func (c *commit) fail(err error) error {
	var rerrs []error
	for _, n := range slices.Backward(c.placed) {
		if rerr := c.Sink.Remove(context.Background(), c.name(n)); rerr != nil {
			rerrs = append(rerrs, rerr)
		}
	}
	c.placed = nil
	if serr := c.barrier(context.Background()); serr != nil {
		rerrs = append(rerrs, serr)
	}
	e, ok := err.(*Error)
	if !ok {
		e = &Error{Stage: StageWrite, Err: err}
	}
	if e.Stage >= StageCommit {
		e.Msg = strings.TrimPrefix(e.Msg+"; the previous set is untouched", "; ")
	}
	if len(rerrs) > 0 {
		e.Msg = strings.TrimPrefix(e.Msg+"; some new files could not be removed", "; ")
		e.Err = errors.Join(append([]error{e.Err}, rerrs...)...)
	}
	return e
}

// notDurable is the error of a commit whose entry point is in place but
// not durable: readers see the new set, which a power loss may undo. The
// previous set's files are kept.
func (c *commit) notDurable(name string, err error) error {
	return &Error{Stage: StageSwitch, Name: name, InPlace: true, Err: err,
		Msg: "the new set is in place but not durably (a power loss may revert it); the previous set's files were kept"}
}

// switchOut removes the previous set's entry point that still shadows the
// new one for some readers; replaced says that the new entry point
// replaced a file of the previous set (which a rollback cannot restore).
func (c *commit) switchOut(ctx context.Context, shadow, entry string, replaced bool) error {
	if !c.has(shadow) {
		return nil
	}
	err := c.Sink.Remove(ctx, c.name(shadow))
	if err == nil {
		c.res.Replaced = append(c.res.Replaced, shadow)
		// Gone durably before the previous set's other files go: a
		// reader that prefers it must never find it without them.
		if serr := c.barrier(ctx); serr != nil {
			return c.notDurable(entry, serr)
		}
		return nil
	}
	if !replaced {
		return c.fail(&Error{Stage: StageSwitch, Name: shadow, Err: err,
			Msg: "removing it, which would shadow the new set, failed"})
	}
	return &Error{Stage: StageSwitch, Name: shadow, InPlace: true, Err: err,
		Msg: fmt.Sprintf("the new set is in place, but this file of the previous set could not be removed: readers that prefer it to the new %s still load the previous set", entry)}
}

// removePrevious removes the files of the previous set but keep: a single
// file first (it would shadow a new index for readers that prefer single
// files), then indexes, then shards, then hidden leftovers. Failures are
// warnings: the new set is committed, and the next Commit removes what is
// left.
func (c *commit) removePrevious(ctx context.Context, keep map[string]bool) {
	rank := func(f file) int {
		switch {
		case f.Role == setname.Single:
			return 0
		case f.IsIndex():
			return 1
		case f.IsShard():
			return 2
		}
		return 3
	}
	prev := append(slices.Clone(c.visible), c.hidden...)
	slices.SortStableFunc(prev, func(a, b file) int { return rank(a) - rank(b) })
	keepShards := false
	entryGone := false // a single file or index of the previous set removed, not yet durably
	for _, f := range prev {
		if f.IsShard() && entryGone {
			// The entry points that name the shards are gone durably
			// before any shard goes.
			if err := c.barrier(ctx); err != nil {
				c.warn("kept the previous shards: the removal of the files that name them may not be durable: %v", err)
				keepShards = true
			}
			entryGone = false
		}
		if keep[f.Name] {
			if !f.Hidden() {
				c.res.Replaced = append(c.res.Replaced, f.Name) // overwritten
			}
			continue
		}
		if slices.Contains(c.res.Replaced, f.Name) || (keepShards && f.IsShard()) {
			continue
		}
		if err := c.Sink.Remove(ctx, c.name(f.Name)); err != nil {
			c.warn("could not remove %s of the previous set: %v", c.Sink.Location(c.name(f.Name)), err)
			if f.IsIndex() {
				// Its shards stay, so that it stays loadable.
				keepShards = true
				c.warn("kept the previous shards, which %s may name", f.Name)
			}
			continue
		}
		if f.Hidden() {
			c.res.Leftovers = append(c.res.Leftovers, f.Name)
		} else {
			c.res.Replaced = append(c.res.Replaced, f.Name)
		}
		if f.Role == setname.Single || f.IsIndex() {
			entryGone = true
		}
	}
}

// unswap moves a set committed under swap names to its standard names
// std on a sink.Linker: links, a second index switch, and the removal of
// the swap names. Where that fails the set keeps its swap names.
func (c *commit) unswap(ctx context.Context, std []string) {
	l, ok := c.Sink.(sink.Linker)
	if !ok {
		return
	}
	var linked []string
	undo := func(err error) {
		for _, f := range linked {
			if rerr := c.Sink.Remove(ctx, c.name(f)); rerr != nil {
				c.warn("could not remove %s: %v", f, rerr)
			}
		}
		c.warn("the set keeps its swap names (%s, ...): %v", c.res.Files[0], err)
	}
	for i, f := range c.res.Files {
		if err := l.Link(ctx, c.name(f), c.name(std[i])); err != nil {
			undo(err)
			return
		}
		linked = append(linked, std[i])
	}
	// The standard names are durable before the index names them.
	if err := c.barrier(ctx); err != nil {
		undo(err)
		return
	}
	wm := make(map[string]string, len(c.res.WeightMap))
	for t, f := range c.res.WeightMap {
		wm[t] = std[slices.Index(c.res.Files, f)]
	}
	if err := c.writeIndex(ctx, wm, false, ""); err != nil && !errors.Is(err, sink.ErrNotDurable) {
		undo(err)
		return
	} else if err != nil {
		c.warn("%v", err)
	}
	// The index naming them is durable before the swap names go.
	if err := c.barrier(ctx); err != nil {
		c.warn("the set keeps its swap names too (%s, ...): %v", c.res.Files[0], err)
		c.res.Files, c.res.WeightMap = std, wm
		return
	}
	for _, f := range c.res.Files {
		if err := c.Sink.Remove(ctx, c.name(f)); err != nil {
			c.warn("could not remove %s: %v", f, err)
		}
	}
	c.res.Files, c.res.WeightMap = std, wm
}

func randomToken() (string, error) {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}
