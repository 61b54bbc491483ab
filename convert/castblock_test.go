package convert

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/safetensors"
)

// castBlockChunk makes a measured F32 → BF16 cast's pieces 8 castBlocks
// long (ChunkBytes counts both staging arrays of float32).
const castBlockChunk = 8 * castBlock * 8

// blockedModel returns tensors whose measured casts to BF16 span several
// pieces of several castBlocks each, with partial last blocks and pieces,
// and values the measure treats apart (NaN, values that overflow, zeros,
// tiny ones).
func blockedModel() []safetensors.TensorData {
	rng := rand.New(rand.NewPCG(7, 8))
	values := func(n int) []float64 {
		x := make([]float64, n)
		for i := range x {
			x[i] = rng.NormFloat64()
			switch rng.IntN(100) {
			case 0:
				x[i] *= 1e-30
			case 1:
				x[i] = 0
			}
		}
		x[castBlock+5] = math.NaN()
		x[3*castBlock-1] = 3.4e38 // beyond BF16's largest finite value
		return x
	}
	tensor := func(name string, dt dtype.DType, n int) safetensors.TensorData {
		b, _ := dt.ByteLen(int64(n))
		data := make([]byte, b)
		if _, err := dtype.EncodeFloat64(data, dt, values(n), dtype.Options{Saturate: true}); err != nil {
			panic(err)
		}
		return safetensors.TensorData{Name: name, DType: dt, Shape: []int64{int64(n)}, Data: data}
	}
	return []safetensors.TensorData{
		tensor("f32.weight", dtype.F32, 2*8*castBlock+3*castBlock+24),
		tensor("f64.weight", dtype.F64, 3*castBlock+8),
		tensor("f16.weight", dtype.F16, 3*castBlock+40),
	}
}

// TestRunCastInBlocks checks that a measured cast done castBlock elements
// at a time writes what one conversion of the whole tensor writes and
// reports the errors a plain loop over the whole tensor finds, with the
// source's checksums verified across blocks and pieces.
func TestRunCastInBlocks(t *testing.T) {
	ctx := context.Background()
	src := filepath.Join(t.TempDir(), "model.safetensors")
	model := blockedModel()
	if err := safetensors.Save(ctx, src, model, nil); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "model.safetensors")
	rep := run(t, src, dst, Options{Policy: ckpt.Policy{Default: target(t, "bf16")}, ChunkBytes: castBlockChunk, Workers: 3})
	out, err := safetensors.Open(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	reports := map[string]TensorReport{}
	for _, tr := range rep.Tensors {
		reports[tr.Name] = tr
	}
	for _, td := range model {
		n := td.Shape[0]
		want := make([]byte, 2*n)
		if _, err := dtype.Convert(want, dtype.BF16, td.Data, td.DType, dtype.Options{Workers: 1}); err != nil {
			t.Fatal(err)
		}
		got, err := out.Tensor(td.Name)
		if err != nil {
			t.Fatal(err)
		}
		b, err := got.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != string(want) {
			t.Errorf("%s: the output differs from one conversion of the whole tensor", td.Name)
		}

		x, y := make([]float64, n), make([]float64, n)
		dtype.DecodeFloat64(x, td.Data, td.DType)
		dtype.DecodeFloat64(y, want, dtype.BF16)
		var inf int64
		var maxAbs, maxRel, sse, ssq float64
		for i := range x {
			if math.IsNaN(x[i]) || math.IsInf(x[i], 0) {
				continue
			}
			if math.IsInf(y[i], 0) {
				inf++
				continue
			}
			e := math.Abs(x[i] - y[i])
			maxAbs = max(maxAbs, e)
			if x[i] != 0 {
				maxRel = max(maxRel, e/math.Abs(x[i]))
			}
			sse += e * e
			ssq += x[i] * x[i]
		}
		tr := reports[td.Name]
		rms := math.Sqrt(sse / ssq)
		if tr.Elements != n || tr.Inf != inf || tr.MaxAbsErr != maxAbs || tr.MaxRelErr != maxRel || math.Abs(tr.RMSRelErr-rms) > 1e-9*rms {
			t.Errorf("%s: reported %d elements, %d Inf, errors max %g, rel %g, RMS %g; want %d, %d, %g, %g, %g",
				td.Name, tr.Elements, tr.Inf, tr.MaxAbsErr, tr.MaxRelErr, tr.RMSRelErr, n, inf, maxAbs, maxRel, rms)
		}
		if td.DType != dtype.F16 && inf != 1 { // saturated to F16's largest value
			t.Errorf("%s: the fixture has %d values that overflow BF16, want 1", td.Name, inf)
		}
	}
}

// TestRunCastInBlocksChecksum damages one byte of a source tensor inside a
// block in the middle of a piece, and in the last, partial block: the
// measured cast, which sums its blocks and checks each piece once, finds
// both.
func TestRunCastInBlocksChecksum(t *testing.T) {
	ctx := context.Background()
	model := blockedModel()
	f32 := model[0]
	for _, at := range []struct {
		name string
		elem int64
	}{
		{"middle", 8*castBlock + 2*castBlock + 100}, // the second piece's third block
		{"last", f32.Shape[0] - 3},
	} {
		t.Run(at.name, func(t *testing.T) {
			src := filepath.Join(t.TempDir(), "model.safetensors")
			if err := safetensors.Save(ctx, src, model, nil); err != nil {
				t.Fatal(err)
			}
			h, err := safetensors.ReadHeaderFile(src)
			if err != nil {
				t.Fatal(err)
			}
			info, _ := h.Lookup(f32.Name)
			b, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			b[h.DataOffset+info.Begin+4*at.elem] ^= 0x01 // a low mantissa bit: the same BF16 value
			if err := os.WriteFile(src, b, 0o644); err != nil {
				t.Fatal(err)
			}
			dst := filepath.Join(t.TempDir(), "model.safetensors")
			_, err = Run(ctx, src, dst, Options{Policy: ckpt.Policy{Default: target(t, "bf16")}, ChunkBytes: castBlockChunk, Workers: 2})
			var ce *safetensors.ChecksumError
			if !errors.Is(err, ckpt.ErrChecksum) || !errors.As(err, &ce) || ce.Tensor != f32.Name {
				t.Fatalf("Run of a damaged source: %v", err)
			}
			if _, err := os.Stat(dst); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a failed Run left %s: %v", dst, err)
			}
		})
	}
}

// TestRunCastTruncatedSource truncates the source while its tensor is
// converted: the measured cast, reading block by block, reports a source
// error naming the tensor (never a crash) and writes nothing.
func TestRunCastTruncatedSource(t *testing.T) {
	ctx := context.Background()
	model := blockedModel()
	src := filepath.Join(t.TempDir(), "model.safetensors")
	if err := safetensors.Save(ctx, src, model, nil); err != nil {
		t.Fatal(err)
	}
	h, err := safetensors.ReadHeaderFile(src)
	if err != nil {
		t.Fatal(err)
	}
	name := model[0].Name
	info, _ := h.Lookup(name)
	var pieces int
	testHookPiece = func(tensor string) error {
		if tensor == name {
			if pieces++; pieces == 2 {
				// Keep the first piece's bytes only.
				if err := os.Truncate(src, h.DataOffset+info.Begin+4*8*castBlock); err != nil {
					t.Error(err)
				}
			}
		}
		return nil
	}
	defer func() { testHookPiece = nil }()
	dst := filepath.Join(t.TempDir(), "model.safetensors")
	_, err = Run(ctx, src, dst, Options{Policy: ckpt.Policy{Default: target(t, "bf16")}, ChunkBytes: castBlockChunk, Workers: 1})
	var e *Error
	if !errors.As(err, &e) || e.Kind != ErrSource || e.Tensor != name {
		t.Fatalf("Run with the source truncated meanwhile: %v", err)
	}
	if _, err := os.Stat(dst); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed Run left %s: %v", dst, err)
	}
}
