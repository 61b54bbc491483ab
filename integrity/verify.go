package integrity

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/ckpt-go/ckpt/internal/safeopen"
	"github.com/ckpt-go/ckpt/internal/setname"
	"github.com/ckpt-go/ckpt/internal/srcfs"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/shard"
	"github.com/ckpt-go/ckpt/source"
	"github.com/ckpt-go/ckpt/torch"
	"github.com/ckpt-go/ckpt/variant"
)

// Verify checks the checkpoint at location and reports every problem it
// finds. location is a .safetensors file, a shard index
// (*.safetensors.index*.json) with its shards, a PyTorch file or index
// (named as the loader names them: variant.IsPyTorchName), a
// folder (every safetensors file and index in it, of every variant, and
// the PyTorch weights package variant names), a diffusers pipeline folder
// (model_index.json: every listed component's folder, and the root), a
// Hugging Face hub cache snapshot, or a "SCHEME://" location opened through
// package source's registry (import package remote for s3://, https://).
// PyTorch files are checked as the package documentation says.
//
// It checks, for every safetensors file: that its header parses, that the
// file is as long as the header says (neither truncated, naming each tensor
// cut, nor with trailing bytes), that its checksums are intact and, when it
// has them, every tensor's stored bytes against its checksum (every byte
// is read, in parallel pieces, with memory bounded by WithWorkers). For
// every index: its weight_map against the shards' headers (a tensor no
// shard or the wrong shard holds, a tensor a shard holds that the index
// does not name, a tensor held by two shards, metadata.total_size against
// the bytes of the tensors it names, a shard file that is missing). For a
// hub cache snapshot (…/snapshots/REV/FILE linking to …/blobs/HASH, with
// FollowSymlinks): that each blob's content hashes to its name (SHA-256
// for the 64-hex names of LFS files, the git blob SHA-1 for the 40-hex
// names of small files).
//
// Problems go into the Report; the error is for what prevented the check
// itself: a location that cannot be opened or listed, a canceled ctx.
// Nothing is ever written, and no file is opened in a way that blocks (a
// FIFO or a device is refused as NotRegular before it is read).
func Verify(ctx context.Context, location string, opts ...Option) (*Report, error) {
	cfg := buildConfig(opts)
	v, name, err := newVerifier(ctx, location, cfg)
	if err != nil {
		return nil, err
	}
	defer v.close()
	if err := v.plan(name); err != nil {
		return nil, err
	}
	if err := v.check(); err != nil {
		return nil, err
	}
	return v.report(), nil
}

// verifier is one run of Verify.
type verifier struct {
	ctx      context.Context
	cfg      config
	location string
	src      srcfs.FS
	closer   io.Closer // the file system source.Open opened (nil with WithFS)
	root     string    // file names in problems are relative to it
	hub      bool      // some file is a hub cache blob

	files  map[string]*fileCheck // by name as reached
	found  int                   // safetensors files and indexes found
	others map[string]bool       // names of non-safetensors files checked
	rep    Report

	mu sync.Mutex // guards rep.Problems and the counters while data is checked
}

func newVerifier(ctx context.Context, location string, cfg config) (*verifier, string, error) {
	v := &verifier{ctx: ctx, cfg: cfg, location: location, files: map[string]*fileCheck{}, others: map[string]bool{}}
	v.rep = Report{Location: location, Problems: []*Problem{}, Files: []FileReport{}, Notes: []string{}}
	name := location
	if cfg.withFS {
		if cfg.src.FS() == nil {
			return nil, "", &fs.PathError{Op: "verify", Path: location, Err: errors.New("WithFS was given a nil file system")}
		}
		name = path.Clean(cmpOr(name, "."))
		if !fs.ValidPath(name) {
			return nil, "", &fs.PathError{Op: "verify", Path: location, Err: errors.New("with WithFS the location is an fs.FS name: slash-separated, without a leading slash or .. elements")}
		}
		v.src = cfg.src
	} else {
		fsys, n, err := source.Open(ctx, location)
		if err != nil {
			return nil, "", err
		}
		if c, ok := fsys.(io.Closer); ok {
			v.closer = c
		}
		v.src, name = cfg.src.WithFS(fsys), n
	}
	return v, name, nil
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func (v *verifier) close() {
	v.closeTorch()
	if v.closer != nil {
		v.closer.Close()
	}
}

// problem records a problem (safe for concurrent use).
func (v *verifier) problem(p *Problem) {
	v.mu.Lock()
	v.rep.Problems = append(v.rep.Problems, p)
	v.mu.Unlock()
}

func (v *verifier) note(format string, args ...any) {
	v.mu.Lock()
	v.rep.Notes = append(v.rep.Notes, fmt.Sprintf(format, args...))
	v.mu.Unlock()
}

// rel names a file in problems: relative to the root, slash-separated.
func (v *verifier) rel(name string) string {
	if v.src.IsOS() {
		r, err := filepath.Rel(v.root, name)
		if err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
			return filepath.ToSlash(name)
		}
		return filepath.ToSlash(r)
	}
	if v.root == "." {
		return name
	}
	if name == v.root {
		return "."
	}
	if r, ok := strings.CutPrefix(name, v.root+"/"); ok {
		return r
	}
	return name
}

// plan finds what to check under name, reads every header and index, and
// runs the structural checks.
func (v *verifier) plan(name string) error {
	st, err := v.src.Stat(name)
	if err != nil {
		var pe *fs.PathError
		if v.src.IsOS() && errors.As(err, &pe) {
			return err // names the path
		}
		return &fs.PathError{Op: "verify", Path: v.location, Err: err}
	}
	switch {
	case st.IsDir() && v.src.IsFolder(name):
		v.root = name
		return v.folderOrPipeline(name)
	case v.src.Base(name) == variant.ModelIndex:
		v.root = v.src.Dir(name)
		return v.folderOrPipeline(v.root)
	case strings.HasSuffix(name, ".json"):
		v.root = v.src.Dir(name)
		v.index(name, true)
	default:
		v.root = v.src.Dir(name)
		v.file(name, true)
	}
	return v.ctx.Err()
}

// folderOrPipeline checks a pipeline root (it has a model_index.json) or a
// plain folder.
func (v *verifier) folderOrPipeline(dir string) error {
	mi := v.src.Join(dir, variant.ModelIndex)
	if _, err := v.src.Lstat(mi); err != nil {
		if err := v.folder(dir, true); err != nil {
			return err
		}
		if v.found == 0 {
			v.problem(newProblem(NoWeights, v.rel(dir), "", nil, "no safetensors or PyTorch weights file or index to verify"))
		}
		return v.ctx.Err()
	}
	// model_index.json: its blob, when in a hub snapshot, and its
	// components.
	names, err := variant.Components(dir, variant.WithSource(v.src))
	if err != nil {
		v.modelIndexProblem(mi, err)
		v.found++ // no component to look for weights in: the problem says why
	} else if real, ok := v.quietResolve(mi); ok {
		v.other(mi, real, "model_index")
	}
	if err := v.folder(dir, true); err != nil {
		return err
	}
	for _, n := range names {
		if err := v.ctx.Err(); err != nil {
			return err
		}
		comp := v.src.Join(dir, n)
		if n == "" || n == "." || n == ".." || strings.ContainsAny(n, `/\:`) || strings.ContainsFunc(n, func(r rune) bool { return r < 0x20 }) {
			v.problem(newProblem(MissingComponent, v.rel(mi), "", nil,
				fmt.Sprintf("component %s is not a bare folder name", strconv.Quote(n))))
			continue
		}
		st, err := v.src.Stat(comp)
		if err != nil || !st.IsDir() {
			v.problem(newProblem(MissingComponent, v.rel(comp), "", nil, "listed in "+variant.ModelIndex+" but there is no such folder"))
			continue
		}
		if _, ok := v.resolve(comp, false); !ok {
			continue
		}
		if err := v.folder(comp, false); err != nil {
			return err
		}
	}
	if v.found == 0 {
		v.problem(newProblem(NoWeights, v.rel(dir), "", nil, "no safetensors or PyTorch weights file or index to verify in the pipeline"))
	}
	return v.ctx.Err()
}

// modelIndexProblem reports why model_index.json could not be read.
func (v *verifier) modelIndexProblem(mi string, err error) {
	kind, msg := InvalidModelIndex, err.Error()
	var ve *variant.Error
	if errors.As(err, &ve) {
		msg = ve.Msg
		if ve.Err != nil {
			var se *shard.Error
			if errors.As(ve.Err, &se) && se.Kind == shard.ErrInsecurePath {
				msg = ""
			} else {
				msg = strings.TrimPrefix(msg+": "+ve.Err.Error(), ": ")
			}
		}
		switch ve.Kind {
		case variant.ErrInsecurePath:
			kind, msg = InsecurePath, insecureMsg
		case variant.ErrNotRegular:
			kind = NotRegular
		default:
			msg = "cannot list the components: " + msg
		}
	}
	v.problem(newProblem(kind, v.rel(mi), "", nil, msg))
}

// insecureMsg is the message of an InsecurePath problem.
const insecureMsg = "a symbolic link that leads out of its folder: not followed (FollowSymlinks allows it)"

// isIndexName reports a shard index's name: the set naming rules'
// (package setname), or any name ending in ".safetensors.index.json".
func isIndexName(name string) bool {
	if s, ok := setname.ParseVisible(name); ok && s.IsIndex() {
		return true
	}
	return strings.HasSuffix(name, ".safetensors.index.json")
}

// folder checks the safetensors files and indexes of the folder dir, and
// its PyTorch weights named as package variant names them (the files the
// loader reads: pytorch_model.bin, its variants, indexes and shards):
// each index with its shards, then the files no index named, as single
// files.
// In a hub cache snapshot every other file's blob is checked too. A root
// folder that cannot be listed is an error; a component folder, a
// problem.
func (v *verifier) folder(dir string, root bool) error {
	entries, err := v.src.ReadDir(dir)
	if err != nil {
		if root {
			return &fs.PathError{Op: "verify", Path: v.location, Err: err}
		}
		v.problem(newProblem(IO, v.rel(dir), "", nil, "cannot list the folder: "+err.Error()))
		return nil
	}
	var singles []string
	for _, e := range entries {
		if err := v.ctx.Err(); err != nil {
			return err
		}
		name := e.Name()
		p := v.src.Join(dir, name)
		switch {
		case isIndexName(name):
			v.index(p, false)
		case strings.HasSuffix(name, ".safetensors"):
			singles = append(singles, p)
		case variant.FormatOf(name) == variant.FormatPyTorch && strings.HasSuffix(name, ".json"):
			v.index(p, false)
		case variant.FormatOf(name) == variant.FormatPyTorch:
			singles = append(singles, p)
		case name == variant.ModelIndex:
			// checked by folderOrPipeline
		case !e.IsDir() && v.src.IsOS() && e.Type()&fs.ModeSymlink != 0 && !strings.HasPrefix(name, "."):
			// A file of a hub cache snapshot: its blob is checked.
			if real, ok := v.quietResolve(p); ok {
				if _, _, hub := hubBlob(p, real); hub {
					v.other(p, real, "other")
				}
			}
		}
	}
	var fresh []*fileCheck
	for _, p := range singles {
		if _, seen := v.files[p]; seen {
			continue // a shard of an index
		}
		fc, _ := v.locate(p, false)
		if fc.missing != "" {
			v.problem(newProblem(IO, fc.display, "", nil, fc.missing))
		}
		if sn, ok := setname.ParseVisible(v.src.Base(p)); ok && sn.IsShard() {
			v.note("%s: named like a shard, but no index in its folder names it: verified as a file of its own", fc.display)
		}
		fresh = append(fresh, fc)
	}
	v.readHeaders(fresh)
	if err := v.ctx.Err(); err != nil {
		return err
	}
	return nil
}

// resolve applies the symlink rule to name, a file or folder inside its
// folder (unless direct: the location itself, followed wherever it
// leads): it returns the name to open, or reports an InsecurePath
// problem and returns false. A name that does not exist, or a dangling
// link, returns ("", true): the open then reports it.
func (v *verifier) resolve(name string, direct bool) (string, bool) {
	if !v.src.IsOS() {
		return name, true
	}
	if direct {
		if real, err := filepath.EvalSymlinks(name); err == nil {
			return real, true
		}
		return name, true
	}
	real, inside, err := v.src.Resolve(name)
	if err != nil {
		return "", true
	}
	if !inside && !v.src.Follow() {
		v.problem(newProblem(InsecurePath, v.rel(name), "", nil, insecureMsg))
		return "", false
	}
	return real, true
}

// unresolved says why the symbolic links of name, which exists, cannot be
// followed.
func (v *verifier) unresolved(name string) string {
	_, _, err := v.src.Resolve(name)
	if errors.Is(err, fs.ErrNotExist) {
		return "a dangling symbolic link"
	}
	return "a symbolic link that cannot be followed (a loop?)"
}

// quietResolve is resolve without a problem: where name's links lead
// when it may be read.
func (v *verifier) quietResolve(name string) (string, bool) {
	real, inside, err := v.src.Resolve(name)
	if err != nil || (!inside && !v.src.Follow()) {
		return "", false
	}
	return real, true
}

// fileCheck is one safetensors file, a PyTorch file (kind "pytorch"),
// or, with kind "other" or "model_index", a file whose hub blob is
// checked.
type fileCheck struct {
	name    string // as reached (in its folder)
	open    string // what is opened: name with its links evaluated
	display string
	kind    string

	missing string // why it is not there ("" when it is): who named it reports it
	bad     bool   // not checked: insecure, not regular, unreadable
	size    int64
	hdr     *safetensors.Header // nil unless it parsed
	ck      *torch.Checkpoint   // a PyTorch file that opened, read through ckFile
	ckFile  fs.File
	// A PyTorch hub blob's stored records, summed by the pass that
	// hashes it (recordSums: the CRC-32 of each record it read whole).
	records    []torch.StoredRecord
	recordSums map[string]uint32
	sums       map[string]uint32 // nil without checksums
	blob       *blobCheck        // a hub cache blob
	seqOnly    bool              // its source can only be read in order
}

// dataEnd is where the header says the data section ends.
func dataEnd(h *safetensors.Header) int64 {
	var end int64
	for _, t := range h.Tensors {
		end = max(end, t.End)
	}
	return h.DataOffset + end
}

// file checks the safetensors file name (once, however many indexes name
// it) and returns it.
func (v *verifier) file(name string, direct bool) *fileCheck {
	fc, fresh := v.locate(name, direct)
	if fresh {
		v.readHeaders([]*fileCheck{fc})
	}
	return fc
}

// readHeaders reads the headers of the files located (fc.open set), a
// few at a time (an object store answers each with a request or two).
func (v *verifier) readHeaders(fcs []*fileCheck) {
	limit := 4
	if !v.src.IsOS() {
		limit = 16
	}
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for _, fc := range fcs {
		if fc.open == "" {
			continue
		}
		if v.ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			v.readHeader(fc)
		}()
	}
	wg.Wait()
}

// locate registers the safetensors file name, applies the symlink rule and
// finds what to open; fresh is false when it was located before.
func (v *verifier) locate(name string, direct bool) (fc *fileCheck, fresh bool) {
	if fc, ok := v.files[name]; ok {
		return fc, false
	}
	fc = &fileCheck{name: name, display: v.rel(name), kind: "safetensors"}
	if variant.IsPyTorchName(v.src.Base(name)) {
		fc.kind = kindTorch
	}
	v.files[name] = fc
	v.found++
	if _, err := v.src.Lstat(name); err != nil && errors.Is(err, fs.ErrNotExist) {
		fc.missing = "missing"
		return fc, true
	}
	real, ok := v.resolve(name, direct)
	if !ok {
		fc.bad = true
		return fc, true
	}
	if real == "" {
		fc.missing = v.unresolved(name)
		return fc, true
	}
	fc.open = real
	return fc, true
}

// openRegular opens the file name of the source for reading, refusing what
// is not a regular file without blocking, and returns its size.
func (v *verifier) openRegular(name string) (fs.File, int64, error) {
	var f fs.File
	var st fs.FileInfo
	var err error
	if v.src.IsOS() {
		f, st, err = safeopen.Open(name)
	} else {
		f, st, err = safeopen.OpenFS(v.src.FS(), name)
	}
	if err != nil {
		return nil, 0, err
	}
	return f, st.Size(), nil
}

// openProblem reports a file that could not be opened.
func (v *verifier) openProblem(display string, err error) {
	var nr *safeopen.NotRegularError
	if errors.As(err, &nr) {
		v.problem(newProblem(NotRegular, display, "", nil, safeopen.Describe(nr.Mode)+", not a regular file"))
		return
	}
	v.problem(newProblem(IO, display, "", nil, "cannot open: "+err.Error()))
}

// readHeader opens fc, reads and parses its header, and checks the file's
// size against it and its checksums' integrity. It is safe for concurrent
// use on distinct files.
func (v *verifier) readHeader(fc *fileCheck) {
	if fc.kind == kindTorch {
		v.readTorch(fc)
		return
	}
	f, size, err := v.openRegular(fc.open)
	if err != nil {
		fc.bad = true
		v.openProblem(fc.display, err)
		return
	}
	defer f.Close()
	fc.size = size
	ra, ok := f.(io.ReaderAt)
	if !ok {
		fc.seqOnly = true
		ra = &sequentialReaderAt{r: f}
	}
	v.addBlob(fc)
	hdr, p := parseHeader(fc.display, ra, size)
	if p != nil {
		v.problem(p)
		v.fileReport(fc)
		return
	}
	fc.hdr = hdr
	defer v.fileReport(fc)
	end := dataEnd(hdr)
	switch {
	case size < end:
		for _, t := range hdr.Tensors {
			b, e := hdr.DataOffset+t.Begin, hdr.DataOffset+t.End
			if e <= size || t.ByteLen() == 0 {
				continue
			}
			where := "inside"
			if b >= size {
				where = "before"
			}
			v.problem(newProblem(Truncated, fc.display, t.Name, &Range{b, e},
				fmt.Sprintf("truncated: the file ends at byte %d, %s the tensor's bytes %d to %d (the header needs %d bytes)", size, where, b, e, end)))
		}
	case size > end:
		v.problem(newProblem(TrailingBytes, fc.display, "", &Range{end, size},
			fmt.Sprintf("%d trailing bytes: the data end at byte %d, the file at %d", size-end, end, size)))
	}
	sums, err := hdr.Checksums()
	v.mu.Lock()
	v.rep.Tensors += len(hdr.Tensors)
	if sums == nil {
		v.rep.UncheckedTensors += len(hdr.Tensors)
	}
	v.mu.Unlock()
	switch {
	case err != nil:
		msg := err.Error()
		var se *safetensors.Error
		if errors.As(err, &se) {
			msg = se.Msg
		}
		v.problem(newProblem(DamagedChecksums, fc.display, "", nil, msg))
	case sums == nil:
		if v.cfg.require && len(hdr.Tensors) > 0 {
			v.problem(newProblem(NoChecksums, fc.display, "", nil,
				fmt.Sprintf("no checksums for its %d %s", len(hdr.Tensors), plural(len(hdr.Tensors), "tensor", "tensors"))))
		}
	default:
		fc.sums = sums
	}
}

// fileReport records fc among the files checked.
func (v *verifier) fileReport(fc *fileCheck) {
	r := FileReport{Name: fc.display, Kind: fc.kind, Size: fc.size}
	if fc.hdr != nil {
		r.Tensors = len(fc.hdr.Tensors)
	}
	if fc.ck != nil {
		r.Tensors = fc.ck.Len()
	}
	r.Checksums = fc.sums != nil
	if fc.blob != nil {
		r.Blob = fc.blob.algo + ":" + fc.blob.want
	}
	v.mu.Lock()
	v.rep.Files = append(v.rep.Files, r)
	v.mu.Unlock()
}

// parseHeader reads and parses the header of a file of the given size
// without checking its size against it (dataEnd does), so that a
// truncated file still names its tensors.
func parseHeader(display string, ra io.ReaderAt, size int64) (*safetensors.Header, *Problem) {
	if size < 8 {
		return nil, newProblem(Truncated, display, "", &Range{size, 8},
			fmt.Sprintf("truncated: %d bytes, shorter than the 8-byte header length", size))
	}
	var lenBuf [8]byte
	if _, err := ra.ReadAt(lenBuf[:], 0); err != nil {
		return nil, newProblem(IO, display, "", nil, "reading the header length: "+err.Error())
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > safetensors.MaxHeaderSize {
		return nil, newProblem(InvalidHeader, display, "", nil,
			fmt.Sprintf("invalid header: the header length field says %d bytes, more than the %d allowed", n, safetensors.MaxHeaderSize))
	}
	if int64(n)+8 > size {
		return nil, newProblem(Truncated, display, "", &Range{size, 8 + int64(n)},
			fmt.Sprintf("truncated: %d bytes, but the header length field says the header alone ends at byte %d", size, 8+n))
	}
	raw := make([]byte, n)
	if _, err := ra.ReadAt(raw, 8); err != nil && !(err == io.EOF && int64(n)+8 == size) {
		return nil, newProblem(IO, display, "", nil, "reading the header: "+err.Error())
	}
	h, err := safetensors.ParseHeader(raw, -1)
	if err != nil {
		return nil, newProblem(InvalidHeader, display, "", nil, "invalid header: "+strings.TrimPrefix(err.Error(), "safetensors: "))
	}
	return h, nil
}

// sequentialReaderAt serves the in-order ReadAt calls of parseHeader from
// a file that has no ReadAt.
type sequentialReaderAt struct {
	r   io.Reader
	pos int64
}

func (s *sequentialReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off != s.pos {
		return 0, fmt.Errorf("read at %d: the file can only be read in order (at %d)", off, s.pos)
	}
	n, err := io.ReadFull(s.r, p)
	s.pos += int64(n)
	if err == io.ErrUnexpectedEOF {
		err = io.EOF
	}
	return n, err
}

// other records a file, whose links lead to real, that is not a safetensors file (an index,
// model_index.json, a file of a hub snapshot) among the files checked;
// when it is a hub blob, its hash is checked with the data.
func (v *verifier) other(name, real, kind string) {
	if v.others[name] {
		return
	}
	v.others[name] = true
	fc := &fileCheck{name: name, open: real, display: v.rel(name), kind: kind}
	f, size, err := v.openRegular(real)
	if err != nil {
		v.openProblem(fc.display, err)
		return
	}
	f.Close()
	fc.size = size
	if v.src.IsOS() {
		if algo, want, hub := hubBlob(name, real); hub {
			fc.blob = v.newBlob(fc.display, algo, want)
		}
	}
	if fc.blob != nil {
		v.files[name] = fc
	}
	v.fileReport(fc)
}

// addBlob notes that fc is a hub cache blob, when it is one.
func (v *verifier) addBlob(fc *fileCheck) {
	if !v.src.IsOS() {
		return
	}
	if algo, want, hub := hubBlob(fc.name, fc.open); hub {
		fc.blob = v.newBlob(fc.display, algo, want)
	}
}

// newBlob returns the check of a blob named want, or nil (with a note)
// for a name that is no hash.
func (v *verifier) newBlob(display, algo, want string) *blobCheck {
	v.mu.Lock()
	v.hub = true
	v.mu.Unlock()
	if algo == "" {
		v.note("%s: its hub blob %s is not named by a hash: not checked", display, want)
		return nil
	}
	return &blobCheck{algo: algo, want: want}
}

// index checks the shard index name, its shards and its weight_map
// against their headers.
func (v *verifier) index(name string, direct bool) {
	v.found++
	display := v.rel(name)
	real, ok := v.resolve(name, direct)
	if !ok {
		return
	}
	if real == "" {
		v.problem(newProblem(IO, display, "", nil, v.unresolved(name)))
		return
	}
	data, err := v.src.ReadFile(real, shard.MaxIndexSize)
	if err != nil {
		var tl *safeopen.TooLargeError
		if errors.As(err, &tl) {
			v.problem(newProblem(InvalidIndex, display, "", nil,
				fmt.Sprintf("invalid index: %d bytes, more than the %d an index may have", tl.Size, shard.MaxIndexSize)))
			return
		}
		v.openProblem(display, err)
		return
	}
	v.other(name, real, "index")
	var ix *indexInfo
	if variant.IsPyTorchName(v.src.Base(name)) {
		if ix, err = parseTorchIndex(data); err != nil {
			v.problem(torchIndexProblem(display, err))
			return
		}
	} else if ix, err = parseIndex(data); err != nil {
		kind := InvalidIndex
		if errors.Is(err, shard.ErrInsecurePath) {
			kind = InsecurePath
		}
		v.problem(newProblem(kind, display, "", nil, "invalid index: "+strings.TrimPrefix(err.Error(), "shard: ")))
		return
	}
	for _, w := range ix.warnings {
		v.note("%s: %s", display, w)
	}
	dir := v.src.Dir(name)
	shards := ix.shards
	files := make(map[string]*fileCheck, len(shards))
	complete := true // every shard there and readable
	var fresh []*fileCheck
	for _, s := range shards {
		fc, isNew := v.locate(v.src.Join(dir, s), false)
		files[s] = fc
		if isNew {
			fresh = append(fresh, fc)
		}
	}
	v.readHeaders(fresh)
	for _, s := range shards {
		fc := files[s]
		switch {
		case fc.missing == "missing":
			complete = false
			v.problem(newProblem(MissingShard, display, "", nil, "names shard "+s+", which is missing"))
		case fc.missing != "":
			complete = false
			v.problem(newProblem(MissingShard, display, "", nil, "names shard "+s+", which is "+fc.missing))
		case !fc.parsed():
			complete = false
		}
	}

	// Every tensor the index names must be in the shard it names.
	var total int64
	for _, t := range ix.names {
		s := ix.weightMap[t]
		fc := files[s]
		if !fc.parsed() {
			continue // the shard's own problem says why
		}
		if n, ok := fc.lookup(t); ok {
			total += n
			continue
		}
		complete = false
		var others []string
		for _, o := range shards {
			if o != s && holds(files[o], t) {
				others = append(others, o)
			}
		}
		has := "whose header does not have it"
		if fc.ck != nil {
			has = "which does not hold it"
		}
		msg := "the index maps it to " + s + ", " + has + "; no shard of the index holds it"
		if len(others) > 0 {
			msg = "the index maps it to " + s + ", " + has + "; it is in " + strings.Join(others, " and ") + " (the index names the wrong shard)"
		}
		v.problem(newProblem(TensorMissingFromShard, display, t, nil, msg))
	}

	// Every tensor of a shard must be named by the index, for that shard.
	for _, s := range shards {
		fc := files[s]
		if !fc.parsed() {
			continue
		}
		for _, t := range fc.tensorNames() {
			named, ok := ix.weightMap[t]
			switch {
			case !ok:
				v.problem(newProblem(UnmappedTensor, fc.display, t, nil,
					"held by the shard, but the index "+v.src.Base(name)+" does not name it"))
			case named != s && holds(files[named], t):
				v.problem(newProblem(DuplicateTensor, fc.display, t, nil,
					"also held by "+named+", the shard the index "+v.src.Base(name)+" maps it to"))
			}
		}
	}

	// metadata.total_size: the bytes of the tensors the index names.
	if want := ix.totalSize; want != nil && complete && *want != total {
		v.problem(newProblem(TotalSizeMismatch, display, "", nil,
			fmt.Sprintf("metadata.total_size is %d, but the tensors the index names hold %d bytes", *want, total)))
	}
}

// parseIndex parses a safetensors shard index (package shard's rules).
func parseIndex(data []byte) (*indexInfo, error) {
	ix, err := shard.ParseIndex(data)
	if err != nil {
		return nil, err
	}
	info := &indexInfo{names: ix.Names(), weightMap: ix.WeightMap, shards: ix.Shards(), warnings: ix.Warnings}
	if n, ok := ix.Metadata["total_size"].(json.Number); ok {
		if want, err := n.Int64(); err == nil && want == ix.TotalSize {
			info.totalSize = &want
		}
	}
	return info, nil
}

// holds reports whether fc, when its tensors are known, has the tensor.
func holds(fc *fileCheck, tensor string) bool {
	if fc == nil {
		return false
	}
	_, ok := fc.lookup(tensor)
	return ok
}

// report returns the report, sorted.
func (v *verifier) report() *Report {
	r := v.rep
	sortProblems(r.Problems)
	slices.SortFunc(r.Files, func(a, b FileReport) int { return strings.Compare(a.Name, b.Name) })
	slices.Sort(r.Notes)
	return &r
}
