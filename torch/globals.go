package torch

import (
	"github.com/ckpt-go/ckpt/dtype"
)

// globalKind says what an allowed global is to the unpickler.
type globalKind uint8

const (
	gOrderedDict       globalKind = iota + 1 // collections.OrderedDict: called with () it makes an empty dict
	gRebuildV2                               // torch._utils._rebuild_tensor_v2
	gRebuildV3                               // torch._utils._rebuild_tensor_v3
	gRebuildParam                            // torch._utils._rebuild_parameter
	gRebuildParamState                       // torch._utils._rebuild_parameter_with_state
	gStorage                                 // a typed storage class (torch.FloatStorage); dt is its dtype
	gUntypedStorage                          // torch.storage.UntypedStorage: bytes (U8)
	gDType                                   // a dtype (torch.float8_e4m3fn); dt is it
)

// pyGlobal is an allowed global: a class, function or dtype that the
// unpickler knows the meaning of. Nothing is imported or called: the
// unpickler interprets REDUCE on these by itself.
type pyGlobal struct {
	kind    globalKind
	spelled string      // as the pickle spells it: "torch FloatStorage"
	dt      dtype.DType // for gStorage, gUntypedStorage and gDType
}

// allowed maps "module name", as GLOBAL spells it, to the globals PyTorch
// writes into the data.pkl of a state dict.
var allowed = map[string]*pyGlobal{}

// unsupportedTypes are globals PyTorch writes for tensors whose dtype has no
// safetensors equivalent: refused with ErrUnsupported rather than
// ErrForbiddenGlobal, since they are harmless, just not convertible.
var unsupportedTypes = map[string]bool{}

func init() {
	add := func(kind globalKind, spelled string, dt dtype.DType) {
		allowed[spelled] = &pyGlobal{kind: kind, spelled: spelled, dt: dt}
	}
	add(gOrderedDict, "collections OrderedDict", dtype.Invalid)
	add(gRebuildV2, "torch._utils _rebuild_tensor_v2", dtype.Invalid)
	add(gRebuildV3, "torch._utils _rebuild_tensor_v3", dtype.Invalid)
	add(gRebuildParam, "torch._utils _rebuild_parameter", dtype.Invalid)
	add(gRebuildParamState, "torch._utils _rebuild_parameter_with_state", dtype.Invalid)
	add(gUntypedStorage, "torch.storage UntypedStorage", dtype.U8)
	add(gUntypedStorage, "torch UntypedStorage", dtype.U8)

	// The typed storages torch.save names in persistent ids ("torch
	// FloatStorage": the class's __module__ is torch).
	for name, dt := range map[string]dtype.DType{
		"FloatStorage":        dtype.F32,
		"DoubleStorage":       dtype.F64,
		"HalfStorage":         dtype.F16,
		"BFloat16Storage":     dtype.BF16,
		"LongStorage":         dtype.I64,
		"IntStorage":          dtype.I32,
		"ShortStorage":        dtype.I16,
		"CharStorage":         dtype.I8,
		"ByteStorage":         dtype.U8,
		"BoolStorage":         dtype.BOOL,
		"ComplexFloatStorage": dtype.C64,
	} {
		add(gStorage, "torch "+name, dt)
	}
	for _, name := range []string{"ComplexDoubleStorage", "QInt8Storage", "QUInt8Storage",
		"QInt32Storage", "QUInt4x2Storage", "QUInt2x4Storage"} {
		unsupportedTypes["torch "+name] = true
	}

	// The dtypes _rebuild_tensor_v3 takes: a torch.dtype pickles as the
	// global torch.<name>, name being what its __reduce__ returns (the
	// canonical name; the aliases are accepted too).
	for name, dt := range map[string]dtype.DType{
		"float32": dtype.F32, "float": dtype.F32,
		"float64": dtype.F64, "double": dtype.F64,
		"float16": dtype.F16, "half": dtype.F16,
		"bfloat16":  dtype.BF16,
		"complex64": dtype.C64, "cfloat": dtype.C64,
		"int64": dtype.I64, "long": dtype.I64,
		"int32": dtype.I32, "int": dtype.I32,
		"int16": dtype.I16, "short": dtype.I16,
		"int8":            dtype.I8,
		"uint8":           dtype.U8,
		"uint16":          dtype.U16,
		"uint32":          dtype.U32,
		"uint64":          dtype.U64,
		"bool":            dtype.BOOL,
		"float8_e4m3fn":   dtype.F8_E4M3,
		"float8_e5m2":     dtype.F8_E5M2,
		"float8_e4m3fnuz": dtype.F8_E4M3FNUZ,
		"float8_e5m2fnuz": dtype.F8_E5M2FNUZ,
		"float8_e8m0fnu":  dtype.F8_E8M0,
	} {
		add(gDType, "torch "+name, dt)
	}
	for _, name := range []string{"complex32", "chalf", "complex128", "cdouble",
		"qint8", "quint8", "qint32", "quint4x2", "quint2x4", "float4_e2m1fn_x2",
		"bits1x8", "bits2x4", "bits4x2", "bits8", "bits16",
		"uint1", "uint2", "uint3", "uint4", "uint5", "uint6", "uint7",
		"int1", "int2", "int3", "int4", "int5", "int6", "int7"} {
		unsupportedTypes["torch "+name] = true
	}
}

// lookupGlobal resolves a global as the pickle spells it ("module name").
func lookupGlobal(module, name string) (*pyGlobal, error) {
	spelled := module + " " + name
	if g, ok := allowed[spelled]; ok {
		return g, nil
	}
	if unsupportedTypes[spelled] {
		return nil, &Error{Kind: ErrUnsupported, Global: spelled,
			Msg: "unsupported dtype: torch." + name + " has no safetensors dtype"}
	}
	return nil, &Error{Kind: ErrForbiddenGlobal, Global: spelled,
		Msg: "not a global that PyTorch writes for a state dict; refused without importing anything"}
}
