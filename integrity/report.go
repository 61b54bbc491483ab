package integrity

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Report is what Verify found: the problems, and what it checked.
type Report struct {
	// Location is the location verified, as given.
	Location string `json:"location"`
	// Problems are the problems found, sorted by file, then by position
	// in the file, then by message. Empty when all is well.
	Problems []*Problem `json:"problems"`
	// Files are the files checked, sorted by name.
	Files []FileReport `json:"files"`
	// Notes say what was not checked, and why (files without checksums
	// are counted in UncheckedTensors instead).
	Notes []string `json:"notes"`

	// Tensors is the number of tensors of the safetensors files whose
	// headers parsed and of the PyTorch files that opened (ties not
	// counted).
	Tensors int `json:"tensors"`
	// VerifiedTensors is the number of tensors whose stored bytes were
	// checked against their checksums, and VerifiedBytes their bytes.
	VerifiedTensors int   `json:"verified_tensors"`
	VerifiedBytes   int64 `json:"verified_bytes"`
	// UncheckedTensors is the number of tensors in safetensors files
	// without checksums: only the structure of those files could be
	// checked.
	UncheckedTensors int `json:"unchecked_tensors"`
	// ArchiveTensors is the number of tensors of PyTorch files whose
	// storage records matched the CRC-32 their zip archive records, and
	// ArchiveBytes the bytes of the records read (every record of the
	// archives, data.pkl included). A CRC-32 per record is no checksum
	// per tensor: it was computed by torch.save from the bytes it wrote,
	// so it finds damage since the file was written, as the safetensors
	// checksums do.
	ArchiveTensors int   `json:"archive_verified_tensors"`
	ArchiveBytes   int64 `json:"archive_verified_bytes"`
	// Blobs is the number of Hugging Face hub cache blobs whose content
	// was hashed and compared with their names.
	Blobs int `json:"blobs"`
}

// FileReport is one file checked.
type FileReport struct {
	// Name is the file, relative to the location verified.
	Name string `json:"name"`
	// Kind is "safetensors", "pytorch" (a PyTorch checkpoint, a
	// torch.save archive), "index" (a shard index of either),
	// "model_index" (a pipeline's model_index.json) or "other" (a file of
	// a hub snapshot whose blob was checked).
	Kind string `json:"kind"`
	// Size is the file's size in bytes.
	Size int64 `json:"size"`
	// Tensors is the number of tensors of a safetensors file whose
	// header parsed, or of a PyTorch file that opened.
	Tensors int `json:"tensors,omitempty"`
	// Checksums reports that the file's header names a checksum for
	// every tensor.
	Checksums bool `json:"checksums,omitempty"`
	// Blob is the name of the hub cache blob the file is, when it is one
	// ("sha256:HEX" or "git-sha1:HEX").
	Blob string `json:"blob,omitempty"`
}

// OK reports whether no problem was found.
func (r *Report) OK() bool { return len(r.Problems) == 0 }

// Err returns nil when no problem was found, and a *ProblemsError
// holding them otherwise.
func (r *Report) Err() error {
	if r.OK() {
		return nil
	}
	return &ProblemsError{Location: r.Location, Problems: r.Problems}
}

// Summary is one line saying what was checked: files, tensors, bytes
// verified by checksum, tensors without checksums, PyTorch tensors
// verified by their archive's CRC-32, hub blobs.
func (r *Report) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s, %d %s, %s verified by checksum (%d %s), %d %s without checksums",
		len(r.Files), plural(len(r.Files), "file", "files"),
		r.Tensors, plural(r.Tensors, "tensor", "tensors"),
		humanBytes(r.VerifiedBytes), r.VerifiedTensors, plural(r.VerifiedTensors, "tensor", "tensors"),
		r.UncheckedTensors, plural(r.UncheckedTensors, "tensor", "tensors"))
	if r.ArchiveTensors > 0 || r.ArchiveBytes > 0 {
		fmt.Fprintf(&b, ", %d PyTorch %s verified by the archive's CRC-32 (%s)",
			r.ArchiveTensors, plural(r.ArchiveTensors, "tensor", "tensors"), humanBytes(r.ArchiveBytes))
	}
	if r.Blobs > 0 {
		fmt.Fprintf(&b, ", %d hub %s hashed", r.Blobs, plural(r.Blobs, "blob", "blobs"))
	}
	return b.String()
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// humanBytes formats n in binary units: "512 B", "1.5 GiB".
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// sortProblems orders problems by file, then by the start of their range
// (problems without one first), then by message.
func sortProblems(ps []*Problem) {
	begin := func(p *Problem) int64 {
		if p.Range == nil {
			return -1
		}
		return p.Range.Begin
	}
	slices.SortFunc(ps, func(a, b *Problem) int {
		return cmp.Or(strings.Compare(a.File, b.File), cmp.Compare(begin(a), begin(b)), strings.Compare(a.Message, b.Message))
	})
}
