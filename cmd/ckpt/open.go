package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/ckpt-go/ckpt/internal/srcfs"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/shard"
	"github.com/ckpt-go/ckpt/torch"
	"github.com/ckpt-go/ckpt/variant"
)

// checkpointTarget is what a path on the command line names: a single
// safetensors file, an index JSON, or a folder holding one component.
type checkpointTarget struct {
	path string
	kind string // "file", "index" or "folder"
	ckpt *shard.Checkpoint
	// torch is the target when it is a PyTorch checkpoint opened with
	// openTarget's pytorch set (ckpt is nil then).
	torch *torch.Checkpoint
	fsys  fs.FS             // the remote location's file system, or nil
	name  string            // path as a name of fsys (path itself for a local path)
	rels  map[string]string // relFile's: file -> rel(file)
}

// root returns the folder the target's files are named relative to: the
// folder opened, or the folder of the file or index opened.
func (t *checkpointTarget) root() string {
	switch {
	case t.kind == "folder":
		return t.name
	case t.fsys != nil:
		return path.Dir(t.name)
	}
	return filepath.Dir(t.name)
}

// rel returns the name of one of the target's files relative to its root,
// slash-separated ("model-00001-of-00002.safetensors", "sub/x.safetensors"),
// or its full path or location in the unexpected case that it is not
// inside the root.
func (t *checkpointTarget) rel(file string) string {
	root := t.root()
	if t.fsys != nil { // names of an fs.FS: already slash-separated
		if root == "." {
			return file
		}
		if r, ok := strings.CutPrefix(file, root+"/"); ok && r != "" {
			return r
		}
		if l, ok := t.fsys.(interface{ Location(string) string }); ok {
			return l.Location(file)
		}
		return file
	}
	r, err := filepath.Rel(root, file)
	if err != nil || r == "." || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
		return file
	}
	return filepath.ToSlash(r)
}

// relFile is rel, computed once per file: a checkpoint has a few files
// and up to millions of tensors, each naming its file.
func (t *checkpointTarget) relFile(file string) string {
	if r, ok := t.rels[file]; ok {
		return r
	}
	if t.rels == nil {
		t.rels = make(map[string]string)
	}
	r := t.rel(file)
	t.rels[file] = r
	return r
}

// followFlag is the --follow-symlinks flag of the commands that open
// checkpoints: the one opt-in to symbolic links that lead out of their
// folder (shard.WithFollowSymlinks).
func followFlag(fs *flag.FlagSet) *bool {
	return fs.Bool("follow-symlinks", false,
		"let the files a folder or index resolves to be symlinks leading out of it (the Hugging Face cache: snapshots link into ../../blobs)")
}

// cliSource is the one source value a command reads a checkpoint
// through: fsys (nil: the operating system's files) and the symlink rule of
// --follow-symlinks. It is passed to package variant and package shard as
// it is.
func cliSource(fsys fs.FS, follow bool) srcfs.FS {
	return srcfs.Of(fsys).Following(follow)
}

// openTarget opens path as a checkpoint: a .safetensors file, a
// *.safetensors.index*.json, or a folder resolved with the variant rules;
// path may be a remote location (s3://, https://). follow is
// --follow-symlinks. With pytorch set, a PyTorch checkpoint — a file or
// index named as one (variant.IsPyTorchName), or a folder whose resolved
// weights are PyTorch ones — is opened with package torch into t.torch;
// without it, it is opened as safetensors (and refused).
func openTarget(path, variantName string, follow, pytorch bool) (*checkpointTarget, error) {
	fsys, name, err := openLocation(path)
	if err != nil {
		return nil, err
	}
	t, err := openTargetFS(fsys, path, name, variantName, follow, pytorch)
	if err != nil {
		closeFS(fsys)
		return nil, err
	}
	return t, nil
}

// openTargetFS is openTarget for the name of fsys (nil: a local path).
func openTargetFS(fsys fs.FS, path, name, variantName string, follow, pytorch bool) (*checkpointTarget, error) {
	var st fs.FileInfo
	var err error
	if fsys != nil {
		st, err = fs.Stat(fsys, name)
	} else {
		st, err = os.Stat(name)
	}
	if err != nil {
		return nil, err
	}
	src := cliSource(fsys, follow)
	opts := []shard.Option{shard.WithSource(src)}
	vopts := []variant.Option{variant.WithSource(src)}
	t := &checkpointTarget{path: path, kind: "file", fsys: fsys, name: name}
	switch {
	case st.IsDir():
		t.kind = "folder"
		plan, err := variant.ResolveComponent(name, variantName, vopts...)
		if err != nil {
			return nil, err
		}
		if pytorch && plan.Format == variant.FormatPyTorch && len(plan.Files) > 0 {
			file := src.Join(plan.Dir, cmp.Or(plan.Index, plan.Files[0]))
			t.torch, err = openTorch(fsys, file, follow)
			break
		}
		t.ckpt, err = plan.Open()
	case pytorch && variant.IsPyTorchName(name):
		if strings.HasSuffix(strings.ToLower(name), ".json") {
			t.kind = "index"
		}
		t.torch, err = openTorch(fsys, name, follow)
	case strings.HasSuffix(name, ".json"):
		t.kind = "index"
		t.ckpt, err = shard.Open(name, opts...)
	default:
		t.ckpt, err = shard.Open(name, opts...)
	}
	if err != nil {
		return nil, err
	}
	return t, nil
}

// openTorch opens the PyTorch file or index file of fsys (nil: a local
// path, kept to its folder unless follow is set).
func openTorch(fsys fs.FS, file string, follow bool) (*torch.Checkpoint, error) {
	if fsys != nil {
		return torch.OpenFS(fsys, file)
	}
	var opts []torch.Option
	if follow {
		opts = append(opts, torch.WithSymlinkRoot("/"))
	}
	return torch.Open(file, opts...)
}

func (t *checkpointTarget) Close() error {
	var err error
	switch {
	case t.ckpt != nil:
		err = t.ckpt.Close()
	case t.torch != nil:
		err = t.torch.Close()
	}
	closeFS(t.fsys)
	return err
}

// relTo returns path relative to base when it is inside it, and the base
// name when path is base itself.
func relTo(base, path string) string {
	if filepath.Clean(base) == filepath.Clean(path) {
		return filepath.Base(path)
	}
	if r, err := filepath.Rel(base, path); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return path
}

// errorInfo is the JSON form of an error: its kind (the typed error's kind
// name), the tensor or file it concerns, and the message.
type errorInfo struct {
	Kind    string `json:"kind"`
	File    string `json:"file,omitempty"`
	Tensor  string `json:"tensor"`
	Message string `json:"message"`
}

// followHint is added to the message of an error about a symlink leading
// out of its folder.
const followHint = " (on the command line: pass --follow-symlinks)"

// withHint adds followHint to err when it is about a symlink out of its
// folder.
func withHint(err error) error {
	if err != nil && (errors.Is(err, shard.ErrInsecurePath) || errors.Is(err, variant.ErrInsecurePath)) &&
		strings.Contains(err.Error(), "symlink") {
		return fmt.Errorf("%w%s", err, followHint)
	}
	return err
}

func describeError(err error) *errorInfo {
	if err == nil {
		return nil
	}
	err = withHint(err)
	info := &errorInfo{Kind: "error", Message: err.Error()}
	var se *safetensors.Error
	var he *shard.Error
	var ve *variant.Error
	switch {
	case errors.As(err, &se):
		// The file format's own error is the most precise: report it
		// rather than the wrappers around it, unless it names another
		// file than they do (the target of a symlink): then the whole
		// chain says which file of the folder led there.
		info.Kind, info.File, info.Tensor, info.Message = se.Kind.String(), se.File, se.Tensor, se.Error()
		outer := ""
		if errors.As(err, &ve) {
			outer = ve.File
		}
		if errors.As(err, &he) && he.Shard != "" {
			outer = he.Shard
		}
		if outer != "" && filepath.Base(se.File) != filepath.Base(outer) {
			info.Message = err.Error()
		}
	case errors.As(err, &he):
		info.Kind, info.File, info.Tensor = he.Kind.String(), cmp.Or(he.Shard, he.Path), he.Tensor
	case errors.As(err, &ve):
		info.Kind, info.File, info.Tensor = ve.Kind.String(), cmp.Or(ve.File, ve.Dir), ve.Tensor
	case os.IsNotExist(err):
		info.Kind = "not_found"
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		// The packages have no kind of their own for it: a canceled
		// operation's error wraps the context's.
		info.Kind = "canceled"
	}
	return info
}

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
