//go:build amd64 && !purego

package dtype

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/ckpt-go/ckpt/internal/crc32c"
)

// The summing kernels are wired where the CPU can run them, and only for
// the pairs they convert: otherwise TestConvertSum would pass through the
// stepping path alone.
func TestSumKernelWired(t *testing.T) {
	for _, from := range Builtins() {
		for _, to := range Builtins() {
			want := hasVPCLMULQDQ && to == F32 && (from == BF16 || from == F16 && hasF16C)
			if got := archSumKernel(from, to) != nil; got != want {
				t.Errorf("%v→%v: summing kernel %v, want %v", from, to, got, want)
			}
		}
	}
	if !hasVPCLMULQDQ {
		t.Log("this CPU has no VPCLMULQDQ: the summing kernels do not run here")
	}
}

// Each summing kernel this CPU can run, forced in turn (the table holds
// only the best one): the output of the plain kernel and the CRC of the
// source, with special values stopping the kernel at block boundaries.
func TestSumKernelsEach(t *testing.T) {
	type variant struct {
		name     string
		run      sumRun
		can      bool
		from     DType
		needF16C bool
	}
	vs := []variant{
		{"bf16 YMM", folding(bf16ToF32AVX2, foldYMM), hasVPCLMULQDQ, BF16, false},
		{"bf16 ZMM", folding(bf16ToF32AVX2, foldZMM), hasAVX512Fold, BF16, false},
		{"f16 YMM", folding(f16ToF32AVX2, foldYMM), hasVPCLMULQDQ, F16, true},
		{"f16 ZMM", folding(f16ToF32AVX2, foldZMM), hasAVX512Fold, F16, true},
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for _, vr := range vs {
		if !vr.can || vr.needF16C && !hasF16C {
			t.Logf("%s: not on this CPU", vr.name)
			continue
		}
		v := newVecKernel(vr.from, F32, genericKernel(vr.from, F32))
		v.sum = vr.run
		for _, n := range []int{32, 33, 64, 1000, 4096, 70000} {
			src := make([]byte, 2*n)
			for i := 0; i < n; i++ {
				binary.LittleEndian.PutUint16(src[2*i:], uint16(rng.Uint32())&0x3fff) // finite in both formats
			}
			if n > 100 {
				binary.LittleEndian.PutUint16(src[2*40:], 0x7fff)    // NaN in block 1
				binary.LittleEndian.PutUint16(src[2*(n-5):], 0x7fff) // and in the tail's block
			}
			want, got := make([]byte, 4*n), make([]byte, 4*n)
			var ws, gs Stats
			genericKernel(vr.from, F32)(want, src, Options{}, &ws)
			crc := uint32(0x1234)
			v.convertSum(got, src, Options{}, &gs, &crc)
			if !bytes.Equal(got, want) {
				t.Errorf("%s n=%d: output differs", vr.name, n)
			}
			if w := crc32c.Update(0x1234, src); crc != w {
				t.Errorf("%s n=%d: CRC %08x, want %08x", vr.name, n, crc, w)
			}
		}
	}
}
