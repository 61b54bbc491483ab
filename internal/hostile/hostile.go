// Package hostile builds the hostile checkpoint folders that the hostile
// test suites (package hostile at the repository root, and cmd/ckpt's
// hostile tests) run every public entry point on: FIFOs and devices where a
// file is expected, symbolic links out of the folder, a folder laid out like
// the Hugging Face cache, /dev/zero as an index, oversized indexes, and
// headers nested around the JSON depth limit. Each Case says what every
// class of entry point must answer, so that the library and the command
// line are held to the same verdicts.
package hostile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
)

// Verdicts: "" means accepted; Any means refused with any typed error;
// otherwise the snake_case name of the error kind expected (for example
// "not_regular_file" or "insecure_path"), followed, for a general kind, by
// ": " and the check the message names ("invalid_index: index too large").
const (
	OK  = ""
	Any = "*"
)

// Kind splits a verdict into the name of the error kind it expects and the
// phrase the error's message must contain ("" when the verdict names none).
func Kind(verdict string) (kind, says string) {
	kind, says, _ = strings.Cut(verdict, ": ")
	return kind, says
}

// Case is one hostile folder and the verdict of each class of entry point.
type Case struct {
	Name string
	// Dir is the folder a user names (package variant, ckpt validate DIR).
	Dir string
	// File, when set, is a file in Dir named directly: safetensors.Open,
	// ReadHeaderFile and OpenFS take it when it is a .safetensors file,
	// shard.ReadIndex when it is an index, shard.Open in both cases. A file
	// named directly is followed through its links.
	File string
	// Pipeline is set when Dir is a diffusers pipeline root.
	Pipeline bool
	// Culprit is a name every refusal must mention.
	Culprit string

	// The verdicts. Shard is shard.Open(File) (and ReadIndex for an index),
	// ShardFollow the same with shard.WithFollowSymlinks; Folder is package
	// variant (and the CLI) on Dir, FolderFollow the same with the opt-in.
	// File is safetensors.Open, ReadHeaderFile and OpenFS on File.
	FileWant, ShardWant, ShardFollow, Folder, FolderFollow string
}

// IsIndex reports whether c.File is a shard index.
func (c Case) IsIndex() bool { return strings.HasSuffix(c.File, ".json") }

// Path returns Dir/File.
func (c Case) Path() string { return filepath.Join(c.Dir, c.File) }

// Cases builds every hostile folder under t.TempDir() and returns them.
// Cases that need what the platform lacks (FIFOs, symbolic links, /dev/zero)
// are left out.
func Cases(t testing.TB) []Case {
	t.Helper()
	b := &builder{t: t}
	var out []Case
	add := func(cs ...Case) { out = append(out, cs...) }
	add(b.fifos()...)
	add(b.devices()...)
	add(b.linksOut()...)
	add(b.hubCache()...)
	add(b.sizes()...)
	add(b.oddities()...)
	add(b.reference()...)
	add(b.nesting()...)
	return out
}

type builder struct {
	t testing.TB
}

const (
	single = "model.safetensors"
	index  = "model.safetensors.index.json"
	shard1 = "model-00001-of-00002.safetensors"
	shard2 = "model-00002-of-00002.safetensors"
	fifo1  = "model-00001-of-00001.safetensors"
	mindex = "model_index.json"
)

var tensors = []ckpttest.Tensor{
	ckpttest.T("a.weight", dtype.F32, 2, 3),
	ckpttest.T("b.weight", dtype.BF16, 4),
	ckpttest.T("c.bias", dtype.F16, 3),
}

func (b *builder) fatal(err error) {
	b.t.Helper()
	if err != nil {
		b.t.Fatal(err)
	}
}

func (b *builder) dir() string { return b.t.TempDir() }

// sharded writes a two-shard set with its index into dir.
func (b *builder) sharded(dir string) {
	b.t.Helper()
	_, err := ckpttest.WriteWeights(dir, ckpttest.Weights{Shards: 2, Tensors: tensors})
	b.fatal(err)
}

// singleFile writes model.safetensors into dir.
func (b *builder) singleFile(dir string) {
	b.t.Helper()
	_, err := ckpttest.WriteWeights(dir, ckpttest.Weights{Tensors: tensors})
	b.fatal(err)
}

// symlink makes link point to target, or skips the test when the platform
// cannot.
func (b *builder) symlink(target, link string) {
	b.t.Helper()
	if err := os.Symlink(target, link); err != nil {
		b.t.Skip("symbolic links unsupported:", err)
	}
}

// mkfifo makes a FIFO at path; ok is false where FIFOs do not exist.
func (b *builder) mkfifo(path string) bool {
	b.t.Helper()
	if err := mkfifo(path); err != nil {
		if errors.Is(err, errNoFIFO) {
			return false
		}
		b.t.Fatal(err)
	}
	return true
}

// moveOut moves dir/name to a new folder outside dir and links it back.
func (b *builder) moveOut(dir, name string) {
	b.t.Helper()
	out := filepath.Join(b.dir(), name)
	b.fatal(os.Rename(filepath.Join(dir, name), out))
	b.symlink(out, filepath.Join(dir, name))
}

func (b *builder) fifos() []Case {
	var cs []Case
	// The reproducer: an index whose one shard is a FIFO.
	d := b.dir()
	b.fatal(os.WriteFile(filepath.Join(d, index), []byte(`{"weight_map":{"w":"`+fifo1+`"}}`), 0o644))
	if !b.mkfifo(filepath.Join(d, fifo1)) {
		return nil
	}
	cs = append(cs, Case{Name: "fifo shard", Dir: d, File: index, Culprit: fifo1,
		ShardWant: "not_regular_file", ShardFollow: "not_regular_file", Folder: "not_regular_file", FolderFollow: "not_regular_file"})
	cs = append(cs, Case{Name: "fifo shard named directly", Dir: d, File: fifo1, Culprit: fifo1,
		FileWant: "not_regular_file", ShardWant: "not_regular_file", ShardFollow: "not_regular_file", Folder: "not_regular_file", FolderFollow: "not_regular_file"})

	// model.safetensors itself a FIFO.
	d = b.dir()
	b.mkfifo(filepath.Join(d, single))
	cs = append(cs, Case{Name: "fifo single file", Dir: d, File: single, Culprit: single,
		FileWant: "not_regular_file", ShardWant: "not_regular_file", ShardFollow: "not_regular_file", Folder: "not_regular_file", FolderFollow: "not_regular_file"})

	// model.safetensors a symlink to a FIFO in the folder.
	d = b.dir()
	b.mkfifo(filepath.Join(d, "pipe"))
	b.symlink("pipe", filepath.Join(d, single))
	cs = append(cs, Case{Name: "symlink to a fifo inside", Dir: d, File: single, Culprit: single,
		FileWant: "not_regular_file", ShardWant: "not_regular_file", ShardFollow: "not_regular_file", Folder: "not_regular_file", FolderFollow: "not_regular_file"})

	// model.safetensors a symlink to a FIFO outside the folder.
	d = b.dir()
	pipe := filepath.Join(b.dir(), "pipe")
	b.mkfifo(pipe)
	b.symlink(pipe, filepath.Join(d, single))
	cs = append(cs, Case{Name: "symlink to a fifo outside", Dir: d, File: single, Culprit: single,
		FileWant: "not_regular_file", ShardWant: "not_regular_file", ShardFollow: "not_regular_file", Folder: "insecure_path", FolderFollow: "not_regular_file"})

	// The index a FIFO, next to valid shards.
	d = b.dir()
	b.sharded(d)
	b.fatal(os.Remove(filepath.Join(d, index)))
	b.mkfifo(filepath.Join(d, index))
	cs = append(cs, Case{Name: "fifo index", Dir: d, File: index, Culprit: index,
		ShardWant: "not_regular_file", ShardFollow: "not_regular_file", Folder: "not_regular_file", FolderFollow: "not_regular_file"})

	// A shard of a valid set replaced by a symlink to a FIFO in the folder.
	d = b.dir()
	b.sharded(d)
	b.fatal(os.Remove(filepath.Join(d, shard2)))
	b.mkfifo(filepath.Join(d, "pipe"))
	b.symlink("pipe", filepath.Join(d, shard2))
	cs = append(cs, Case{Name: "shard symlinked to a fifo", Dir: d, File: index, Culprit: shard2,
		ShardWant: "not_regular_file", ShardFollow: "not_regular_file", Folder: "not_regular_file", FolderFollow: "not_regular_file"})

	// model_index.json a FIFO.
	d = b.pipeline()
	b.fatal(os.Remove(filepath.Join(d, mindex)))
	b.mkfifo(filepath.Join(d, mindex))
	cs = append(cs, Case{Name: "fifo model_index.json", Dir: d, Pipeline: true, Culprit: mindex,
		Folder: "not_regular_file", FolderFollow: "not_regular_file"})

	// A FIFO planted as a save's lock file, beside a temporary that makes
	// shard.Leftovers (and so ckpt validate) ask whether a save holds it.
	d = b.dir()
	b.singleFile(d)
	b.fatal(os.WriteFile(filepath.Join(d, "."+single+".tmp-1"), nil, 0o644))
	b.mkfifo(filepath.Join(d, "."+single+".lock"))
	cs = append(cs, Case{Name: "fifo lock file", Dir: d, File: single, Culprit: single})

	// A unix socket as the single file (open(2) fails on it, with ENXIO).
	d = b.dir()
	if l, err := net.Listen("unix", filepath.Join(d, single)); err == nil {
		b.t.Cleanup(func() { l.Close() })
		cs = append(cs, Case{Name: "socket single file", Dir: d, File: single, Culprit: single,
			FileWant: "not_regular_file", ShardWant: "not_regular_file", ShardFollow: "not_regular_file", Folder: "not_regular_file", FolderFollow: "not_regular_file"})
	}
	return cs
}

// pipeline writes a small pipeline (a transformers text_encoder, a
// diffusers unet) and returns its root.
func (b *builder) pipeline() string {
	b.t.Helper()
	root := b.dir()
	b.fatal(ckpttest.WritePipeline(root, ckpttest.Pipeline{Components: []ckpttest.Component{
		{Name: "text_encoder", Library: "transformers", Class: "CLIPTextModel", Weights: []ckpttest.Weights{{Tensors: tensors}}},
		{Name: "unet", Weights: []ckpttest.Weights{{Prefix: ckpttest.DiffusersPrefix, Shards: 2, Tensors: tensors}}},
	}}))
	return root
}

func (b *builder) devices() []Case {
	if _, err := os.Stat("/dev/zero"); err != nil {
		return nil
	}
	var cs []Case
	// A character device as the single file, and as the index: outside
	// the folder, so refused as such unless links may be followed, and
	// then refused as not regular, before any byte is read.
	for _, dev := range []string{"/dev/null", "/dev/zero"} {
		d := b.dir()
		b.symlink(dev, filepath.Join(d, single))
		cs = append(cs, Case{Name: "single file -> " + dev, Dir: d, File: single, Culprit: single,
			FileWant: "not_regular_file", ShardWant: "not_regular_file", ShardFollow: "not_regular_file", Folder: "insecure_path", FolderFollow: "not_regular_file"})
	}
	d := b.dir()
	b.sharded(d)
	b.fatal(os.Remove(filepath.Join(d, index)))
	b.symlink("/dev/zero", filepath.Join(d, index))
	cs = append(cs, Case{Name: "index -> /dev/zero", Dir: d, File: index, Culprit: index,
		ShardWant: "not_regular_file", ShardFollow: "not_regular_file", Folder: "insecure_path", FolderFollow: "not_regular_file"})
	d = b.dir()
	b.sharded(d)
	b.fatal(os.Remove(filepath.Join(d, shard1)))
	b.symlink("/dev/zero", filepath.Join(d, shard1))
	cs = append(cs, Case{Name: "shard -> /dev/zero", Dir: d, File: index, Culprit: shard1,
		ShardWant: "insecure_path", ShardFollow: "not_regular_file", Folder: "insecure_path", FolderFollow: "not_regular_file"})
	d = b.pipeline()
	b.fatal(os.Remove(filepath.Join(d, mindex)))
	b.symlink("/dev/zero", filepath.Join(d, mindex))
	cs = append(cs, Case{Name: "model_index.json -> /dev/zero", Dir: d, Pipeline: true, Culprit: mindex,
		Folder: "insecure_path", FolderFollow: "not_regular_file"})
	return cs
}

func (b *builder) linksOut() []Case {
	var cs []Case
	// A shard symlinked out of the folder.
	d := b.dir()
	b.sharded(d)
	b.moveOut(d, shard2)
	cs = append(cs, Case{Name: "shard outside", Dir: d, File: index, Culprit: shard2,
		ShardWant: "insecure_path", ShardFollow: OK, Folder: "insecure_path", FolderFollow: OK})
	// The index symlinked out of the folder: followed when named directly
	// (its shards are still looked up beside the link), refused when the
	// folder is resolved.
	d = b.dir()
	b.sharded(d)
	b.moveOut(d, index)
	cs = append(cs, Case{Name: "index outside", Dir: d, File: index, Culprit: index,
		ShardWant: OK, ShardFollow: OK, Folder: "insecure_path", FolderFollow: OK})
	// The single file symlinked out.
	d = b.dir()
	b.singleFile(d)
	b.moveOut(d, single)
	cs = append(cs, Case{Name: "single file outside", Dir: d, File: single, Culprit: single,
		FileWant: OK, ShardWant: OK, ShardFollow: OK, Folder: "insecure_path", FolderFollow: OK})
	// A symlink inside the folder is fine.
	d = b.dir()
	b.singleFile(d)
	b.fatal(os.Rename(filepath.Join(d, single), filepath.Join(d, "blob")))
	b.symlink("blob", filepath.Join(d, single))
	cs = append(cs, Case{Name: "single file linked inside", Dir: d, File: single, Culprit: single})
	// model_index.json symlinked out of the pipeline.
	d = b.pipeline()
	b.moveOut(d, mindex)
	cs = append(cs, Case{Name: "model_index.json outside", Dir: d, Pipeline: true, Culprit: mindex,
		Folder: "insecure_path", FolderFollow: OK})
	// A component folder symlinked out of the pipeline.
	d = b.pipeline()
	b.moveOut(d, "unet")
	cs = append(cs, Case{Name: "component folder outside", Dir: d, Pipeline: true, Culprit: "unet",
		Folder: "insecure_path", FolderFollow: OK})
	// A component's weights symlinked out of its folder.
	d = b.pipeline()
	b.moveOut(filepath.Join(d, "text_encoder"), single)
	cs = append(cs, Case{Name: "component weights outside", Dir: d, Pipeline: true, Culprit: single,
		Folder: "insecure_path", FolderFollow: OK})
	return cs
}

// hubCache lays folders out like the Hugging Face cache:
// models--org--name/snapshots/<hash>/<file> -> ../../blobs/<sha>.
func (b *builder) hubCache() []Case {
	var cs []Case
	repo := filepath.Join(b.dir(), "models--org--name")
	blobs := filepath.Join(repo, "blobs")
	b.fatal(os.MkdirAll(blobs, 0o755))
	b.fatal(os.MkdirAll(filepath.Join(repo, "refs"), 0o755))
	b.fatal(os.WriteFile(filepath.Join(repo, "refs", "main"), []byte("0123abcd"), 0o644))
	n := 0
	// link moves the files of src into blobs and links them from snap,
	// at depth levels below the repository (snapshots/<hash>[/component]).
	var link func(src, snap string, depth int)
	link = func(src, snap string, depth int) {
		b.t.Helper()
		b.fatal(os.MkdirAll(snap, 0o755))
		es, err := os.ReadDir(src)
		b.fatal(err)
		for _, e := range es {
			if e.IsDir() {
				link(filepath.Join(src, e.Name()), filepath.Join(snap, e.Name()), depth+1)
				continue
			}
			n++
			sha := fmt.Sprintf("%064x", n)
			b.fatal(os.Rename(filepath.Join(src, e.Name()), filepath.Join(blobs, sha)))
			up := strings.Repeat(".."+string(filepath.Separator), depth)
			b.symlink(up+filepath.Join("blobs", sha), filepath.Join(snap, e.Name()))
		}
	}
	d := b.dir()
	b.singleFile(d)
	snap := filepath.Join(repo, "snapshots", "1111111111111111111111111111111111111111")
	link(d, snap, 2)
	cs = append(cs, Case{Name: "hub cache single file", Dir: snap, File: single, Culprit: single,
		FileWant: OK, ShardWant: OK, ShardFollow: OK, Folder: "insecure_path", FolderFollow: OK})
	d = b.dir()
	b.sharded(d)
	snap = filepath.Join(repo, "snapshots", "2222222222222222222222222222222222222222")
	link(d, snap, 2)
	cs = append(cs, Case{Name: "hub cache sharded", Dir: snap, File: index, Culprit: "safetensors",
		ShardWant: "insecure_path", ShardFollow: OK, Folder: "insecure_path", FolderFollow: OK})
	d = b.pipeline()
	snap = filepath.Join(repo, "snapshots", "3333333333333333333333333333333333333333")
	link(d, snap, 2)
	cs = append(cs, Case{Name: "hub cache pipeline", Dir: snap, Pipeline: true, Culprit: mindex,
		Folder: "insecure_path", FolderFollow: OK})
	return cs
}

// sparse makes a file of size bytes without writing them.
func (b *builder) sparse(path string, size int64) {
	b.t.Helper()
	f, err := os.Create(path)
	b.fatal(err)
	b.fatal(f.Truncate(size))
	b.fatal(f.Close())
}

func (b *builder) sizes() []Case {
	var cs []Case
	d := b.dir()
	b.sharded(d)
	b.sparse(filepath.Join(d, index), 64<<20+1)
	const tooLarge = "invalid_index: index too large"
	cs = append(cs, Case{Name: "index over 64 MiB", Dir: d, File: index, Culprit: index,
		ShardWant: tooLarge, ShardFollow: tooLarge, Folder: tooLarge, FolderFollow: tooLarge})
	d = b.pipeline()
	b.sparse(filepath.Join(d, mindex), 1<<20+1)
	cs = append(cs, Case{Name: "model_index.json over 1 MiB", Dir: d, Pipeline: true, Culprit: mindex,
		Folder: "invalid_layout: model index invalid", FolderFollow: "invalid_layout: model index invalid"})
	// A header length field far beyond the file.
	d = b.dir()
	raw := binary.LittleEndian.AppendUint64(nil, 99_000_000)
	b.fatal(os.WriteFile(filepath.Join(d, single), append(raw, "{}"...), 0o644))
	cs = append(cs, Case{Name: "header length past the end", Dir: d, File: single, Culprit: single,
		FileWant: "invalid_header_length", ShardWant: "invalid_header_length", ShardFollow: "invalid_header_length",
		Folder: "invalid_header_length", FolderFollow: "invalid_header_length"})
	return cs
}

func (b *builder) oddities() []Case {
	var cs []Case
	// A symlink loop and a dangling symlink where the single file should be.
	d := b.dir()
	b.symlink(single, filepath.Join(d, single))
	cs = append(cs, Case{Name: "symlink loop", Dir: d, File: single, Culprit: single,
		FileWant: Any, ShardWant: Any, ShardFollow: Any, Folder: Any, FolderFollow: Any})
	d = b.dir()
	b.symlink("nowhere.bin", filepath.Join(d, single))
	cs = append(cs, Case{Name: "dangling symlink", Dir: d, File: single, Culprit: single,
		FileWant: Any, ShardWant: Any, ShardFollow: Any, Folder: Any, FolderFollow: Any})
	// A folder where the single file should be.
	d = b.dir()
	b.fatal(os.Mkdir(filepath.Join(d, single), 0o755))
	cs = append(cs, Case{Name: "folder named model.safetensors", Dir: d, File: single, Culprit: single,
		FileWant: "not_regular_file", ShardWant: "invalid_argument: unsupported path", ShardFollow: "invalid_argument: unsupported path", Folder: "not_regular_file", FolderFollow: "not_regular_file"})
	// An index of a shard that is a folder.
	d = b.dir()
	b.sharded(d)
	b.fatal(os.Remove(filepath.Join(d, shard1)))
	b.fatal(os.Mkdir(filepath.Join(d, shard1), 0o755))
	cs = append(cs, Case{Name: "shard is a folder", Dir: d, File: index, Culprit: shard1,
		ShardWant: "not_regular_file", ShardFollow: "not_regular_file", Folder: "not_regular_file", FolderFollow: "not_regular_file"})
	return cs
}

// headerFile writes a safetensors file with the given JSON header and one
// data byte.
func (b *builder) headerFile(dir, header string) {
	b.t.Helper()
	raw := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	raw = append(append(raw, header...), 1)
	b.fatal(os.WriteFile(filepath.Join(dir, single), raw, 0o644))
}

// reference: what the reference (safetensors 0.8) accepts and ckpt refuses
// by design, as the safetensors package documentation says.
func (b *builder) reference() []Case {
	var cs []Case
	refused := func(name, header, kind string) {
		d := b.dir()
		b.headerFile(d, header)
		cs = append(cs, Case{Name: name, Dir: d, File: single, Culprit: single,
			FileWant: kind, ShardWant: kind, ShardFollow: kind, Folder: kind, FolderFollow: kind})
	}
	refused("duplicate tensor", `{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, "duplicate_key")
	refused("zero beside 2^63", `{"a":{"dtype":"U8","shape":[0,9223372036854775808],"data_offsets":[0,0]},"b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, "overflow")
	return cs
}

// Nested returns a JSON value of exactly levels nested containers (arrays,
// objects or both alternating) around a 0.
func Nested(shape string, levels int) string {
	isArray := func(i int) bool { return shape == "arrays" || (shape == "mixed" && i%2 == 0) }
	var s strings.Builder
	for i := range levels {
		if isArray(i) {
			s.WriteString("[")
		} else {
			s.WriteString(`{"k":`)
		}
	}
	s.WriteString("0")
	for i := levels - 1; i >= 0; i-- {
		if isArray(i) {
			s.WriteString("]")
		} else {
			s.WriteString("}")
		}
	}
	return s.String()
}

// nesting sweeps headers 126 to 130 containers deep (counting the header
// object) through every position: the reference accepts 127 and refuses
// 128.
func (b *builder) nesting() []Case {
	const entry = `"dtype":"U8","shape":[1],"data_offsets":[0,1]`
	var cs []Case
	for _, shape := range []string{"arrays", "objects", "mixed"} {
		for depth := 126; depth <= 130; depth++ {
			deep := func(otherwise string) string {
				if depth >= 128 {
					return "invalid_json"
				}
				return otherwise
			}
			for _, p := range []struct{ pos, header, want string }{
				{"tensor field", `{"a":{` + entry + `,"x":` + Nested(shape, depth-2) + `}}`, deep(OK)},
				{"metadata value", `{"__metadata__":{"k":` + Nested(shape, depth-2) + `},"a":{` + entry + `}}`, deep("invalid_header")},
				{"top level", Nested(shape, depth), deep("invalid_header")},
			} {
				d := b.dir()
				b.headerFile(d, p.header)
				cs = append(cs, Case{Name: fmt.Sprintf("nesting %d %s in %s", depth, shape, p.pos), Dir: d, File: single, Culprit: single,
					FileWant: p.want, ShardWant: p.want, ShardFollow: p.want, Folder: p.want, FolderFollow: p.want})
			}
		}
	}
	return cs
}

// errNoFIFO is mkfifo's error where the platform has no FIFOs.
var errNoFIFO = errors.New("no FIFOs on this platform")
