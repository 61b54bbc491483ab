package integrity

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/ckpt-go/ckpt/torch"
)

// PyTorch checkpoints.
//
// A PyTorch checkpoint (a torch.save zip archive) has no per-tensor
// checksums, but its archive records a CRC-32 and the sizes of each
// record in its directory and its local headers. Verify opens each
// PyTorch file through package torch, which refuses the structural damage
// of a truncated or mixed-up copy (no zip directory at the end, a damaged
// data.pkl, whose CRC the zip reader checks, a storage record that is
// missing, too short or runs past the end), then reads every record and
// compares it with its CRC-32 (torch.Checkpoint.VerifyRecords). A file
// that is a hub cache blob is read once: the pass that hashes it in order
// also sums its stored records (torch.StoredRecord), and VerifyRecords
// checks them from those sums, reading only their local headers
// (TestHubTorchBlobReadOnce). Its tensors count as verified by the
// archive's CRC-32 (Report.ArchiveTensors), not as checksummed.

// kindTorch is the FileReport.Kind of a PyTorch checkpoint file.
const kindTorch = "pytorch"

// readTorch opens fc as a PyTorch archive: its zip directory, pickle and
// every tensor's bounds. It is safe for concurrent use on distinct files.
func (v *verifier) readTorch(fc *fileCheck) {
	f, size, err := v.openRegular(fc.open)
	if err != nil {
		fc.bad = true
		v.openProblem(fc.display, err)
		return
	}
	fc.size = size
	defer v.fileReport(fc)
	ra, ok := f.(io.ReaderAt)
	if !ok {
		f.Close()
		fc.bad = true
		v.problem(newProblem(IO, fc.display, "", nil, "a PyTorch archive is read from its end, and this file can only be read in order"))
		return
	}
	v.addBlob(fc)
	ck, err := torch.NewReader(ra, size, "")
	if err != nil {
		f.Close()
		v.problem(torchProblem(fc.display, err))
		return
	}
	fc.ck, fc.ckFile = ck, f
	if fc.blob != nil {
		fc.records = ck.StoredRecords() // summed as the blob is hashed: its bytes are read once
	}
	v.mu.Lock()
	v.rep.Tensors += ck.Len()
	v.mu.Unlock()
	if v.cfg.require && ck.Len() > 0 {
		v.problem(newProblem(NoChecksums, fc.display, "", nil,
			fmt.Sprintf("a PyTorch checkpoint: no checksums for its %d %s (only its archive's CRC-32 per record)", ck.Len(), plural(ck.Len(), "tensor", "tensors"))))
	}
}

// torchProblem is the problem of a PyTorch file that package torch
// refuses to open.
func torchProblem(display string, err error) *Problem {
	var te *torch.Error
	if !errors.As(err, &te) {
		p := newProblem(IO, display, "", nil, "reading the archive: "+err.Error())
		p.Err = err
		return p
	}
	kind := InvalidArchive
	switch te.Kind {
	case torch.ErrIO:
		kind = IO
	case torch.ErrNotRegular:
		kind = NotRegular
	case torch.ErrInsecurePath:
		kind = InsecurePath
	}
	named := *te
	named.Tensor = "" // the problem names it
	p := newProblem(kind, display, te.Tensor, nil, strings.TrimPrefix(named.Error(), "torch: "))
	p.Err = err
	return p
}

// torchNames returns every name a PyTorch file holds: its tensors and
// their aliases (a weight map names both).
func torchNames(ck *torch.Checkpoint) []string {
	names := ck.Names()
	for a := range ck.Aliases() {
		names = append(names, a)
	}
	slices.Sort(names[ck.Len():])
	return names
}

// checkTorch reads the records of every PyTorch file that opened, one
// file at a time, workers records at once, and reports each that
// disagrees with its archive's CRC-32: one problem per tensor that views
// it (or one for the file, when no tensor does). The records of a hub
// blob were summed by the pass that hashed it (fileRun.sequential): they
// are checked from those sums, not read again.
func (v *verifier) checkTorch(workers int, read int64) error {
	var fcs []*fileCheck
	for _, fc := range v.files {
		if fc.ck != nil {
			fcs = append(fcs, fc)
		}
	}
	slices.SortFunc(fcs, func(a, b *fileCheck) int { return strings.Compare(a.display, b.display) })
	for _, fc := range fcs {
		opts := torch.VerifyOptions{Workers: workers, ReadSize: int(min(read, 64<<20))}
		if sums := fc.recordSums; sums != nil {
			opts.Summed = func(_, record string) (uint32, bool) {
				crc, ok := sums[record]
				return crc, ok
			}
		}
		st, err := fc.ck.VerifyRecords(v.ctx, opts, func(e *torch.RecordError) {
			v.recordProblems(fc, e)
		})
		if err != nil {
			if ctxErr := v.ctx.Err(); ctxErr != nil {
				return ctxErr
			}
			v.problem(newProblem(IO, fc.display, "", nil, "reading the records: "+err.Error()))
			continue
		}
		v.mu.Lock()
		v.rep.ArchiveTensors += st.Tensors
		v.rep.ArchiveBytes += st.Bytes
		v.mu.Unlock()
	}
	return v.ctx.Err()
}

// recordProblems reports a record of fc that disagrees with its archive.
func (v *verifier) recordProblems(fc *fileCheck, e *torch.RecordError) {
	kind := ChecksumMismatch
	if e.Err != nil {
		kind = IO
	}
	rng := &Range{e.Begin, e.End}
	where := fmt.Sprintf("record %s, bytes %d to %d", e.Record, e.Begin, e.End)
	if len(e.Tensors) == 0 {
		p := newProblem(kind, fc.display, "", rng, where+": "+e.Msg)
		p.Err = e
		v.problem(p)
		return
	}
	for _, t := range e.Tensors {
		msg := where
		if len(e.Tensors) > 1 {
			others := make([]string, 0, len(e.Tensors)-1)
			for _, o := range e.Tensors {
				if o != t {
					others = append(others, fmt.Sprintf("%q", o))
				}
			}
			msg += " (its storage, shared with " + strings.Join(others, ", ") + ")"
		} else {
			msg += " (its storage)"
		}
		p := newProblem(kind, fc.display, t, rng, msg+": "+e.Msg)
		p.Err = e
		v.problem(p)
	}
}

// closeTorch closes the PyTorch files opened.
func (v *verifier) closeTorch() {
	for _, fc := range v.files {
		if fc.ck != nil {
			fc.ck.Close()
			fc.ckFile.Close()
			fc.ck = nil
		}
	}
}

// indexInfo is what the structural checks use of a shard index, of
// either format.
type indexInfo struct {
	names     []string
	weightMap map[string]string
	shards    []string
	totalSize *int64 // metadata.total_size when it is checked
	warnings  []string
}

// parseTorchIndex parses a PyTorch shard index. Its metadata.total_size
// is not checked: writers count the tensors that share a storage
// differently (transformers once per storage, the hub by storage size).
func parseTorchIndex(data []byte) (*indexInfo, error) {
	ix, err := torch.ParseIndex(data)
	if err != nil {
		return nil, err
	}
	return &indexInfo{names: ix.Names, weightMap: ix.WeightMap, shards: ix.Shards}, nil
}

// torchIndexProblem is the problem of a PyTorch index that does not
// parse.
func torchIndexProblem(display string, err error) *Problem {
	kind := InvalidIndex
	if errors.Is(err, torch.ErrInsecurePath) {
		kind = InsecurePath
	}
	msg := strings.TrimPrefix(err.Error(), "torch: ")
	if !strings.HasPrefix(msg, "invalid index") {
		msg = "invalid index: " + msg
	}
	p := newProblem(kind, display, "", nil, msg)
	p.Err = err
	return p
}

// parsed reports whether fc's tensors are known: its header parsed or
// its archive opened.
func (fc *fileCheck) parsed() bool { return fc.hdr != nil || fc.ck != nil }

// lookup returns the bytes of the tensor name of fc, and whether fc
// holds it (an alias of a PyTorch file counts as held).
func (fc *fileCheck) lookup(name string) (int64, bool) {
	switch {
	case fc.hdr != nil:
		info, ok := fc.hdr.Lookup(name)
		if !ok {
			return 0, false
		}
		return info.ByteLen(), true
	case fc.ck != nil:
		t, err := fc.ck.Tensor(name)
		if err != nil {
			return 0, false
		}
		return t.ByteLen(), true
	}
	return 0, false
}

// tensorNames returns the names fc holds, in its order.
func (fc *fileCheck) tensorNames() []string {
	switch {
	case fc.hdr != nil:
		out := make([]string, len(fc.hdr.Tensors))
		for i, t := range fc.hdr.Tensors {
			out[i] = t.Name
		}
		return out
	case fc.ck != nil:
		return torchNames(fc.ck)
	}
	return nil
}
