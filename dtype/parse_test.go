package dtype

import (
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
)

func TestParseNamesAndAliases(t *testing.T) {
	for _, d := range Builtins() {
		info := d.Info()
		for _, s := range append([]string{info.Name, strings.ToLower(info.Name), " " + info.Name + " "}, info.Aliases...) {
			got, err := Parse(s)
			if err != nil || got != d {
				t.Errorf("Parse(%q) = %v, %v; want %v", s, got, err, d)
			}
		}
		if d.String() != info.Name || d.Bits() != info.Bits {
			t.Errorf("%v: String/Bits disagree with Info", d)
		}
	}
	for s, want := range map[string]DType{
		"torch.float8_e4m3fn": F8_E4M3, "bfloat16": BF16, "bf16": BF16, "float16": F16, "half": F16,
		"fp16": F16, "fp32": F32, "float32": F32, "float8_e8m0fnu": F8_E8M0, "np.float16": F16,
		"torch.bfloat16": BF16, "ml_dtypes.float4_e2m1fn": F4, "float8_e5m2fnuz": F8_E5M2FNUZ,
		"torch.int64": I64, "uint8": U8, "bool": BOOL, "complex64": C64, "double": F64,
	} {
		if got, err := Parse(s); err != nil || got != want {
			t.Errorf("Parse(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	want := []int{8, 8, 8, 16, 16, 32, 32, 64, 64, 16, 16, 32, 64, 64, 8, 8, 8, 8, 8, 4, 6, 6}
	for i, d := range Builtins() {
		if d.Bits() != want[i] {
			t.Errorf("%v.Bits() = %d, want %d", d, d.Bits(), want[i])
		}
	}
}

func TestParseUnknown(t *testing.T) {
	_, err := Parse("float7")
	var ue *UnknownError
	if !errors.Is(err, ErrUnknown) || !errors.As(err, &ue) {
		t.Fatalf("Parse(float7): %v", err)
	}
	if ue.Name != "float7" || len(ue.Valid) < 22 || !strings.Contains(err.Error(), `"float7"`) ||
		!strings.Contains(err.Error(), "F8_E4M3") || !strings.Contains(err.Error(), "BF16") {
		t.Errorf("error does not name the input and the valid names: %v", err)
	}
	var d DType
	if err := d.UnmarshalText([]byte("nope")); !errors.Is(err, ErrUnknown) {
		t.Errorf("UnmarshalText: %v", err)
	}
	if _, err := DType(0).MarshalText(); !errors.Is(err, ErrUnknown) {
		t.Errorf("MarshalText(Invalid): %v", err)
	}
	if err := d.UnmarshalText([]byte("float8_e4m3fn")); err != nil || d != F8_E4M3 {
		t.Errorf("UnmarshalText: %v %v", d, err)
	}
	if b, err := d.MarshalText(); err != nil || string(b) != "F8_E4M3" {
		t.Errorf("MarshalText: %s %v", b, err)
	}
}

func TestByteLenElements(t *testing.T) {
	if n, err := F4.ByteLen(6); err != nil || n != 3 {
		t.Errorf("F4.ByteLen(6) = %d, %v", n, err)
	}
	if _, err := F4.ByteLen(3); !errors.Is(err, ErrLength) {
		t.Errorf("F4.ByteLen(3): %v", err)
	}
	if n, err := F6_E3M2.ByteLen(8); err != nil || n != 6 {
		t.Errorf("F6.ByteLen(8) = %d, %v", n, err)
	}
	if _, err := F6_E3M2.ByteLen(2); !errors.Is(err, ErrLength) {
		t.Errorf("F6.ByteLen(2): %v", err)
	}
	if _, err := F64.ByteLen(math.MaxInt64 / 8); !errors.Is(err, ErrLength) {
		t.Errorf("F64.ByteLen(huge): %v", err)
	}
	if n, err := F6_E2M3.Elements(9); err != nil || n != 12 {
		t.Errorf("F6.Elements(9) = %d, %v", n, err)
	}
	if _, err := F32.Elements(6); !errors.Is(err, ErrLength) {
		t.Errorf("F32.Elements(6): %v", err)
	}
}

// e3m4 is a toy 8-bit float (bias 3, 4 mantissa bits, no Inf/NaN, the
// all-ones codes are ordinary values) registered by the tests.
func e3m4Value(c byte) float32 {
	s := float32(1)
	if c&0x80 != 0 {
		s = -1
	}
	e := int(c >> 4 & 7)
	m := float64(c & 15)
	if e == 0 {
		return s * float32(math.Ldexp(m, 1-3-4))
	}
	return s * float32(math.Ldexp(16+m, e-3-4))
}

var testE3M4Spec = Spec{
	Name:    "F8_TEST_E3M4",
	Aliases: []string{"float8_test_e3m4"},
	Bits:    8,
	Min:     -31, Max: 31,
	HasNegZero: true,
	Doc:        "toy FP8 E3M4 for tests",
	Decode: func(dst []float32, src []byte) {
		for i, c := range src {
			dst[i] = e3m4Value(c)
		}
	},
	Encode: func(dst []byte, src []float32, opts Options) Stats {
		var st Stats
		for i, x := range src {
			// Nearest code by brute force (ties: the even code).
			best, bd := byte(0), math.Inf(1)
			for c := 0; c < 256; c++ {
				d := math.Abs(float64(e3m4Value(byte(c))) - float64(x))
				if d < bd || (d == bd && c&1 == 0) {
					best, bd = byte(c), d
				}
			}
			if math.Signbit(float64(x)) && e3m4Value(best) == 0 {
				best |= 0x80
			}
			if math.Abs(float64(x)) > 31 {
				st.Overflow++
				st.Saturated++
			}
			dst[i] = best
		}
		return st
	},
}

var registerTestE3M4 = sync.OnceValues(func() (DType, error) { return Register(testE3M4Spec) })

func TestRegistry(t *testing.T) {
	d, err := registerTestE3M4()
	if err != nil {
		t.Fatal(err)
	}
	if !d.Valid() || d.String() != "F8_TEST_E3M4" || d.Bits() != 8 || !d.IsFloat() || d.Info().Builtin {
		t.Errorf("registered dtype info: %+v", d.Info())
	}
	if p, err := Parse("float8_test_e3m4"); err != nil || p != d {
		t.Errorf("Parse alias: %v %v", p, err)
	}
	if p, err := Parse("f8_test_e3m4"); err != nil || p != d {
		t.Errorf("Parse name: %v %v", p, err)
	}
	found := false
	for _, n := range Names() {
		found = found || n == "F8_TEST_E3M4"
	}
	if !found {
		t.Error("Names does not list the registered dtype")
	}

	// F32 -> toy -> F32, and toy -> other built-ins.
	in := []float32{1, -2.5, 0.0625, 100, 1.03125}
	b := make([]byte, len(in))
	st, err := EncodeFloat32(b, d, in, Options{})
	if err != nil || st.Elements != 5 || st.Overflow != 1 || st.MaxAbs != 100 {
		t.Fatalf("encode to registered: %v %v", st, err)
	}
	back := make([]float32, len(in))
	if _, err := DecodeFloat32(back, b, d); err != nil {
		t.Fatal(err)
	}
	want := []float32{1, -2.5, 0.0625, 31, 1} // 1.03125 is a tie: even code (1.0)
	for i := range want {
		if back[i] != want[i] {
			t.Errorf("round trip %v -> %v, want %v", in[i], back[i], want[i])
		}
	}
	bf := make([]byte, 2*len(in))
	if _, err := Convert(bf, BF16, b, d, Options{}); err != nil || binary.LittleEndian.Uint16(bf[2:]) != 0xC020 {
		t.Errorf("registered -> BF16: % x %v", bf, err)
	}
	i64 := make([]byte, 8*len(in))
	binary.LittleEndian.PutUint64(i64, 3)
	if _, err := Convert(b, d, i64, I64, Options{}); err != nil || b[0] != e3m4Code(3) {
		t.Errorf("I64 -> registered: % x %v", b, err)
	}
	same := make([]byte, len(b))
	if st, err := Convert(same, d, b, d, Options{}); err != nil || string(same) != string(b) || st.Elements != 5 {
		t.Errorf("registered copy: %v %v", st, err)
	}

	// Refusals.
	for _, s := range []Spec{
		testE3M4Spec, // duplicate
		{Name: "BF16", Bits: 8, Decode: testE3M4Spec.Decode, Encode: testE3M4Spec.Encode},
		{Name: "F8_OTHER", Aliases: []string{"bfloat16"}, Bits: 8, Decode: testE3M4Spec.Decode, Encode: testE3M4Spec.Encode},
		{Name: "F8_OTHER", Aliases: []string{"FLOAT8_TEST_E3M4"}, Bits: 8, Decode: testE3M4Spec.Decode, Encode: testE3M4Spec.Encode},
		{Name: "lower", Bits: 8, Decode: testE3M4Spec.Decode, Encode: testE3M4Spec.Encode},
		{Name: "F12", Bits: 12, Decode: testE3M4Spec.Decode, Encode: testE3M4Spec.Encode},
		{Name: "F8_NOCODEC", Bits: 8},
		{Name: "F8_RANGE", Bits: 8, Min: 1, Max: -1, Decode: testE3M4Spec.Decode, Encode: testE3M4Spec.Encode},
	} {
		_, err := Register(s)
		var re *RegisterError
		if !errors.Is(err, ErrRegister) || !errors.As(err, &re) || re.Name != s.Name {
			t.Errorf("Register(%q) = %v, want a RegisterError", s.Name, err)
		}
	}
	if _, err := Parse("f8_other"); err == nil {
		t.Error("a refused registration left a name behind")
	}
}

func e3m4Code(v float32) byte {
	for c := 0; c < 256; c++ {
		if e3m4Value(byte(c)) == v {
			return byte(c)
		}
	}
	return 0
}
