package ckpttest_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/google/go-cmp/cmp"
)

// FuzzParseTensors checks that the spec parser never panics, that what it
// accepts is well formed, and that an accepted spec written back in the
// canonical form parses to the same tensors.
func FuzzParseTensors(f *testing.F) {
	for _, s := range []string{
		"embed:BF16[8,4] layers.0.w:F8_E4M3[4,4] scale:F32[] ids:I64[3]",
		"a:F32; b:f16[2 ,3]\nc:F4[2]",
		"x:y:U8[1]", ":F32[1]", "a:F32[", "a:F32[-1]", "a:F32[1,,2]", "a:NOPE[1]",
		"a:F32[99999999999999999999]", "a[1]:F32[2]", "", "   ;;  ",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		ts, err := ckpttest.ParseTensors(spec)
		if err != nil {
			return
		}
		var b strings.Builder
		for i, tt := range ts {
			if tt.Name == "" || !tt.DType.Valid() || tt.Shape == nil {
				t.Fatalf("accepted %q: %+v", spec, tt)
			}
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(tt.Name + ":" + tt.DType.String() + "[")
			for j, d := range tt.Shape {
				if d < 0 {
					t.Fatalf("negative dimension from %q", spec)
				}
				if j > 0 {
					b.WriteByte(',')
				}
				b.WriteString(strconv.FormatInt(d, 10))
			}
			b.WriteString("]")
		}
		again, err := ckpttest.ParseTensors(b.String())
		if err != nil {
			t.Fatalf("canonical form %q of %q: %v", b.String(), spec, err)
		}
		if d := cmp.Diff(ts, again); d != "" {
			t.Fatalf("%q -> %q differs (-first +again):\n%s", spec, b.String(), d)
		}
	})
}
