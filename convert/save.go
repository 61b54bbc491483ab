package convert

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ckpt-go/ckpt/internal/atomicfile"
	"github.com/ckpt-go/ckpt/internal/safeopen"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/shard"
)

// IfRunning says what Save does when a save of the same folder is still
// running in this process.
type IfRunning int

const (
	// WaitForPrevious makes Save wait until the running save is done (or
	// ctx is), then start. This back-pressure keeps a training loop that
	// saves faster than the disk writes from queueing buffers.
	WaitForPrevious IfRunning = iota
	// RefusePrevious makes Save return an *Error of kind ErrBusy at once;
	// the caller may skip this save and try at a later step.
	RefusePrevious
)

// SaveOptions configure Save and Check. The zero value saves
// synchronously into DIR/checkpoint-0 with the default shard size and keeps
// every checkpoint.
type SaveOptions struct {
	// Name is the checkpoint folder's name inside the target folder;
	// default "checkpoint-STEP" (Step in decimal), as transformers' Trainer
	// names them. It must be a bare name: letters, digits and "_" first,
	// then also ".", "=", "+" and "-", at most 255 bytes.
	Name string
	// Step and Epoch go into every shard's __metadata__ as "step" and
	// "epoch" (MetaStep, MetaEpoch) and into the manifest.
	Step  int64
	Epoch float64
	// Metadata is added to every shard's __metadata__. "format" defaults
	// to "pt", which transformers requires; "step" and "epoch" are
	// Save's own (ErrInvalid). Every shard names the checksum of each of
	// its tensors (safetensors.ChecksumPrefix); a checksum key given here
	// is a claim the tensor's data must match, which goes into the shard
	// that holds it (ErrInvalid when no tensor of that name is saved).
	Metadata map[string]string
	// Prefix names the shard files (DefaultPrefix, "model", when empty).
	Prefix string
	// MaxShardSize is the largest shard in bytes of tensor data
	// (shard.DefaultMaxShardSize, 5 GB, when 0); a larger tensor gets a
	// shard of its own.
	MaxShardSize int64
	// KeepLast, when positive, keeps only the newest KeepLast checkpoints
	// that Save wrote in the target folder (newest by the order of their
	// saves, recorded in each manifest), removing the others after the new
	// one is committed; a save also removes, before it writes, those that a
	// save killed between its commit and its removals left, so the folder
	// never holds more than KeepLast+1. Folders Save did not write, and
	// checkpoints copied or renamed to another name (cp -r checkpoint-300
	// best), are neither counted nor removed.
	KeepLast int
	// Overwrite lets a save replace a checkpoint of the same name that
	// Save wrote (a run resumed from an earlier step). Without it a taken
	// name is ErrExists. The replacement is atomic on Linux (both folders
	// swapped in one rename); elsewhere the old folder is moved aside
	// first, and a kill between the two renames leaves it hidden until the
	// next save of the folder restores it. On an object store (s3://) the
	// new shards take new names, the index is replaced last and the old
	// files are removed after it.
	Overwrite bool
	// Background makes Save return as soon as the save has started: the
	// returned *Pending tells when it is done. The caller hands the
	// tensors' Data over to the save and must not modify them until then.
	Background bool
	// IfRunning chooses between waiting for a save of the same folder that
	// is still running and refusing (ErrBusy).
	IfRunning IfRunning
}

// SaveResult describes a committed checkpoint.
type SaveResult struct {
	// Path is the checkpoint folder, DIR/NAME.
	Path string `json:"path"`
	// Name is the folder's name.
	Name string `json:"name"`
	// Step and Epoch are the options' values.
	Step  int64   `json:"step"`
	Epoch float64 `json:"epoch"`
	// Seq numbers the saves of the target folder: one more than the
	// highest Seq of the checkpoints it held.
	Seq int64 `json:"seq"`
	// Index is the index file's name, "" for a single file.
	Index string `json:"index,omitempty"`
	// Files are the safetensors files, in shard order.
	Files []string `json:"files"`
	// Tensors is the number of tensors; TotalSize their bytes of data.
	Tensors   int   `json:"tensors"`
	TotalSize int64 `json:"total_size"`
	// Replaced is true when Overwrite replaced a checkpoint of the name.
	Replaced bool `json:"replaced,omitempty"`
	// Removed lists the older checkpoints that KeepLast removed.
	Removed []string `json:"removed,omitempty"`
	// Leftovers lists what killed saves had left (hidden temporary
	// folders) and this save removed, or restored.
	Leftovers []string `json:"leftovers,omitempty"`
	// Warnings report cleanup that failed after the commit (an old
	// checkpoint that could not be removed, for instance).
	Warnings []string `json:"warnings,omitempty"`
	// Duration is how long the save took, waiting excluded.
	Duration time.Duration `json:"duration_ns"`
}

// Pending is a save in progress (or done): Save returns it.
type Pending struct {
	done chan struct{}
	res  *SaveResult
	err  error
}

// Done returns a channel that is closed when the save is done, committed
// or failed. After that the tensors' buffers are the caller's again.
func (p *Pending) Done() <-chan struct{} { return p.done }

// Wait waits until the save is done and returns its result, or the error
// that ended it (an *Error: ErrTarget, ErrExists, ErrNoSpace or
// ErrConflict); on error nothing of the save is left behind and
// earlier checkpoints are untouched.
func (p *Pending) Wait() (*SaveResult, error) {
	<-p.done
	return p.res, p.err
}

// manifestName is the manifest file in every checkpoint folder.
const manifestName = "checkpoint.json"

// IncompleteName is the marker that Save puts in a checkpoint folder of an
// object store (an s3:// location), which has no folders to rename, while
// the folder holds files of no committed checkpoint: from before the first
// shard of a new checkpoint until its manifest is written, and while
// KeepLast removes an old one. A folder with the marker and no manifest is
// Save's: a save runs there, or one that stopped left it. The marker names
// its holder (host and process) and the save refreshes it every 15 s: a
// save of that name refuses it (ErrConflict, saying who holds it) while
// the holder runs, and replaces it once the holder is gone (a process of
// this host that no longer runs, or a marker not refreshed for a minute)
// — Overwrite is not needed: nothing was committed under it. A save whose
// marker was taken over stops with ErrConflict before it commits. A save's
// KeepLast pass removes the folders that a killed removal left. Folders on
// a file system never hold it: there a save is renamed into place.
const IncompleteName = ".ckpt-incomplete"

// manifestFormat marks a manifest as Save's.
const manifestFormat = "ckpt.checkpoint/v1"

// maxManifest bounds the manifest files read (a hostile one is refused
// before it is read).
const maxManifest = 16 << 20

// maxSeq bounds the save numbers a manifest may hold, so that the next
// one never overflows.
const maxSeq = 1 << 62

// manifest is checkpoint.json.
type manifest struct {
	Format    string            `json:"format"`
	Name      string            `json:"name"`
	Step      int64             `json:"step"`
	Epoch     float64           `json:"epoch"`
	Seq       int64             `json:"seq"`
	SavedAt   time.Time         `json:"saved_at"`
	Index     string            `json:"index,omitempty"`
	Files     []string          `json:"files"`
	Tensors   int               `json:"tensors"`
	TotalSize int64             `json:"total_size"`
	Metadata  map[string]string `json:"metadata,omitempty"`
}

// Hidden names in the target folder, all starting with ".ckpt-".
const (
	lockTarget = "ckpt-save"  // the lock file .ckpt-save.lock
	tmpPrefix  = ".ckpt-tmp-" // a checkpoint being written
	delPrefix  = ".ckpt-del-" // a checkpoint being removed
	oldPrefix  = ".ckpt-old-" // .ckpt-old-TOKEN.NAME: a replaced checkpoint moved aside
)

// Save writes tensors as one checkpoint folder dir/NAME (see
// SaveOptions.Name), sharded by SaveOptions.MaxShardSize as
// huggingface_hub shards (model.safetensors, or
// model-0000k-of-0000n.safetensors with model.safetensors.index.json), so
// that ckpt.Open, transformers and safetensors load it as they load any
// model folder. Every dtype of the format, and dtypes added with
// dtype.Register, are written as their bytes are; the tensors are checked
// as Check checks them and every problem is returned at once, before
// anything is written.
//
// The checkpoint is committed atomically as a whole folder:
//
//  1. Save takes the target folder's lock, ".ckpt-save.lock" (an
//     advisory flock; saves of one folder in other processes wait for
//     it), and removes the hidden folders of killed saves.
//  2. It writes the shards into a hidden folder dir/.ckpt-tmp-TOKEN with
//     package shard's writer, then the manifest checkpoint.json (name,
//     step, epoch, order of the save, files, metadata), fsyncs every file
//     and the folder.
//  3. One rename moves the folder to dir/NAME, and dir is fsynced. With
//     Overwrite, a checkpoint of the same name is swapped out in the same
//     rename (Linux) and removed.
//  4. With KeepLast, older checkpoints are each renamed to a hidden
//     dir/.ckpt-del-TOKEN, then removed (only after the commit: until
//     then the folder holds the KeepLast previous checkpoints).
//
// So if the process is killed at any instant, every checkpoint that was
// complete stays loadable, the new one is either complete under its name
// or absent, and no partial checkpoint is ever visible under a final name;
// what a kill leaves is hidden and the next save removes it. A canceled ctx
// or a failure before step 3 removes the hidden folder and returns an
// *Error (ErrTarget; a canceled ctx's matches context.Canceled or
// context.DeadlineExceeded); after step 3 the save is
// committed and cancellation no longer applies.
//
// A synchronous save returns a Pending that is already done, or the error.
// With SaveOptions.Background, Save validates, waits for or refuses a
// running save of the same folder (SaveOptions.IfRunning), then returns
// while the save goes on; its outcome comes from Pending.Wait. The tensors'
// Data is read in place, not copied: the caller must not modify it until
// the Pending is done. Names, shapes and metadata are copied when Save is
// called.
//
// dir may also be a location of a registered sink (s3://BUCKET/PREFIX with
// package remote imported), which has no folders to rename: the
// checkpoint's shards are uploaded under DIR/NAME/ (multipart uploads, parts
// in parallel with their CRC-32C, aborted on failure or cancellation: no
// part is left behind), its index last, in one request (exclusive where
// there was none: If-None-Match: *), then its manifest; a reader never sees
// a partial checkpoint. A new name holds the marker IncompleteName from
// before its first shard until its manifest is written. A name that holds
// files already is refused (ErrExists) unless Overwrite is set and it is a
// checkpoint Save wrote, or it holds only what a save killed there left
// (the marker, no manifest: replaced without Overwrite, as a trainer that
// resumes saves that step again): then the new shards take new names, the
// index is replaced last and the old shards are removed after it. Between
// the index and the manifest of a replacing save, the folder loads the new
// weights while its manifest still describes the previous save. KeepLast
// removes older checkpoints after the new one's manifest is written, each
// marked first, then losing its manifest, its index, its shards and the
// marker last; the next save removes what a killed removal left. Saves of
// one location are serialized in this process only (IfRunning). A kill at
// any instant leaves every committed checkpoint loadable, except the one
// being replaced, which loads the previous or the new save
// (TestSaveS3Killed). The multipart uploads a killed save left are aborted
// (sink.UploadAborter) when its name is saved again or its removal finished;
// those of names never saved again stay until a bucket lifecycle rule
// (AbortIncompleteMultipartUpload) removes them.
func Save(ctx context.Context, dir string, tensors []safetensors.TensorData, opts SaveOptions) (*Pending, error) {
	specs := make([]safetensors.TensorSpec, len(tensors))
	lens := make([]int, len(tensors))
	data := make(map[string][]byte, len(tensors))
	for i, t := range tensors {
		specs[i] = safetensors.TensorSpec{Name: t.Name, DType: t.DType, Shape: t.Shape}
		lens[i] = len(t.Data)
		data[t.Name] = t.Data
	}
	p, errs := newPlan(dir, specs, lens, &opts)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	key := dir
	if !isRemote(dir) {
		var err error
		if key, err = filepath.Abs(dir); err != nil {
			return nil, &Error{Kind: ErrTarget, Path: dir, Err: err}
		}
	}
	done, err := acquire(ctx, key, opts.IfRunning)
	if err != nil {
		if errors.Is(err, ErrBusy) {
			return nil, &Error{Kind: ErrBusy, Path: dir, Msg: "a save of this folder is running (SaveOptions.IfRunning is RefusePrevious)"}
		}
		return nil, &Error{Kind: ErrTarget, Path: dir, Msg: "write: canceled waiting for the running save of this folder", Err: withCtxErr(ctx.Err(), err)}
	}
	pend := &Pending{done: done}
	run := func() {
		pend.res, pend.err = p.save(ctx, func(name string) ([]byte, error) { return data[name], nil })
		finish(key, done)
	}
	if opts.Background {
		go run()
		return pend, nil
	}
	run()
	if pend.err != nil {
		return nil, pend.err
	}
	return pend, nil
}

// running holds, per target folder (absolute path), a channel closed when
// the save running there ends.
var running struct {
	sync.Mutex
	m map[string]chan struct{}
}

// acquire marks a save of key as running, waiting for or refusing a
// running one. It returns the channel that finish closes: the Pending's
// done channel, so that a save counts as running exactly until its Pending
// is done.
func acquire(ctx context.Context, key string, mode IfRunning) (chan struct{}, error) {
	for {
		running.Lock()
		ch, busy := running.m[key]
		if !busy {
			if running.m == nil {
				running.m = map[string]chan struct{}{}
			}
			mine := make(chan struct{})
			running.m[key] = mine
			running.Unlock()
			return mine, nil
		}
		running.Unlock()
		if mode == RefusePrevious {
			return nil, ErrBusy
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// finish ends the running save of key: its Pending is done and another
// save of the folder may start, in one step.
func finish(key string, done chan struct{}) {
	running.Lock()
	delete(running.m, key)
	close(done)
	running.Unlock()
}

// hook, when set by tests, is called at each step of a save (to slow it
// down or observe it); step names the point reached.
var hook func(step string)

func at(step string) {
	if hook != nil {
		hook(step)
	}
}

// save runs the protocol of Save, holding the folder's lock.
func (p *plan) save(ctx context.Context, data func(string) ([]byte, error)) (res *SaveResult, err error) {
	if isRemote(p.dir) {
		return p.saveSink(ctx, data)
	}
	start := time.Now()
	dir := p.dir
	if err := ctx.Err(); err != nil {
		return nil, &Error{Kind: ErrTarget, Path: dir, Msg: "write: canceled", Err: err}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, &Error{Kind: ErrTarget, Path: dir, Msg: "creating the folder", Err: err}
	}
	lock, err := atomicfile.LockTarget(ctx, dir, lockTarget)
	if err != nil {
		if ctx.Err() != nil {
			return nil, &Error{Kind: ErrTarget, Path: dir, Msg: "write: canceled waiting for another process's save of this folder", Err: ctx.Err()}
		}
		return nil, &Error{Kind: ErrTarget, Path: dir, Msg: "taking the lock", Err: err}
	}
	defer lock.Unlock()
	at("locked")
	res = &SaveResult{Name: p.name, Path: filepath.Join(dir, p.name), Step: p.opts.Step, Epoch: p.opts.Epoch, Tensors: len(p.specs), TotalSize: p.data}
	if lock.Exclusive() {
		res.Leftovers, res.Warnings = cleanStale(dir)
	}
	if err := p.checkName(); err != nil {
		return nil, err
	}
	if p.opts.KeepLast > 0 {
		// What a save killed between its commit and its pruning left: the
		// folder never holds more than KeepLast+1 checkpoints.
		p.prune(res, "")
	}
	if err := p.checkSpace(dir); err != nil {
		return nil, err
	}
	_, highest, warns := scan(dir)
	res.Warnings = append(res.Warnings, warns...)
	res.Seq = highest + 1

	tok, err := randomToken()
	if err != nil {
		return nil, &Error{Kind: ErrTarget, Path: dir, Msg: "write: naming the temporary folder", Err: err}
	}
	tmp := filepath.Join(dir, tmpPrefix+tok)
	if err := os.Mkdir(tmp, 0o755); err != nil {
		return nil, &Error{Kind: ErrTarget, Path: dir, Msg: "write: creating the temporary folder", Err: err}
	}
	committed := false
	defer func() {
		if !committed {
			os.RemoveAll(tmp)
		}
	}()
	wres, err := shard.WriteFrom(ctx, tmp, p.prefix, "", p.specs, data, p.metadata, shard.WithMaxShardSize(p.maxShard))
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			return nil, &Error{Kind: ErrTarget, Path: dir, Msg: "write: canceled", Err: cmp.Or(ctx.Err(), err)}
		}
		return nil, &Error{Kind: ErrTarget, Path: dir, Msg: "write", Err: err}
	}
	res.Files, res.Index = wres.Files, wres.Index
	at("written")
	m := manifest{Format: manifestFormat, Name: p.name, Step: p.opts.Step, Epoch: p.opts.Epoch, Seq: res.Seq,
		SavedAt: time.Now().UTC(), Index: wres.Index, Files: wres.Files, Tensors: len(p.specs), TotalSize: wres.TotalSize, Metadata: p.opts.Metadata}
	if err := writeManifest(tmp, &m); err != nil {
		return nil, &Error{Kind: ErrTarget, Path: dir, Msg: "write: writing " + manifestName, Err: err}
	}
	if err := atomicfile.SyncDir(tmp); err != nil {
		return nil, &Error{Kind: ErrTarget, Path: dir, Msg: "write: fsync of the temporary folder", Err: err}
	}
	at("synced")
	if err := ctx.Err(); err != nil {
		return nil, &Error{Kind: ErrTarget, Path: dir, Msg: "write: canceled", Err: err}
	}
	replaced, err := p.commit(tmp, res)
	if err != nil {
		return nil, err
	}
	committed = true
	res.Replaced = replaced
	at("committed")
	if p.opts.KeepLast > 0 {
		p.prune(res, res.Name)
	}
	res.Duration = time.Since(start)
	return res, nil
}

// writeManifest writes checkpoint.json into folder and fsyncs it.
func writeManifest(folder string, m *manifest) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(folder, manifestName), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// commit renames the written folder tmp to its name, swapping out a
// checkpoint of that name when Overwrite allowed it, and fsyncs the
// target folder.
func (p *plan) commit(tmp string, res *SaveResult) (replaced bool, err error) {
	final := res.Path
	_, err = os.Lstat(final)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.Rename(tmp, final); err != nil {
			return false, &Error{Kind: ErrTarget, Path: final, Msg: "commit: renaming the new checkpoint into place", Err: err}
		}
	case err != nil:
		return false, &Error{Kind: ErrTarget, Path: final, Msg: "commit", Err: err}
	default:
		// checkName allowed it: Overwrite, and final is Save's.
		replaced = true
		if err := exchangeFunc(tmp, final); err == nil {
			// tmp now holds the old checkpoint: removed below, or by the
			// next save when this one is killed first.
			if err := atomicfile.SyncDir(p.dir); err != nil {
				return true, notDurable(final, err)
			}
			if err := os.RemoveAll(tmp); err != nil {
				res.Warnings = append(res.Warnings, fmt.Sprintf("removing the replaced checkpoint (now %s): %v", tmp, err))
			}
			return true, nil
		} else if !errors.Is(err, errExchangeUnsupported) {
			return false, &Error{Kind: ErrTarget, Path: final, Msg: "commit: swapping the new checkpoint with the old one", Err: err}
		}
		tok, err := randomToken()
		if err != nil {
			return false, &Error{Kind: ErrTarget, Path: final, Msg: "commit", Err: err}
		}
		aside := filepath.Join(p.dir, oldPrefix+tok+"."+p.name)
		if err := os.Rename(final, aside); err != nil {
			return false, &Error{Kind: ErrTarget, Path: final, Msg: "commit: moving the old checkpoint aside", Err: err}
		}
		at("aside")
		if err := os.Rename(tmp, final); err != nil {
			if rerr := os.Rename(aside, final); rerr != nil {
				return false, &Error{Kind: ErrTarget, Path: final, Msg: fmt.Sprintf("commit: renaming the new checkpoint into place failed and the old one stays at %s (the next save restores it)", aside), Err: errors.Join(err, rerr)}
			}
			return false, &Error{Kind: ErrTarget, Path: final, Msg: "commit: renaming the new checkpoint into place", Err: err}
		}
		if err := atomicfile.SyncDir(p.dir); err != nil {
			return true, notDurable(final, err)
		}
		if err := os.RemoveAll(aside); err != nil {
			res.Warnings = append(res.Warnings, fmt.Sprintf("removing the replaced checkpoint (now %s): %v", aside, err))
		}
		return true, nil
	}
	if err := atomicfile.SyncDir(p.dir); err != nil {
		return false, notDurable(final, err)
	}
	return replaced, nil
}

// notDurable reports a checkpoint renamed into place whose folder could
// not be fsynced.
func notDurable(final string, err error) error {
	return &Error{Kind: ErrTarget, Path: final, Msg: "commit: the checkpoint is in place but syncing its parent folder failed (a power loss may undo it)", Err: err}
}

var errExchangeUnsupported = errors.New("atomic exchange of folders unsupported")

// exchangeFunc is exchange; tests replace it to exercise the fallback.
var exchangeFunc = exchange

// prune removes the oldest checkpoints beyond KeepLast, never current
// (the one just written): each is renamed to a hidden name first, so that
// no partly removed checkpoint is visible, then removed.
func (p *plan) prune(res *SaveResult, current string) {
	cps, _, _ := scan(p.dir) // save reports unreadable manifests once
	if len(cps) <= p.opts.KeepLast {
		return
	}
	var trash []string
	for _, c := range cps[:len(cps)-p.opts.KeepLast] {
		if c.Name == current {
			continue
		}
		tok, err := randomToken()
		if err != nil {
			res.Warnings = append(res.Warnings, fmt.Sprintf("keeping %s: %v", c.Name, err))
			continue
		}
		t := filepath.Join(p.dir, delPrefix+tok)
		if err := os.Rename(c.Path, t); err != nil {
			res.Warnings = append(res.Warnings, fmt.Sprintf("removing old checkpoint %s: %v", c.Name, err))
			continue
		}
		at("pruning")
		trash = append(trash, t)
		res.Removed = append(res.Removed, c.Name)
	}
	if err := atomicfile.SyncDir(p.dir); err != nil {
		res.Warnings = append(res.Warnings, fmt.Sprintf("fsync of %s after removing old checkpoints: %v", p.dir, err))
	}
	for _, t := range trash {
		if err := os.RemoveAll(t); err != nil {
			res.Warnings = append(res.Warnings, fmt.Sprintf("removing %s: %v (the next save retries)", t, err))
		}
	}
}

// cleanStale removes the hidden folders that killed saves left in dir
// (the caller holds the folder's lock, so no live save owns any) and
// restores a checkpoint moved aside by an Overwrite that was killed before
// the new one took its name.
func cleanStale(dir string) (done, warnings []string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, []string{fmt.Sprintf("listing %s for leftovers: %v", dir, err)}
	}
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || !strings.HasPrefix(name, ".ckpt-") {
			continue
		}
		path := filepath.Join(dir, name)
		switch {
		case strings.HasPrefix(name, tmpPrefix), strings.HasPrefix(name, delPrefix), strings.HasPrefix(name, ".ckpt-probe-"):
		case strings.HasPrefix(name, oldPrefix):
			_, orig, ok := strings.Cut(strings.TrimPrefix(name, oldPrefix), ".")
			if ok && checkpointNameRE.MatchString(orig) {
				target := filepath.Join(dir, orig)
				if _, err := os.Lstat(target); errors.Is(err, fs.ErrNotExist) {
					if err := os.Rename(path, target); err == nil {
						done = append(done, name+" (restored as "+orig+")")
						continue
					}
				}
			}
		default:
			continue
		}
		if err := os.RemoveAll(path); err != nil {
			warnings = append(warnings, fmt.Sprintf("removing leftover %s: %v", name, err))
			continue
		}
		done = append(done, name)
	}
	return done, warnings
}

// CheckpointInfo describes a checkpoint that Save wrote, from its
// manifest.
type CheckpointInfo struct {
	// Path is the checkpoint folder; Name its name.
	Path string `json:"path"`
	Name string `json:"name"`
	// Step, Epoch and Seq are the manifest's (Seq orders the saves).
	Step    int64     `json:"step"`
	Epoch   float64   `json:"epoch"`
	Seq     int64     `json:"seq"`
	SavedAt time.Time `json:"saved_at"`
	// Files and TotalSize describe the safetensors files.
	Files     []string `json:"files"`
	TotalSize int64    `json:"total_size"`
	// Metadata is the caller's metadata.
	Metadata map[string]string `json:"metadata,omitempty"`
}

// Checkpoints lists the checkpoints that Save wrote in dir, oldest save
// first (by Seq): the last one is where a resumed run starts. Folders
// without a manifest (not Save's) are not listed, nor are checkpoints
// copied or renamed to another name than Save gave them (the manifest
// records it): those are the user's, and KeepLast never removes them
// either. A folder whose manifest
// cannot be read or parsed is not listed either, and is named in the
// error, which is then an errors.Join of one error per such folder next to
// the checkpoints that were read. dir may be a location of a registered
// sink (s3://...), as for Save.
func Checkpoints(dir string) ([]CheckpointInfo, error) {
	if isRemote(dir) {
		return checkpointsSink(dir)
	}
	if _, err := os.ReadDir(dir); err != nil {
		return nil, &Error{Kind: ErrTarget, Path: dir, Err: err}
	}
	cps, _, warns := scan(dir)
	var errs []error
	for _, w := range warns {
		errs = append(errs, &Error{Kind: ErrTarget, Path: dir, Msg: w})
	}
	return cps, errors.Join(errs...)
}

// scan reads the manifests of the visible folders of dir and returns the
// checkpoints still under the name Save gave them, sorted by Seq (then
// name), and the highest Seq of all manifests. Unreadable manifests are
// reported as warnings.
func scan(dir string) (cps []CheckpointInfo, highest int64, warnings []string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, 0, []string{fmt.Sprintf("listing %s: %v", dir, err)}
	}
	var out []CheckpointInfo
	var warns []string
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		m, err := readManifest(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			warns = append(warns, fmt.Sprintf("%s: not counted as a checkpoint: %v", path, err))
			continue
		}
		highest = max(highest, m.Seq)
		if m.Name != e.Name() {
			continue // a copy or a renamed checkpoint ("best"): the user's now
		}
		out = append(out, CheckpointInfo{Path: path, Name: e.Name(), Step: m.Step, Epoch: m.Epoch, Seq: m.Seq, SavedAt: m.SavedAt,
			Files: m.Files, TotalSize: m.TotalSize, Metadata: m.Metadata})
	}
	slices.SortFunc(out, func(a, b CheckpointInfo) int {
		return cmp.Or(cmp.Compare(a.Seq, b.Seq), strings.Compare(a.Name, b.Name))
	})
	return out, highest, warns
}

// readManifest reads and checks folder/checkpoint.json. A missing file
// gives an error matching fs.ErrNotExist.
func readManifest(folder string) (*manifest, error) {
	b, err := safeopen.ReadFile(filepath.Join(folder, manifestName), maxManifest)
	if err != nil {
		return nil, err
	}
	return parseManifest(b)
}
