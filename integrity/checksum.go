package integrity

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/sink"
)

// ChecksumReport says what Checksum did.
type ChecksumReport struct {
	// Location is the location given.
	Location string `json:"location"`
	// Written are the files rewritten with checksums, relative to the
	// location (as Report names files), sorted.
	Written []string `json:"written"`
	// Verified are the files that already had checksums: verified, and
	// left as they were.
	Verified []string `json:"verified"`
	// Skipped are the files that cannot take checksums, sorted: PyTorch
	// checkpoints (verified by their archive's CRC-32, and left as they
	// were).
	Skipped []Skipped `json:"skipped"`
	// Report is the verification that came first. Checksum writes
	// nothing unless it found no problem.
	Report *Report `json:"report"`
}

// Skipped is a file Checksum left as it was, and why.
type Skipped struct {
	File   string `json:"file"`
	Reason string `json:"reason"`
}

// torchSkipReason is why Checksum skips a PyTorch file.
const torchSkipReason = "a PyTorch checkpoint: safetensors checksums cannot be written into it (its records carry their zip archive's CRC-32, which was verified); convert it to safetensors (ckpt convert) for checksums per tensor"

// copyChunk is the most bytes of a tensor copied at once when a file is
// rewritten.
const copyChunk = 4 << 20

// Checksum adds checksums (see safetensors.ChecksumPrefix) to every
// safetensors file of the checkpoint at location that has none: files,
// the shards of indexes, folders and pipelines as Verify takes them, and
// s3:// locations (written through package sink: import package remote).
//
// It verifies the checkpoint first, with Verify's checks and options, and
// writes nothing when that found a problem: the error is then a
// *ProblemsError holding them (errors.Is(err, safetensors.ErrChecksum)
// when one is a checksum mismatch or damaged checksums): checksums are
// never written over data that disagrees with the checksums it has, nor
// into a damaged set. A file that already has checksums was verified by
// that pass and is left as it is.
//
// Each file without checksums is rewritten whole through a
// safetensors.Writer, which computes the CRC-32C of every tensor as it
// passes: the same tensors (names, dtypes, shapes, bytes) and the same
// metadata keys, laid out as the Writer lays files out (tensors ordered by
// dtype, then name; a data section aligned to 4096 bytes stays so). A local
// file is written to a temporary file beside it that is renamed over it
// (safetensors.Create: its permission bits are kept, and a symbolic link
// inside the folder keeps pointing to it): killed at any instant, each
// file is either the old one or the new one, both complete. Index files
// are not touched: shard names and tensor bytes (metadata.total_size) do
// not change. On S3 each object is replaced in one step by a multipart
// upload that completes only if the object is still the version read
// (If-Match); the data are read twice (once for the CRCs, which the
// header carries ahead of the data, once to copy them, checked against
// the first).
//
// A PyTorch checkpoint cannot take checksums: it is verified (its
// records against their archive's CRC-32), listed in Skipped, and never
// rewritten.
//
// The files of a Hugging Face hub cache snapshot are refused: their
// blobs are named by the hash of their content, which a rewrite would
// break.
func Checksum(ctx context.Context, location string, opts ...Option) (*ChecksumReport, error) {
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
	rep := v.report()
	cr := &ChecksumReport{Location: location, Written: []string{}, Verified: []string{}, Skipped: []Skipped{}, Report: rep}
	for _, fc := range v.files {
		if fc.kind == kindTorch {
			cr.Skipped = append(cr.Skipped, Skipped{File: fc.display, Reason: torchSkipReason})
		}
	}
	slices.SortFunc(cr.Skipped, func(a, b Skipped) int { return strings.Compare(a.File, b.File) })
	if !rep.OK() {
		return cr, rep.Err()
	}
	if v.hub {
		return cr, newProblem(NotWritable, v.rel(v.root), "", nil,
			"a Hugging Face hub cache snapshot: its blobs are named by the hash of their content, which adding checksums would change; write a copy (ckpt convert) instead")
	}
	var files []*fileCheck
	for _, fc := range v.files {
		if fc.kind == "safetensors" && fc.hdr != nil && len(fc.hdr.Tensors) > 0 {
			files = append(files, fc)
		}
	}
	slices.SortFunc(files, func(a, b *fileCheck) int { return strings.Compare(a.display, b.display) })

	var snk sink.Sink
	if !v.src.IsOS() {
		if snk, err = v.openSink(); err != nil {
			return cr, err
		}
	}
	buf := make([]byte, copyChunk)
	for _, fc := range files {
		if fc.sums != nil {
			cr.Verified = append(cr.Verified, fc.display)
			continue
		}
		if snk != nil {
			err = rewriteSink(ctx, snk, fc, buf)
		} else {
			err = rewriteLocal(ctx, fc, buf)
		}
		if err != nil {
			return cr, err
		}
		cr.Written = append(cr.Written, fc.display)
	}
	return cr, nil
}

// openSink opens the sink that writes the files of a remote location: the
// sink of the location of the root folder.
func (v *verifier) openSink() (sink.Sink, error) {
	loc, ok := v.src.FS().(interface{ Location(string) string })
	if v.cfg.withFS || !ok {
		return nil, newProblem(NotWritable, v.rel(v.root), "", nil,
			"the checkpoint was given as a file system (WithFS): there is no location to write to")
	}
	snk, err := sink.Open(v.ctx, loc.Location(v.root))
	if err != nil {
		p := newProblem(NotWritable, v.rel(v.root), "", nil, "cannot write there: "+err.Error())
		p.Err = err
		return nil, p
	}
	return snk, nil
}

// rewritePlan returns what a rewrite of a file with header h writes: its
// tensors, its metadata, and its alignment when it is 4096.
func rewritePlan(h *safetensors.Header) ([]safetensors.TensorSpec, map[string]string, []safetensors.WriteOption) {
	specs := make([]safetensors.TensorSpec, len(h.Tensors))
	for i, t := range h.Tensors {
		specs[i] = safetensors.TensorSpec{Name: t.Name, DType: t.DType, Shape: t.Shape}
	}
	var opts []safetensors.WriteOption
	if h.DataOffset%4096 == 0 {
		opts = append(opts, safetensors.WithAlignment(4096))
	}
	return specs, maps.Clone(h.Metadata), opts
}

// sameLayout reports whether h, the header of a file opened for a rewrite,
// is the one verified: the file was not replaced in between.
func sameLayout(h, verified *safetensors.Header) bool {
	return h.DataOffset == verified.DataOffset && maps.Equal(h.Metadata, verified.Metadata) &&
		slices.EqualFunc(h.Tensors, verified.Tensors, func(a, b safetensors.TensorInfo) bool {
			return a.Name == b.Name && a.DType == b.DType && a.Begin == b.Begin && a.End == b.End && slices.Equal(a.Shape, b.Shape)
		})
}

// errChanged is the error of a file replaced between its verification and
// its rewrite.
func errChanged(fc *fileCheck) error {
	return newProblem(IO, fc.display, "", nil, "the file changed after it was verified: not rewritten")
}

// rewriteLocal rewrites the local file fc with checksums, atomically.
func rewriteLocal(ctx context.Context, fc *fileCheck, buf []byte) error {
	src, err := safetensors.Open(fc.open, safetensors.WithReadAt())
	if err != nil {
		return err
	}
	defer src.Close()
	if !sameLayout(src.Header(), fc.hdr) {
		return errChanged(fc)
	}
	specs, md, opts := rewritePlan(src.Header())
	fw, err := safetensors.Create(ctx, fc.open, specs, md, opts...)
	if err != nil {
		return err
	}
	defer fw.Close()
	if err := copyTensors(src, fw.Writer, buf); err != nil {
		return fmt.Errorf("integrity: %s: %w", fc.display, err)
	}
	return fw.Commit()
}

// copyTensors copies the tensors of src to w, in w's order.
func copyTensors(src *safetensors.File, w *safetensors.Writer, buf []byte) error {
	for {
		spec, tw, err := w.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		t, err := src.Tensor(spec.Name)
		if err != nil {
			return err
		}
		n := t.ByteLen()
		for off := int64(0); off < n; {
			m := min(int64(len(buf)), n-off)
			if _, err := t.ReadAt(buf[:m], off); err != nil && err != io.EOF {
				return err
			}
			if _, err := tw.Write(buf[:m]); err != nil {
				return err
			}
			off += m
		}
	}
}

// rewriteSink rewrites the file fc of the sink with checksums: the CRCs
// first, read from the version of the object that the write will replace,
// then the file, the CRCs in its header as claims that the Writer checks
// against the data it copies.
func rewriteSink(ctx context.Context, snk sink.Sink, fc *fileCheck, buf []byte) error {
	name := fc.display
	version, gone, err := sink.SeenVersion(ctx, snk, name)
	if err != nil {
		return err
	}
	if gone {
		return errChanged(fc)
	}
	fsys := snk.FS()
	if c, ok := fsys.(io.Closer); ok {
		defer c.Close()
	}
	src, err := safetensors.OpenFS(fsys, name)
	if err != nil {
		return err
	}
	defer src.Close()
	if !sameLayout(src.Header(), fc.hdr) {
		return errChanged(fc)
	}
	specs, md, opts := rewritePlan(src.Header())
	if md == nil {
		md = make(map[string]string, len(specs))
	}
	for _, s := range specs {
		t, err := src.Tensor(s.Name)
		if err != nil {
			return err
		}
		var crc uint32
		n := t.ByteLen()
		for off := int64(0); off < n; {
			if err := ctx.Err(); err != nil {
				return err
			}
			m := min(int64(len(buf)), n-off)
			if _, err := t.ReadAt(buf[:m], off); err != nil && err != io.EOF {
				return err
			}
			crc = safetensors.UpdateChecksum(crc, buf[:m])
			off += m
		}
		md[safetensors.ChecksumPrefix+s.Name] = safetensors.FormatChecksum(crc)
	}
	f, err := sink.CreateIf(ctx, snk, name, false, version)
	if err != nil {
		return err
	}
	w, err := safetensors.NewWriter(f, specs, md, opts...)
	if err == nil {
		err = copyTensors(src, w, buf)
	}
	if err == nil {
		err = w.Close()
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		f.Abort()
		if errors.Is(err, safetensors.ErrChecksum) {
			return fmt.Errorf("integrity: %s: the object changed while it was read: %w", name, err)
		}
		return fmt.Errorf("integrity: %s: %w", snk.Location(name), err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("integrity: %s: %w", snk.Location(name), err)
	}
	return nil
}
