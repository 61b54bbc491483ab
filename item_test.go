package ckpt

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"testing"

	"github.com/ckpt-go/ckpt/dtype"
)

// Every Item says what Load does with its tensor, and its Parts read
// exactly the stored bytes of the part: read as stored they are Load's
// bytes, Produce gives Load's bytes for every action, and a quantized
// part's Quant describes the part's own data and scales.
func TestItemsAgreeWithLoad(t *testing.T) {
	rows := MustParsePattern("**")
	for _, c := range []struct {
		name string
		path func(t *testing.T) string
		opts []Option
	}{
		{"whole", writeRankFixture, nil},
		{"rows", writeRankFixture, []Option{WithRank(1, 3, Split{Pattern: rows, Dim: 0})}},
		{"columns-f32", writeRankFixture, []Option{WithDType(To(dtype.F32)), WithRank(1, 2, Split{Pattern: MustParsePattern("*.weight"), Dim: 1})}},
		{"fp8-dequantized-inside-a-block", func(t *testing.T) string { return deepseekAligned(t, 300, 256) },
			[]Option{WithDType(To(dtype.BF16)), WithRank(1, 3, Split{Pattern: rows, Dim: 0})}},
		{"fp8-kept", func(t *testing.T) string { return deepseekAligned(t, 256, 256) },
			[]Option{WithDType(Quantized), WithRank(1, 2, Split{Pattern: rows, Dim: 0})}},
	} {
		for _, mode := range readModes {
			t.Run(c.name+"/"+mode.name, func(t *testing.T) {
				m := mustOpen(t, c.path(t), append(slices.Clone(mode.opts), c.opts...)...)
				w := mustLoad(t, m)
				items, err := m.Items()
				if err != nil {
					t.Fatal(err)
				}
				if len(items) != w.Len() {
					t.Fatalf("%d items, %d tensors loaded", len(items), w.Len())
				}
				for i, it := range items {
					if it.Key != m.Names()[i] {
						t.Errorf("item %d is %s, Names has %s", i, it.Key, m.Names()[i])
					}
					tt, err := w.Tensor(it.Key)
					if err != nil {
						t.Fatal(err)
					}
					if it.DType != tt.DType || !slices.Equal(it.Shape, tt.Shape) || it.Action != tt.Action() && tt.Action() != ActionRead {
						t.Errorf("%s: item %s %v %v, loaded %s %v %s", it.Key, it.DType, it.Shape, it.Action, tt.DType, tt.Shape, tt.Action())
					}
					if (it.Split == nil) != (tt.Split == nil) {
						t.Errorf("%s: item split %v, loaded %v", it.Key, it.Split, tt.Split)
					}
					data := readPart(t, &it.Data)
					switch it.Action {
					case ActionView, ActionRead, ActionQuantized:
						if !bytes.Equal(data, tt.Bytes()) {
							t.Errorf("%s: the item's part reads other bytes than Load's", it.Key)
						}
					}
					if it.Action == ActionQuantized {
						if it.Quant == nil || len(it.Scales) != len(tt.Scales) {
							t.Fatalf("%s: kept quantized without its layout or scales", it.Key)
						}
						for j := range it.Scales {
							if sb := readPart(t, &it.Scales[j]); !bytes.Equal(sb, tt.Scales[j].Bytes()) || !slices.Equal(it.Scales[j].Shape, tt.Scales[j].Shape) {
								t.Errorf("%s: scale %d differs from Load's", it.Key, j)
							}
							if !slices.Equal(it.Quant.Scales[j].Shape, it.Scales[j].Shape) {
								t.Errorf("%s: the layout's scale %d is %v, the part's %v", it.Key, j, it.Quant.Scales[j].Shape, it.Scales[j].Shape)
							}
						}
					}
					if it.Quant != nil {
						n, _ := it.Quant.Data.DType.ByteLen(numElements(it.Quant.Data.Shape))
						if n != it.Data.Size() {
							t.Errorf("%s: the layout's data is %d bytes, the part %d", it.Key, n, it.Data.Size())
						}
					}
					dst := make([]byte, it.Bytes)
					pt, err := it.Produce(context.Background(), dst)
					if err != nil {
						t.Fatalf("%s: Produce: %v", it.Key, err)
					}
					if !bytes.Equal(dst, tt.Bytes()) || pt.DType != tt.DType {
						t.Errorf("%s: Produce gives other bytes than Load", it.Key)
					}
				}
			})
		}
	}
}

func readPart(t *testing.T, p *Part) []byte {
	t.Helper()
	b := make([]byte, p.Size())
	if n, err := p.ReadAt(b, 0); err != nil || int64(n) != p.Size() {
		t.Fatalf("%s: ReadAt = %d, %v", p.Tensor, n, err)
	}
	// Reads at an offset give the same bytes; past the end is io.EOF.
	if p.Size() > 3 {
		tail := make([]byte, p.Size()-3)
		if _, err := p.ReadAt(tail, 3); err != nil || !bytes.Equal(tail, b[3:]) {
			t.Errorf("%s: ReadAt at 3: %v", p.Tensor, err)
		}
	}
	if _, err := p.ReadAt(make([]byte, 1), p.Size()); !errors.Is(err, io.EOF) {
		t.Errorf("%s: ReadAt past the end: %v, want io.EOF", p.Tensor, err)
	}
	return b
}

// Items of a closed model are refused.
func TestItemsClosed(t *testing.T) {
	m := mustOpen(t, writeRankFixture(t))
	m.Close()
	if _, err := m.Items(); !errors.Is(err, ErrClosed) {
		t.Errorf("Items after Close: %v", err)
	}
}
