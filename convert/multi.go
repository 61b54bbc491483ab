package convert

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ckpt-go/ckpt/internal/atomicfile"
	"github.com/ckpt-go/ckpt/internal/safeopen"
	"github.com/ckpt-go/ckpt/internal/setname"
	"github.com/ckpt-go/ckpt/internal/setwrite"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/shard"
	"github.com/ckpt-go/ckpt/sink"
)

// ShardOptions configure SaveShard.
type ShardOptions struct {
	// Step and Epoch go into the shard's __metadata__ (MetaStep,
	// MetaEpoch) and its completion marker. Every rank of one save must
	// give the same Step: the ranks' shards are named after it (with the
	// checkpoint they replace and the world size), and Commit commits
	// the shards of one save only.
	Step  int64
	Epoch float64
	// Metadata is added to the shard's __metadata__, as in SaveOptions.
	Metadata map[string]string
	// Prefix names the files (DefaultPrefix, "model", when empty); Commit
	// must be given the same.
	Prefix string
}

// ShardResult describes the shard a rank saved.
type ShardResult struct {
	// Location is the checkpoint's location; File the shard's name in it
	// and Marker its completion marker's.
	Location string `json:"location"`
	File     string `json:"file"`
	Marker   string `json:"marker"`
	// Rank and World are SaveShard's arguments.
	Rank  int `json:"rank"`
	World int `json:"world"`
	// Save identifies the save the shard belongs to (12 hex digits, the
	// same for every rank of one save).
	Save string `json:"save"`
	// Size is the shard file's size; Tensors its tensor count and
	// DataSize their bytes.
	Size     int64 `json:"size"`
	Tensors  int   `json:"tensors"`
	DataSize int64 `json:"data_size"`
	// Duration is how long the rank's save took.
	Duration time.Duration `json:"duration_ns"`
}

// CommitOptions configure Commit.
type CommitOptions struct {
	// Prefix is the ranks' ShardOptions.Prefix (DefaultPrefix when empty).
	Prefix string
	// VerifyData reads every shard whole, before the commit, and checks
	// each tensor against the checksum its header names (a
	// *safetensors.ChecksumError, matching ckpt.ErrChecksum, names the
	// one that differs) and the whole file against the CRC-32C its rank
	// recorded; without it Commit checks each shard's size and header (a
	// few KB per shard) only.
	VerifyData bool
}

// CommitResult describes a committed multi-writer checkpoint.
type CommitResult struct {
	// Location is the checkpoint's location and Index its index's name.
	Location string `json:"location"`
	Index    string `json:"index"`
	// Files are the shards, rank by rank.
	Files []string `json:"files"`
	// World, Step and Save are the committed save's.
	World int    `json:"world"`
	Step  int64  `json:"step"`
	Save  string `json:"save"`
	// Tensors is the number of tensors; TotalSize their bytes of data.
	Tensors   int   `json:"tensors"`
	TotalSize int64 `json:"total_size"`
	// Replaced lists the files of the previous checkpoint that the new
	// one replaced; Removed the leftovers of other saves (shards and
	// markers of saves that were never committed, temporaries of killed
	// ranks) and the committed save's markers.
	Replaced []string `json:"replaced,omitempty"`
	Removed  []string `json:"removed,omitempty"`
	// Warnings report cleanup that failed after the commit.
	Warnings []string `json:"warnings,omitempty"`
}

// markerFormat marks a rank's completion marker.
const markerFormat = "ckpt.rank/v1"

// maxMarker bounds the markers read (a marker lists its rank's tensors).
const maxMarker = 64 << 20

// maxWorld is the largest world SaveShard accepts: shard numbers have five
// digits, as huggingface_hub writes them.
const maxWorld = 99999

// rankMarker is a rank's completion marker: written after its shard, it
// says that the shard is complete and what it holds.
type rankMarker struct {
	Format string  `json:"format"`
	Prefix string  `json:"prefix"`
	Rank   int     `json:"rank"`
	World  int     `json:"world"`
	Step   int64   `json:"step"`
	Epoch  float64 `json:"epoch"`
	// Save is the save's token; Base identifies the checkpoint it
	// replaces ("" for none).
	Save string `json:"save"`
	Base string `json:"base"`
	// File is the shard's name, Size its size, HeaderLen the bytes of its
	// header as written (length field included, tensors' checksums filled
	// in), HeaderSHA256 their hash and CRC32C the CRC-32C (Castagnoli) of
	// the whole file, all in hex.
	File         string         `json:"file"`
	Size         int64          `json:"size"`
	HeaderLen    int64          `json:"header_len"`
	HeaderSHA256 string         `json:"header_sha256"`
	CRC32C       string         `json:"crc32c"`
	DataSize     int64          `json:"data_size"`
	Tensors      []markerTensor `json:"tensors"`
	SavedAt      time.Time      `json:"saved_at"`
}

type markerTensor struct {
	Name  string  `json:"name"`
	DType string  `json:"dtype"`
	Shape []int64 `json:"shape"`
}

// multiNames are the names of the files of one prefix that multi-writer
// saves use.
type multiNames struct {
	prefix              string
	shard, marker, temp *regexp.Regexp
}

func namesOf(prefix string) multiNames {
	q := regexp.QuoteMeta(prefix)
	nn := `-(\d{5,})-of-(\d{5,})`
	return multiNames{
		prefix: prefix,
		// PREFIX-NNNNN-of-NNNNN[.swap-TOKEN].safetensors
		shard: regexp.MustCompile(`^` + q + nn + `(?:\.swap-([0-9a-f]{12}))?\.safetensors$`),
		// .PREFIX-NNNNN-of-NNNNN[.swap-TOKEN].ckpt-rank.json
		marker: regexp.MustCompile(`^\.` + q + nn + `(?:\.swap-([0-9a-f]{12}))?\.ckpt-rank\.json$`),
		// temporaries of the set's files (package shard's and the
		// sink's): .NAME.tmp-DIGITS
		// sink's): .NAME.tmp-DIGITS, of shards, markers, the index and
		// the single file
		temp: regexp.MustCompile(`^\.(?:` + q + nn + `(?:\.swap-[0-9a-f]{12})?\.safetensors|\.` + q + nn + `(?:\.swap-[0-9a-f]{12})?\.ckpt-rank\.json|` + q + `\.safetensors(?:\.index\.json)?)\.tmp-[0-9]+$`),
	}
}

func (n multiNames) indexName() string  { return setname.IndexName(n.prefix, "") }
func (n multiNames) singleName() string { return setname.SingleName(n.prefix, "") }

// shardName is rank's shard: standard when the save replaces nothing,
// else tagged with the save's token, a name no committed file has.
func (n multiNames) shardName(rank, world int, token string) string {
	s := fmt.Sprintf("%s-%05d-of-%05d", n.prefix, rank+1, world)
	if token != "" {
		s += ".swap-" + token
	}
	return s + ".safetensors"
}

func (n multiNames) markerName(shard string) string {
	return "." + strings.TrimSuffix(shard, ".safetensors") + ".ckpt-rank.json"
}

// base is the checkpoint of a prefix committed in a location.
type base struct {
	id    string          // "" when there is none
	index *shard.Index    // its index, when it has one that parses
	files map[string]bool // the files it is made of (entry points included)
	hasIx bool            // PREFIX.safetensors.index.json exists
	hasSi bool            // PREFIX.safetensors exists
}

// readBase identifies the committed checkpoint of the listing's prefix:
// a hash of its index's bytes and of its single file's header and size.
// Every rank of a save computes the same, and Commit checks it again.
func readBase(fsys fs.FS, files map[string]int64, n multiNames) (*base, error) {
	b := &base{files: map[string]bool{}}
	h := sha256.New()
	io.WriteString(h, "ckpt.base/v1\n")
	if _, ok := files[n.indexName()]; ok {
		b.hasIx = true
		raw, err := safeopen.ReadFileFS(fsys, n.indexName(), shard.MaxIndexSize)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(h, "index %d\n", len(raw))
		h.Write(raw)
		b.files[n.indexName()] = true
		if ix, err := shard.ParseIndex(raw); err == nil {
			b.index = ix
			for _, f := range ix.Shards() {
				b.files[f] = true
			}
		}
	}
	if size, ok := files[n.singleName()]; ok {
		b.hasSi = true
		hdr, err := readHeaderBytes(fsys, n.singleName(), size)
		if err != nil {
			hdr = nil // a damaged single file: identified by its size
		}
		fmt.Fprintf(h, "single %d %d\n", size, len(hdr))
		h.Write(hdr)
		b.files[n.singleName()] = true
	}
	if b.hasIx || b.hasSi {
		b.id = hex.EncodeToString(h.Sum(nil))
	}
	return b, nil
}

// readHeaderBytes reads the header of a safetensors file (its length
// field included), bounded by the file's size and MaxHeaderSize.
func readHeaderBytes(fsys fs.FS, name string, size int64) ([]byte, error) {
	// A FIFO or a device would block the open: only regular files.
	if st, err := fs.Stat(fsys, name); err != nil {
		return nil, err
	} else if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file (%v)", name, st.Mode().Type())
	}
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var lb [8]byte
	if _, err := io.ReadFull(f, lb[:]); err != nil {
		return nil, fmt.Errorf("%s: reading the header length: %w", name, err)
	}
	n := binary.LittleEndian.Uint64(lb[:])
	if n > safetensors.MaxHeaderSize || int64(n) > size-8 {
		return nil, fmt.Errorf("%s: header length %d exceeds the file (%d bytes) or %d", name, n, size, safetensors.MaxHeaderSize)
	}
	b := make([]byte, 8+n)
	copy(b, lb[:])
	if _, err := io.ReadFull(f, b[8:]); err != nil {
		return nil, fmt.Errorf("%s: reading the header: %w", name, err)
	}
	return b, nil
}

// saveToken names the files of one save: every rank of the save computes
// it from the same inputs.
func saveToken(baseID, prefix string, world int, step int64) string {
	s := sha256.Sum256([]byte(fmt.Sprintf("ckpt.save/v1\x00%s\x00%s\x00%d\x00%d", baseID, prefix, world, step)))
	return hex.EncodeToString(s[:6])
}

// SaveShard writes one rank's part of a checkpoint that several processes
// save together (data- or tensor-parallel training): rank r of world
// writes its tensors as the shard PREFIX-{r+1}-of-{world}.safetensors of
// the checkpoint at location (a folder of a local or shared file system,
// or a location of a registered sink such as s3://BUCKET/PREFIX), then a
// small completion marker beside it. Once every rank has returned, one
// process calls Commit, which checks the ranks' shards and writes the
// index: until then no index names the new shards, and readers load what
// the location held before (or find no checkpoint there).
//
// Ranks need no coordination but their arguments: each names its files
// from the checkpoint committed at location (none, or the index and single
// file it finds), world and ShardOptions.Step, so every rank of a save
// computes the same names. When the location holds no checkpoint the
// shards take their standard names; when it does, they are named
// PREFIX-{r+1}-of-{world}.swap-TOKEN.safetensors (the swap names of
// package shard, which readers ignore until an index names them), so
// that no file of the committed checkpoint changes before Commit.
//
// The shard is written under a hidden temporary name and fsynced, then
// renamed into place (on an object store: uploaded in parts and
// completed); the marker, .{shard without .safetensors}.ckpt-rank.json,
// is written after it, holding the shard's size, the SHA-256 of its
// header, the CRC-32C of its bytes and its tensors. A rank that fails or
// is killed leaves no marker (and at most a hidden temporary file, which
// Commit removes); running it again rewrites its shard.
//
// The tensors are checked as Save checks them (every problem at once, as
// an errors.Join of *Error values); the data is read in place. Errors are
// *Error values: ErrOption (rank, world, options), ErrInvalid (the
// tensors or metadata), ErrTarget.
func SaveShard(ctx context.Context, location string, rank, world int, tensors []safetensors.TensorData, opts ShardOptions) (*ShardResult, error) {
	start := time.Now()
	if world < 1 || world > maxWorld {
		return nil, &Error{Kind: ErrOption, Path: location, Field: "world", Msg: fmt.Sprintf("%d is not in [1, %d]", world, maxWorld)}
	}
	if rank < 0 || rank >= world {
		return nil, &Error{Kind: ErrOption, Path: location, Field: "rank", Ranks: []int{rank}, Msg: fmt.Sprintf("%d is not in [0, %d)", rank, world)}
	}
	specs := make([]safetensors.TensorSpec, len(tensors))
	lens := make([]int, len(tensors))
	data := make(map[string][]byte, len(tensors))
	for i, t := range tensors {
		specs[i] = safetensors.TensorSpec{Name: t.Name, DType: t.DType, Shape: t.Shape}
		lens[i] = len(t.Data)
		data[t.Name] = t.Data
	}
	so := SaveOptions{Step: opts.Step, Epoch: opts.Epoch, Metadata: opts.Metadata, Prefix: opts.Prefix, MaxShardSize: math.MaxInt64}
	p, errs := newPlan(location, specs, lens, &so)
	if len(errs) > 0 {
		for _, e := range errs {
			if ce, ok := e.(*Error); ok {
				ce.Ranks = []int{rank}
			}
		}
		return nil, errors.Join(errs...)
	}
	if err := ctx.Err(); err != nil {
		return nil, &Error{Kind: ErrTarget, Path: location, Ranks: []int{rank}, Msg: "write", Err: err}
	}
	dest, err := openSink(ctx, location)
	if err != nil {
		return nil, err
	}
	names := namesOf(p.prefix)
	fsys := dest.FS()
	files, err := listSink(fsys)
	if err != nil {
		return nil, &Error{Kind: ErrTarget, Path: location, Ranks: []int{rank}, Msg: "listing the location", Err: err}
	}
	b, err := readBase(fsys, files, names)
	if err != nil {
		return nil, &Error{Kind: ErrTarget, Path: location, Ranks: []int{rank}, Msg: "reading the checkpoint there", Err: err}
	}
	token := saveToken(b.id, p.prefix, world, opts.Step)
	fileToken := token
	if b.id == "" {
		fileToken = ""
	}
	name := names.shardName(rank, world, fileToken)
	if b.files[name] {
		return nil, &Error{Kind: ErrConflict, Path: dest.Location(name), Ranks: []int{rank}, Msg: "the committed checkpoint uses this shard's name"}
	}
	m := rankMarker{Format: markerFormat, Prefix: p.prefix, Rank: rank, World: world, Step: opts.Step, Epoch: opts.Epoch,
		Save: token, Base: b.id, File: name}
	if err := writeRankShard(ctx, dest, name, p, data, &m); err != nil {
		if ce, ok := err.(*Error); ok {
			ce.Ranks = []int{rank}
		}
		return nil, err
	}
	at("shard-written")
	m.SavedAt = time.Now().UTC()
	doc, err := json.MarshalIndent(&m, "", " ")
	if err != nil {
		return nil, &Error{Kind: ErrTarget, Path: location, Ranks: []int{rank}, Msg: "write", Err: err}
	}
	marker := names.markerName(name)
	if err := writeSinkFile(ctx, dest, marker, append(doc, '\n'), false); err != nil {
		return nil, sinkErr(ctx, dest.Location(marker), rank, err)
	}
	return &ShardResult{Location: location, File: name, Marker: marker, Rank: rank, World: world, Save: token,
		Size: m.Size, Tensors: len(m.Tensors), DataSize: m.DataSize, Duration: time.Since(start)}, nil
}

// sinkErr wraps a failure to write through a sink.
func sinkErr(ctx context.Context, where string, rank int, err error) error {
	var ranks []int
	if rank >= 0 {
		ranks = []int{rank}
	}
	if ctx.Err() != nil {
		return &Error{Kind: ErrTarget, Path: where, Ranks: ranks, Msg: "write: canceled", Err: ctx.Err()}
	}
	return &Error{Kind: ErrTarget, Path: where, Ranks: ranks, Msg: "write", Err: err}
}

// writeSinkFile writes b as the file name of sink.
func writeSinkFile(ctx context.Context, dest sink.Sink, name string, b []byte, exclusive bool) error {
	return writeSinkFileIf(ctx, dest, name, b, exclusive, "")
}

// writeSinkFileIf is writeSinkFile that, given a version, replaces only
// that version of name (sink.CreateIf).
func writeSinkFileIf(ctx context.Context, dest sink.Sink, name string, b []byte, exclusive bool, version string) error {
	_, err := writeSinkFileVersion(ctx, dest, name, b, exclusive, version)
	return err
}

// writeSinkFileVersion is writeSinkFileIf that returns the version it
// wrote (sink.Written: "" on a sink that is not Conditional).
func writeSinkFileVersion(ctx context.Context, dest sink.Sink, name string, b []byte, exclusive bool, version string) (string, error) {
	return sink.WriteFile(ctx, dest, name, b, exclusive, version)
}

// writeRankShard streams the shard of a plan's tensors to name and fills
// in the marker's description of it: the file as written, its header with
// the checksums of its tensors (filled in at the end, when the sink's
// files are sink.Patchable) and its CRC-32C, combined from the header's
// and the tensors' without reading the file again.
func writeRankShard(ctx context.Context, dest sink.Sink, name string, p *plan, data map[string][]byte, m *rankMarker) error {
	where := dest.Location(name)
	if _, err := setwrite.HeaderLen(p.specs, p.metadata); err != nil {
		return &Error{Kind: ErrInvalid, Path: where, Msg: "header", Err: err}
	}
	for _, s := range p.specs {
		m.Tensors = append(m.Tensors, markerTensor{Name: s.Name, DType: s.DType.String(), Shape: s.Shape})
	}
	m.DataSize = p.data

	f, err := dest.Create(ctx, name, false)
	if err != nil {
		return sinkErr(ctx, where, -1, err)
	}
	err = func() error {
		w, flush, err := setwrite.NewWriter(f, p.specs, p.metadata)
		if err != nil {
			return err
		}
		for {
			if err := ctx.Err(); err != nil {
				return err
			}
			s, tw, err := w.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				return err
			}
			if _, err := tw.Write(data[s.Name]); err != nil {
				return err
			}
		}
		if err := w.Close(); err != nil {
			return err
		}
		if err := flush(); err != nil {
			return err
		}
		hdr := w.Header()
		hs := sha256.Sum256(hdr)
		m.HeaderLen, m.HeaderSHA256 = int64(len(hdr)), hex.EncodeToString(hs[:])
		m.Size = w.Size()
		crc, ok := setwrite.FileChecksum(w)
		if !ok {
			return errors.New("the writer computed no checksums")
		}
		m.CRC32C = safetensors.FormatChecksum(crc)
		return nil
	}()
	if err == nil {
		at("shard-closing")
		err = ctx.Err()
	}
	if err == nil {
		err = f.Close()
	}
	if err != nil {
		f.Abort()
		return sinkErr(ctx, where, -1, err)
	}
	return nil
}

// Commit completes a checkpoint that several ranks saved with SaveShard:
// run once, by any process, after every rank has returned. It finds the
// ranks' completion markers at location (of ShardOptions.Prefix; the
// newest save when markers of several saves onto the current checkpoint
// are there), and checks, before anything changes, that all world ranks
// finished: every marker present and well-formed, every shard present with
// the size and the header (SHA-256) that its marker records and the
// tensors it lists, no tensor name in two ranks (ErrInvalid, "duplicate", naming the
// tensor and both ranks), and, with CommitOptions.VerifyData, every
// shard's bytes (CRC-32C). Missing or incomplete ranks are one *Error of
// kind ErrIncomplete whose Ranks lists them all (wrapping an error per
// rank that says what is wrong): nothing is committed, readers still load
// the previous checkpoint, and the ranks' files stay for a later Commit
// once the missing ranks have saved.
//
// The index, PREFIX.safetensors.index.json (the shards in rank order,
// metadata.total_size), is then written in one step (a rename, or an
// object store's single PUT): that switches every index-following reader
// to the new checkpoint. When the location held no index, the write is
// exclusive (If-None-Match: * on an object store): an index written
// concurrently by another writer is never replaced (ErrConflict); when it
// held one, on an object store the new index replaces only the version
// Commit saw (If-Match on its ETag), so that an index another writer
// committed meanwhile is never replaced either (ErrConflict). A
// previous single file PREFIX.safetensors, which readers prefer to an
// index, is removed next (the switch for those readers); then the previous
// checkpoint's shards, the markers, and the leftovers of saves that were
// never committed. So if the committing process is killed at any instant,
// every reader loads either the complete previous checkpoint or the
// complete new one; a Commit run again after a kill finishes the cleanup.
//
// Ranks whose markers record another base than the checkpoint now at
// location (someone committed there since they saved) are ErrConflict. On
// a local or shared file system Commit holds package shard's lock of the
// set (".PREFIX.safetensors.lock") and syncs the folder.
func Commit(ctx context.Context, location string, opts CommitOptions) (*CommitResult, error) {
	prefix := cmp.Or(opts.Prefix, DefaultPrefix)
	if err := checkPrefix(prefix); err != nil {
		return nil, &Error{Kind: ErrOption, Path: location, Field: "Prefix", Msg: err.Error()}
	}
	if err := ctx.Err(); err != nil {
		return nil, &Error{Kind: ErrTarget, Path: location, Msg: "write: canceled", Err: err}
	}
	dest, err := openSink(ctx, location)
	if err != nil {
		return nil, err
	}
	names := namesOf(prefix)
	var exclusive bool // the folder's lock is held: temporaries are no live writer's
	if ds, ok := dest.(*sink.Dir); ok {
		lock, err := lockDir(ctx, ds, names.singleName())
		if err != nil {
			if ctx.Err() != nil {
				return nil, &Error{Kind: ErrTarget, Path: location, Msg: "write: canceled waiting for another save of the set", Err: ctx.Err()}
			}
			return nil, &Error{Kind: ErrTarget, Path: location, Msg: "taking the lock", Err: err}
		}
		defer lock.Unlock()
		exclusive = lock.Exclusive()
	}
	at("commit-locked")
	fsys := dest.FS()
	files, err := listSink(fsys)
	if err != nil {
		return nil, &Error{Kind: ErrTarget, Path: location, Msg: "listing the location", Err: err}
	}
	// The version of the index that the new one replaces, seen before it
	// is read: a replacement since is refused when the index is written.
	var ixVersion string
	ixGone := false
	if _, ok := files[names.indexName()]; ok {
		if ixVersion, ixGone, err = sink.SeenVersion(ctx, dest, names.indexName()); err != nil {
			return nil, &Error{Kind: ErrTarget, Path: dest.Location(names.indexName()), Msg: "reading the index's version", Err: err}
		}
	}
	cur, err := readBase(fsys, files, names)
	if err != nil {
		return nil, &Error{Kind: ErrTarget, Path: location, Msg: "reading the checkpoint there", Err: err}
	}
	g, err := chooseSave(fsys, files, names, cur, location)
	if err != nil {
		return nil, err
	}
	res := &CommitResult{Location: location, Index: names.indexName(), World: g.world, Step: g.step, Save: g.token}
	if err := g.verify(ctx, fsys, files, dest, opts.VerifyData); err != nil {
		return nil, err
	}
	wm := map[string]string{}
	owner := map[string]int{}
	for r, m := range g.markers {
		res.Files = append(res.Files, m.File)
		res.TotalSize += m.DataSize
		for _, t := range m.Tensors {
			if o, dup := owner[t.Name]; dup {
				return nil, &Error{Kind: ErrInvalid, Path: location, Tensor: t.Name, Ranks: []int{o, r},
					Msg: fmt.Sprintf("duplicate: ranks %d and %d both saved this tensor; nothing was committed", o, r)}
			}
			owner[t.Name] = r
			wm[t.Name] = m.File
		}
	}
	res.Tensors = len(wm)
	if err := ctx.Err(); err != nil {
		return nil, &Error{Kind: ErrTarget, Path: location, Msg: "write: canceled", Err: err}
	}
	at("commit-verified")

	// The switch: the index, in one step.
	if !g.committed {
		b, err := setwrite.IndexJSON(res.TotalSize, wm)
		if err != nil {
			return nil, &Error{Kind: ErrTarget, Path: location, Msg: "commit", Err: err}
		}
		if err := writeSinkFileIf(ctx, dest, names.indexName(), b, !cur.hasIx || ixGone, ixVersion); err != nil {
			if errors.Is(err, fs.ErrExist) {
				return nil, &Error{Kind: ErrConflict, Path: dest.Location(names.indexName()), Msg: "another writer wrote or replaced the index since Commit looked; it was not replaced", Err: err}
			}
			if ctx.Err() != nil {
				return nil, &Error{Kind: ErrTarget, Path: location, Msg: "write: canceled: the index was not written; the previous checkpoint is untouched", Err: ctx.Err()}
			}
			return nil, &Error{Kind: ErrTarget, Path: dest.Location(names.indexName()), Msg: "commit: writing the index; the previous checkpoint is untouched", Err: err}
		}
		if cur.hasIx {
			res.Replaced = append(res.Replaced, names.indexName())
		}
	}
	at("commit-indexed")
	// Readers that prefer a single file to an index switch when it goes.
	if cur.hasSi {
		if err := dest.Remove(ctx, names.singleName()); err != nil {
			return nil, &Error{Kind: ErrTarget, Path: dest.Location(names.singleName()), Err: err,
				Msg: "commit: the new index is in place, but the previous single file could not be removed: readers that prefer it to an index still load the previous checkpoint (Commit again to finish)"}
		}
		res.Replaced = append(res.Replaced, names.singleName())
	}
	at("commit-switched")

	// Cleanup: what no reader needs any more. Failures are warnings.
	keep := map[string]bool{names.indexName(): true}
	for _, m := range g.markers {
		keep[m.File] = true
	}
	remove := func(n string, replaced bool) {
		if err := dest.Remove(ctx, n); err != nil {
			res.Warnings = append(res.Warnings, fmt.Sprintf("could not remove %s: %v", n, err))
			return
		}
		if replaced {
			res.Replaced = append(res.Replaced, n)
		} else {
			res.Removed = append(res.Removed, n)
		}
	}
	for _, n := range sortedNames(files) {
		switch {
		case keep[n] || n == names.singleName() || n == names.indexName():
		case names.shard.MatchString(n):
			remove(n, cur.files[n])
		case names.temp.MatchString(n) && exclusive:
			remove(n, false)
		case names.marker.MatchString(n) && !g.isMarker[n]:
			remove(n, false)
		}
	}
	at("commit-cleaned")
	for _, n := range g.markerNames() {
		remove(n, false)
	}
	if ds, ok := dest.(*sink.Dir); ok {
		if err := atomicfile.SyncDir(ds.Root()); err != nil {
			res.Warnings = append(res.Warnings, fmt.Sprintf("syncing %s after the cleanup: %v", location, err))
		}
	}
	return res, nil
}

// checkPrefix applies package shard's rule for prefixes.
func checkPrefix(prefix string) error {
	if _, err := shard.WriteFrom(context.Background(), ".", prefix, "", nil, nil, nil); errors.Is(err, shard.ErrInvalidPrefix) {
		return errors.New(err.(*shard.Error).Msg)
	}
	return nil
}

// saveGroup is the markers of one save.
type saveGroup struct {
	token     string
	base      string
	world     int
	step      int64
	markers   []*rankMarker // by rank; nil where missing
	names     []string      // marker names by rank
	isMarker  map[string]bool
	newest    time.Time
	committed bool // the current index is this save's already (a Commit killed after its switch)
	bad       []error
}

func (g *saveGroup) markerNames() []string {
	var out []string
	for _, n := range g.names {
		if n != "" {
			out = append(out, n)
		}
	}
	return out
}

// chooseSave reads the markers and picks the save to commit: the newest
// of those made onto the current checkpoint (or already switched in).
func chooseSave(fsys fs.FS, files map[string]int64, names multiNames, cur *base, location string) (*saveGroup, error) {
	groups := map[string]*saveGroup{}
	var unreadable []error
	for _, n := range sortedNames(files) {
		mm := names.marker.FindStringSubmatch(n)
		if mm == nil {
			continue
		}
		b, err := safeopen.ReadFileFS(fsys, n, maxMarker)
		var m rankMarker
		if err == nil {
			err = json.Unmarshal(b, &m)
		}
		num, _ := strconv.Atoi(mm[1])
		of, _ := strconv.Atoi(mm[2])
		if err == nil && (m.Format != markerFormat || m.Prefix != names.prefix || m.World != of || m.Rank != num-1 ||
			m.World < 1 || m.World > maxWorld || names.markerName(m.File) != n || !names.shard.MatchString(m.File)) {
			err = errors.New("not a completion marker of this name (format, prefix, rank, world or file differ)")
		}
		if err != nil {
			unreadable = append(unreadable, fmt.Errorf("%s: %w", n, err))
			continue
		}
		g := groups[m.Save]
		if g == nil {
			g = &saveGroup{token: m.Save, base: m.Base, world: m.World, step: m.Step, isMarker: map[string]bool{},
				markers: make([]*rankMarker, m.World), names: make([]string, m.World)}
			groups[m.Save] = g
		}
		if g.base != m.Base || g.world != m.World || g.step != m.Step {
			g.bad = append(g.bad, fmt.Errorf("%s: base, world or step differ from the save's other markers", n))
			continue
		}
		g.markers[m.Rank], g.names[m.Rank] = &m, n
		g.isMarker[n] = true
		if m.SavedAt.After(g.newest) {
			g.newest = m.SavedAt
		}
	}
	var cands, stale []*saveGroup
	for _, g := range groups {
		switch {
		case g.base == cur.id:
			cands = append(cands, g)
		case cur.index != nil && g.owns(cur.index):
			g.committed = true
			cands = append(cands, g)
		default:
			stale = append(stale, g)
		}
	}
	if len(cands) == 0 {
		if len(stale) > 0 {
			return nil, &Error{Kind: ErrConflict, Path: location, Err: errors.Join(unreadable...),
				Msg: fmt.Sprintf("the ranks' markers (%d saves) record another checkpoint than the one at the location: another writer committed there since they saved; save the ranks again", len(stale))}
		}
		return nil, &Error{Kind: ErrIncomplete, Path: location, Err: errors.Join(unreadable...),
			Msg: "no rank's completion marker of prefix " + names.prefix + " is there: no save to commit"}
	}
	slices.SortFunc(cands, func(a, b *saveGroup) int {
		return cmp.Or(b.newest.Compare(a.newest), strings.Compare(a.token, b.token))
	})
	return cands[0], nil
}

// owns reports whether ix names exactly this save's shards.
func (g *saveGroup) owns(ix *shard.Index) bool {
	var want []string
	for _, m := range g.markers {
		if m == nil {
			return false
		}
		want = append(want, m.File)
	}
	got := ix.Shards()
	slices.Sort(want)
	slices.Sort(got)
	return slices.Equal(want, got)
}

// verify checks every rank's marker and shard; the missing or incomplete
// ranks are one ErrIncomplete.
func (g *saveGroup) verify(ctx context.Context, fsys fs.FS, files map[string]int64, dest sink.Sink, data bool) error {
	var ranks []int
	var errs []error
	errs = append(errs, g.bad...)
	for r := range g.world {
		if err := ctx.Err(); err != nil {
			return &Error{Kind: ErrTarget, Path: dest.Location(""), Msg: "write: canceled", Err: err}
		}
		m := g.markers[r]
		var err error
		if m == nil {
			err = &Error{Kind: ErrIncomplete, Path: dest.Location(""), Ranks: []int{r}, Msg: fmt.Sprintf("no completion marker of rank %d of %d (save %s, step %d)", r, g.world, g.token, g.step)}
		} else if err = checkRankShard(ctx, fsys, m, data); err != nil {
			err = &Error{Kind: ErrIncomplete, Path: dest.Location(m.File), Ranks: []int{r}, Err: err}
		}
		if err != nil {
			ranks = append(ranks, r)
			errs = append(errs, err)
		}
	}
	if len(ranks) == 0 && len(g.bad) == 0 {
		return nil
	}
	msg := fmt.Sprintf("%d of %d ranks of the save (step %d) are missing or incomplete; nothing was committed", len(ranks), g.world, g.step)
	if len(ranks) == 0 {
		msg = "markers of the save disagree; nothing was committed"
	}
	return &Error{Kind: ErrIncomplete, Path: dest.Location(""), Ranks: ranks, Msg: msg, Err: errors.Join(errs...)}
}

// checkRankShard checks one rank's shard against its marker.
func checkRankShard(ctx context.Context, fsys fs.FS, m *rankMarker, data bool) error {
	st, err := fs.Stat(fsys, m.File)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", m.File)
	}
	if st.Size() != m.Size {
		return fmt.Errorf("%s has %d bytes, its marker says %d", m.File, st.Size(), m.Size)
	}
	hdr, err := readHeaderBytes(fsys, m.File, st.Size())
	if err != nil {
		return err
	}
	if s := sha256.Sum256(hdr); int64(len(hdr)) != m.HeaderLen || hex.EncodeToString(s[:]) != m.HeaderSHA256 {
		return fmt.Errorf("%s: its header is not the one its marker records", m.File)
	}
	h, err := safetensors.ParseHeader(hdr[8:], st.Size()-int64(len(hdr)))
	if err != nil {
		return err
	}
	if len(h.Tensors) != len(m.Tensors) {
		return fmt.Errorf("%s holds %d tensors, its marker lists %d", m.File, len(h.Tensors), len(m.Tensors))
	}
	for _, t := range m.Tensors {
		info, ok := h.Lookup(t.Name)
		if !ok || info.DType.String() != t.DType || !slices.Equal(info.Shape, t.Shape) {
			return fmt.Errorf("%s: tensor %q is not as its marker lists it", m.File, t.Name)
		}
	}
	if !data {
		return nil
	}
	// Every tensor against the checksum its header names (a shard of a
	// sink that cannot patch has none), and the whole file against its
	// marker's CRC-32C, in one read.
	sums, err := h.Checksums()
	if err != nil {
		return fmt.Errorf("%s: %w", m.File, err)
	}
	f, err := fsys.Open(m.File)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	read := func(n int64) (uint32, error) {
		var crc uint32
		for n > 0 {
			if err := ctx.Err(); err != nil {
				return 0, err
			}
			b := buf[:min(n, int64(len(buf)))]
			if _, err := io.ReadFull(f, b); err != nil {
				return 0, fmt.Errorf("%s: %w", m.File, err)
			}
			crc = safetensors.UpdateChecksum(crc, b)
			n -= int64(len(b))
		}
		return crc, nil
	}
	crc, err := read(h.DataOffset)
	if err != nil {
		return err
	}
	for _, t := range h.Tensors {
		tc, err := read(t.ByteLen())
		if err != nil {
			return err
		}
		if want, ok := sums[t.Name]; ok && want != tc {
			return &safetensors.ChecksumError{File: m.File, Tensor: t.Name, Begin: h.DataOffset + t.Begin, End: h.DataOffset + t.End, Want: want, Got: tc}
		}
		crc = safetensors.CombineChecksums(crc, tc, t.ByteLen())
	}
	if got := safetensors.FormatChecksum(crc); got != m.CRC32C {
		return fmt.Errorf("%s: CRC-32C %s, its marker records %s", m.File, got, m.CRC32C)
	}
	return nil
}
