package cuda

import (
	"fmt"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/quant"
)

// Kernel dtype codes (numerics.h: CK_F32, CK_BF16, CK_F16; 3 is an 8-bit
// float decoded through a table).
const (
	ckF32  = 0
	ckBF16 = 1
	ckF16  = 2
	ckTab  = 3
)

// Scale encodings and per-tensor factor modes (numerics.h).
const (
	ckSNone = 0
	ckSF32  = 1
	ckSBF16 = 2
	ckSF16  = 3
	ckSTab  = 4

	ckGNone = 0
	ckGMul  = 1
	ckGDiv  = 2
)

// tableTypes are the 8-bit float types whose codes the kernels decode
// through a 256-entry float64 table, in the order of the device's table
// buffer; the F4 table (16 entries) follows them.
var tableTypes = []dtype.DType{dtype.F8_E4M3, dtype.F8_E5M2, dtype.F8_E4M3FNUZ, dtype.F8_E5M2FNUZ, dtype.F8_E8M0}

// decodeTables holds every code's exact value, from package dtype (the
// values quant.Weight.Dequantize uses, NaN bits included).
var decodeTables = func() map[dtype.DType][]float64 {
	t := map[dtype.DType][]float64{}
	codes := make([]byte, 256)
	for i := range codes {
		codes[i] = byte(i)
	}
	for _, d := range tableTypes {
		v := make([]float64, 256)
		if _, err := dtype.DecodeFloat64(v, codes, d); err != nil {
			panic(err) // fixed, valid arguments
		}
		t[d] = v
	}
	var pairs [8]byte
	for j := range pairs {
		pairs[j] = byte(2*j) | byte(2*j+1)<<4
	}
	f4 := make([]float64, 16)
	if _, err := dtype.DecodeFloat64(f4, pairs[:], dtype.F4); err != nil {
		panic(err)
	}
	t[dtype.F4] = f4
	return t
}()

// tableIndex returns the offset, in float64 elements, of d's table in the
// device's table buffer.
func tableIndex(d dtype.DType) (int64, bool) {
	for i, t := range tableTypes {
		if t == d {
			return int64(i) * 256, true
		}
	}
	if d == dtype.F4 {
		return int64(len(tableTypes)) * 256, true
	}
	return 0, false
}

// allTables returns the table buffer's contents: tableTypes' tables, then
// F4's.
func allTables() []float64 {
	out := make([]float64, 0, len(tableTypes)*256+16)
	for _, d := range tableTypes {
		out = append(out, decodeTables[d]...)
	}
	return append(out, decodeTables[dtype.F4]...)
}

// dqScale is one scale operand of the dequantization kernel.
type dqScale struct {
	index int         // into quant.Weight.Scales; -1: none
	kind  int         // ckS*
	tab   dtype.DType // the table's dtype for ckSTab
}

// dqPlan is a quantized weight's dequantization as the kernels compute
// it: the argument values of ck_dequant (and of the Linear kernels' FP8
// weight path), chosen by the rules of quant.Weight.Dequantize.
type dqPlan struct {
	elem    dtype.DType // the codes' type (its table)
	fp4     bool
	n, r, c int64 // elements; the [R, C] view
	prim    dqScale
	varies  bool
	br, bc  int64
	gridC   int64
	glob    dqScale
	gmode   int
}

// scaleKind returns how the kernels decode a scale.
func scaleKind(s quant.Scale) (dqScale, error) {
	if s.Role == quant.RoleE8M0 {
		return dqScale{kind: ckSTab, tab: dtype.F8_E8M0}, nil
	}
	switch s.DType {
	case dtype.F32:
		return dqScale{kind: ckSF32}, nil
	case dtype.BF16:
		return dqScale{kind: ckSBF16}, nil
	case dtype.F16:
		return dqScale{kind: ckSF16}, nil
	}
	if _, ok := tableIndex(s.DType); ok && s.DType != dtype.F4 {
		return dqScale{kind: ckSTab, tab: s.DType}, nil
	}
	return dqScale{}, fmt.Errorf("scale %q: dtype %s is not one the kernels decode (F32, BF16, F16 or an 8-bit float)", s.Name, s.DType)
}

// planDequant chooses the kernel arguments for w. It assumes w passed
// quant's validation (Upload and the loader check it); what it cannot
// express is an error.
func planDequant(w *quant.Weight) (*dqPlan, error) {
	p := &dqPlan{elem: w.Elem, prim: dqScale{index: -1}, glob: dqScale{index: -1}}
	switch {
	case w.Elem == dtype.F4:
		p.fp4 = true
	case w.Elem == dtype.F8_E4M3 || w.Elem == dtype.F8_E5M2 || w.Elem == dtype.F8_E4M3FNUZ || w.Elem == dtype.F8_E5M2FNUZ:
	default:
		return nil, fmt.Errorf("element type %s is not an FP8 type or F4", w.Elem)
	}
	p.n, p.r, p.c = 1, 1, 1
	for _, d := range w.Shape {
		if d < 0 {
			return nil, fmt.Errorf("negative dimension in %v", w.Shape)
		}
		p.n *= d
	}
	if len(w.Shape) > 0 {
		p.c = w.Shape[len(w.Shape)-1]
		if p.c > 0 {
			p.r = p.n / p.c
		} else {
			p.r = 0
			for _, d := range w.Shape[:len(w.Shape)-1] {
				p.r = max(p.r, 1) * d
			}
		}
	}
	if len(w.Scales) > 2 {
		return nil, fmt.Errorf("%d scales; at most 2", len(w.Scales))
	}
	// quant's rule: at most one scale varies (the primary); among the
	// per-tensor ones a non-dividing scale is the primary when none varies,
	// the other the per-tensor factor.
	for pass := 0; pass < 2; pass++ {
		for i, s := range w.Scales {
			if s.Block[0] < 1 || s.Block[1] < 1 {
				return nil, fmt.Errorf("scale %q: block %v is not positive", s.Name, s.Block)
			}
			varies := s.Block[0] < p.r || s.Block[1] < p.c
			divides := s.Role == quant.RoleGlobalScale
			switch {
			case pass == 0 && varies:
				if divides || p.prim.index >= 0 {
					return nil, fmt.Errorf("scale %q: layout not computable", s.Name)
				}
				p.prim.index = i
			case pass == 1 && !varies:
				switch {
				case !divides && p.prim.index < 0:
					p.prim.index = i
				case p.glob.index < 0:
					p.glob.index = i
				default:
					return nil, fmt.Errorf("two per-tensor factors besides the varying scale")
				}
			}
		}
	}
	if i := p.prim.index; i >= 0 {
		s := w.Scales[i]
		k, err := scaleKind(s)
		if err != nil {
			return nil, err
		}
		k.index = i
		p.prim = k
		if s.Block[0] < p.r || s.Block[1] < p.c {
			p.varies = true
			p.br, p.bc = s.Block[0], s.Block[1]
			p.gridC = (p.c + p.bc - 1) / p.bc
		}
	}
	if i := p.glob.index; i >= 0 {
		s := w.Scales[i]
		k, err := scaleKind(s)
		if err != nil {
			return nil, err
		}
		k.index = i
		p.glob = k
		p.gmode = ckGMul
		if s.Role == quant.RoleGlobalScale {
			p.gmode = ckGDiv
		}
	}
	if !p.varies {
		p.br, p.bc, p.gridC = 1, 1, 1 // unused; nonzero so that no division by zero can happen
	}
	return p, nil
}

// kernelDType returns the kernel code of an activation dtype.
func kernelDType(d dtype.DType) (int, bool) {
	switch d {
	case dtype.F32:
		return ckF32, true
	case dtype.BF16:
		return ckBF16, true
	case dtype.F16:
		return ckF16, true
	}
	return 0, false
}
