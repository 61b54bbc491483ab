package bench_test

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ckpt-go/ckpt/safetensors"
	nlp "github.com/nlpodyssey/safetensors"
)

// TestPeersAgree checks that ckpt and nlpodyssey/safetensors read the same
// tensors (names, dtypes, shapes, bytes) from every fixture, so that the
// benchmarks compare equal work.
func TestPeersAgree(t *testing.T) {
	for _, fx := range fixtures(t, t.TempDir()) {
		t.Run(fx.name, func(t *testing.T) {
			f, err := safetensors.OpenBytes(fx.file)
			if err != nil {
				t.Fatalf("ckpt: %v", err)
			}
			defer f.Close()
			st, err := nlp.Deserialize(fx.file)
			if err != nil {
				t.Fatalf("nlpodyssey: %v", err)
			}
			if f.Len() != st.Len() {
				t.Fatalf("ckpt has %d tensors, nlpodyssey %d", f.Len(), st.Len())
			}
			if fx.names != nil && !slices.Equal(f.Names(), fx.names) {
				t.Errorf("ckpt names differ from the generator's")
			}
			for name, tn := range f.Tensors() {
				v, ok := st.Tensor(name)
				if !ok {
					t.Fatalf("nlpodyssey has no tensor %q", name)
				}
				if tn.DType().String() != v.DType().String() {
					t.Errorf("%s: dtype %s vs %s", name, tn.DType(), v.DType())
				}
				shape := make([]uint64, 0, len(tn.Shape()))
				for _, d := range tn.Shape() {
					shape = append(shape, uint64(d))
				}
				if !slices.Equal(shape, v.Shape()) {
					t.Errorf("%s: shape %v vs %v", name, tn.Shape(), v.Shape())
				}
				b, err := tn.Bytes()
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(b, v.Data()) {
					t.Errorf("%s: data differs", name)
				}
				if len(b) > 0 && &b[0] != &v.Data()[0] {
					t.Errorf("%s: the two views do not share memory (not zero-copy)", name)
				}
			}
		})
	}
}

// BenchmarkHeaderParse: parse and validate the JSON header, MB/s of header.
// Baseline: a plain copy of the same bytes.
func BenchmarkHeaderParse(b *testing.B) {
	for _, fx := range fixtures(b, b.TempDir()) {
		dataLen := int64(len(fx.file) - 8 - len(fx.header))
		b.Run(fx.name+"/impl=copy", func(b *testing.B) {
			dst := make([]byte, len(fx.header))
			b.SetBytes(int64(len(fx.header)))
			b.ResetTimer()
			for range b.N {
				copy(dst, fx.header)
			}
		})
		b.Run(fx.name+"/impl=ckpt", func(b *testing.B) {
			b.SetBytes(int64(len(fx.header)))
			b.ReportAllocs()
			for range b.N {
				if _, err := safetensors.ParseHeader(fx.header, dataLen); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fx.name+"/impl=nlpodyssey", func(b *testing.B) {
			b.SetBytes(int64(len(fx.header)))
			b.ReportAllocs()
			for range b.N {
				if _, _, err := nlp.ReadMetadata(fx.file); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkOpenBytes: open an in-memory file and take the zero-copy view of
// every tensor. MB/s of header.
func BenchmarkOpenBytes(b *testing.B) {
	for _, fx := range fixtures(b, b.TempDir()) {
		b.Run(fx.name+"/impl=ckpt", func(b *testing.B) {
			b.SetBytes(int64(len(fx.header)))
			b.ReportAllocs()
			for range b.N {
				f, err := safetensors.OpenBytes(fx.file)
				if err != nil {
					b.Fatal(err)
				}
				for _, t := range f.Tensors() {
					if _, err := t.Bytes(); err != nil {
						b.Fatal(err)
					}
				}
				f.Close()
			}
		})
		b.Run(fx.name+"/impl=nlpodyssey", func(b *testing.B) {
			b.SetBytes(int64(len(fx.header)))
			b.ReportAllocs()
			for range b.N {
				st, err := nlp.Deserialize(fx.file)
				if err != nil {
					b.Fatal(err)
				}
				for _, v := range st.Tensors() {
					_ = v.TensorView.Data()
				}
			}
		})
	}
}

// BenchmarkTensorAccess: look a tensor up by name in an open file and take
// its zero-copy bytes; ns per lookup. Baseline: a Go map from name to
// offsets and a slice expression.
func BenchmarkTensorAccess(b *testing.B) {
	for _, fx := range fixtures(b, b.TempDir()) {
		f, err := safetensors.OpenBytes(fx.file)
		if err != nil {
			b.Fatal(err)
		}
		st, err := nlp.Deserialize(fx.file)
		if err != nil {
			b.Fatal(err)
		}
		names := f.Names()
		r := rand.New(rand.NewPCG(1, 2))
		order := make([]string, 4096)
		for i := range order {
			order[i] = names[r.IntN(len(names))]
		}
		h := f.Header()
		offs := make(map[string][2]int64, len(names))
		for _, ti := range h.Tensors {
			offs[ti.Name] = [2]int64{h.DataOffset + ti.Begin, h.DataOffset + ti.End}
		}
		b.Run(fx.name+"/impl=map", func(b *testing.B) {
			var sink int
			for i := range b.N {
				o := offs[order[i%len(order)]]
				sink += len(fx.file[o[0]:o[1]])
			}
			_ = sink
		})
		b.Run(fx.name+"/impl=ckpt", func(b *testing.B) {
			b.ReportAllocs()
			var sink int
			for i := range b.N {
				t, err := f.Tensor(order[i%len(order)])
				if err != nil {
					b.Fatal(err)
				}
				d, err := t.Bytes()
				if err != nil {
					b.Fatal(err)
				}
				sink += len(d)
			}
			_ = sink
		})
		b.Run(fx.name+"/impl=nlpodyssey", func(b *testing.B) {
			b.ReportAllocs()
			var sink int
			for i := range b.N {
				v, ok := st.Tensor(order[i%len(order)])
				if !ok {
					b.Fatal("missing tensor")
				}
				sink += len(v.Data())
			}
			_ = sink
		})
		f.Close()
	}
}
