package convert

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/ckpt-go/ckpt/internal/safeopen"
	"github.com/ckpt-go/ckpt/internal/setwrite"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/sink"
	"github.com/ckpt-go/ckpt/source"
)

// isRemote reports whether a target is a location of a registered sink
// rather than a path.
func isRemote(dir string) bool { return source.Scheme(dir) != "" }

// saveSink is Save's protocol for a location of a registered sink (an
// object store), which has no folders to rename: the checkpoint's shards
// are uploaded under DIR/NAME/ (each a multipart upload, aborted on
// failure or cancellation), its index last (setwrite.Commit), then its
// manifest; KeepLast removes the older checkpoints after that, manifest
// first.
func (p *plan) saveSink(ctx context.Context, data func(string) ([]byte, error)) (*SaveResult, error) {
	start := time.Now()
	dir := p.dir
	if err := ctx.Err(); err != nil {
		return nil, &Error{Kind: ErrTarget, Path: dir, Msg: "write: canceled", Err: err}
	}
	dest, err := openSink(ctx, dir)
	if err != nil {
		return nil, err
	}
	res := &SaveResult{Name: p.name, Path: joinLocation(dir, p.name), Step: p.opts.Step, Epoch: p.opts.Epoch, Tensors: len(p.specs), TotalSize: p.data}
	fsys := dest.FS()
	st, err := p.checkNameFS(ctx, dest, res.Path)
	if err != nil {
		return nil, err
	}
	replacing, abandoned := st.replacing, st.abandoned
	scan := scanFS(fsys, dir)
	res.Warnings = append(res.Warnings, scan.warnings...)
	res.Seq = scan.highest + 1
	at("locked")
	// A new name holds the marker until the manifest is written: what a
	// kill leaves there is Save's to replace (save_marker.go).
	var mk *marker
	if !replacing {
		mk, err = claimMarker(ctx, dest, p.name, res.Seq, abandoned, st.markerVersion)
		if errors.Is(err, fs.ErrExist) {
			return nil, &Error{Kind: ErrConflict, Path: res.Path, Msg: "another save of this name began meanwhile (it wrote " + IncompleteName + " first)", Err: err}
		}
		if err != nil {
			return nil, sinkErr(ctx, dest.Location(path.Join(p.name, IncompleteName)), -1, err)
		}
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		defer cancel(nil)
		mk.keep(ctx, cancel)
		defer mk.release()
		at("marked")
	}
	marker := path.Join(p.name, IncompleteName)
	takenOver := func() error {
		if mk != nil && (!mk.owned() || errors.Is(context.Cause(ctx), errTakenOver)) {
			return &Error{Kind: ErrConflict, Path: res.Path, Msg: "this save stopped: another one took the name over", Err: errTakenOver}
		}
		return nil
	}
	if replacing || abandoned {
		abortUploads(ctx, dest, p.name, "a save killed there", res)
	}

	write := func(s safetensors.TensorSpec, w io.Writer) error {
		b, err := data(s.Name)
		if err != nil {
			return err
		}
		if want, _ := s.ByteLen(); int64(len(b)) != want {
			return &Error{Kind: ErrInvalid, Path: dir, Tensor: s.Name, Msg: fmt.Sprintf("data length: data has %d bytes, %s%v needs %d", len(b), s.DType, s.Shape, want)}
		}
		_, err = w.Write(b)
		return err
	}
	sres, err := writeSinkSet(ctx, &setwrite.Set{Sink: dest, Dir: p.name, Prefix: p.prefix, Specs: p.specs, Write: write,
		Metadata: p.metadata, MaxShard: p.maxShard, Replace: replacing || abandoned})
	if err != nil {
		if terr := takenOver(); terr != nil {
			return nil, terr
		}
		if !replacing && !abandoned && !errors.Is(err, ErrConflict) {
			// The set removed its files: the name is free again (unless
			// another writer took it meanwhile: the marker is its too).
			mk.release()
			if mk.owned() {
				dest.Remove(context.WithoutCancel(ctx), marker)
			}
		}
		// The set's own errors are returned as they are, but for a
		// failed write (sinkErr's), which is said of the whole save.
		var ce *Error
		if errors.As(err, &ce) && (ce.Kind != ErrTarget || !strings.HasPrefix(ce.Msg, "write")) {
			return nil, ce
		}
		if ctx.Err() != nil {
			return nil, &Error{Kind: ErrTarget, Path: dir, Msg: "write: canceled", Err: ctx.Err()}
		}
		return nil, &Error{Kind: ErrTarget, Path: dir, Msg: "write", Err: err}
	}
	res.Files, res.Index, res.Replaced = sres.Files, sres.Index, replacing
	res.Warnings = append(res.Warnings, sres.Warnings...)
	at("written")
	m := manifest{Format: manifestFormat, Name: p.name, Step: p.opts.Step, Epoch: p.opts.Epoch, Seq: res.Seq,
		SavedAt: time.Now().UTC(), Index: sres.Index, Files: sres.Files, Tensors: len(p.specs), TotalSize: sres.Total, Metadata: p.opts.Metadata}
	if mk != nil {
		if err := mk.confirm(context.WithoutCancel(ctx)); err != nil {
			if terr := takenOver(); terr != nil {
				return nil, terr
			}
			return nil, &Error{Kind: ErrTarget, Path: res.Path, Msg: "commit: refreshing " + IncompleteName + " before the manifest", Err: err}
		}
	}
	b, err := json.MarshalIndent(&m, "", "  ")
	if err == nil {
		err = writeSinkFile(context.WithoutCancel(ctx), dest, path.Join(p.name, manifestName), append(b, '\n'), false)
	}
	if err != nil {
		// The weights are in place and load; only Checkpoints and KeepLast
		// do not count them yet.
		return nil, &Error{Kind: ErrTarget, Path: res.Path, Msg: "commit: the checkpoint is in place, but writing " + manifestName + " failed", Err: err}
	}
	at("committed")
	if !replacing {
		if err := dest.Remove(context.WithoutCancel(ctx), marker); err != nil {
			res.Warnings = append(res.Warnings, fmt.Sprintf("removing %s: %v (the manifest is written: the checkpoint counts)", dest.Location(marker), err))
		}
	}
	if p.opts.KeepLast > 0 {
		p.pruneSink(dest, res)
	}
	res.Duration = time.Since(start)
	return res, nil
}

// nameState is what checkNameFS found under a checkpoint name.
type nameState struct {
	replacing     bool   // a checkpoint Save wrote, which Overwrite replaces
	abandoned     bool   // only what a stopped save left: replaced without Overwrite
	markerVersion string // the version of the stopped save's marker (a Conditional sink)
}

// checkNameFS refuses a name that holds a checkpoint (or files of one)
// unless Overwrite is set and it is a checkpoint that Save wrote; it
// reports whether one is replaced, and whether the name holds only what a
// save that stopped left (IncompleteName without a manifest, its holder
// gone: save_marker.go), which is replaced without Overwrite: nothing was
// committed under it. A name a running save holds is ErrConflict.
func (p *plan) checkNameFS(ctx context.Context, dest sink.Sink, where string) (nameState, error) {
	fsys := dest.FS()
	es, err := fs.ReadDir(fsys, p.name)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nameState{}, &Error{Kind: ErrTarget, Path: where, Msg: "listing the location", Err: err}
	}
	if len(es) == 0 {
		return nameState{}, nil
	}
	_, merr := readManifestFS(fsys, p.name)
	if errors.Is(merr, fs.ErrNotExist) {
		// The version first: a marker refreshed after it is read is
		// then not replaced (the conditional write fails).
		version, gone, verr := sink.SeenVersion(ctx, dest, path.Join(p.name, IncompleteName))
		if inc, err := readIncomplete(fsys, p.name); err == nil && verr == nil && !gone {
			if stopped, who := inc.stale(time.Now()); !stopped {
				return nameState{}, &Error{Kind: ErrConflict, Path: where, Msg: who}
			}
			return nameState{abandoned: true, markerVersion: version}, nil
		}
	}
	if !p.opts.Overwrite {
		return nameState{}, &Error{Kind: ErrExists, Path: where, Msg: "a checkpoint of this name exists (SaveOptions.Overwrite replaces it)"}
	}
	if merr != nil {
		return nameState{}, &Error{Kind: ErrExists, Path: where, Msg: "exists and is not a checkpoint that Save wrote (no readable " + manifestName + "): Overwrite replaces only those", Err: merr}
	}
	return nameState{replacing: true}, nil
}

// The states of a folder that IncompleteName marks.
const (
	stateSaving   = "saving"   // a new checkpoint, its manifest not written yet
	stateRemoving = "removing" // an old checkpoint that KeepLast removes
)

// incompleteFormat marks an IncompleteName file as Save's.
const incompleteFormat = "ckpt.incomplete/v1"

// incomplete is the content of IncompleteName.
type incomplete struct {
	Format string    `json:"format"`
	State  string    `json:"state"`
	Seq    int64     `json:"seq"`
	At     time.Time `json:"at"` // written, or last refreshed
	// Who holds the name (save_marker.go); absent in a marker of
	// state removing.
	Owner string `json:"owner,omitempty"`
	Host  string `json:"host,omitempty"`
	PID   int    `json:"pid,omitempty"`
}

// writeIncomplete marks the folder name of sink as being in state.
func writeIncomplete(ctx context.Context, dest sink.Sink, name, state string, seq int64) error {
	b, err := json.Marshal(incomplete{Format: incompleteFormat, State: state, Seq: seq, At: time.Now().UTC()})
	if err != nil {
		return err
	}
	return writeSinkFile(ctx, dest, path.Join(name, IncompleteName), append(b, '\n'), false)
}

// readIncomplete reads and checks the marker of the folder name.
func readIncomplete(fsys fs.FS, name string) (*incomplete, error) {
	b, err := safeopen.ReadFileFS(fsys, path.Join(name, IncompleteName), maxManifest)
	if err != nil {
		return nil, err
	}
	return parseIncomplete(b)
}

// parseIncomplete parses and checks a marker's bytes.
func parseIncomplete(b []byte) (*incomplete, error) {
	var m incomplete
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", IncompleteName, err)
	}
	if m.Format != incompleteFormat || (m.State != stateSaving && m.State != stateRemoving) {
		return nil, fmt.Errorf("%s: format %q, state %q", IncompleteName, m.Format, m.State)
	}
	return &m, nil
}

// readManifestFS reads and checks NAME/checkpoint.json of fsys.
func readManifestFS(fsys fs.FS, name string) (*manifest, error) {
	b, err := safeopen.ReadFileFS(fsys, path.Join(name, manifestName), maxManifest)
	if err != nil {
		return nil, err
	}
	return parseManifest(b)
}

// parseManifest parses and checks a manifest's bytes.
func parseManifest(b []byte) (*manifest, error) {
	var m manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", manifestName, err)
	}
	if m.Format != manifestFormat {
		return nil, fmt.Errorf("%s: format %q, want %q", manifestName, m.Format, manifestFormat)
	}
	if m.Seq < 1 || m.Seq > maxSeq {
		return nil, fmt.Errorf("%s: seq %d out of range [1, %d]", manifestName, m.Seq, int64(maxSeq))
	}
	return &m, nil
}

// sinkScan is what scanFS found.
type sinkScan struct {
	cps        []CheckpointInfo // sorted by Seq
	highest    int64            // the highest Seq of all manifests
	warnings   []string
	incomplete map[string]string // folder -> the state its IncompleteName gives, where it has no manifest
}

// scanFS is scan for a sink's files: the checkpoints in the folders of
// its root and the highest Seq of all manifests, and the folders that
// killed saves or removals left.
func scanFS(fsys fs.FS, dir string) sinkScan {
	var r sinkScan
	es, err := fs.ReadDir(fsys, ".")
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			r.warnings = []string{fmt.Sprintf("listing %s: %v", dir, err)}
		}
		return r
	}
	for _, e := range es {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		m, err := readManifestFS(fsys, e.Name())
		if errors.Is(err, fs.ErrNotExist) {
			if inc, err := readIncomplete(fsys, e.Name()); err == nil {
				if r.incomplete == nil {
					r.incomplete = map[string]string{}
				}
				r.incomplete[e.Name()] = inc.State
			}
			continue
		}
		if err != nil {
			r.warnings = append(r.warnings, fmt.Sprintf("%s: not counted as a checkpoint: %v", joinLocation(dir, e.Name()), err))
			continue
		}
		r.highest = max(r.highest, m.Seq)
		if m.Name != e.Name() {
			continue // a copy or a renamed checkpoint: the user's
		}
		r.cps = append(r.cps, CheckpointInfo{Path: joinLocation(dir, e.Name()), Name: e.Name(), Step: m.Step, Epoch: m.Epoch, Seq: m.Seq,
			SavedAt: m.SavedAt, Files: m.Files, TotalSize: m.TotalSize, Metadata: m.Metadata})
	}
	slices.SortFunc(r.cps, func(a, b CheckpointInfo) int {
		return cmp.Or(cmp.Compare(a.Seq, b.Seq), strings.Compare(a.Name, b.Name))
	})
	return r
}

// pruneSink removes the oldest checkpoints beyond KeepLast, never the one
// just written, and what killed removals left. A folder to remove is
// marked first (IncompleteName, "removing"); then it loses its manifest
// (it is no longer counted), its index or single file (no longer
// loadable), the rest, and the marker last: a kill anywhere leaves a
// marked folder, which the next save's pass removes. Folders that killed
// saves left are named in the warnings: saving the name again replaces
// them, and a save running elsewhere may own them.
func (p *plan) pruneSink(dest sink.Sink, res *SaveResult) {
	ctx := context.Background()
	fsys := dest.FS()
	scan := scanFS(fsys, p.dir)
	for _, name := range slices.Sorted(maps.Keys(scan.incomplete)) {
		loc := dest.Location(name)
		switch scan.incomplete[name] {
		case stateRemoving:
			abortUploads(ctx, dest, name, "a killed save", res)
			if err := removeSinkFolder(ctx, dest, name); err != nil {
				res.Warnings = append(res.Warnings, err.Error()+" (the next save retries)")
				continue
			}
			res.Leftovers = append(res.Leftovers, loc+": what a killed removal left, removed")
		case stateSaving:
			res.Warnings = append(res.Warnings, fmt.Sprintf("%s holds files of a save that did not finish (%s, no %s): killed, or still running in another process; not a checkpoint; saving %s again replaces them",
				loc, IncompleteName, manifestName, name))
		}
	}
	if len(scan.cps) <= p.opts.KeepLast {
		return
	}
	for _, c := range scan.cps[:len(scan.cps)-p.opts.KeepLast] {
		if c.Name == res.Name {
			continue
		}
		if err := writeIncomplete(ctx, dest, c.Name, stateRemoving, c.Seq); err != nil {
			res.Warnings = append(res.Warnings, fmt.Sprintf("removing old checkpoint %s: marking it: %v (the next save retries)", c.Name, err))
			continue
		}
		at("pruning")
		if err := removeSinkFolder(ctx, dest, c.Name); err != nil {
			res.Warnings = append(res.Warnings, err.Error()+" (the next save retries)")
			continue
		}
		res.Removed = append(res.Removed, c.Name)
	}
}

// abortUploads aborts the unfinished uploads under the folder name of a
// sink.UploadAborter (who: what left them), noting it in res's leftovers.
// A failure is a warning: the uploads are only storage.
func abortUploads(ctx context.Context, dest sink.Sink, name, who string, res *SaveResult) {
	a, ok := dest.(sink.UploadAborter)
	if !ok {
		return
	}
	n, err := a.AbortUploads(ctx, name)
	if err != nil {
		res.Warnings = append(res.Warnings, fmt.Sprintf("%s: aborting the unfinished uploads of %s: %v", dest.Location(name), who, err))
	}
	if n > 0 {
		res.Leftovers = append(res.Leftovers, fmt.Sprintf("%s: %d unfinished uploads of %s aborted", dest.Location(name), n, who))
	}
}

// removeSinkFolder removes every file under the folder name of a sink: its
// manifest first, then its index or single file, the rest, and its
// IncompleteName marker last. It lists the folder in a fresh view of the
// sink (Sink.FS), which holds the marker just written.
func removeSinkFolder(ctx context.Context, dest sink.Sink, name string) error {
	var files []string
	err := fs.WalkDir(dest.FS(), name, func(f string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			files = append(files, f)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("removing %s: %w", dest.Location(name), err)
	}
	rank := func(n string) int {
		switch b := path.Base(n); {
		case b == manifestName:
			return 0
		case b == IncompleteName:
			return 3
		case strings.HasSuffix(b, ".json"), strings.HasSuffix(b, ".safetensors") && !shardNumRE.MatchString(b):
			return 1 // indexes and single files
		}
		return 2
	}
	slices.SortStableFunc(files, func(a, b string) int { return rank(a) - rank(b) })
	for _, f := range files {
		if err := dest.Remove(ctx, f); err != nil {
			return fmt.Errorf("removing %s: %w", dest.Location(f), err)
		}
		at("pruning")
	}
	return nil
}

var shardNumRE = regexp.MustCompile(`-\d{5,}-of-\d{5,}`)

// checkpointsSink is Checkpoints for a location of a registered sink.
func checkpointsSink(dir string) ([]CheckpointInfo, error) {
	dest, err := openSink(context.Background(), dir)
	if err != nil {
		return nil, err
	}
	scan := scanFS(dest.FS(), dir)
	var errs []error
	for _, w := range scan.warnings {
		errs = append(errs, &Error{Kind: ErrTarget, Path: dir, Msg: w})
	}
	return scan.cps, errors.Join(errs...)
}

// checkTargetSink is Check's target check for a location of a registered
// sink: it can be listed, and the checkpoint's name is free (or Overwrite
// is set and it holds a checkpoint Save wrote). Nothing is written.
func (p *plan) checkTargetSink() []error {
	dest, err := openSink(context.Background(), p.dir)
	if err != nil {
		return []error{err}
	}
	fsys := dest.FS()
	if _, err := fs.ReadDir(fsys, "."); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return []error{&Error{Kind: ErrTarget, Path: p.dir, Msg: "listing the location", Err: err}}
	}
	if _, err := p.checkNameFS(context.Background(), dest, joinLocation(p.dir, p.name)); err != nil {
		return []error{err}
	}
	return nil
}
