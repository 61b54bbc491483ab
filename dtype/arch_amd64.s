//go:build amd64 && !purego

#include "textflag.h"

// Vector fast paths for the dtype conversions (AVX2, F16C for the F16 pair).
// Each function converts whole blocks from the start of src into dst and
// returns the number of elements done; it stops before the first block that
// holds a value needing the portable kernel (see vecRun in arch_vec.go). The
// 32-byte accumulator at acc carries the running maximum of the input
// magnitudes in and out of the call.

// CHECK16 loads 32 16-bit values from off(SI), takes their magnitudes into
// Y0 (as the lane-wise max of the two halves of the block, 16 lanes) and
// jumps to done when any magnitude is above the limit in Y13.
#define CHECK16 \
	VPAND   (SI), Y14, Y0 \
	VPAND   32(SI), Y14, Y1 \
	VPMAXUW Y0, Y1, Y0 \
	VPCMPGTW Y13, Y0, Y1 \
	VPTEST  Y1, Y1 \
	JNZ     done \
	VPMAXUW Y0, Y15, Y15

// func bf16ToF32AVX2(dst, src []byte, acc *[32]byte) int
TEXT ·bf16ToF32AVX2(SB), NOSPLIT, $0-64
	MOVQ dst_base+0(FP), DI
	MOVQ src_base+24(FP), SI
	MOVQ src_len+32(FP), CX
	MOVQ acc+48(FP), DX
	SHRQ $6, CX                 // blocks of 32 elements (64 bytes)
	XORQ AX, AX
	VMOVDQU (DX), Y15
	VPCMPEQW Y14, Y14, Y14
	VPSRLW  $1, Y14, Y14        // 0x7fff: magnitude mask
	MOVL    $0x7f7f7f7f, BX     // largest finite magnitude
	MOVQ    BX, X13
	VPBROADCASTD X13, Y13
	TESTQ   CX, CX
	JZ      done

bf16loop:
	CHECK16
	VPMOVZXWD (SI), Y0
	VPMOVZXWD 16(SI), Y1
	VPMOVZXWD 32(SI), Y2
	VPMOVZXWD 48(SI), Y3
	VPSLLD  $16, Y0, Y0
	VPSLLD  $16, Y1, Y1
	VPSLLD  $16, Y2, Y2
	VPSLLD  $16, Y3, Y3
	VMOVDQU Y0, (DI)
	VMOVDQU Y1, 32(DI)
	VMOVDQU Y2, 64(DI)
	VMOVDQU Y3, 96(DI)
	ADDQ    $64, SI
	ADDQ    $128, DI
	ADDQ    $32, AX
	DECQ    CX
	JNZ     bf16loop

done:
	VMOVDQU Y15, (DX)
	VZEROUPPER
	MOVQ    AX, ret+56(FP)
	RET

// func f16ToF32AVX2(dst, src []byte, acc *[32]byte) int
TEXT ·f16ToF32AVX2(SB), NOSPLIT, $0-64
	MOVQ dst_base+0(FP), DI
	MOVQ src_base+24(FP), SI
	MOVQ src_len+32(FP), CX
	MOVQ acc+48(FP), DX
	SHRQ $6, CX                 // blocks of 32 elements (64 bytes)
	XORQ AX, AX
	VMOVDQU (DX), Y15
	VPCMPEQW Y14, Y14, Y14
	VPSRLW  $1, Y14, Y14        // 0x7fff: magnitude mask
	MOVL    $0x7bff7bff, BX     // largest finite magnitude
	MOVQ    BX, X13
	VPBROADCASTD X13, Y13
	TESTQ   CX, CX
	JZ      done

f16loop:
	CHECK16
	VCVTPH2PS (SI), Y0
	VCVTPH2PS 16(SI), Y1
	VCVTPH2PS 32(SI), Y2
	VCVTPH2PS 48(SI), Y3
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	ADDQ    $64, SI
	ADDQ    $128, DI
	ADDQ    $32, AX
	DECQ    CX
	JNZ     f16loop

done:
	VMOVDQU Y15, (DX)
	VZEROUPPER
	MOVQ    AX, ret+56(FP)
	RET

// CHECK32 loads the magnitudes of 32 float32 values from (SI) into Y0-Y3 and
// jumps to done when one is above Y12 (it overflows, or is Inf or NaN).
// Nonzero magnitudes at or below Y11 round to zero, which the vector code
// gets right: CHECK32 only counts them, in R9. Y13 holds 0x7fffffff, Y14 all
// ones; Y4-Y7 and BX are clobbered.
#define CHECK32 \
	VPAND   (SI), Y13, Y0 \
	VPAND   32(SI), Y13, Y1 \
	VPAND   64(SI), Y13, Y2 \
	VPAND   96(SI), Y13, Y3 \
	VPMAXUD Y0, Y1, Y4 \
	VPMAXUD Y2, Y4, Y4 \
	VPMAXUD Y3, Y4, Y4 \
	VPCMPGTD Y12, Y4, Y6 \
	VPTEST  Y6, Y6 \
	JNZ     done \
	VPMAXUD Y4, Y15, Y15 \
	VPADDD  Y14, Y0, Y5 \
	VPADDD  Y14, Y1, Y6 \
	VPMINUD Y5, Y6, Y5 \
	VPADDD  Y14, Y2, Y6 \
	VPMINUD Y6, Y5, Y5 \
	VPADDD  Y14, Y3, Y6 \
	VPMINUD Y6, Y5, Y5 \
	VPMAXUD Y11, Y5, Y7 \
	VPCMPEQD Y7, Y5, Y7 \
	VPMOVMSKB Y7, BX \
	CMPL    BX, $0xffffffff \
	JEQ     nounder \
	COUNTUNDER(Y0) \
	COUNTUNDER(Y1) \
	COUNTUNDER(Y2) \
	COUNTUNDER(Y3) \
nounder:

// COUNTUNDER adds to R9 the number of lanes of reg (magnitudes) that are
// nonzero and at most Y11.
#define COUNTUNDER(reg) \
	VPADDD  Y14, reg, Y5 \
	VPMAXUD Y11, Y5, Y6 \
	VPCMPEQD Y6, Y5, Y6 \
	VPMOVMSKB Y6, BX \
	NOTL    BX \
	POPCNTL BX, BX \
	SHRL    $2, BX \
	ADDQ    BX, R9

// PROLOG32 loads the arguments and the constants of CHECK32 (limits from
// omax and under, 32-bit immediates).
#define PROLOG32(omax, under) \
	MOVQ dst_base+0(FP), DI \
	MOVQ src_base+24(FP), SI \
	MOVQ src_len+32(FP), CX \
	MOVQ acc+48(FP), DX \
	SHRQ $7, CX \
	XORQ AX, AX \
	XORQ R9, R9 \
	VMOVDQU (DX), Y15 \
	VPCMPEQD Y14, Y14, Y14 \
	VPSRLD  $1, Y14, Y13 \
	MOVL    omax, BX \
	MOVQ    BX, X12 \
	VPBROADCASTD X12, Y12 \
	MOVL    under, BX \
	MOVQ    BX, X11 \
	VPBROADCASTD X11, Y11

// func f32ToF16AVX2(dst, src []byte, acc *[32]byte) (n, under int)
TEXT ·f32ToF16AVX2(SB), NOSPLIT, $0-72
	PROLOG32($0x477fefff, $0x33000000)
	TESTQ   CX, CX
	JZ      done

f32f16loop:
	CHECK32
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS 64(SI), Y2
	VMOVUPS 96(SI), Y3
	VCVTPS2PH $0, Y0, (DI)
	VCVTPS2PH $0, Y1, 16(DI)
	VCVTPS2PH $0, Y2, 32(DI)
	VCVTPS2PH $0, Y3, 48(DI)
	ADDQ    $128, SI
	ADDQ    $64, DI
	ADDQ    $32, AX
	DECQ    CX
	JNZ     f32f16loop

done:
	VMOVDQU Y15, (DX)
	VZEROUPPER
	MOVQ    AX, n+56(FP)
	MOVQ    R9, under+64(FP)
	RET

// RNEBF16 rounds the float32 at off(SI) to the bfloat16 bits in the low half
// of each lane of reg (round to nearest even; finite values only). Y10 holds
// 0x7fff, Y9 holds 1; Y8 is clobbered.
#define RNEBF16(off, reg) \
	VMOVDQU off(SI), reg \
	VPSRLD  $16, reg, Y8 \
	VPAND   Y9, Y8, Y8 \
	VPADDD  Y10, reg, reg \
	VPADDD  Y8, reg, reg \
	VPSRLD  $16, reg, reg

// func f32ToBF16AVX2(dst, src []byte, acc *[32]byte) (n, under int)
TEXT ·f32ToBF16AVX2(SB), NOSPLIT, $0-72
	PROLOG32($0x7f7f7fff, $0x00008000)
	VPSRLD  $17, Y14, Y10       // 0x7fff
	VPSRLD  $31, Y14, Y9        // 1
	TESTQ   CX, CX
	JZ      done

f32bf16loop:
	CHECK32
	RNEBF16(0, Y0)
	RNEBF16(32, Y1)
	RNEBF16(64, Y2)
	RNEBF16(96, Y3)
	VPACKUSDW Y1, Y0, Y0        // lanes: 0-3 8-11 | 4-7 12-15
	VPACKUSDW Y3, Y2, Y2
	VPERMQ  $0xd8, Y0, Y0
	VPERMQ  $0xd8, Y2, Y2
	VMOVDQU Y0, (DI)
	VMOVDQU Y2, 32(DI)
	ADDQ    $128, SI
	ADDQ    $64, DI
	ADDQ    $32, AX
	DECQ    CX
	JNZ     f32bf16loop

done:
	VMOVDQU Y15, (DX)
	VZEROUPPER
	MOVQ    AX, n+56(FP)
	MOVQ    R9, under+64(FP)
	RET

// Offsets in f8EncodeParams.
#define E_OMAX 0
#define E_UNDER 32
#define E_SUBLIM 64
#define E_MAGIC 96
#define E_REBIAS 128
#define E_HALF 160
#define E_SHIFT 192

// ENCF8 turns the magnitude in reg (of the float32 at off(SI)) into the FP8
// code with its sign, in the low byte of each lane. R8 points at the
// f8EncodeParams, X10 holds the shift, Y9 holds 1 (per lane), Y8 0x80.
// Y4-Y7 are clobbered.
#define ENCF8(off, reg) \
	VPSRLD  X10, reg, Y4 \
	VPAND   Y9, Y4, Y4 \
	VPADDD  E_HALF(R8), reg, Y5 \
	VPADDD  Y4, Y5, Y5 \
	VPSRLD  X10, Y5, Y5 \
	VPSUBD  E_REBIAS(R8), Y5, Y5 \
	VADDPS  E_MAGIC(R8), reg, Y6 \
	VPSUBD  E_MAGIC(R8), Y6, Y6 \
	VMOVDQU E_SUBLIM(R8), Y7 \
	VPCMPGTD reg, Y7, Y7 \
	VPBLENDVB Y7, Y6, Y5, reg \
	VMOVDQU off(SI), Y4 \
	VPSRLD  $24, Y4, Y4 \
	VPAND   Y8, Y4, Y4 \
	VPOR    Y4, reg, reg

// func f32ToF8AVX2(dst, src []byte, acc *[32]byte, p *f8EncodeParams) (n, under int)
TEXT ·f32ToF8AVX2(SB), NOSPLIT, $0-80
	MOVQ dst_base+0(FP), DI
	MOVQ src_base+24(FP), SI
	MOVQ src_len+32(FP), CX
	MOVQ acc+48(FP), DX
	MOVQ p+56(FP), R8
	SHRQ $7, CX                 // blocks of 32 elements (128 bytes)
	XORQ AX, AX
	XORQ R9, R9
	VMOVDQU (DX), Y15
	VPCMPEQD Y14, Y14, Y14
	VPSRLD  $1, Y14, Y13        // 0x7fffffff
	VMOVDQU E_OMAX(R8), Y12
	VMOVDQU E_UNDER(R8), Y11
	VMOVDQU E_SHIFT(R8), X10
	VPSRLD  $31, Y14, Y9        // 1
	VPSLLD  $7, Y9, Y8          // 0x80
	TESTQ   CX, CX
	JZ      done

f32f8loop:
	CHECK32
	ENCF8(0, Y0)
	ENCF8(32, Y1)
	ENCF8(64, Y2)
	ENCF8(96, Y3)
	VPACKUSDW Y1, Y0, Y0
	VPACKUSDW Y3, Y2, Y2
	VPACKUSWB Y2, Y0, Y0
	VMOVDQU f8perm<>(SB), Y4
	VPERMD  Y0, Y4, Y0
	VMOVDQU Y0, (DI)
	ADDQ    $128, SI
	ADDQ    $32, DI
	ADDQ    $32, AX
	DECQ    CX
	JNZ     f32f8loop

done:
	VMOVDQU Y15, (DX)
	VZEROUPPER
	MOVQ    AX, n+64(FP)
	MOVQ    R9, under+72(FP)
	RET

// f8perm reorders the dwords after the two packing steps.
DATA f8perm<>+0(SB)/4, $0
DATA f8perm<>+4(SB)/4, $4
DATA f8perm<>+8(SB)/4, $1
DATA f8perm<>+12(SB)/4, $5
DATA f8perm<>+16(SB)/4, $2
DATA f8perm<>+20(SB)/4, $6
DATA f8perm<>+24(SB)/4, $3
DATA f8perm<>+28(SB)/4, $7
GLOBL f8perm<>(SB), RODATA|NOPTR, $32

// Offsets in f8DecodeParams.
#define D_MAGMASK8 0
#define D_MAGSPECIAL8 32
#define D_CODESPECIAL8 64
#define D_SIGNMASK32 96
#define D_MAGMASK32 128
#define D_SCALE 160
#define D_SHIFT 192

// DECF8 decodes the 8 codes at off(SI) into float32 at 4*off(DI). R8 points
// at the f8DecodeParams, X10 holds the shift.
#define DECF8(off) \
	VPMOVZXBD off(SI), Y4 \
	VPSLLD  $24, Y4, Y5 \
	VPAND   D_SIGNMASK32(R8), Y5, Y5 \
	VPAND   D_MAGMASK32(R8), Y4, Y4 \
	VPSLLD  X10, Y4, Y4 \
	VMULPS  D_SCALE(R8), Y4, Y4 \
	VPOR    Y5, Y4, Y4 \
	VMOVDQU Y4, (4*off)(DI)

// func f8ToF32AVX2(dst, src []byte, acc *[32]byte, p *f8DecodeParams) int
TEXT ·f8ToF32AVX2(SB), NOSPLIT, $0-72
	MOVQ dst_base+0(FP), DI
	MOVQ src_base+24(FP), SI
	MOVQ src_len+32(FP), CX
	MOVQ acc+48(FP), DX
	MOVQ p+56(FP), R8
	SHRQ $5, CX                 // blocks of 32 elements (32 bytes)
	XORQ AX, AX
	VMOVDQU (DX), Y15
	VMOVDQU D_SHIFT(R8), X10
	TESTQ   CX, CX
	JZ      done

f8loop:
	VMOVDQU (SI), Y0
	VPAND   D_MAGMASK8(R8), Y0, Y1
	VPMAXUB D_MAGSPECIAL8(R8), Y1, Y2
	VPCMPEQB Y1, Y2, Y2
	VPCMPEQB D_CODESPECIAL8(R8), Y0, Y3
	VPOR    Y2, Y3, Y2
	VPTEST  Y2, Y2
	JNZ     done
	VPMAXUB Y1, Y15, Y15
	DECF8(0)
	DECF8(8)
	DECF8(16)
	DECF8(24)
	ADDQ    $32, SI
	ADDQ    $128, DI
	ADDQ    $32, AX
	DECQ    CX
	JNZ     f8loop

done:
	VMOVDQU Y15, (DX)
	VZEROUPPER
	MOVQ    AX, ret+64(FP)
	RET

// func cpuid(eaxArg, ecxArg uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL eaxArg+0(FP), AX
	MOVL ecxArg+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET

// func xgetbv() (eax uint32)
TEXT ·xgetbv(SB), NOSPLIT, $0-4
	MOVL $0, CX
	XGETBV
	MOVL AX, eax+0(FP)
	RET

// Offsets in f8HalfParams.
#define H_MAGMASK8 0
#define H_MAGSPECIAL8 32
#define H_CODESPECIAL8 64
#define H_WORDMASK 96
#define H_SCALE 128
#define H_SHIFT 160

// F8CHECK jumps to done when the 32 codes at (SI) hold a code for the
// portable kernel, and folds their magnitudes into Y15 otherwise. R8 points
// at the parameters (H_ and D_ offsets of the check rows agree).
#define F8CHECK \
	VMOVDQU (SI), Y0 \
	VPAND   H_MAGMASK8(R8), Y0, Y1 \
	VPMAXUB H_MAGSPECIAL8(R8), Y1, Y2 \
	VPCMPEQB Y1, Y2, Y2 \
	VPCMPEQB H_CODESPECIAL8(R8), Y0, Y3 \
	VPOR    Y2, Y3, Y2 \
	VPTEST  Y2, Y2 \
	JNZ     done \
	VPMAXUB Y1, Y15, Y15

// HALF8 widens the 16 codes at off(SI) to binary16 bits (code<<8, then an
// arithmetic shift by X10 and a mask by Y9, both per word), converts them to
// float32 with F16C, scales by Y8 and stores them at 4*off(DI). X11 is zero.
#define HALF8(off) \
	VMOVDQU off(SI), X0 \
	VPUNPCKLBW X0, X11, X1 \
	VPUNPCKHBW X0, X11, X2 \
	VPSRAW  X10, X1, X1 \
	VPSRAW  X10, X2, X2 \
	VPAND   X9, X1, X1 \
	VPAND   X9, X2, X2 \
	VCVTPH2PS X1, Y1 \
	VCVTPH2PS X2, Y2 \
	VMULPS  Y8, Y1, Y1 \
	VMULPS  Y8, Y2, Y2 \
	VMOVUPS Y1, (4*off)(DI) \
	VMOVUPS Y2, (4*off+32)(DI)

// func f8ToF32F16C(dst, src []byte, acc *[32]byte, p *f8HalfParams) int
TEXT ·f8ToF32F16C(SB), NOSPLIT, $0-72
	MOVQ dst_base+0(FP), DI
	MOVQ src_base+24(FP), SI
	MOVQ src_len+32(FP), CX
	MOVQ acc+48(FP), DX
	MOVQ p+56(FP), R8
	SHRQ $5, CX                 // blocks of 32 elements (32 bytes)
	XORQ AX, AX
	VMOVDQU (DX), Y15
	VMOVDQU H_SHIFT(R8), X10
	VMOVDQU H_WORDMASK(R8), Y9
	VMOVDQU H_SCALE(R8), Y8
	VPXOR   X11, X11, X11
	TESTQ   CX, CX
	JZ      done

f8hloop:
	F8CHECK
	HALF8(0)
	HALF8(16)
	ADDQ    $32, SI
	ADDQ    $128, DI
	ADDQ    $32, AX
	DECQ    CX
	JNZ     f8hloop

done:
	VMOVDQU Y15, (DX)
	VZEROUPPER
	MOVQ    AX, ret+64(FP)
	RET

// E5M2 codes are the top byte of binary16: no shift, mask or scale.
#define E5M2HALF(off) \
	VMOVDQU off(SI), X0 \
	VPUNPCKLBW X0, X11, X1 \
	VPUNPCKHBW X0, X11, X2 \
	VCVTPH2PS X1, Y1 \
	VCVTPH2PS X2, Y2 \
	VMOVUPS Y1, (4*off)(DI) \
	VMOVUPS Y2, (4*off+32)(DI)

// func e5m2ToF32F16C(dst, src []byte, acc *[32]byte, p *f8HalfParams) int
TEXT ·e5m2ToF32F16C(SB), NOSPLIT, $0-72
	MOVQ dst_base+0(FP), DI
	MOVQ src_base+24(FP), SI
	MOVQ src_len+32(FP), CX
	MOVQ acc+48(FP), DX
	MOVQ p+56(FP), R8
	SHRQ $5, CX                 // blocks of 32 elements (32 bytes)
	XORQ AX, AX
	VMOVDQU (DX), Y15
	VPXOR   X11, X11, X11
	TESTQ   CX, CX
	JZ      done

e5m2loop:
	F8CHECK
	E5M2HALF(0)
	E5M2HALF(16)
	ADDQ    $32, SI
	ADDQ    $128, DI
	ADDQ    $32, AX
	DECQ    CX
	JNZ     e5m2loop

done:
	VMOVDQU Y15, (DX)
	VZEROUPPER
	MOVQ    AX, ret+64(FP)
	RET
