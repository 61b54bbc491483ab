package convert

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/safetensors"
)

// TestRunEveryDTypePair converts a tensor of every dtype to every other
// (with rules, which reach integer and narrow targets alike), in pieces,
// and checks the bytes against dtype.Convert; a cast that loses nothing
// converts back to the source's bytes.
func TestRunEveryDTypePair(t *testing.T) {
	var all []dtype.DType
	for _, d := range dtype.Builtins() {
		if d != dtype.C64 {
			all = append(all, d)
		}
	}
	var ts []ckpttest.Tensor
	rng := rand.New(rand.NewPCG(21, 22))
	for _, d := range all {
		tt := ckpttest.T("t_"+d.String(), d, 4, 2000) // 8000 elements: several 4 KiB pieces
		if d.IsFloat() && d.Bits() >= 16 {
			tt = randTensor(rng, tt.Name, d, 4, 2000)
		}
		ts = append(ts, tt)
	}
	ts = append(ts, ckpttest.T("c", dtype.C64, 3))
	src := ckpttest.File(t, ts...)
	srcF, err := safetensors.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer srcF.Close()
	dir := t.TempDir()
	for _, saturate := range []bool{false, true} {
		for _, to := range all {
			dst := filepath.Join(dir, fmt.Sprintf("to_%s_%v.safetensors", to, saturate))
			rules := []ckpt.Rule{mustRule(t, "c=stored"), mustRule(t, "**="+to.String())}
			rep := run(t, src, dst, Options{Policy: ckpt.Policy{Rules: rules, Saturate: saturate}, ChunkBytes: 4096, Workers: 2})
			out, err := safetensors.Open(dst)
			if err != nil {
				t.Fatal(err)
			}
			for _, from := range all {
				name := "t_" + from.String()
				st, _ := srcF.Tensor(name)
				sb, _ := st.Bytes()
				want := make([]byte, len(sb)/max(from.Bits()/8, 1)*max(to.Bits()/8, 1))
				if n, _ := to.ByteLen(st.NumElements()); true {
					want = make([]byte, n)
				}
				if _, err := dtype.Convert(want, to, sb, from, dtype.Options{Saturate: saturate}); err != nil {
					t.Fatal(err)
				}
				ot, err := out.Tensor(name)
				if err != nil || ot.DType() != to {
					t.Fatalf("%s -> %s: %v %v", from, to, ot, err)
				}
				got, _ := ot.Bytes()
				if !bytes.Equal(got, want) {
					t.Errorf("%s -> %s (saturate %v): bytes differ from dtype.Convert", from, to, saturate)
				}
				var tr *TensorReport
				for i := range rep.Tensors {
					if rep.Tensors[i].Name == name {
						tr = &rep.Tensors[i]
					}
				}
				if tr.Narrowed == exact(from, to) && from != to {
					t.Errorf("%s -> %s: narrowed %v", from, to, tr.Narrowed)
				}
				if from != to && exact(from, to) && !saturate {
					// Back to the source's bytes.
					back := filepath.Join(dir, "back.safetensors")
					run(t, dst, back, Options{Policy: ckpt.Policy{Rules: []ckpt.Rule{mustRule(t, name+"="+from.String())}}})
					bf, _ := safetensors.Open(back)
					bt, _ := bf.Tensor(name)
					bb, _ := bt.Bytes()
					if !bytes.Equal(bb, sb) {
						t.Errorf("%s -> %s -> %s: not the source's bytes", from, to, from)
					}
					bf.Close()
				}
			}
			out.Close()
		}
	}
	_, err = Run(context.Background(), src, filepath.Join(dir, "c.safetensors"), Options{Policy: ckpt.Policy{Rules: []ckpt.Rule{mustRule(t, "c=F32")}}})
	if !errors.Is(err, ErrCast) {
		t.Errorf("complex to real: %v", err)
	}
}
