package convert

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/ckpt-go/ckpt/internal/atomicfile"
	"github.com/ckpt-go/ckpt/internal/pathutil"
	"github.com/ckpt-go/ckpt/internal/safeopen"
	"github.com/ckpt-go/ckpt/internal/srcfs"
	"github.com/ckpt-go/ckpt/quant"
	"github.com/ckpt-go/ckpt/shard"
	"github.com/ckpt-go/ckpt/variant"
)

// Weights file names, as package variant and shard know them: PREFIX[.V]
// for single files, PREFIX[.V]-NNNNN-of-NNNNN[.swap-TOKEN] and diffusers'
// legacy PREFIX-NNNNN-of-NNNNN.V for shards, PREFIX.safetensors.index[.V].json
// and the legacy PREFIX.safetensors.V.index.json for indexes.
var (
	prefixRE      = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_-]*$`)
	variantRE     = regexp.MustCompile(`^[A-Za-z0-9_]+$`)
	shardRE       = regexp.MustCompile(`^(.+?)(?:\.([A-Za-z0-9_]+))?-\d{5}-of-\d{5}(?:\.swap-[0-9a-f]+|\.([A-Za-z0-9_]+))?$`)
	indexRE       = regexp.MustCompile(`^(.+?)\.safetensors\.index(?:\.([A-Za-z0-9_]+))?\.json$`)
	legacyIndexRE = regexp.MustCompile(`^(.+?)\.safetensors\.([A-Za-z0-9_]+)\.index\.json$`)
)

// weightsName splits the name of a safetensors file or index into the
// set's prefix and variant; ok is false when the name is not one a shard
// set can have (the prefix would not be a valid prefix).
func weightsName(base string) (prefix, variant string, ok bool) {
	switch {
	case indexRE.MatchString(base):
		m := indexRE.FindStringSubmatch(base)
		prefix, variant = m[1], m[2]
	case legacyIndexRE.MatchString(base):
		m := legacyIndexRE.FindStringSubmatch(base)
		prefix, variant = m[1], m[2]
	case strings.HasSuffix(base, ".safetensors"):
		stem := strings.TrimSuffix(base, ".safetensors")
		if m := shardRE.FindStringSubmatch(stem); m != nil {
			prefix, variant = m[1], m[2]
			if variant == "" {
				variant = m[3]
			}
		} else if p, v, dot := strings.Cut(stem, "."); dot {
			prefix, variant = p, v
		} else {
			prefix = stem
		}
	default:
		return "", "", false
	}
	ok = prefixRE.MatchString(prefix) && !regexp.MustCompile(`-\d{5}-of-\d{5}$`).MatchString(prefix) &&
		(variant == "" || variantRE.MatchString(variant))
	return prefix, variant, ok
}

// isWeightsFile reports whether a file of a source folder holds weights
// (of any variant or format), which Run converts or leaves out but never
// copies, and why.
func isWeightsFile(name string) (bool, string) {
	l := strings.ToLower(name)
	switch {
	case strings.HasSuffix(l, ".safetensors"):
		return true, "safetensors weights not converted (another variant or set)"
	case strings.Contains(l, ".safetensors.") && strings.HasSuffix(l, ".json") && strings.Contains(l, "index"):
		return true, "index of safetensors weights not converted (another variant or set)"
	case strings.HasSuffix(l, ".json") && variant.IsPyTorchName(name): // a variant's index too
		return true, "index of PyTorch weights"
	}
	for _, ext := range []string{".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".gguf", ".onnx", ".onnx_data", ".pdparams", ".ot"} {
		if strings.HasSuffix(l, ext) {
			return true, "weights of another format (" + ext + ")"
		}
	}
	if strings.HasPrefix(name, ".") && (strings.HasSuffix(name, ".lock") || strings.Contains(name, ".tmp-") || strings.Contains(name, ".old-")) {
		return true, "a lock or temporary file of an earlier save"
	}
	return false, ""
}

// sourceShards places each output tensor of c in the shard of the source
// file its data is read from (that file's number among the source's
// weights files, loaderStore.files), so that the output keeps the source's
// sharding: a weight's new FP8 scale goes with its weight, and a tensor
// read from no stored tensor of that name goes with the tensor before it.
// Package shard numbers the output's shards in the order of these numbers
// and makes none for a number no tensor has (a source file that held only
// scales of weights that were dequantized), so n source files convert to
// n output files unless one ends up empty.
func sourceShards(c *component) map[string]int {
	fileOf := map[string]int{}
	for _, e := range c.store.entries() {
		fileOf[e.name] = e.file
	}
	byQuant := map[*quant.FP8Quantizer]int{} // a quantized weight's shard, for its scale
	out := make(map[string]int, len(c.tasks))
	prev := 0
	for _, t := range c.tasks {
		name := t.spec.Name
		if t.w != nil {
			name = t.w.Data.Name // a dequantized or requantized weight's data
		}
		f, ok := fileOf[name]
		if t.kind == kScale {
			// Its name may be a stored scale's, which the new one replaces.
			f, ok = byQuant[t.q]
		}
		if !ok {
			f = prev
		}
		if t.q != nil && t.kind != kScale {
			byQuant[t.q] = f
		}
		out[t.spec.Name], prev = f, f
	}
	return out
}

// convertedFiles returns the paths, relative to the source folder, of the
// weights files (and indexes) of the sets that Run converts: the files of
// the source folder that are written anew rather than copied or left out.
func (r *runner) convertedFiles() map[string]bool {
	out := map[string]bool{}
	for _, c := range r.comps {
		rel, err := r.srcRel(c.srcDir)
		if err != nil {
			continue
		}
		shards, index := c.store.files()
		if index != "" {
			shards = append(shards, index)
		}
		for _, f := range shards {
			out[filepath.Join(filepath.FromSlash(rel), path.Base(filepath.ToSlash(f)))] = true
		}
	}
	return out
}

// leftOut returns the files of skipped that Run does not convert either:
// the weights files of the sets it converts are written anew, not left
// out.
func (r *runner) leftOut(skipped []SkippedFile) []SkippedFile {
	converted := r.convertedFiles()
	return slices.DeleteFunc(skipped, func(s SkippedFile) bool { return converted[s.Path] })
}

// copyFile is a non-weight file of a source folder to copy: real is the
// checked path to read, rel its path relative to the source and
// destination roots.
type copyFile struct {
	real, rel string
	// fsys is the file system of a source with a scheme, name the
	// file's name in it (real is then its location); nil for paths.
	fsys fs.FS
	name string
}

// scanCopies lists the files under root to copy into the destination,
// refusing (before anything is written) a file that is not regular or a
// symbolic link that leaves its folder, unless src follows links out of
// their folder (src is the runner's source, on the operating system's
// files). skip says which
// relative paths are handled otherwise (the components' configs).
func scanCopies(root string, src srcfs.FS, skip func(rel string) (bool, string)) ([]copyFile, []SkippedFile, error) {
	var files []copyFile
	var skipped []SkippedFile
	sopts := []shard.Option{shard.WithSource(src)}
	visited := map[string]bool{}
	var walk func(dir, rel string, depth int) error
	walk = func(dir, rel string, depth int) error {
		if depth > 32 {
			return &Error{Kind: ErrSource, Path: dir, Msg: "copy: folders nested more than 32 deep"}
		}
		real, err := filepath.EvalSymlinks(dir)
		if err != nil {
			return &Error{Kind: ErrSource, Path: dir, Err: err}
		}
		if visited[real] {
			return nil // a link back to a folder already copied
		}
		visited[real] = true
		ents, err := os.ReadDir(dir)
		if err != nil {
			return &Error{Kind: ErrSource, Path: dir, Err: err}
		}
		for _, e := range ents {
			name := e.Name()
			r := filepath.Join(rel, name)
			p := filepath.Join(dir, name)
			if w, why := isWeightsFile(name); w {
				skipped = append(skipped, SkippedFile{Path: r, Reason: why})
				continue
			}
			if s, why := skip(r); s {
				if why != "" {
					skipped = append(skipped, SkippedFile{Path: r, Reason: why})
				}
				continue
			}
			target := p
			if e.Type()&fs.ModeSymlink != 0 {
				t, err := shard.ResolveFile(p, sopts...)
				if err != nil {
					if errors.Is(err, shard.ErrInsecurePath) {
						return &Error{Kind: ErrSource, Path: p, Msg: "copy: a symbolic link that leads out of its folder (FollowSymlinks allows it)", Err: err}
					}
					return &Error{Kind: ErrSource, Path: p, Msg: "copy", Err: err}
				}
				target = t
			}
			st, err := os.Stat(target)
			if err != nil {
				return &Error{Kind: ErrSource, Path: p, Msg: "copy", Err: err}
			}
			switch {
			case st.IsDir():
				if err := walk(p, r, depth+1); err != nil {
					return err
				}
			case st.Mode().IsRegular():
				files = append(files, copyFile{real: target, rel: r})
			default:
				return &Error{Kind: ErrSource, Path: p, Msg: "copy: not a regular file: " + safeopen.Describe(st.Mode())}
			}
		}
		return nil
	}
	if err := walk(root, "", 0); err != nil {
		return nil, nil, err
	}
	return files, skipped, nil
}

// copyInto copies one file atomically to dst, reading it through safeopen
// (a regular file, opened without blocking).
func copyInto(ctx context.Context, src, dst string) error {
	in, _, err := safeopen.Open(src)
	if err != nil {
		return &Error{Kind: ErrSource, Path: src, Msg: "copy", Err: err}
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return &Error{Kind: ErrTarget, Path: filepath.Dir(dst), Msg: "write", Err: err}
	}
	return writeAtomic(ctx, dst, func(w io.Writer) error {
		_, err := io.Copy(w, in)
		return err
	})
}

// writeAtomic writes a file atomically (temporary file, fsync, rename).
func writeAtomic(ctx context.Context, path string, write func(io.Writer) error) error {
	f, err := atomicfile.Create(ctx, path)
	if err != nil {
		if ctx.Err() != nil {
			return &Error{Kind: ErrTarget, Path: path, Msg: "write: canceled", Err: ctx.Err()}
		}
		return &Error{Kind: ErrTarget, Path: path, Msg: "write", Err: err}
	}
	if err := write(f); err != nil {
		f.Abort()
		return &Error{Kind: ErrTarget, Path: path, Msg: "write", Err: err}
	}
	if err := f.Commit(); err != nil {
		return &Error{Kind: ErrTarget, Path: path, Msg: "write", Err: err}
	}
	return nil
}

// samePath reports whether a and b name the same folder or file (their
// links evaluated; a missing b is not a).
func samePath(a, b string) bool {
	ra, err1 := filepath.EvalSymlinks(a)
	rb, err2 := filepath.EvalSymlinks(b)
	if err1 != nil || err2 != nil {
		return false
	}
	if ra == rb {
		return true
	}
	sa, err1 := os.Stat(ra)
	sb, err2 := os.Stat(rb)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}

// nested reports whether one of the folders a and b lies inside the other
// (or they are the same), their links evaluated as far as they exist.
func nested(a, b string) bool {
	ra, rb := realish(a), realish(b)
	return pathutil.Within(ra, rb) || pathutil.Within(rb, ra)
}

// realish evaluates the links of the longest existing ancestor of p and
// appends the rest.
func realish(p string) string {
	p, _ = filepath.Abs(p)
	rest := ""
	for {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(r, rest)
		}
		parent := filepath.Dir(p)
		if parent == p {
			return filepath.Join(p, rest)
		}
		rest = filepath.Join(filepath.Base(p), rest)
		p = parent
	}
}

// sortedKeys returns m's keys, sorted.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
