package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/safetensors"
)

// fixture is one checkpoint the cases run on.
type fixture struct {
	path    string // a .safetensors file or an index
	bytes   int64  // tensor data bytes
	tensors int
}

// pattern is the data every fixture's tensors are cut from: finite BF16
// values (normal, σ = 1) so that every implementation converts them alike.
var pattern = sync.OnceValue(func() []byte {
	r := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, 8<<20)
	for i := 0; i < len(b); i += 2 {
		bits := math.Float32bits(float32(r.NormFloat64()))
		binary.LittleEndian.PutUint16(b[i:], uint16(bits>>16))
	}
	return b
})

// shardSpec is one file of a fixture: its tensors (BF16) in write order.
type shardSpec []safetensors.TensorSpec

// writeShard writes the tensors of spec to path, their bytes cut from
// pattern at a different offset per tensor.
func writeShard(path string, spec shardSpec) (int64, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<20)
	w, err := safetensors.NewWriter(bw, spec, map[string]string{"format": "pt"})
	if err != nil {
		return 0, err
	}
	var total int64
	for i := 0; ; i++ {
		ts, tw, err := w.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, err
		}
		n, err := ts.ByteLen()
		if err != nil {
			return 0, err
		}
		total += n
		pat := pattern()
		off := (i * 4099 * 2) % len(pat)
		for n > 0 {
			k := min(n, int64(len(pat)-off))
			if _, err := tw.Write(pat[off : off+int(k)]); err != nil {
				return 0, err
			}
			n -= k
			off = 0
		}
	}
	if err := w.Close(); err != nil {
		return 0, err
	}
	if err := bw.Flush(); err != nil {
		return 0, err
	}
	return total, f.Close()
}

// writeSet writes shards (one file, or several plus an index) under dir
// with the given base name and returns the fixture.
func writeSet(dir, base string, shards []shardSpec) (fixture, error) {
	fx := fixture{}
	if len(shards) == 1 {
		fx.path = filepath.Join(dir, base+".safetensors")
		n, err := writeShard(fx.path, shards[0])
		fx.bytes, fx.tensors = n, len(shards[0])
		return fx, err
	}
	wm := map[string]string{}
	for i, spec := range shards {
		name := fmt.Sprintf("%s-%05d-of-%05d.safetensors", base, i+1, len(shards))
		n, err := writeShard(filepath.Join(dir, name), spec)
		if err != nil {
			return fx, err
		}
		fx.bytes += n
		fx.tensors += len(spec)
		for _, t := range spec {
			wm[t.Name] = name
		}
	}
	fx.path = filepath.Join(dir, base+".safetensors.index.json")
	b, err := json.MarshalIndent(map[string]any{"metadata": map[string]any{"total_size": fx.bytes}, "weight_map": wm}, "", "  ")
	if err != nil {
		return fx, err
	}
	return fx, os.WriteFile(fx.path, append(b, '\n'), 0o644)
}

// layers returns a transformer-like set of BF16 tensors totalling about
// total bytes: per layer one large matrix of about matrix bytes (shape
// [rows, 1024]) and a norm vector of 1024, split into nshards files of
// about equal size.
func layers(prefix string, total, matrix int64, nshards int) []shardSpec {
	rows := max(matrix/2048, 1)
	nlayers := max(int(total/(rows*2048)), 1)
	shards := make([]shardSpec, nshards)
	for l := range nlayers {
		s := l * nshards / nlayers
		shards[s] = append(shards[s],
			safetensors.TensorSpec{Name: fmt.Sprintf("%s.layers.%d.mlp.weight", prefix, l), DType: dtype.BF16, Shape: []int64{rows, 1024}},
			safetensors.TensorSpec{Name: fmt.Sprintf("%s.layers.%d.norm.weight", prefix, l), DType: dtype.BF16, Shape: []int64{1024}})
	}
	return shards
}

// makeFixtures writes the fixtures that cases need into dir, unless a
// previous run left them there (their names carry their sizes).
func makeFixtures(dir string, cfg config, needed map[string]bool) (map[string]fixture, error) {
	out := map[string]fixture{}
	add := func(name, base string, shards []shardSpec) error {
		if !needed[name] {
			return nil
		}
		fx, err := writeSet(dir, base, shards)
		if err != nil {
			return fmt.Errorf("fixture %s: %w", name, err)
		}
		out[name] = fx
		return nil
	}
	// open: a 2-shard index of many small tensors (header-bound).
	var open []shardSpec
	for i := range cfg.openTensors {
		s := i * 2 / cfg.openTensors
		if len(open) <= s {
			open = append(open, nil)
		}
		open[s] = append(open[s], safetensors.TensorSpec{Name: fmt.Sprintf("model.layers.%d.mlp.experts.%d.weight", i/64, i%64), DType: dtype.BF16, Shape: []int64{4, 8}})
	}
	// many: one file of many small tensors.
	many := make(shardSpec, cfg.many)
	for i := range many {
		many[i] = safetensors.TensorSpec{Name: fmt.Sprintf("model.layers.%d.weight", i), DType: dtype.BF16, Shape: []int64{cfg.manyKiB / 2, 1024}}
	}
	// tiny: one file of many 4×4 tensors (per-tensor overhead).
	tiny := make(shardSpec, cfg.tiny)
	for i := range tiny {
		tiny[i] = safetensors.TensorSpec{Name: fmt.Sprintf("model.layers.%d.mlp.experts.%d.weight", i/256, i%256), DType: dtype.BF16, Shape: []int64{4, 4}}
	}
	mib := int64(1 << 20)
	steps := []struct {
		name, base string
		shards     []shardSpec
	}{
		{"open", fmt.Sprintf("open-%d", cfg.openTensors), open},
		{"many", fmt.Sprintf("many-%dx%dKiB", cfg.many, cfg.manyKiB), []shardSpec{many}},
		{"one", fmt.Sprintf("one-%dMiB", cfg.oneMiB), []shardSpec{{{Name: "weight", DType: dtype.BF16, Shape: []int64{cfg.oneMiB * mib / 2048, 1024}}}}},
		{"set", fmt.Sprintf("set-%dMiB", cfg.setMiB), layers("set", cfg.setMiB*mib, 8*mib, 2)},
		{"big", fmt.Sprintf("big-%dMiBx%d", cfg.bigMiB, cfg.bigShards), layers("big", cfg.bigMiB*mib, 16*mib, cfg.bigShards)},
		{"tiny", fmt.Sprintf("tiny-%dx4x4", cfg.tiny), []shardSpec{tiny}},
	}
	for _, s := range steps {
		if fx, ok := existing(dir, s.base, s.shards); ok && needed[s.name] {
			out[s.name] = fx
			continue
		}
		if err := add(s.name, s.base, s.shards); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// existing returns the fixture base in dir if a previous run wrote it whole
// (every file present with a valid header).
func existing(dir, base string, shards []shardSpec) (fixture, bool) {
	fx := fixture{path: filepath.Join(dir, base+".safetensors")}
	files := []string{fx.path}
	if len(shards) > 1 {
		fx.path = filepath.Join(dir, base+".safetensors.index.json")
		files = files[:0]
		for i := range shards {
			files = append(files, filepath.Join(dir, fmt.Sprintf("%s-%05d-of-%05d.safetensors", base, i+1, len(shards))))
		}
		if _, err := os.Stat(fx.path); err != nil {
			return fx, false
		}
	}
	for i, f := range files {
		h, err := safetensors.ReadHeaderFile(f)
		if err != nil || len(h.Tensors) != len(shards[i]) || !strings.HasSuffix(f, ".safetensors") {
			return fx, false
		}
		fx.bytes += h.DataLen
		fx.tensors += len(h.Tensors)
	}
	return fx, true
}
