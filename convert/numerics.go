package convert

import (
	"math"

	"github.com/ckpt-go/ckpt/dtype"
)

// numeric describes a float dtype's values for deciding whether a cast is
// exact: p significant bits, the smallest positive value, the largest
// finite value.
type numeric struct {
	p        int
	min, max float64
}

var numerics = map[dtype.DType]numeric{
	dtype.F64:         {53, 0x1p-1074, math.MaxFloat64},
	dtype.F32:         {24, 0x1p-149, math.MaxFloat32},
	dtype.BF16:        {8, 0x1p-133, 0x1.fep127},
	dtype.F16:         {11, 0x1p-24, 65504},
	dtype.F8_E4M3:     {4, 0x1p-9, 448},
	dtype.F8_E5M2:     {3, 0x1p-16, 57344},
	dtype.F8_E4M3FNUZ: {4, 0x1p-10, 240},
	dtype.F8_E5M2FNUZ: {3, 0x1p-17, 57344},
	dtype.F8_E8M0:     {1, 0x1p-127, 0x1p127},
	dtype.F6_E2M3:     {4, 0.125, 7.5},
	dtype.F6_E3M2:     {3, 0.0625, 28},
	dtype.F4:          {2, 0.5, 6},
}

// exact reports whether every value of from is a value of to, so that the
// cast loses nothing and the report has nothing to say about it.
func exact(from, to dtype.DType) bool {
	if from == to {
		return true
	}
	f, ok1 := numerics[from]
	t, ok2 := numerics[to]
	if ok1 && ok2 {
		// E8M0 has no zero and no sign; the FNUZ types no -0 and no
		// infinity; F4 and F6 no infinity and no NaN.
		fi, ti := from.Info(), to.Info()
		if to == dtype.F8_E8M0 || (fi.HasNegZero && !ti.HasNegZero) || (fi.HasInf && !ti.HasInf) || (fi.HasNaN && !ti.HasNaN) {
			return false
		}
		return t.p >= f.p && t.min <= f.min && t.max >= f.max
	}
	if !ok2 {
		return false // to an integer, bool, complex or registered type
	}
	switch from {
	case dtype.BOOL, dtype.U8, dtype.I8:
		return t.p >= 8 && t.max >= 255
	case dtype.I16, dtype.U16:
		return t.p >= 16 && t.max >= 65535
	case dtype.I32, dtype.U32:
		return t.p >= 32
	}
	return false
}
