package main

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/hostile"
	"github.com/ckpt-go/ckpt/shard"
)

func TestConvertCommand(t *testing.T) {
	root := testPipeline(t)
	dst := filepath.Join(t.TempDir(), "out")
	stdout, stderr, code := runCLI(t, "convert", root, dst, "--dtype", "bf16", "--component", "vae=F32", "--keep", "**.bias=F32", "--verify")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	// The transformer keeps its two shards; its bf16 variant is left out.
	for _, want := range []string{"transformer: diffusion_pytorch_model-00001-of-00002.safetensors, diffusion_pytorch_model-00002-of-00002.safetensors",
		"left out 1 file not converted or copied: transformer/diffusion_pytorch_model.bf16.safetensors", "numerics:", "worst tensors:", "verified"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	if stderr != "" {
		t.Errorf("a progress bar or noise on a non-terminal: %q", stderr)
	}
	m, err := ckpt.Open(dst)
	if err != nil {
		t.Fatal(err)
	}
	p, err := m.Plan()
	m.Close()
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, c := range p.Components {
		for _, tp := range c.Tensors {
			checked++
			want := "BF16"
			switch {
			case c.Name == "vae":
				want = "F32"
			case strings.HasSuffix(tp.Name, ".bias"):
				want = "F32"
			case tp.Name == "ids":
				want = "I64"
			}
			if tp.Stored != want {
				t.Errorf("%s/%s: %s, want %s", c.Name, tp.Name, tp.Stored, want)
			}
		}
	}
	if checked != 8 { // testPipeline's 4 + 3 + 1 tensors
		t.Errorf("the output has %d tensors, want 8", checked)
	}

	// FP8 with block scales as JSON: the transformer is a diffusers
	// model, which diffusers would not load with compressed-tensors
	// scales: refused, unless written for ckpt on purpose.
	dst2 := filepath.Join(t.TempDir(), "fp8")
	_, stderr, code = runCLI(t, "convert", root, dst2, "--dtype", "F8_E4M3", "--fp8-scale", "block:16")
	if code != 1 || !strings.Contains(stderr, `cast: component "transformer": unreadable: `) || !strings.Contains(stderr, "--allow-ckpt-only-quant") {
		t.Errorf("fp8 diffusers transformer: exit %d: %s", code, stderr)
	}
	stdout, stderr, code = runCLI(t, "convert", root, dst2, "--dtype", "F8_E4M3", "--fp8-scale", "block:16", "--json", "--max-shard-size", "100B", "--allow-ckpt-only-quant")
	if code != 0 {
		t.Fatalf("fp8: exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "diffusers will not load it") {
		t.Errorf("fp8: no warning that diffusers will not load the transformer:\n%s", stdout)
	}
	var rep struct {
		Components []struct {
			Name  string   `json:"name"`
			Files []string `json:"files"`
			Index string   `json:"index"`
		} `json:"components"`
		Tensors []struct {
			Component, Name, Action, Scale string
		} `json:"tensors"`
		Summary struct {
			Quantized int `json:"quantized"`
		} `json:"summary"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, stdout)
	}
	var quantized []string
	for _, tr := range rep.Tensors {
		if tr.Action == "quantize" {
			quantized = append(quantized, tr.Component+"/"+tr.Name+" "+tr.Scale)
		}
	}
	if len(quantized) != 2 || rep.Summary.Quantized != 2 {
		t.Errorf("quantized %v (%d)", quantized, rep.Summary.Quantized)
	}
	for _, c := range rep.Components {
		if c.Name == "transformer" && (c.Index == "" || len(c.Files) <= 2) {
			t.Errorf("--max-shard-size 100B: transformer not re-sharded: %+v", c)
		}
	}
}

// A sharded folder converts to as many shards, each tensor in the shard
// it came from, and the report lists nothing as left out (issue 19).
func TestConvertCommandKeepsShards(t *testing.T) {
	src := t.TempDir()
	if _, err := ckpttest.WriteWeights(src, ckpttest.Weights{Shards: 3, Tensors: ckpttest.Tensors(t,
		"a.weight:BF16[64,64] b.weight:BF16[64,64] c.weight:BF16[64,64] d.bias:BF16[64] e.weight:BF16[32,64] f.weight:BF16[64,64]")}); err != nil {
		t.Fatal(err)
	}
	srcIndex, err := shard.ReadIndex(filepath.Join(src, "model.safetensors.index.json"))
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "out")
	stdout, stderr, code := runCLI(t, "convert", src, dst, "--dtype", "F32")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if want := "weights: model-00001-of-00003.safetensors, model-00002-of-00003.safetensors, model-00003-of-00003.safetensors in " + dst + " (index model.safetensors.index.json)"; !strings.Contains(stdout, want) || strings.Contains(stdout, "left out") {
		t.Errorf("output:\n%s\nwant %q and nothing left out", stdout, want)
	}
	ix, err := shard.ReadIndex(filepath.Join(dst, "model.safetensors.index.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(ix.WeightMap, srcIndex.WeightMap) || ix.TotalSize != 2*srcIndex.TotalSize {
		t.Errorf("index %+v, the source's %+v", ix, srcIndex)
	}

	stdout, stderr, code = runCLI(t, "convert", src, filepath.Join(t.TempDir(), "json"), "--dtype", "F32", "--json")
	if code != 0 {
		t.Fatalf("--json: exit %d: %s", code, stderr)
	}
	var rep map[string]any
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if s, ok := rep["skipped"]; ok {
		t.Errorf("--json: skipped %v", s)
	}
}

func TestConvertCommandErrors(t *testing.T) {
	src := ckpttest.File(t, ckpttest.Tensor{Name: "x", DType: dtype.F32, Shape: []int64{2}, Data: f32le(1, 1e30)})
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{src}, 2, "SRC and DST"},
		{[]string{src, dir, "--fp8-scale", "rows"}, 2, "--fp8-scale"},
		{[]string{src, dir, "--scale-format", "gguf"}, 2, "--scale-format"},
		{[]string{src, dir, "--dtype", "F8_E4M3", "--scale-format", "deepseek", "--fp8-scale", "channel"}, 2, "block scales only"},
		{[]string{src, dir, "--variant", "a.b"}, 2, "variant"},
		{[]string{src, dir, "--component", "vae=F32"}, 2, "no such component"},
		{[]string{src, filepath.Join(dir, "o.safetensors"), "--dtype", "f16", "--fail-on-overflow"}, 1, "overflow"},
		{[]string{filepath.Join(dir, "missing"), dir}, 1, "source"},
	} {
		_, stderr, code := runCLI(t, append([]string{"convert"}, tc.args...)...)
		if code != tc.code || !strings.Contains(stderr, tc.msg) {
			t.Errorf("convert %v: exit %d (want %d), stderr %q (want %q)", tc.args, code, tc.code, stderr, tc.msg)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "o.safetensors")); err == nil {
		t.Errorf("--fail-on-overflow committed the output")
	}
}

func f32le(v ...float32) []byte {
	b := make([]byte, 4*len(v))
	dtype.EncodeFloat32(b, dtype.F32, v, dtype.Options{})
	return b
}

func TestProgressBar(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(0, 0)
	p := newProgressBar(&buf)
	p.now = func() time.Time { return now }
	p.update("write", 0, 4<<30, false)
	now = now.Add(2 * time.Second)
	p.update("write", 1<<30, 4<<30, false)
	now = now.Add(10 * time.Millisecond)
	p.update("write", 1<<30+1, 4<<30, false) // within the interval: not drawn
	now = now.Add(time.Second)
	p.update("verify", 1<<30, 1<<30, false)
	p.finish()
	lines := strings.Split(buf.String(), "\r")
	if len(lines) != 4 {
		t.Fatalf("%d redraws: %q", len(lines)-1, buf.String())
	}
	if l := lines[2]; !strings.Contains(l, "[======>") || !strings.Contains(l, " 25% 1.0 GiB / 4.0 GiB  512.0 MiB/s  0:06") {
		t.Errorf("line %q", l)
	}
	if l := lines[3]; !strings.HasPrefix(l, "\nverify") && !strings.Contains(lines[2], "\n") {
		t.Errorf("a new phase does not start a new line: %q", buf.String())
	}
	if !strings.HasSuffix(buf.String(), "0:00\n") {
		t.Errorf("finish: %q", buf.String())
	}
}

// TestConvertHostile runs ckpt convert on every hostile case (the folder
// and the file it names, with and without --follow-symlinks), under the
// deadline: exit 0 where the loader accepts the weights, else 1 with a
// message naming the culprit, or naming the file it refuses to copy.
func TestConvertHostile(t *testing.T) {
	for _, c := range hostile.Cases(t) {
		t.Run(c.Name, func(t *testing.T) {
			for _, follow := range []bool{false, true} {
				var flags []string
				folderWant, shardWant := c.Folder, c.ShardWant
				if follow {
					flags = []string{"--follow-symlinks"}
					folderWant, shardWant = c.FolderFollow, c.ShardFollow
				}
				targets := map[string]string{c.Dir: folderWant}
				if c.File != "" {
					targets[c.Path()] = shardWant
				}
				for target, want := range targets {
					out := filepath.Join(t.TempDir(), "out") + string(filepath.Separator)
					_, stderr, code := cliRun(t, append([]string{"convert", target, out, "--dtype", "bf16"}, flags...)...)
					switch {
					case strings.Contains(stderr, "convert: source:") && strings.Contains(stderr, ": copy"):
						// a non-weight file refused, named in the message
					case want == hostile.OK && code != 0:
						t.Errorf("convert %s %v: exit %d: %s", target, flags, code, stderr)
					case want != hostile.OK && (code != 1 || !strings.Contains(stderr, c.Culprit)):
						t.Errorf("convert %s %v: exit %d, want 1 and a message naming %s: %s", target, flags, code, c.Culprit, stderr)
					}
				}
			}
		})
	}
}
