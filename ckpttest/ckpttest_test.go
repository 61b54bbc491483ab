package ckpttest_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/x448/float16"
)

func TestParseTensors(t *testing.T) {
	ts, err := ckpttest.ParseTensors("embed:BF16[8,4]; layers.0.w:float8_e4m3fn[4,4]\nscale:F32[] ids:I64 ns:a:b:F16[2]")
	if err != nil {
		t.Fatal(err)
	}
	want := []ckpttest.Tensor{
		{Name: "embed", DType: dtype.BF16, Shape: []int64{8, 4}},
		{Name: "layers.0.w", DType: dtype.F8_E4M3, Shape: []int64{4, 4}},
		{Name: "scale", DType: dtype.F32, Shape: []int64{}},
		{Name: "ids", DType: dtype.I64, Shape: []int64{}},
		{Name: "ns:a:b", DType: dtype.F16, Shape: []int64{2}},
	}
	if len(ts) != len(want) {
		t.Fatalf("got %+v", ts)
	}
	for i := range ts {
		if ts[i].Name != want[i].Name || ts[i].DType != want[i].DType || !slices.Equal(ts[i].Shape, want[i].Shape) {
			t.Errorf("%d: %+v, want %+v", i, ts[i], want[i])
		}
	}
	for _, bad := range []string{"noname", ":F32[1]", "x:NOPE[1]", "x:F32[1", "x:F32[a]", "x:F32[-1]"} {
		if _, err := ckpttest.ParseTensors(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestFillAllDTypes checks that contents are deterministic and that every
// float value is finite (decoded independently of the dtype package for the
// IEEE types and by bit pattern for FP8).
func TestFillAllDTypes(t *testing.T) {
	for _, dt := range dtype.Builtins() {
		a, err := ckpttest.Fill("w", dt, []int64{4, 64})
		if err != nil {
			t.Fatalf("%s: %v", dt, err)
		}
		b, _ := ckpttest.Fill("w", dt, []int64{4, 64})
		c, _ := ckpttest.Fill("v", dt, []int64{4, 64})
		n, _ := dt.ByteLen(256)
		if int64(len(a)) != n || !bytes.Equal(a, b) || bytes.Equal(a, c) {
			t.Errorf("%s: not deterministic, or not name-dependent", dt)
		}
		for i := 0; i < len(a); {
			switch dt {
			case dtype.F32, dtype.C64:
				v := math.Float32frombits(binary.LittleEndian.Uint32(a[i:]))
				if v < -1 || v >= 1 {
					t.Fatalf("%s: %v", dt, v)
				}
				i += 4
			case dtype.F64:
				v := math.Float64frombits(binary.LittleEndian.Uint64(a[i:]))
				if v < -1 || v >= 1 {
					t.Fatalf("%s: %v", dt, v)
				}
				i += 8
			case dtype.F16:
				v := float16.Frombits(binary.LittleEndian.Uint16(a[i:])).Float32()
				if v < -1 || v > 1 {
					t.Fatalf("%s: %v", dt, v)
				}
				i += 2
			case dtype.BF16:
				v := math.Float32frombits(uint32(binary.LittleEndian.Uint16(a[i:])) << 16)
				if v < -1 || v > 1 {
					t.Fatalf("%s: %v", dt, v)
				}
				i += 2
			case dtype.BOOL:
				if a[i] > 1 {
					t.Fatalf("BOOL %d", a[i])
				}
				i++
			case dtype.F8_E4M3:
				if a[i]&0x7f == 0x7f {
					t.Fatalf("%s NaN", dt)
				}
				i++
			case dtype.F8_E5M2:
				if a[i]&0x7c == 0x7c {
					t.Fatalf("%s non-finite", dt)
				}
				i++
			case dtype.F8_E4M3FNUZ, dtype.F8_E5M2FNUZ:
				if a[i] == 0x80 {
					t.Fatalf("%s NaN", dt)
				}
				i++
			case dtype.F8_E8M0:
				if a[i] == 0xff {
					t.Fatalf("%s NaN", dt)
				}
				i++
			default:
				i = len(a)
			}
		}
	}
	if _, err := ckpttest.Fill("w", dtype.F4, []int64{3}); err == nil {
		t.Error("3 F4 elements accepted")
	}
	if _, err := ckpttest.Fill("w", dtype.F32, []int64{1 << 40}); err == nil {
		t.Error("a 4 TiB fixture accepted")
	}
}

// TestEncodeReadsBack checks the independent encoder against the
// safetensors reader.
func TestEncodeReadsBack(t *testing.T) {
	ts := ckpttest.MustParseTensors("b:F8_E5M2[3,3] a:BF16[2] e:F32[0] s:F6_E2M3[4] f:F4[2,2]")
	path := filepath.Join(t.TempDir(), "x.safetensors")
	if err := ckpttest.WriteFile(path, ts, map[string]string{"k": "v", "format": "pt"}); err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Len() != len(ts) || f.Metadata()["k"] != "v" || f.Header().HeaderLen%8 != 0 {
		t.Fatalf("len %d metadata %v", f.Len(), f.Metadata())
	}
	for _, want := range ts {
		tt, err := f.Tensor(want.Name)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := tt.Bytes()
		exp, _ := want.Contents()
		if tt.DType() != want.DType || !slices.Equal(tt.Shape(), want.Shape) || !bytes.Equal(got, exp) {
			t.Errorf("%s differs", want.Name)
		}
	}
	for _, bad := range [][]ckpttest.Tensor{
		{ckpttest.T("a", dtype.F32, 1), ckpttest.T("a", dtype.F32, 1)},
		{ckpttest.T("", dtype.F32, 1)},
		{{Name: "a", DType: dtype.F32, Shape: []int64{2}, Data: []byte{1}}},
	} {
		if _, err := ckpttest.Encode(bad, nil); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

func TestWriteWeightsLayouts(t *testing.T) {
	ts := ckpttest.MustParseTensors("a:F32[2] b:F32[2] c:F32[2]")
	for _, tc := range []struct {
		w    ckpttest.Weights
		want []string
	}{
		{ckpttest.Weights{Tensors: ts}, []string{"model.safetensors"}},
		{ckpttest.Weights{Variant: "fp16", Tensors: ts}, []string{"model.fp16.safetensors"}},
		{ckpttest.Weights{Shards: 2, Tensors: ts}, []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "model.safetensors.index.json"}},
		{ckpttest.Weights{Prefix: ckpttest.DiffusersPrefix, Variant: "fp16", Shards: 2, Tensors: ts},
			[]string{"diffusion_pytorch_model.fp16-00001-of-00002.safetensors", "diffusion_pytorch_model.fp16-00002-of-00002.safetensors", "diffusion_pytorch_model.safetensors.index.fp16.json"}},
		{ckpttest.Weights{Variant: "fp16", Shards: 3, Layout: ckpttest.Legacy, Tensors: ts},
			[]string{"model-00001-of-00003.fp16.safetensors", "model-00002-of-00003.fp16.safetensors", "model-00003-of-00003.fp16.safetensors", "model.safetensors.index.fp16.json"}},
		{ckpttest.Weights{Variant: "fp16", Shards: 2, Layout: ckpttest.LegacyIndexName, Tensors: ts},
			[]string{"model-00001-of-00002.fp16.safetensors", "model-00002-of-00002.fp16.safetensors", "model.safetensors.fp16.index.json"}},
	} {
		dir := t.TempDir()
		got, err := ckpttest.WriteWeights(dir, tc.w)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("wrote %v, want %v", got, tc.want)
		}
		if len(got) > 1 {
			var ix struct {
				Metadata  map[string]int64
				WeightMap map[string]string `json:"weight_map"`
			}
			b, _ := os.ReadFile(filepath.Join(dir, got[len(got)-1]))
			if err := json.Unmarshal(b, &ix); err != nil || len(ix.WeightMap) != 3 || ix.Metadata["total_size"] != 24 {
				t.Errorf("index %s: %v", b, err)
			}
		}
	}
	if _, err := ckpttest.WriteWeights(t.TempDir(), ckpttest.Weights{Variant: "a.b", Tensors: ts}); err == nil {
		t.Error("bad variant accepted")
	}
	if _, err := ckpttest.WriteWeights(t.TempDir(), ckpttest.Weights{Shards: 4, Tensors: ts}); err == nil {
		t.Error("more shards than tensors accepted")
	}
}

func TestWritePipeline(t *testing.T) {
	root := ckpttest.NewPipeline(t, ckpttest.Pipeline{
		Components: []ckpttest.Component{
			{Name: "unet", Weights: []ckpttest.Weights{{Prefix: ckpttest.DiffusersPrefix, Tensors: ckpttest.MustParseTensors("w:F16[2]")}}},
			{Name: "text_encoder", Library: "transformers", Class: "CLIPTextModel", Weights: []ckpttest.Weights{{Tensors: ckpttest.MustParseTensors("w:F16[2]")}}},
			{Name: "hidden", Unlisted: true, Files: map[string]string{"x.txt": "x"}},
		},
		Null:  []string{"safety_checker"},
		Files: map[string]string{"README.md": "hi"},
	})
	b, err := os.ReadFile(filepath.Join(root, "model_index.json"))
	if err != nil {
		t.Fatal(err)
	}
	var mi map[string]any
	json.Unmarshal(b, &mi)
	if mi["_class_name"] != "DiffusionPipeline" || mi["hidden"] != nil || mi["safety_checker"] == nil {
		t.Errorf("model_index %s", b)
	}
	te, _ := mi["text_encoder"].([]any)
	if len(te) != 2 || te[0] != "transformers" || te[1] != "CLIPTextModel" {
		t.Errorf("text_encoder %v", te)
	}
	for _, p := range []string{"unet/diffusion_pytorch_model.safetensors", "text_encoder/model.safetensors", "hidden/x.txt", "README.md"} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Error(err)
		}
	}
	if err := ckpttest.WritePipeline(t.TempDir(), ckpttest.Pipeline{Components: []ckpttest.Component{{Name: "../x"}}}); err == nil {
		t.Error("component path accepted")
	}
}

func TestOpenFixtureZstd(t *testing.T) {
	// testdata/tiny.safetensors.zst was made with ckpttest.Compress from
	// WriteFile(ckpttest.MustParseTensors("w:BF16[4,4] b:F8_E4M3[4]"), {"format":"pt"}).
	p := ckpttest.OpenFixture(t, filepath.Join("testdata", "tiny.safetensors.zst"))
	if filepath.Base(p) != "tiny.safetensors" {
		t.Fatalf("path %s", p)
	}
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := ckpttest.Encode(ckpttest.MustParseTensors("w:BF16[4,4] b:F8_E4M3[4]"), map[string]string{"format": "pt"})
	if !bytes.Equal(got, want) {
		t.Fatal("decompressed fixture differs")
	}
	if q := ckpttest.OpenFixture(t, "testdata/plain.safetensors"); q != "testdata/plain.safetensors" {
		t.Errorf("uncompressed path changed: %s", q)
	}

	// Round trip, and corrupt input.
	dir := t.TempDir()
	src := filepath.Join(dir, "x.safetensors")
	os.WriteFile(src, want, 0o644)
	if err := ckpttest.Compress(src, src+".zst"); err != nil {
		t.Fatal(err)
	}
	out, err := ckpttest.Decompress(src+".zst", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(out); !bytes.Equal(b, want) {
		t.Error("round trip differs")
	}
	os.WriteFile(filepath.Join(dir, "bad.safetensors.zst"), []byte("not zstd at all"), 0o644)
	var e *ckpttest.Error
	if _, err := ckpttest.Decompress(filepath.Join(dir, "bad.safetensors.zst"), dir); !errors.As(err, &e) || e.Op != "decompress" {
		t.Errorf("corrupt: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "bad.safetensors")); err == nil {
		t.Error("partial output left behind")
	}
	if _, err := ckpttest.Decompress(src, dir); err == nil {
		t.Error("name without .zst accepted")
	}
}
