//go:build arm64 && !purego

#include "textflag.h"

// Vector fast paths for the dtype conversions (ASIMD). Each function converts
// whole blocks from the start of src into dst and returns the number of
// elements done; it stops before the first block that holds a value needing
// the portable kernel (see vecRun in arch_vec.go). The first 16 bytes at acc
// carry the running maximum of the input magnitudes in and out of the call.
//
// The Go assembler has no mnemonics for FCVTL/FCVTN; they are encoded with
// WORD (FCVTL Vd.4S, Vn.4H = 0x0e217800 | n<<5 | d; FCVTL2 sets bit 30;
// FCVTN Vd.4H, Vn.4S = 0x0e216800 | n<<5 | d; FCVTN2 sets bit 30).

// ALLLE jumps to done unless every lane of x (a vector, unsigned) is at most
// the same lane of lim: min(x, lim) == x in every lane. T is the arrangement;
// V30 and R6, R7 are clobbered.
#define ALLLE(T, x, lim) \
	VUMIN   lim.T, x.T, V30.T \
	VCMEQ   V30.T, x.T, V30.T \
	VMOV    V30.D[0], R6 \
	VMOV    V30.D[1], R7 \
	AND     R6, R7, R6 \
	CMN     $1, R6 \
	BNE     done

// PROLOG loads the slice arguments: R0 dst, R1 src, R2 source length, R3 acc,
// V31 the running maximum.
#define PROLOG \
	MOVD    dst_base+0(FP), R0 \
	MOVD    src_base+24(FP), R1 \
	MOVD    src_len+32(FP), R2 \
	MOVD    acc+48(FP), R3 \
	MOVD    $0, R4 \
	VLD1    (R3), [V31.B16]

// EPILOG stores the running maximum and returns the element count in R4.
#define EPILOG \
	VST1    [V31.B16], (R3) \
	MOVD    R4, ret+56(FP) \
	RET

// WIDEN16 loads 16 16-bit values (32 bytes) from (R1) into V0, V1 and jumps to
// done unless every magnitude (V26 mask) is at most V27; it folds them into
// V31.
#define WIDEN16 \
	VLD1    (R1), [V0.H8, V1.H8] \
	VAND    V26.B16, V0.B16, V2.B16 \
	VAND    V26.B16, V1.B16, V3.B16 \
	VUMAX   V2.H8, V3.H8, V2.H8 \
	ALLLE(H8, V2, V27) \
	VUMAX   V2.H8, V31.H8, V31.H8

// UNDER adds one to the lanes of V25 where t (magnitude-1, unsigned) is
// below V24: max(t, V24) != t.
#define UNDER(t) \
	VUMAX   V24.S4, t.S4, V20.S4 \
	VCMEQ   V20.S4, t.S4, V20.S4 \
	VADD    V23.S4, V25.S4, V25.S4 \
	VADD    V20.S4, V25.S4, V25.S4

// RNE rounds the float32 lanes of x to nearest even at bit 16 (in place):
// x + 0x7fff + (x>>16 & 1). V22 holds 0x7fff, V23 one; V21 is clobbered.
#define RNE(x) \
	VUSHR   $16, x.S4, V21.S4 \
	VAND    V23.B16, V21.B16, V21.B16 \
	VADD    V22.S4, x.S4, x.S4 \
	VADD    V21.S4, x.S4, x.S4

// NARROW16 loads 16 float32 (64 bytes) from (R1) into V0-V3, their magnitudes
// into V4-V7, and jumps to done unless all are at most V27 (no overflow, Inf
// or NaN). Then it folds them into V31 and adds to the lanes of V25 one for
// each nonzero magnitude at most V24 (those round to zero). V26 holds
// 0x7fffffff, V23 one per lane; V16-V22 are clobbered.
#define NARROW16 \
	VLD1    (R1), [V0.S4, V1.S4, V2.S4, V3.S4] \
	VAND    V26.B16, V0.B16, V4.B16 \
	VAND    V26.B16, V1.B16, V5.B16 \
	VAND    V26.B16, V2.B16, V6.B16 \
	VAND    V26.B16, V3.B16, V7.B16 \
	VUMAX   V4.S4, V5.S4, V16.S4 \
	VUMAX   V6.S4, V16.S4, V16.S4 \
	VUMAX   V7.S4, V16.S4, V16.S4 \
	ALLLE(S4, V16, V27) \
	VUMAX   V16.S4, V31.S4, V31.S4 \
	VSUB    V23.S4, V4.S4, V16.S4 \
	VSUB    V23.S4, V5.S4, V17.S4 \
	VSUB    V23.S4, V6.S4, V18.S4 \
	VSUB    V23.S4, V7.S4, V19.S4 \
	UNDER(V16) \
	UNDER(V17) \
	UNDER(V18) \
	UNDER(V19)

// NPROLOG sets the constants of NARROW16 from omax and under (registers
// R5 is clobbered) and clears the underflow counters.
#define NPROLOG(omax, under) \
	PROLOG \
	LSR     $6, R2, R2 \
	MOVD    $0x7fffffff, R5 \
	VDUP    R5, V26.S4 \
	MOVD    $omax, R5 \
	VDUP    R5, V27.S4 \
	MOVD    $under, R5 \
	VDUP    R5, V24.S4 \
	MOVD    $1, R5 \
	VDUP    R5, V23.S4 \
	VEOR    V25.B16, V25.B16, V25.B16

// NEPILOG stores the underflow counters at cnt, then returns like EPILOG.
#define NEPILOG \
	MOVD    cnt+56(FP), R5 \
	VST1    [V25.S4], (R5) \
	VST1    [V31.B16], (R3) \
	MOVD    R4, ret+64(FP) \
	RET

// F8CHECK jumps to done unless the 32 codes in V0, V1 are all plain numbers:
// magnitude (mask V20) at most V21 and code not V22. It folds the
// magnitudes into V31. V2-V5, V30 and R6, R7 are clobbered.
#define F8CHECK \
	VAND    V20.B16, V0.B16, V2.B16 \
	VAND    V20.B16, V1.B16, V3.B16 \
	VUMAX   V2.B16, V3.B16, V4.B16 \
	ALLLE(B16, V4, V21) \
	VCMEQ   V22.B16, V0.B16, V5.B16 \
	VCMEQ   V22.B16, V1.B16, V30.B16 \
	VORR    V5.B16, V30.B16, V30.B16 \
	VMOV    V30.D[0], R6 \
	VMOV    V30.D[1], R7 \
	ORR     R6, R7, R6 \
	CBNZ    R6, done \
	VUMAX   V4.B16, V31.B16, V31.B16

// HALF16 turns the 8 codes in src (as code<<8 per 16-bit lane) into
// binary16 bits by moving the 4-bit exponent down one bit (sign mask V24,
// magnitude mask V25), then runs the given FCVTL, FCVTL2 and two FMUL (by
// V23) encodings. V4, V5 are clobbered.
#define HALF16(src, flo, fhi, mlo, mhi) \
	VAND    V24.B16, src.B16, V4.B16 \
	VAND    V25.B16, src.B16, V5.B16 \
	VUSHR   $1, V5.H8, V5.H8 \
	VORR    V4.B16, V5.B16, src.B16 \
	WORD    flo \
	WORD    fhi \
	WORD    mlo \
	WORD    mhi

// ENC4 turns the float32 magnitudes in a (of the raw values in x) into FP8
// codes with sign, in the low byte of each lane of a: round to nearest even
// at bit SH and rebias for normal results, or add the magic float (FADD
// V15.4S, a.4S, V10.4S, encoded as fadd) and take the bits below it for
// subnormal ones. V8 half, V9 rebias, V10 magic, V11 smallest normal - 1,
// V12 0x80, V23 one (V11 is the sublim row of f8EncodeParams, which
// already holds the smallest normal - 1); V13-V16 are clobbered.
#define ENC4(a, x, SH, fadd) \
	VUSHR   $SH, a.S4, V13.S4 \
	VAND    V23.B16, V13.B16, V13.B16 \
	VADD    V8.S4, a.S4, V14.S4 \
	VADD    V13.S4, V14.S4, V14.S4 \
	VUSHR   $SH, V14.S4, V14.S4 \
	VSUB    V9.S4, V14.S4, V14.S4 \
	WORD    fadd \
	VSUB    V10.S4, V15.S4, V15.S4 \
	VUMIN   V11.S4, a.S4, V16.S4 \
	VCMEQ   V16.S4, a.S4, V16.S4 \
	VBSL    V14.B16, V15.B16, V16.B16 \
	VUSHR   $24, x.S4, V13.S4 \
	VAND    V12.B16, V13.B16, V13.B16 \
	VORR    V13.B16, V16.B16, a.B16

// F8ENC is the body of the F32→FP8 encoders for rounding bit SH.
#define F8ENC(SH) \
	PROLOG \
	LSR     $6, R2, R2 \
	MOVD    p+56(FP), R5 \
	VLD1    (R5), [V27.S4] \
	ADD     $32, R5, R6 \
	VLD1    (R6), [V24.S4] \
	ADD     $64, R5, R6 \
	VLD1    (R6), [V11.S4] \
	ADD     $96, R5, R6 \
	VLD1    (R6), [V10.S4] \
	ADD     $128, R5, R6 \
	VLD1    (R6), [V9.S4] \
	ADD     $160, R5, R6 \
	VLD1    (R6), [V8.S4] \
	MOVD    $0x7fffffff, R5 \
	VDUP    R5, V26.S4 \
	MOVD    $1, R5 \
	VDUP    R5, V23.S4 \
	MOVD    $0x80, R5 \
	VDUP    R5, V12.S4 \
	VEOR    V25.B16, V25.B16, V25.B16 \
	CBZ     R2, done \
loop: \
	NARROW16 \
	ENC4(V4, V0, SH, $0x4e2ad48f) \
	ENC4(V5, V1, SH, $0x4e2ad4af) \
	ENC4(V6, V2, SH, $0x4e2ad4cf) \
	ENC4(V7, V3, SH, $0x4e2ad4ef) \
	VUZP1   V5.H8, V4.H8, V17.H8 \
	VUZP1   V7.H8, V6.H8, V18.H8 \
	VUZP1   V18.B16, V17.B16, V19.B16 \
	VST1.P  [V19.B16], 16(R0) \
	ADD     $64, R1 \
	ADD     $16, R4 \
	SUBS    $1, R2 \
	BNE     loop \
done: \
	MOVD    cnt+64(FP), R5 \
	VST1    [V25.S4], (R5) \
	VST1    [V31.B16], (R3) \
	MOVD    R4, ret+72(FP) \
	RET

// func bf16ToF32NEON(dst, src []byte, acc *[32]byte) int
TEXT ·bf16ToF32NEON(SB), NOSPLIT, $0-64
	PROLOG
	LSR     $5, R2, R2              // blocks of 16 elements (32 bytes)
	MOVD    $0x7fff, R5
	VDUP    R5, V26.H8
	MOVD    $0x7f7f, R5             // largest finite magnitude
	VDUP    R5, V27.H8
	VEOR    V29.B16, V29.B16, V29.B16
	CBZ     R2, done

bf16loop:
	WIDEN16
	VZIP1   V0.H8, V29.H8, V4.H8
	VZIP2   V0.H8, V29.H8, V5.H8
	VZIP1   V1.H8, V29.H8, V6.H8
	VZIP2   V1.H8, V29.H8, V7.H8
	VST1.P  [V4.S4, V5.S4, V6.S4, V7.S4], 64(R0)
	ADD     $32, R1
	ADD     $16, R4
	SUBS    $1, R2
	BNE     bf16loop

done:
	EPILOG

// func f16ToF32NEON(dst, src []byte, acc *[32]byte) int
TEXT ·f16ToF32NEON(SB), NOSPLIT, $0-64
	PROLOG
	LSR     $5, R2, R2              // blocks of 16 elements (32 bytes)
	MOVD    $0x7fff, R5
	VDUP    R5, V26.H8
	MOVD    $0x7bff, R5             // largest finite magnitude
	VDUP    R5, V27.H8
	CBZ     R2, done

f16loop:
	WIDEN16
	WORD    $0x0e217804             // FCVTL  V4.4S, V0.4H
	WORD    $0x4e217805             // FCVTL2 V5.4S, V0.8H
	WORD    $0x0e217826             // FCVTL  V6.4S, V1.4H
	WORD    $0x4e217827             // FCVTL2 V7.4S, V1.8H
	VST1.P  [V4.S4, V5.S4, V6.S4, V7.S4], 64(R0)
	ADD     $32, R1
	ADD     $16, R4
	SUBS    $1, R2
	BNE     f16loop

done:
	EPILOG

// func f32ToBF16NEON(dst, src []byte, acc *[32]byte, cnt *[4]uint32) int
TEXT ·f32ToBF16NEON(SB), NOSPLIT, $0-72
	NPROLOG(0x7f7f7fff, 0x00008000)
	MOVD    $0x7fff, R5
	VDUP    R5, V22.S4
	CBZ     R2, done

f32bf16loop:
	NARROW16
	RNE(V0)
	RNE(V1)
	RNE(V2)
	RNE(V3)
	VUZP2   V1.H8, V0.H8, V4.H8
	VUZP2   V3.H8, V2.H8, V5.H8
	VST1.P  [V4.H8, V5.H8], 32(R0)
	ADD     $64, R1
	ADD     $16, R4
	SUBS    $1, R2
	BNE     f32bf16loop

done:
	NEPILOG

// func f32ToF16NEON(dst, src []byte, acc *[32]byte, cnt *[4]uint32) int
TEXT ·f32ToF16NEON(SB), NOSPLIT, $0-72
	NPROLOG(0x477fefff, 0x33000000)
	CBZ     R2, done

f32f16loop:
	NARROW16
	WORD    $0x0e216804             // FCVTN  V4.4H, V0.4S
	WORD    $0x4e216824             // FCVTN2 V4.8H, V1.4S
	WORD    $0x0e216845             // FCVTN  V5.4H, V2.4S
	WORD    $0x4e216865             // FCVTN2 V5.8H, V3.4S
	VST1.P  [V4.H8, V5.H8], 32(R0)
	ADD     $64, R1
	ADD     $16, R4
	SUBS    $1, R2
	BNE     f32f16loop

done:
	NEPILOG

// func e5m2ToF32NEON(dst, src []byte, acc *[32]byte) int
TEXT ·e5m2ToF32NEON(SB), NOSPLIT, $0-64
	PROLOG
	LSR     $5, R2, R2              // blocks of 32 codes
	MOVD    $0x7f, R5
	VDUP    R5, V26.B16
	MOVD    $0x7b, R5               // largest finite magnitude code
	VDUP    R5, V27.B16
	VEOR    V29.B16, V29.B16, V29.B16
	CBZ     R2, done

e5m2loop:
	VLD1    (R1), [V0.B16, V1.B16]
	VAND    V26.B16, V0.B16, V2.B16
	VAND    V26.B16, V1.B16, V3.B16
	VUMAX   V2.B16, V3.B16, V2.B16
	ALLLE(B16, V2, V27)
	VUMAX   V2.B16, V31.B16, V31.B16
	VZIP1   V0.B16, V29.B16, V2.B16   // code<<8: binary16 bits
	VZIP2   V0.B16, V29.B16, V3.B16
	VZIP1   V1.B16, V29.B16, V4.B16
	VZIP2   V1.B16, V29.B16, V5.B16
	WORD    $0x0e217850             // FCVTL  V16.4S, V2.4H
	WORD    $0x4e217851             // FCVTL2 V17.4S, V2.8H
	WORD    $0x0e217872             // FCVTL  V18.4S, V3.4H
	WORD    $0x4e217873             // FCVTL2 V19.4S, V3.8H
	VST1.P  [V16.S4, V17.S4, V18.S4, V19.S4], 64(R0)
	WORD    $0x0e217890             // FCVTL  V16.4S, V4.4H
	WORD    $0x4e217891             // FCVTL2 V17.4S, V4.8H
	WORD    $0x0e2178b2             // FCVTL  V18.4S, V5.4H
	WORD    $0x4e2178b3             // FCVTL2 V19.4S, V5.8H
	VST1.P  [V16.S4, V17.S4, V18.S4, V19.S4], 64(R0)
	ADD     $32, R1
	ADD     $32, R4
	SUBS    $1, R2
	BNE     e5m2loop

done:
	EPILOG

// func f8ToF32NEON(dst, src []byte, acc *[32]byte, p *f8NeonParams) int
//
// For layouts with a sign and a 4-bit exponent (E4M3, E4M3FNUZ): the code
// as binary16 after an exponent shift, widened exactly by FCVTL and scaled
// by a power of two (FMUL Vd.4S, Vn.4S, Vm.4S = 0x6e20dc00 | m<<16 | n<<5 | d).
TEXT ·f8ToF32NEON(SB), NOSPLIT, $0-72
	PROLOG
	MOVD    p+56(FP), R5
	VLD1    (R5), [V20.B16, V21.B16, V22.B16, V23.B16]
	LSR     $5, R2, R2              // blocks of 32 codes
	MOVD    $0x8000, R5
	VDUP    R5, V24.H8
	MOVD    $0x7f00, R5
	VDUP    R5, V25.H8
	VEOR    V29.B16, V29.B16, V29.B16
	CBZ     R2, done

f8loop:
	VLD1    (R1), [V0.B16, V1.B16]
	F8CHECK
	VZIP1   V0.B16, V29.B16, V2.B16
	VZIP2   V0.B16, V29.B16, V3.B16
	HALF16(V2, $0x0e217850, $0x4e217851, $0x6e37de10, $0x6e37de31)
	HALF16(V3, $0x0e217872, $0x4e217873, $0x6e37de52, $0x6e37de73)
	VST1.P  [V16.S4, V17.S4, V18.S4, V19.S4], 64(R0)
	VZIP1   V1.B16, V29.B16, V2.B16
	VZIP2   V1.B16, V29.B16, V3.B16
	HALF16(V2, $0x0e217850, $0x4e217851, $0x6e37de10, $0x6e37de31)
	HALF16(V3, $0x0e217872, $0x4e217873, $0x6e37de52, $0x6e37de73)
	VST1.P  [V16.S4, V17.S4, V18.S4, V19.S4], 64(R0)
	ADD     $32, R1
	ADD     $32, R4
	SUBS    $1, R2
	BNE     f8loop

done:
	MOVD    R4, ret+64(FP)
	VST1    [V31.B16], (R3)
	RET

// func f32ToE4M3NEON(dst, src []byte, acc *[32]byte, p *f8EncodeParams, cnt *[4]uint32) int
TEXT ·f32ToE4M3NEON(SB), NOSPLIT, $0-80
	F8ENC(20)

// func f32ToE5M2NEON(dst, src []byte, acc *[32]byte, p *f8EncodeParams, cnt *[4]uint32) int
TEXT ·f32ToE5M2NEON(SB), NOSPLIT, $0-80
	F8ENC(21)
