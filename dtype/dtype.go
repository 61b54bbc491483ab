// Package dtype defines the element types of safetensors checkpoints, a
// registry for types the library does not know yet, and exact, fast
// conversions between them.
//
// Every dtype the safetensors format defines has a constant here whose
// String method returns the format's exact name. Conversions (Convert,
// DecodeFloat32, EncodeFloat32) work on byte slices in little-endian
// safetensors layout.
//
// # Rounding
//
// A conversion widens each source value exactly and rounds it once to the
// target, to nearest with ties to even, as if the target's exponent were
// unbounded; the target's overflow rule then applies. There is never a
// second rounding: BF16, F16 and the FP8/FP6/FP4 types go through their
// exact float32 value; F64 sources round straight from float64; I64 and U64
// sources round once (through a round-to-odd float64). From float32 the
// results are bit-identical to ml_dtypes (numpy for F16), NaN encodings
// included; PyTorch agrees on every non-NaN value and on which outputs are
// NaN, but writes some NaNs with other bits (see below). Non-NaN F16 results
// are those of github.com/x448/float16.
//
// # Overflow, infinities and NaN
//
// Without Options.Saturate:
//   - F16, BF16, F32, F8_E5M2: overflow becomes ±Inf.
//   - F8_E4M3 (no infinities): overflow, ±Inf and NaN become NaN 0x7F|sign,
//     as PyTorch's tensor.to(torch.float8_e4m3fn). 464 is a tie that rounds
//     to 448, not an overflow.
//   - F8_E4M3FNUZ, F8_E5M2FNUZ: overflow, ±Inf and NaN become the single
//     NaN 0x80; there is no -0: -0 and negative values that round to zero
//     become 0x00.
//   - F4, F6_E2M3, F6_E3M2 (no Inf, no NaN): overflow and ±Inf saturate to
//     ±max in both modes, as ml_dtypes does. A NaN becomes a zero whose sign
//     bit is the inverse of the NaN's (+NaN -> -0, -NaN -> +0): this is what
//     ml_dtypes 0.6 writes, and ckpt matches it; Stats.NaN counts it.
//
// With Options.Saturate (OCP "SAT", NVIDIA "SATFINITE") finite overflow and
// ±Inf become ±max for every float target, so the output is never infinite;
// NaN stays NaN.
//
// NaN encodings: F16 keeps the sign and the top 10 payload bits, forced
// nonzero, without setting the quiet bit (numpy); BF16 becomes the quiet NaN
// 0x7FC0|sign (ml_dtypes); F8_E4M3 0x7F|sign; F8_E5M2 0x7E|sign (ml_dtypes;
// PyTorch writes 0x7F, both are NaN); F32 from F64 keeps the sign and top
// payload bits and sets the quiet bit, like x86 and ARM hardware, and so does
// F32 to F64 (and BF16 to F64, through F32). Widening BF16 and F16 to F32,
// and F16 to F64, keeps NaN payloads bit for bit (numpy); BF16 NaNs become
// the canonical F16 NaN 0x7E00|sign (ml_dtypes). The FP8 NaN codes widen to
// the quiet NaN 0x7FC00000|sign (the FNUZ NaN 0x80 to 0xFFC00000, like
// ml_dtypes).
//
// # F8_E8M0
//
// F8_E8M0 (float8_e8m0fnu) is an unsigned power of two 2^(e-127), e in
// 0..254, with 0xFF as NaN and no zero. Encoding follows ml_dtypes:
//   - NaN, ±Inf, zero (either sign) and negative values become 0xFF; with
//     Saturate, +Inf and finite overflow become 0xFE (2^127).
//   - x >= 2^-126 rounds to the nearest power of two with ties going up
//     (1.5 -> 2, 3 -> 4): ml_dtypes rounds half up here, not to even.
//     x >= 1.5·2^127 overflows (NaN, or 0xFE with Saturate).
//   - 2^-127 < x < 2^-126 becomes 0x01 (2^-126); 0 < x <= 2^-127 becomes
//     0x00 (2^-127), so tiny positive values never underflow.
//
// F64 sources round once from float64 with the same rules. ml_dtypes
// instead rounds float64 to float32 first, for every narrow target: its
// results differ from ckpt's single rounding for float64 values within
// float32 precision of a midpoint (for example 1+2^-4+2^-30 to F8_E4M3:
// ml_dtypes 1.0, ckpt 1.125).
//
// # Sub-byte packing
//
// F4 stores two elements per byte, element 0 in the low nibble. F6_E2M3 and
// F6_E3M2 store four elements in three bytes: element i occupies bits
// [6i, 6i+6) of the little-endian bit stream, so the three bytes b0 b1 b2 of
// a group hold w = b0 | b1<<8 | b2<<16 and element j is w>>(6j) & 63. This
// is F4's low-first order carried over to 6 bits: element 0 sits in the low
// bits of byte 0, a little-endian load plus shifts unpacks any group, and a
// slice of whole groups (multiples of 4 elements) starts on a byte boundary.
// Byte counts must be whole: n F4 elements take n/2 bytes (n even), n F6
// elements take 3n/4 bytes (n a multiple of 4).
//
// # Integers, BOOL and complex
//
// Integers and BOOL convert to floats exactly, then round once. Floats
// convert to integers by truncation toward zero, clamped to the integer's
// range (Overflow and Saturated count the clamped values, ±Inf counts as
// Saturated); NaN becomes 0 (counted in NaN). Integer narrowing clamps the
// same way. Any nonzero integer and any nonzero or NaN float becomes BOOL 1.
// C64 converts to C64 unchanged; real values convert to C64 with the real
// part rounded to float32 and a zero imaginary part; C64 to a real type is
// ErrUnsupported. Registered dtypes (Register) decode to and encode from
// float32 and convert to and from every other type.
package dtype

import (
	"math"
	"strings"
)

// DType identifies an element type. The zero value is Invalid. Built-in
// dtypes are the constants below; Register adds more at run time.
type DType uint16

// The dtypes of the safetensors format, in the format's spelling.
const (
	Invalid DType = iota
	BOOL
	U8
	I8
	I16
	U16
	I32
	U32
	I64
	U64
	F16
	BF16
	F32
	F64
	C64
	F8_E4M3
	F8_E5M2
	F8_E4M3FNUZ
	F8_E5M2FNUZ
	F8_E8M0
	F4
	F6_E2M3
	F6_E3M2

	numBuiltin // first DType handed out by Register
)

// Kind classifies a dtype.
type Kind uint8

// The kinds of dtype.
const (
	KindInvalid  Kind = iota
	KindBool          // BOOL: one byte, 0 or 1
	KindUnsigned      // unsigned integers
	KindSigned        // two's complement integers
	KindFloat         // binary floating point, including FP8, FP6, FP4 and E8M0
	KindComplex       // pairs of floats (real, imaginary)
)

// String returns the kind in lower case ("float", "signed", ...).
func (k Kind) String() string {
	switch k {
	case KindBool:
		return "bool"
	case KindUnsigned:
		return "unsigned"
	case KindSigned:
		return "signed"
	case KindFloat:
		return "float"
	case KindComplex:
		return "complex"
	}
	return "invalid"
}

// Info describes a dtype.
type Info struct {
	// Name is the safetensors name, e.g. "F8_E4M3".
	Name string
	// Bits is the size of one element in bits: 4 (F4), 6 (F6_*), 8, 16, 32 or 64.
	Bits int
	// Kind tells integers, floats, bool and complex apart.
	Kind Kind
	// Min and Max are the lowest and highest finite values. For integers wider
	// than 53 bits they are rounded to the nearest float64.
	Min, Max float64
	// SmallestPositive is the smallest positive value (a subnormal for most
	// float types; 1 for integers).
	SmallestPositive float64
	// Aliases are the other spellings Parse accepts (lower case).
	Aliases []string
	// HasInf and HasNaN tell whether the type can represent infinities and NaN.
	HasInf, HasNaN bool
	// HasNegZero tells whether -0 is a distinct value.
	HasNegZero bool
	// Builtin is false for dtypes added with Register.
	Builtin bool
	// Doc is a one-line description.
	Doc string

	// codec is set for registered dtypes.
	codec *Spec
}

// IsFloat reports whether the kind is KindFloat.
func (i Info) IsFloat() bool { return i.Kind == KindFloat }

var builtins = [numBuiltin]Info{
	Invalid: {Name: "INVALID"},
	BOOL: {Name: "BOOL", Bits: 8, Kind: KindBool, Min: 0, Max: 1, SmallestPositive: 1,
		Aliases: []string{"bool", "boolean"}, Doc: "boolean, one byte (0 or 1)"},
	U8: {Name: "U8", Bits: 8, Kind: KindUnsigned, Min: 0, Max: math.MaxUint8, SmallestPositive: 1,
		Aliases: []string{"uint8", "u8"}, Doc: "unsigned 8-bit integer"},
	I8: {Name: "I8", Bits: 8, Kind: KindSigned, Min: math.MinInt8, Max: math.MaxInt8, SmallestPositive: 1,
		Aliases: []string{"int8", "i8"}, Doc: "signed 8-bit integer"},
	I16: {Name: "I16", Bits: 16, Kind: KindSigned, Min: math.MinInt16, Max: math.MaxInt16, SmallestPositive: 1,
		Aliases: []string{"int16", "i16", "short"}, Doc: "signed 16-bit integer"},
	U16: {Name: "U16", Bits: 16, Kind: KindUnsigned, Min: 0, Max: math.MaxUint16, SmallestPositive: 1,
		Aliases: []string{"uint16", "u16"}, Doc: "unsigned 16-bit integer"},
	I32: {Name: "I32", Bits: 32, Kind: KindSigned, Min: math.MinInt32, Max: math.MaxInt32, SmallestPositive: 1,
		Aliases: []string{"int32", "i32", "int"}, Doc: "signed 32-bit integer"},
	U32: {Name: "U32", Bits: 32, Kind: KindUnsigned, Min: 0, Max: math.MaxUint32, SmallestPositive: 1,
		Aliases: []string{"uint32", "u32"}, Doc: "unsigned 32-bit integer"},
	I64: {Name: "I64", Bits: 64, Kind: KindSigned, Min: math.MinInt64, Max: math.MaxInt64, SmallestPositive: 1,
		Aliases: []string{"int64", "i64", "long"}, Doc: "signed 64-bit integer"},
	U64: {Name: "U64", Bits: 64, Kind: KindUnsigned, Min: 0, Max: math.MaxUint64, SmallestPositive: 1,
		Aliases: []string{"uint64", "u64"}, Doc: "unsigned 64-bit integer"},
	F16: {Name: "F16", Bits: 16, Kind: KindFloat, Min: -65504, Max: 65504, SmallestPositive: 0x1p-24,
		HasInf: true, HasNaN: true, HasNegZero: true,
		Aliases: []string{"float16", "half", "fp16", "f16"}, Doc: "IEEE 754 binary16"},
	BF16: {Name: "BF16", Bits: 16, Kind: KindFloat, Min: -0x1.fep127, Max: 0x1.fep127, SmallestPositive: 0x1p-133,
		HasInf: true, HasNaN: true, HasNegZero: true,
		Aliases: []string{"bfloat16", "bf16"}, Doc: "bfloat16: the top half of a float32"},
	F32: {Name: "F32", Bits: 32, Kind: KindFloat, Min: -math.MaxFloat32, Max: math.MaxFloat32, SmallestPositive: 0x1p-149,
		HasInf: true, HasNaN: true, HasNegZero: true,
		Aliases: []string{"float32", "float", "fp32", "f32", "single"}, Doc: "IEEE 754 binary32"},
	F64: {Name: "F64", Bits: 64, Kind: KindFloat, Min: -math.MaxFloat64, Max: math.MaxFloat64, SmallestPositive: 0x1p-1074,
		HasInf: true, HasNaN: true, HasNegZero: true,
		Aliases: []string{"float64", "double", "fp64", "f64"}, Doc: "IEEE 754 binary64"},
	C64: {Name: "C64", Bits: 64, Kind: KindComplex, Min: -math.MaxFloat32, Max: math.MaxFloat32, SmallestPositive: 0x1p-149,
		HasInf: true, HasNaN: true, HasNegZero: true,
		Aliases: []string{"complex64", "cfloat", "c64"}, Doc: "complex: two float32 (real, imaginary)"},
	F8_E4M3: {Name: "F8_E4M3", Bits: 8, Kind: KindFloat, Min: -448, Max: 448, SmallestPositive: 0x1p-9,
		HasNaN: true, HasNegZero: true,
		Aliases: []string{"float8_e4m3fn", "f8e4m3fn", "f8_e4m3fn", "fp8_e4m3", "fp8_e4m3fn", "e4m3fn", "e4m3"},
		Doc:     "OCP FP8 E4M3 (e4m3fn): bias 7, no infinities, NaN 0x7F/0xFF, max 448"},
	F8_E5M2: {Name: "F8_E5M2", Bits: 8, Kind: KindFloat, Min: -57344, Max: 57344, SmallestPositive: 0x1p-16,
		HasInf: true, HasNaN: true, HasNegZero: true,
		Aliases: []string{"float8_e5m2", "f8e5m2", "fp8_e5m2", "e5m2"},
		Doc:     "OCP FP8 E5M2: bias 15, IEEE-like with infinities, max 57344"},
	F8_E4M3FNUZ: {Name: "F8_E4M3FNUZ", Bits: 8, Kind: KindFloat, Min: -240, Max: 240, SmallestPositive: 0x1p-10,
		HasNaN:  true,
		Aliases: []string{"float8_e4m3fnuz", "f8e4m3fnuz", "fp8_e4m3fnuz", "e4m3fnuz"},
		Doc:     "FP8 E4M3 FNUZ: bias 8, single NaN 0x80, no -0, no infinities, max 240"},
	F8_E5M2FNUZ: {Name: "F8_E5M2FNUZ", Bits: 8, Kind: KindFloat, Min: -57344, Max: 57344, SmallestPositive: 0x1p-17,
		HasNaN:  true,
		Aliases: []string{"float8_e5m2fnuz", "f8e5m2fnuz", "fp8_e5m2fnuz", "e5m2fnuz"},
		Doc:     "FP8 E5M2 FNUZ: bias 16, single NaN 0x80, no -0, no infinities, max 57344"},
	F8_E8M0: {Name: "F8_E8M0", Bits: 8, Kind: KindFloat, Min: 0x1p-127, Max: 0x1p127, SmallestPositive: 0x1p-127,
		HasNaN:  true,
		Aliases: []string{"float8_e8m0fnu", "f8e8m0fnu", "f8e8m0", "fp8_e8m0", "e8m0", "e8m0fnu"},
		Doc:     "OCP MX scale E8M0: unsigned power of two 2^(e-127), NaN 0xFF, no zero"},
	F4: {Name: "F4", Bits: 4, Kind: KindFloat, Min: -6, Max: 6, SmallestPositive: 0.5,
		HasNegZero: true,
		Aliases:    []string{"float4_e2m1fn", "float4_e2m1fn_x2", "f4e2m1fn", "fp4", "fp4_e2m1", "e2m1", "e2m1fn"},
		Doc:        "OCP MX FP4 E2M1: two per byte, element 0 in the low nibble, max 6"},
	F6_E2M3: {Name: "F6_E2M3", Bits: 6, Kind: KindFloat, Min: -7.5, Max: 7.5, SmallestPositive: 0.125,
		HasNegZero: true,
		Aliases:    []string{"float6_e2m3fn", "f6e2m3fn", "fp6_e2m3", "e2m3", "e2m3fn"},
		Doc:        "OCP MX FP6 E2M3: packed 6-bit, max 7.5"},
	F6_E3M2: {Name: "F6_E3M2", Bits: 6, Kind: KindFloat, Min: -28, Max: 28, SmallestPositive: 0.0625,
		HasNegZero: true,
		Aliases:    []string{"float6_e3m2fn", "f6e3m2fn", "fp6_e3m2", "e3m2", "e3m2fn"},
		Doc:        "OCP MX FP6 E3M2: packed 6-bit, max 28"},
}

func init() {
	for i := range builtins {
		builtins[i].Builtin = DType(i) != Invalid
	}
}

// Builtins returns the dtypes the safetensors format defines, in the order of
// the constants.
func Builtins() []DType {
	out := make([]DType, 0, numBuiltin-1)
	for d := BOOL; d < numBuiltin; d++ {
		out = append(out, d)
	}
	return out
}

// Info returns the description of d. For an unknown d it returns the Invalid
// entry, whose Name is "INVALID" and Bits 0.
func (d DType) Info() Info {
	if d < numBuiltin {
		return builtins[d]
	}
	if info, ok := lookupRegistered(d); ok {
		return *info
	}
	return builtins[Invalid]
}

// info returns a pointer to the description, nil for unknown dtypes.
func (d DType) info() *Info {
	if d < numBuiltin {
		if d == Invalid {
			return nil
		}
		return &builtins[d]
	}
	info, _ := lookupRegistered(d)
	return info
}

// Valid reports whether d is a built-in or registered dtype.
func (d DType) Valid() bool { return d.info() != nil }

// String returns the safetensors name of d, e.g. "BF16".
func (d DType) String() string {
	if info := d.info(); info != nil {
		return info.Name
	}
	return "INVALID"
}

// Bits returns the size of one element in bits, 0 for an invalid dtype.
func (d DType) Bits() int {
	if info := d.info(); info != nil {
		return info.Bits
	}
	return 0
}

// IsFloat reports whether d is a floating-point type (FP8, FP6, FP4 and E8M0
// included; complex excluded).
func (d DType) IsFloat() bool {
	info := d.info()
	return info != nil && info.Kind == KindFloat
}

// Kind returns the kind of d.
func (d DType) Kind() Kind {
	if info := d.info(); info != nil {
		return info.Kind
	}
	return KindInvalid
}

// MarshalText encodes d as its safetensors name.
func (d DType) MarshalText() ([]byte, error) {
	if !d.Valid() {
		return nil, &UnknownError{Name: d.String()}
	}
	return []byte(d.String()), nil
}

// UnmarshalText decodes a name accepted by Parse.
func (d *DType) UnmarshalText(b []byte) error {
	v, err := Parse(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// ByteLen returns the number of bytes n elements of d occupy. It fails when
// the count does not fill whole bytes (sub-byte types) or overflows int64.
func (d DType) ByteLen(n int64) (int64, error) {
	bits := int64(d.Bits())
	if bits == 0 {
		return 0, &UnknownError{Name: d.String()}
	}
	if n < 0 {
		return 0, &LengthError{DType: d, Elements: n, Reason: "negative element count"}
	}
	if n > math.MaxInt64/bits {
		return 0, &LengthError{DType: d, Elements: n, Reason: "byte size overflows int64"}
	}
	total := n * bits
	if total%8 != 0 {
		return 0, &LengthError{DType: d, Elements: n,
			Reason: "elements do not fill whole bytes"}
	}
	return total / 8, nil
}

// Elements returns how many elements of d a byte slice of length n holds. It
// fails when n bytes do not hold a whole number of elements.
func (d DType) Elements(n int) (int, error) {
	bits := d.Bits()
	if bits == 0 {
		return 0, &UnknownError{Name: d.String()}
	}
	total := int64(n) * 8
	if total%int64(bits) != 0 {
		return 0, &LengthError{DType: d, Bytes: int64(n), Reason: "bytes do not hold a whole number of elements"}
	}
	return int(total / int64(bits)), nil
}

// Parse returns the dtype named s. It accepts the safetensors names (F16,
// F8_E4M3, ...) in any letter case and the common framework spellings
// ("bfloat16", "torch.float8_e4m3fn", "np.float16", "fp16", "half",
// "float8_e8m0fnu", ...). An unknown name yields an *UnknownError that lists
// the valid names; it matches ErrUnknown with errors.Is.
func Parse(s string) (DType, error) {
	key := normalizeName(s)
	if d, ok := builtinNames[key]; ok {
		return d, nil
	}
	if d, ok := lookupRegisteredName(key); ok {
		return d, nil
	}
	return Invalid, &UnknownError{Name: s, Valid: Names()}
}

// MustParse is like Parse but panics on an unknown name. It is meant for
// package-level variables and tests.
func MustParse(s string) DType {
	d, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return d
}

// frameworkPrefixes are module prefixes stripped before lookup.
var frameworkPrefixes = []string{"torch.", "np.", "numpy.", "jnp.", "jax.numpy.", "ml_dtypes.", "tf.", "mx.", "mlx.core."}

func normalizeName(s string) string {
	key := strings.ToLower(strings.TrimSpace(s))
	for _, p := range frameworkPrefixes {
		if strings.HasPrefix(key, p) {
			key = key[len(p):]
			break
		}
	}
	return key
}

var builtinNames = func() map[string]DType {
	m := make(map[string]DType)
	for d := BOOL; d < numBuiltin; d++ {
		m[strings.ToLower(builtins[d].Name)] = d
		for _, a := range builtins[d].Aliases {
			m[a] = d
		}
	}
	return m
}()

// Names returns the names of all known dtypes: the built-ins in the order of
// the constants, then registered ones in registration order.
func Names() []string {
	all := All()
	out := make([]string, len(all))
	for i, d := range all {
		out[i] = d.String()
	}
	return out
}

// All returns every known dtype: built-ins, then registered ones.
func All() []DType {
	return append(Builtins(), registeredDTypes()...)
}
