package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/ckpt-go/ckpt/integrity"
	"github.com/ckpt-go/ckpt/safetensors"
)

func verifyCommand() *command {
	c := &command{
		remote:  true,
		name:    "verify",
		args:    "PATH",
		summary: "check every byte and the structure of a checkpoint: checksums, shards, sizes",
		help: `Verifies PATH — a .safetensors file, a *.safetensors.index.json with its
shards, a PyTorch file (.bin, .pt, .pth, .ckpt) or index
(pytorch_model.bin.index.json), a folder (every safetensors file and index
in it, every variant, and its PyTorch weights: pytorch_model*.bin,
diffusion_pytorch_model*.bin), a diffusers pipeline (every component), a
Hugging Face hub cache snapshot, or an s3:// or https:// location — and
prints one line per problem, naming the file, the tensor and the byte range:

  - a tensor whose stored bytes differ from the CRC-32C checksum its
    file's header names (files written by ckpt carry one per tensor; see
    "ckpt checksum"), every byte read;
  - and for every checkpoint, with or without checksums: a header that
    does not parse, a file shorter (naming each tensor cut) or longer than
    its header says, damaged checksum metadata, an index whose weight_map
    disagrees with its shards (a tensor no shard or the wrong shard holds,
    a tensor a shard holds that the index does not name, a tensor in two
    shards), metadata.total_size against the tensors' bytes, a missing
    shard, FIFOs and devices where files are expected, files symlinked out
    of their folder unless --follow-symlinks;
  - in a hub cache snapshot (with --follow-symlinks: its files link into
    ../../blobs), every blob's content against the hash it is named by;
  - a PyTorch file (a torch.save zip archive, which has no checksum per
    tensor): its archive opened as the loader opens it (a truncated copy
    has lost the zip directory at its end: "invalid archive"; a damaged
    data.pkl or storage record table is named), then every record's bytes
    against the CRC-32 its zip directory and local header record: a
    mismatch is one line per tensor that views the record's storage,
    naming the record and its byte range. Its tensors are counted as
    "verified by the archive's CRC-32", not as checksummed; with
    --require-checksums a PyTorch file is a problem (it has none).

Exit status 0 when all is well (a summary: files, tensors, bytes verified by
checksum, tensors without checksums), 1 with one line per problem, or when
PATH cannot be read. --require-checksums makes a file without checksums a
problem. The JSON form is the report: {"location", "ok", "summary",
"problems": [{"kind", "file", "tensor", "range": {"begin", "end"},
"message"}], "files": [{"name", "kind", "size", "tensors", "checksums",
"blob"}], "notes", "tensors", "verified_tensors", "verified_bytes",
"unchecked_tensors", "archive_verified_tensors", "archive_verified_bytes",
"blobs"}, with "error" instead when PATH cannot be read. A file's "kind" is
"safetensors", "pytorch", "index", "model_index" or "other"; a problem's
"kind" is a stable snake_case name (checksum_mismatch, truncated,
invalid_archive, ...: the names of package integrity's Kind).

Examples:
  ckpt verify ./Llama-3-8B
  ckpt verify pytorch_model.bin
  ckpt verify --follow-symlinks ~/.cache/huggingface/hub/models--org--name/snapshots/REV
  ckpt verify --json s3://bucket/checkpoints/step-1000 | jq -r '.problems[].message'`,
	}
	c.run = func(e *env, args []string) error {
		fs := newFlags(e, c)
		asJSON := fs.Bool("json", false, "print the report as JSON")
		follow := followFlag(fs)
		require := fs.Bool("require-checksums", false, "make a file without checksums a problem")
		pos, err := parseFlags(e, c, fs, args)
		if err != nil {
			return err
		}
		if len(pos) != 1 {
			return usageError{msg: "verify takes exactly one PATH"}
		}
		var opts []integrity.Option
		if *follow {
			opts = append(opts, integrity.FollowSymlinks())
		}
		if *require {
			opts = append(opts, integrity.RequireChecksums())
		}
		rep, err := integrity.Verify(context.Background(), pos[0], opts...)
		if *asJSON {
			out := verifyOutput{Report: rep, Error: describeError(err)}
			if rep != nil {
				out.OK, out.Summary = rep.OK(), rep.Summary()
			}
			if err := e.printJSON(out); err != nil {
				return err
			}
			if err != nil || !rep.OK() {
				return exitError{code: 1}
			}
			return nil
		}
		if err != nil {
			return err
		}
		printNotes(e.stderr, rep)
		if rep.OK() {
			fmt.Fprintf(e.stdout, "ok  %s: %s\n", pos[0], rep.Summary())
			return nil
		}
		printProblems(e.stdout, rep.Problems)
		fmt.Fprintf(e.stderr, "ckpt verify: %s: %d %s; checked %s\n", pos[0], len(rep.Problems), pluralize(len(rep.Problems), "problem", "problems"), rep.Summary())
		return exitError{code: 1}
	}
	return c
}

// verifyOutput is the JSON form of ckpt verify.
type verifyOutput struct {
	*integrity.Report
	OK      bool       `json:"ok"`
	Summary string     `json:"summary,omitempty"`
	Error   *errorInfo `json:"error,omitempty"`
}

// printProblems writes one line per problem; a symlink out of its folder
// says which flag allows it.
func printProblems(w io.Writer, ps []*integrity.Problem) {
	for _, p := range ps {
		hint := ""
		if p.Kind == integrity.InsecurePath {
			hint = followHint
		}
		fmt.Fprintf(w, "%s%s\n", p.Message, hint)
	}
}

// printNotes writes what was not checked, and why.
func printNotes(w io.Writer, rep *integrity.Report) {
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

func pluralize(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func checksumCommand() *command {
	c := &command{
		remote:  true,
		name:    "checksum",
		args:    "PATH",
		summary: "add a CRC-32C per tensor to a checkpoint's files, in place",
		help: `Adds checksums (a CRC-32C of every tensor's stored bytes, in the header's
__metadata__ as ckpt.crc32c.NAME; other readers ignore them) to every
safetensors file of PATH that has none: a file, the shards of an index, a
folder (every variant), a pipeline, or an s3:// location. PyTorch files
cannot take them: they are verified (against their archive's CRC-32) and
listed as skipped, never rewritten ("ckpt convert" writes a safetensors copy
with checksums).

PATH is verified first, as "ckpt verify" does; when that finds a problem,
nothing is written and the problems are printed, one per line (exit status
1): checksums are never written over data that disagree with the ones they
have, nor into a damaged set. Files that already have checksums are verified
and left as they are. Each other file is rewritten whole — the same tensors,
bytes and metadata — to a temporary file beside it that is renamed over it,
keeping its permissions (on S3: an upload that replaces the object only if
it is still the version read): killed at any instant, each file is the old
one or the new one, both loadable. Indexes are left as they are. The files
of a Hugging Face hub cache are refused: their blobs are named by the hash
of their content.

The JSON form: {"location", "written": [file], "verified": [file],
"skipped": [{"file", "reason"}], "report": (the verify report)}, with
"error" when nothing could be written.

Examples:
  ckpt checksum ./Llama-3-8B
  ckpt checksum s3://bucket/checkpoints/step-1000 && ckpt verify --require-checksums s3://bucket/checkpoints/step-1000`,
	}
	c.run = func(e *env, args []string) error {
		fs := newFlags(e, c)
		asJSON := fs.Bool("json", false, "print JSON")
		follow := followFlag(fs)
		pos, err := parseFlags(e, c, fs, args)
		if err != nil {
			return err
		}
		if len(pos) != 1 {
			return usageError{msg: "checksum takes exactly one PATH"}
		}
		var opts []integrity.Option
		if *follow {
			opts = append(opts, integrity.FollowSymlinks())
		}
		cr, err := integrity.Checksum(context.Background(), pos[0], opts...)
		if *asJSON {
			out := checksumOutput{ChecksumReport: cr, Error: describeError(err)}
			var pe *integrity.ProblemsError
			if errors.As(err, &pe) { // the report lists them all
				first := pe.Problems[0]
				out.Error = &errorInfo{Kind: first.Kind.String(), File: first.File, Tensor: first.Tensor, Message: err.Error()}
			}
			if err := e.printJSON(out); err != nil {
				return err
			}
			if err != nil {
				return exitError{code: 1}
			}
			return nil
		}
		if cr != nil {
			for _, f := range cr.Written {
				fmt.Fprintf(e.stdout, "wrote     %s (checksums added)\n", f)
			}
			for _, f := range cr.Verified {
				fmt.Fprintf(e.stdout, "verified  %s (it had checksums)\n", f)
			}
			if err == nil {
				for _, f := range cr.Skipped {
					fmt.Fprintf(e.stdout, "skipped   %s (%s)\n", f.File, f.Reason)
				}
			}
		}
		var pe *integrity.ProblemsError
		switch {
		case errors.As(err, &pe):
			printProblems(e.stdout, pe.Problems)
			fmt.Fprintf(e.stderr, "ckpt checksum: %s: %d %s: nothing written\n", pos[0], len(pe.Problems), pluralize(len(pe.Problems), "problem", "problems"))
			return exitError{code: 1}
		case err != nil:
			return err
		}
		printNotes(e.stderr, cr.Report)
		skipped := ""
		if len(cr.Skipped) > 0 {
			skipped = fmt.Sprintf(", %d PyTorch %s skipped", len(cr.Skipped), pluralize(len(cr.Skipped), "file", "files"))
		}
		fmt.Fprintf(e.stdout, "ok  %s: %d %s written with checksums, %d verified%s\n", pos[0], len(cr.Written), pluralize(len(cr.Written), "file", "files"), len(cr.Verified), skipped)
		return nil
	}
	return c
}

// checksumOutput is the JSON form of ckpt checksum.
type checksumOutput struct {
	*integrity.ChecksumReport
	Error *errorInfo `json:"error,omitempty"`
}

// withoutChecksums returns the safetensors file b rewritten without
// checksums, as writers other than ckpt's write it.
func withoutChecksums(b []byte) ([]byte, error) {
	f, err := safetensors.OpenBytes(b)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var tds []safetensors.TensorData
	for name, t := range f.Tensors() {
		data, err := t.Bytes()
		if err != nil {
			return nil, err
		}
		tds = append(tds, safetensors.TensorData{Name: name, DType: t.DType(), Shape: t.Shape(), Data: data})
	}
	return safetensors.Serialize(tds, f.Metadata(), safetensors.WithoutChecksums())
}

// demoVerify adds checksums to a copy of the sample's transformer,
// verifies it, then finds a flipped bit and a truncated shard.
func demoVerify(d *demo, root, work string) error {
	d.section("verify every byte: checksums added to a copy of the transformer, then a flipped bit and a cut shard")
	src := filepath.Join(root, "transformer")
	dir := filepath.Join(work, "verify", "transformer")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return err
		}
		if strings.HasSuffix(e.Name(), ".safetensors") {
			// As a file from another writer arrives: without checksums.
			if b, err = withoutChecksums(b); err != nil {
				return err
			}
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			return err
		}
	}
	ctx := context.Background()
	rep, err := integrity.Verify(ctx, dir)
	if err != nil {
		return err
	}
	d.printf("  before:   %s\n", rep.Summary())
	cr, err := integrity.Checksum(ctx, dir)
	if err != nil {
		return err
	}
	d.printf("  checksum: %d files rewritten with a CRC-32C per tensor (%s), %d already had them\n",
		len(cr.Written), strings.Join(cr.Written, ", "), len(cr.Verified))
	if rep, err = integrity.Verify(ctx, dir, integrity.RequireChecksums()); err != nil {
		return err
	}
	d.printf("  after:    %s\n", rep.Summary())

	// One flipped bit in a tensor of the BF16 file, 10 bytes cut off a shard.
	bf16 := filepath.Join(dir, "diffusion_pytorch_model.bf16.safetensors")
	h, err := safetensors.ReadHeaderFile(bf16)
	if err != nil {
		return err
	}
	raw, err := os.ReadFile(bf16)
	if err != nil {
		return err
	}
	raw[h.DataOffset+h.Tensors[len(h.Tensors)/2].Begin+3] ^= 0x10
	if err := os.WriteFile(bf16, raw, 0o644); err != nil {
		return err
	}
	shard2 := filepath.Join(dir, "diffusion_pytorch_model-00002-of-00002.safetensors")
	st, err := os.Stat(shard2)
	if err != nil {
		return err
	}
	if err := os.Truncate(shard2, st.Size()-10); err != nil {
		return err
	}
	if rep, err = integrity.Verify(ctx, dir); err != nil {
		return err
	}
	d.printf("  damaged:  %d problems (exit status 1 from `ckpt verify`), one line each:\n", len(rep.Problems))
	for _, p := range rep.Problems {
		d.printf("    %s\n", p.Message)
	}
	_, err = integrity.Checksum(ctx, dir)
	d.printf("  checksum refuses to write over them: errors.Is(err, ckpt.ErrChecksum) = %v\n", errors.Is(err, safetensors.ErrChecksum))
	return nil
}
