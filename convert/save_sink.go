package convert

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/internal/safeopen"
	"github.com/ckpt-go/ckpt/safetensors"
)

// isRemote reports whether a target is a location of a registered sink
// rather than a path.
func isRemote(dir string) bool { return ckpt.SchemeOf(dir) != "" }

// saveSink is Save's protocol for a location of a registered sink (an
// object store), which has no folders to rename: the checkpoint's shards
// are uploaded under DIR/NAME/ (each a multipart upload, aborted on
// failure or cancellation), its index last (writeSinkSet), then its
// manifest; KeepLast removes the older checkpoints after that, manifest
// first.
func (p *plan) saveSink(ctx context.Context, data func(string) ([]byte, error)) (*SaveResult, error) {
	start := time.Now()
	dir := p.dir
	if err := ctx.Err(); err != nil {
		return nil, &Error{Kind: ErrCanceled, Path: dir, Err: err}
	}
	sink, err := OpenSink(ctx, dir)
	if err != nil {
		return nil, err
	}
	res := &SaveResult{Name: p.name, Path: joinLocation(dir, p.name), Step: p.opts.Step, Epoch: p.opts.Epoch, Tensors: len(p.specs), TotalSize: p.data}
	fsys := sink.FS()
	replacing, err := p.checkNameFS(fsys, res.Path)
	if err != nil {
		return nil, err
	}
	_, highest, warns := scanFS(fsys, dir)
	res.Warnings = append(res.Warnings, warns...)
	res.Seq = highest + 1
	at("locked")

	write := func(s safetensors.TensorSpec, w io.Writer) error {
		b, err := data(s.Name)
		if err != nil {
			return err
		}
		if want, _ := s.ByteLen(); int64(len(b)) != want {
			return &Error{Kind: ErrDataLength, Path: dir, Tensor: s.Name, Msg: fmt.Sprintf("data has %d bytes, %s%v needs %d", len(b), s.DType, s.Shape, want)}
		}
		_, err = w.Write(b)
		return err
	}
	sres, err := writeSinkSet(ctx, &sinkSet{sink: sink, dir: p.name, prefix: p.prefix, specs: p.specs, write: write,
		metadata: p.metadata, maxShard: p.maxShard, overwrite: replacing})
	if err != nil {
		var ce *Error
		if errors.As(err, &ce) && ce.Kind != ErrWrite {
			return nil, ce
		}
		if ctx.Err() != nil {
			return nil, &Error{Kind: ErrCanceled, Path: dir, Err: ctx.Err()}
		}
		return nil, &Error{Kind: ErrWrite, Path: dir, Err: err}
	}
	res.Files, res.Index, res.Replaced = sres.files, sres.index, replacing
	res.Warnings = append(res.Warnings, sres.warnings...)
	at("written")
	m := manifest{Format: manifestFormat, Name: p.name, Step: p.opts.Step, Epoch: p.opts.Epoch, Seq: res.Seq,
		SavedAt: time.Now().UTC(), Index: sres.index, Files: sres.files, Tensors: len(p.specs), TotalSize: sres.total, Metadata: p.opts.Metadata}
	b, err := json.MarshalIndent(&m, "", "  ")
	if err == nil {
		err = writeSinkFile(context.WithoutCancel(ctx), sink, path.Join(p.name, manifestName), append(b, '\n'), false)
	}
	if err != nil {
		// The weights are in place and load; only Checkpoints and KeepLast
		// do not count them yet.
		return nil, &Error{Kind: ErrCommit, Path: res.Path, Msg: "the checkpoint is in place, but writing " + manifestName + " failed", Err: err}
	}
	at("committed")
	if p.opts.KeepLast > 0 {
		p.pruneSink(sink, res)
	}
	res.Duration = time.Since(start)
	return res, nil
}

// checkNameFS refuses a name that holds a checkpoint (or files of one)
// unless Overwrite is set and it is a checkpoint that Save wrote; it
// reports whether one is replaced.
func (p *plan) checkNameFS(fsys fs.FS, where string) (bool, error) {
	es, err := fs.ReadDir(fsys, p.name)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, &Error{Kind: ErrTarget, Path: where, Msg: "listing the location", Err: err}
	}
	if len(es) == 0 {
		return false, nil
	}
	if !p.opts.Overwrite {
		return false, &Error{Kind: ErrExists, Path: where, Msg: "a checkpoint of this name exists (SaveOptions.Overwrite replaces it)"}
	}
	if _, err := readManifestFS(fsys, p.name); err != nil {
		return false, &Error{Kind: ErrExists, Path: where, Msg: "exists and is not a checkpoint that Save wrote (no readable " + manifestName + "): Overwrite replaces only those", Err: err}
	}
	return true, nil
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

// scanFS is scan for a sink's files: the checkpoints in the folders of
// its root, sorted by Seq, and the highest Seq of all manifests.
func scanFS(fsys fs.FS, dir string) (cps []CheckpointInfo, highest int64, warnings []string) {
	es, err := fs.ReadDir(fsys, ".")
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, 0, nil
		}
		return nil, 0, []string{fmt.Sprintf("listing %s: %v", dir, err)}
	}
	for _, e := range es {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		m, err := readManifestFS(fsys, e.Name())
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("%s: not counted as a checkpoint: %v", joinLocation(dir, e.Name()), err))
			continue
		}
		highest = max(highest, m.Seq)
		if m.Name != e.Name() {
			continue // a copy or a renamed checkpoint: the user's
		}
		cps = append(cps, CheckpointInfo{Path: joinLocation(dir, e.Name()), Name: e.Name(), Step: m.Step, Epoch: m.Epoch, Seq: m.Seq,
			SavedAt: m.SavedAt, Files: m.Files, TotalSize: m.TotalSize, Metadata: m.Metadata})
	}
	slices.SortFunc(cps, func(a, b CheckpointInfo) int {
		return cmp.Or(cmp.Compare(a.Seq, b.Seq), strings.Compare(a.Name, b.Name))
	})
	return cps, highest, warnings
}

// pruneSink removes the oldest checkpoints beyond KeepLast, never the one
// just written: each loses its manifest first (it is no longer counted),
// then its index or single file (no longer loadable), then the rest.
func (p *plan) pruneSink(sink Sink, res *SaveResult) {
	ctx := context.Background()
	fsys := sink.FS()
	cps, _, _ := scanFS(fsys, p.dir)
	if len(cps) <= p.opts.KeepLast {
		return
	}
	for _, c := range cps[:len(cps)-p.opts.KeepLast] {
		if c.Name == res.Name {
			continue
		}
		var files []string
		err := fs.WalkDir(fsys, c.Name, func(name string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() {
				files = append(files, name)
			}
			return nil
		})
		if err != nil {
			res.Warnings = append(res.Warnings, fmt.Sprintf("removing old checkpoint %s: %v", c.Name, err))
			continue
		}
		rank := func(n string) int {
			switch b := path.Base(n); {
			case b == manifestName:
				return 0
			case strings.HasSuffix(b, ".json"), strings.HasSuffix(b, ".safetensors") && !shardNumRE.MatchString(b):
				return 1 // indexes and single files
			}
			return 2
		}
		slices.SortStableFunc(files, func(a, b string) int { return rank(a) - rank(b) })
		failed := false
		for _, f := range files {
			if err := sink.Remove(ctx, f); err != nil {
				res.Warnings = append(res.Warnings, fmt.Sprintf("removing %s: %v (the next save retries)", sink.Location(f), err))
				failed = true
				break
			}
		}
		if !failed {
			res.Removed = append(res.Removed, c.Name)
		}
	}
}

var shardNumRE = regexp.MustCompile(`-\d{5,}-of-\d{5,}`)

// checkpointsSink is Checkpoints for a location of a registered sink.
func checkpointsSink(dir string) ([]CheckpointInfo, error) {
	sink, err := OpenSink(context.Background(), dir)
	if err != nil {
		return nil, err
	}
	cps, _, warns := scanFS(sink.FS(), dir)
	var errs []error
	for _, w := range warns {
		errs = append(errs, &Error{Kind: ErrTarget, Path: dir, Msg: w})
	}
	return cps, errors.Join(errs...)
}

// checkTargetSink is Check's target check for a location of a registered
// sink: it can be listed, and the checkpoint's name is free (or Overwrite
// is set and it holds a checkpoint Save wrote). Nothing is written.
func (p *plan) checkTargetSink() []error {
	sink, err := OpenSink(context.Background(), p.dir)
	if err != nil {
		return []error{err}
	}
	fsys := sink.FS()
	if _, err := fs.ReadDir(fsys, "."); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return []error{&Error{Kind: ErrTarget, Path: p.dir, Msg: "listing the location", Err: err}}
	}
	if _, err := p.checkNameFS(fsys, joinLocation(p.dir, p.name)); err != nil {
		return []error{err}
	}
	return nil
}
