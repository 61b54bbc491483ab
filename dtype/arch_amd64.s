//go:build amd64 && !purego

#include "textflag.h"

// Vector fast paths for the dtype conversions (AVX2; F16C for F16 and the
// FP8 decoders that go through binary16). Each function converts whole
// blocks from the start of src into dst and returns the number of elements
// done; it stops before the first block that holds a value needing the
// portable kernel (see vecRun in arch_vec.go). The 32-byte accumulator at acc
// carries the running maximum of the input magnitudes in and out of the
// call. With nt set, dst must be 32-byte aligned and the results are written
// with non-temporal stores (for outputs much larger than the caches), fenced
// with SFENCE before returning.
//
// Register use common to all: SI src, DI dst, CX blocks left, AX elements
// done, DX acc, R10 nt, Y15 the running maximum.
//
// The macros come first: go vet's asmdecl reads a #define body as part of
// the function before it.

// ARGS loads the slice and accumulator arguments, the nt flag at ntoff, and
// divides the source length by the block size (1<<blockshift bytes).
#define ARGS(ntoff, blockshift) \
	MOVQ    dst_base+0(FP), DI \
	MOVQ    src_base+24(FP), SI \
	MOVQ    src_len+32(FP), CX \
	MOVQ    acc+48(FP), DX \
	MOVBQZX ntoff(FP), R10 \
	SHRQ    $blockshift, CX \
	XORQ    AX, AX \
	XORQ    R9, R9 \
	VMOVDQU (DX), Y15

// FINISH stores the running maximum, fences non-temporal stores and clears
// the upper halves of the vector registers.
#define FINISH \
	VMOVDQU Y15, (DX) \
	TESTQ   R10, R10 \
	JZ      nofence \
	SFENCE \
nofence: \
	VZEROUPPER

// CHECK16 takes the magnitudes of the 32 16-bit values at (SI) (mask in
// Y14), jumps to done when one is above the limit in Y13 (Inf or NaN) and
// folds them into Y15. Y0 and Y1 are clobbered.
#define CHECK16 \
	VPAND   (SI), Y14, Y0 \
	VPAND   32(SI), Y14, Y1 \
	VPMAXUW Y0, Y1, Y0 \
	VPCMPGTW Y13, Y0, Y1 \
	VPTEST  Y1, Y1 \
	JNZ     done \
	VPMAXUW Y0, Y15, Y15

// PROLOG16 sets the constants of CHECK16: the magnitude mask and the largest
// finite magnitude (a 32-bit immediate holding it twice).
#define PROLOG16(limit) \
	VPCMPEQW Y14, Y14, Y14 \
	VPSRLW  $1, Y14, Y14 \
	MOVL    limit, BX \
	MOVQ    BX, X13 \
	VPBROADCASTD X13, Y13

// STORE4 stores Y0-Y3 at (DI) with the store instruction op.
#define STORE4(op) \
	op      Y0, (DI) \
	op      Y1, 32(DI) \
	op      Y2, 64(DI) \
	op      Y3, 96(DI)

// COUNTUNDER adds to R9 the number of lanes of reg (magnitudes) that are
// nonzero and at most Y11. Y14 holds all ones; Y5, Y6 and BX are clobbered.
#define COUNTUNDER(reg) \
	VPADDD  Y14, reg, Y5 \
	VPMAXUD Y11, Y5, Y6 \
	VPCMPEQD Y6, Y5, Y6 \
	VPMOVMSKB Y6, BX \
	NOTL    BX \
	POPCNTL BX, BX \
	SHRL    $2, BX \
	ADDQ    BX, R9

// CHECK32 loads the magnitudes of the 32 float32 values at (SI) into Y0-Y3
// and jumps to done when one is above Y12 (it overflows, or is Inf or NaN).
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

// PROLOG32 sets the constants of CHECK32 from the limits omax and under
// (32-bit immediates).
#define PROLOG32(omax, under) \
	VPCMPEQD Y14, Y14, Y14 \
	VPSRLD  $1, Y14, Y13 \
	MOVL    omax, BX \
	MOVQ    BX, X12 \
	VPBROADCASTD X12, Y12 \
	MOVL    under, BX \
	MOVQ    BX, X11 \
	VPBROADCASTD X11, Y11

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

// Offsets in f8EncodeParams.
#define E_OMAX 0
#define E_UNDER 32
#define E_SUBLIM 64
#define E_MAGIC 96
#define E_REBIAS 128
#define E_HALF 160
#define E_SHIFT 192

#define E_EXPMASK 224
#define E_MINEXP 256
#define E_SHIFTEXP 288
#define E_CODEBIAS 320

// ENCF8 turns the magnitude in reg into the FP8 code without its sign, in
// the low byte of each lane, rounding to nearest even with one float
// addition (see f8EncodeParams): C = 2^(shift + max(e, emin)), sum = |x| + C,
// code = (sum - C) + (C >> shift) - codeBias. R8 points at the
// f8EncodeParams, X10 holds the shift; Y4 and Y5 are clobbered.
#define ENCF8(reg) \
	VPAND   E_EXPMASK(R8), reg, Y4 \
	VPMAXSD E_MINEXP(R8), Y4, Y4 \
	VPADDD  E_SHIFTEXP(R8), Y4, Y4 \
	VADDPS  Y4, reg, Y5 \
	VPSUBD  Y4, Y5, Y5 \
	VPSRLD  X10, Y4, Y4 \
	VPADDD  Y4, Y5, reg \
	VPSUBD  E_CODEBIAS(R8), reg, reg

// Offsets in f8DecodeParams.
#define D_MAGMASK8 0
#define D_MAGSPECIAL8 32
#define D_CODESPECIAL8 64
#define D_SIGNMASK32 96
#define D_MAGMASK32 128
#define D_SCALE 160
#define D_SHIFT 192

// F8CHECK jumps to done when the 32 codes at (SI) hold a code for the
// portable kernel, and folds their magnitudes into Y15 otherwise. R8 points
// at the parameters. Y0-Y3 are clobbered.
#define F8CHECK \
	VMOVDQU (SI), Y0 \
	VPAND   D_MAGMASK8(R8), Y0, Y1 \
	VPMAXUB D_MAGSPECIAL8(R8), Y1, Y2 \
	VPCMPEQB Y1, Y2, Y2 \
	VPCMPEQB D_CODESPECIAL8(R8), Y0, Y3 \
	VPOR    Y2, Y3, Y2 \
	VPTEST  Y2, Y2 \
	JNZ     done \
	VPMAXUB Y1, Y15, Y15

// F8MAGCHECK jumps to done when one of the 32 codes at (SI) has a magnitude
// (code AND Y14) at or above the first special magnitude, and folds their
// magnitudes into Y15 otherwise. Y13 holds the first special magnitude less
// one, so that the saturating subtraction leaves a nonzero byte exactly
// there: one vector operation and one VPTEST per block. Only for layouts
// whose special codes are all magnitudes (E4M3, E5M2). Y1 and Y2 are
// clobbered.
#define F8MAGCHECK \
	VPAND   (SI), Y14, Y1 \
	VPSUBUSB Y13, Y1, Y2 \
	VPTEST  Y2, Y2 \
	JNZ     done \
	VPMAXUB Y1, Y15, Y15

// F8MAGPROLOG sets Y14 and Y13 for F8MAGCHECK from the parameters at R8.
#define F8MAGPROLOG \
	VMOVDQU D_MAGMASK8(R8), Y14 \
	VMOVDQU D_MAGSPECIAL8(R8), Y13 \
	VPCMPEQB Y12, Y12, Y12 \
	VPADDB  Y12, Y13, Y13

// DECF8 decodes the 8 codes at off(SI) into float32 stored with op at
// 4*off(DI): sign, then the magnitude bits shifted into a float32 (by X10)
// times the scale, exact for subnormal codes too. R8 points at the
// f8DecodeParams; Y4 and Y5 are clobbered.
#define DECF8(off, op) \
	VPMOVZXBD off(SI), Y4 \
	VPSLLD  $24, Y4, Y5 \
	VPAND   D_SIGNMASK32(R8), Y5, Y5 \
	VPAND   D_MAGMASK32(R8), Y4, Y4 \
	VPSLLD  X10, Y4, Y4 \
	VMULPS  D_SCALE(R8), Y4, Y4 \
	VPOR    Y5, Y4, Y4 \
	op      Y4, (4*off)(DI)

// e4m3tab holds the VPSHUFB table and the VPMINUB limit (8) of E4M3DEC,
// each a 32-byte row (both lanes alike). The table, indexed by
// min(magnitude, 8), holds what to add to an E4M3 magnitude so that the sum
// is the binary16 bits 14-7 of its value: 0x40 (the exponent rebiased from
// 7 to 15) for every normal magnitude (index 8), and for the subnormal
// magnitudes m = 0-7 (value m*2^-9, normal in binary16) the binary16 bits
// of that value shifted right by 7, less m. Binary16 bits 6-0 are zero for
// every E4M3 value.
DATA e4m3tab<>+0(SB)/8, $0x3f3e3d3c39362f00
DATA e4m3tab<>+8(SB)/8, $0x4040404040404040
DATA e4m3tab<>+16(SB)/8, $0x3f3e3d3c39362f00
DATA e4m3tab<>+24(SB)/8, $0x4040404040404040
DATA e4m3tab<>+32(SB)/8, $0x0808080808080808
DATA e4m3tab<>+40(SB)/8, $0x0808080808080808
DATA e4m3tab<>+48(SB)/8, $0x0808080808080808
DATA e4m3tab<>+56(SB)/8, $0x0808080808080808
GLOBL e4m3tab<>(SB), RODATA|NOPTR, $64

// e4m3fnuztab is e4m3tab for E4M3FNUZ (bias 8): 0x38 for the normal
// magnitudes, and the subnormal ones are m*2^-10.
DATA e4m3fnuztab<>+0(SB)/8, $0x37363534312e2700
DATA e4m3fnuztab<>+8(SB)/8, $0x3838383838383838
DATA e4m3fnuztab<>+16(SB)/8, $0x37363534312e2700
DATA e4m3fnuztab<>+24(SB)/8, $0x3838383838383838
GLOBL e4m3fnuztab<>(SB), RODATA|NOPTR, $32

// E4M3DEC decodes the 32 E4M3 codes at off(SI), given their magnitudes in
// m and their signs (all ones for a negative code) in x, into float32
// stored with op at 4*off(DI). The magnitude plus the e4m3tab entry (table
// in Y8, limit in Y12) is binary16 bits 14-7; the word x<<8 | that,
// shifted left by 7, is the binary16 value, exact, which F16C widens.
// Y0, Y2, Y4, Y5, Y9 and Y10 are clobbered.
#define E4M3DEC(m, x, off, op) \
	VPMINUB Y12, m, Y4 \
	VPSHUFB Y4, Y8, Y4 \
	VPADDB  m, Y4, Y4 \
	VPUNPCKLBW x, Y4, Y5 \
	VPUNPCKHBW x, Y4, Y4 \
	VPSLLW  $7, Y5, Y5 \
	VPSLLW  $7, Y4, Y4 \
	VCVTPH2PS X5, Y0 \
	VCVTPH2PS X4, Y2 \
	VEXTRACTI128 $1, Y5, X5 \
	VEXTRACTI128 $1, Y4, X4 \
	VCVTPH2PS X5, Y9 \
	VCVTPH2PS X4, Y10 \
	op      Y0, (4*off)(DI) \
	op      Y2, (4*off+32)(DI) \
	op      Y9, (4*off+64)(DI) \
	op      Y10, (4*off+96)(DI)

// E5M2HALF widens the 16 E5M2 codes at off(SI) to float32 stored with op
// at 4*off(DI): each code is the top byte of the binary16 of its value.
// X11 is zero; Y1 and Y2 are clobbered.
#define E5M2HALF(off, op) \
	VPUNPCKLBW off(SI), X11, X1 \
	VPUNPCKHBW off(SI), X11, X2 \
	VCVTPH2PS X1, Y1 \
	VCVTPH2PS X2, Y2 \
	op      Y1, (4*off)(DI) \
	op      Y2, (4*off+32)(DI)

// The widenings bf16ToF32AVX2 and f16ToF32AVX2 also fold, when asked,
// the CRC-32C of every block of source bytes they convert, from the
// registers they load anyway (internal/crc32c explains the folding). The
// 64 bytes at state are four 128-bit remainders, one per 16-byte lane of
// a block: each block moves them 512 bits forward (a carry-less
// multiplication of each half of a lane by its constant of the pair at k,
// x^(512±32) mod P) and adds (xors) its own bytes. A block is folded only
// once CHECK16 has passed it, so the state covers exactly the elements
// converted; crc32c.Folded turns it into the CRC of those bytes. With fold
// 2 (AVX-512) the remainders are one ZMM register, Z7, and a block costs
// two multiplications and a three-way xor; with fold 1 they are Y7 (lanes
// 0, 1) and Y8 (lanes 2, 3), and a block costs four and four; fold 0
// folds nothing (k and state are not read). R13 holds fold, Y6
// (Z6) the pair in every lane; Y9 and Y10 (Z9) are clobbered.

// SUMARGS loads the pair and the state (nothing with fold 0).
#define SUMARGS \
	MOVBQZX fold+80(FP), R13 \
	TESTQ   R13, R13 \
	JZ      argsdone \
	MOVQ    k+64(FP), R11 \
	MOVQ    state+72(FP), R12 \
	CMPQ    R13, $2 \
	JEQ     argsz \
	VBROADCASTI128 (R11), Y6 \
	VMOVDQU (R12), Y7 \
	VMOVDQU 32(R12), Y8 \
	JMP     argsdone \
argsz: \
	VBROADCASTI32X4 (R11), Z6 \
	VMOVDQU64 (R12), Z7 \
argsdone:

// FOLD64 folds the 64 bytes at (SI) into the remainders (the branches are
// the same for every block: predicted).
#define FOLD64 \
	TESTQ   R13, R13 \
	JZ      folded \
	CMPQ    R13, $2 \
	JEQ     foldz \
	VPCLMULQDQ $0x00, Y6, Y7, Y9 \
	VPCLMULQDQ $0x11, Y6, Y7, Y7 \
	VPCLMULQDQ $0x00, Y6, Y8, Y10 \
	VPCLMULQDQ $0x11, Y6, Y8, Y8 \
	VPXOR   (SI), Y9, Y9 \
	VPXOR   32(SI), Y10, Y10 \
	VPXOR   Y9, Y7, Y7 \
	VPXOR   Y10, Y8, Y8 \
	JMP     folded \
foldz: \
	VPCLMULQDQ $0x00, Z6, Z7, Z9 \
	VPCLMULQDQ $0x11, Z6, Z7, Z7 \
	VPTERNLOGQ $0x96, (SI), Z9, Z7 \
folded:

// SUMSTORE stores the remainders back to the state.
#define SUMSTORE \
	TESTQ   R13, R13 \
	JZ      stored \
	CMPQ    R13, $2 \
	JEQ     storez \
	VMOVDQU Y7, (R12) \
	VMOVDQU Y8, 32(R12) \
	JMP     stored \
storez: \
	VMOVDQU64 Z7, (R12) \
stored:

// func f32ToF16AVX2(dst, src []byte, acc *[32]byte, nt bool) (n, under int)
TEXT ·f32ToF16AVX2(SB), NOSPLIT, $0-80
	ARGS(nt+56, 7)              // blocks of 32 elements (128 bytes)
	PROLOG32($0x477fefff, $0x33000000)
	TESTQ   CX, CX
	JZ      done

f32f16loop:
	CHECK32
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS 64(SI), Y2
	VMOVUPS 96(SI), Y3
	VCVTPS2PH $0, Y0, X0        // round to nearest even
	VCVTPS2PH $0, Y1, X1
	VCVTPS2PH $0, Y2, X2
	VCVTPS2PH $0, Y3, X3
	TESTQ   R10, R10
	JNZ     f32f16nt
	VMOVDQU X0, (DI)
	VMOVDQU X1, 16(DI)
	VMOVDQU X2, 32(DI)
	VMOVDQU X3, 48(DI)
	JMP     f32f16next

f32f16nt:
	VMOVNTDQ X0, (DI)
	VMOVNTDQ X1, 16(DI)
	VMOVNTDQ X2, 32(DI)
	VMOVNTDQ X3, 48(DI)

f32f16next:
	ADDQ    $128, SI
	ADDQ    $64, DI
	ADDQ    $32, AX
	DECQ    CX
	JNZ     f32f16loop

done:
	FINISH
	MOVQ    AX, n+64(FP)
	MOVQ    R9, under+72(FP)
	RET

// func f32ToBF16AVX2(dst, src []byte, acc *[32]byte, nt bool) (n, under int)
TEXT ·f32ToBF16AVX2(SB), NOSPLIT, $0-80
	ARGS(nt+56, 7)              // blocks of 32 elements (128 bytes)
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
	TESTQ   R10, R10
	JNZ     f32bf16nt
	VMOVDQU Y0, (DI)
	VMOVDQU Y2, 32(DI)
	JMP     f32bf16next

f32bf16nt:
	VMOVNTDQ Y0, (DI)
	VMOVNTDQ Y2, 32(DI)

f32bf16next:
	ADDQ    $128, SI
	ADDQ    $64, DI
	ADDQ    $32, AX
	DECQ    CX
	JNZ     f32bf16loop

done:
	FINISH
	MOVQ    AX, n+64(FP)
	MOVQ    R9, under+72(FP)
	RET

// func f32ToF8AVX2(dst, src []byte, acc *[32]byte, p *f8EncodeParams, nt bool) (n, under int)
TEXT ·f32ToF8AVX2(SB), NOSPLIT, $0-88
	ARGS(nt+64, 7)              // blocks of 32 elements (128 bytes)
	MOVQ    p+56(FP), R8
	VPCMPEQD Y14, Y14, Y14
	VPSRLD  $1, Y14, Y13        // 0x7fffffff
	VMOVDQU E_OMAX(R8), Y12
	VMOVDQU E_UNDER(R8), Y11
	VMOVDQU E_SHIFT(R8), X10
	VPSRLD  $31, Y14, Y9        // 1
	VPABSB  Y14, Y8
	VPSLLW  $7, Y8, Y8          // 0x80 per byte (0x0101 << 7 per word)
	TESTQ   CX, CX
	JZ      done

f32f8loop:
	CHECK32
	ENCF8(Y0)
	ENCF8(Y1)
	ENCF8(Y2)
	ENCF8(Y3)
	VPACKUSDW Y1, Y0, Y0
	VPACKUSDW Y3, Y2, Y2
	VPACKUSWB Y2, Y0, Y0
	// The signs, packed the same way (-1 saturates to 0xff), go in before
	// the final reordering. -1 > x as int32 holds for every negative float
	// but the NaN 0xffffffff, which never gets here.
	VPCMPGTD (SI), Y14, Y4
	VPCMPGTD 32(SI), Y14, Y5
	VPCMPGTD 64(SI), Y14, Y6
	VPCMPGTD 96(SI), Y14, Y7
	VPACKSSDW Y5, Y4, Y4
	VPACKSSDW Y7, Y6, Y6
	VPACKSSWB Y6, Y4, Y4
	VPAND   Y8, Y4, Y4
	VPOR    Y4, Y0, Y0
	VMOVDQU f8perm<>(SB), Y4
	VPERMD  Y0, Y4, Y0
	TESTQ   R10, R10
	JNZ     f32f8nt
	VMOVDQU Y0, (DI)
	JMP     f32f8next

f32f8nt:
	VMOVNTDQ Y0, (DI)

f32f8next:
	ADDQ    $128, SI
	ADDQ    $32, DI
	ADDQ    $32, AX
	DECQ    CX
	JNZ     f32f8loop

done:
	FINISH
	MOVQ    AX, n+72(FP)
	MOVQ    R9, under+80(FP)
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

// func f8ToF32AVX2(dst, src []byte, acc *[32]byte, p *f8DecodeParams, nt bool) int
TEXT ·f8ToF32AVX2(SB), NOSPLIT, $0-80
	ARGS(nt+64, 5)              // blocks of 32 elements (32 bytes)
	MOVQ    p+56(FP), R8
	VMOVDQU D_SHIFT(R8), X10
	TESTQ   CX, CX
	JZ      done

f8loop:
	F8CHECK
	TESTQ   R10, R10
	JNZ     f8nt
	DECF8(0, VMOVDQU)
	DECF8(8, VMOVDQU)
	DECF8(16, VMOVDQU)
	DECF8(24, VMOVDQU)
	JMP     f8next

f8nt:
	DECF8(0, VMOVNTDQ)
	DECF8(8, VMOVNTDQ)
	DECF8(16, VMOVNTDQ)
	DECF8(24, VMOVNTDQ)

f8next:
	ADDQ    $32, SI
	ADDQ    $128, DI
	ADDQ    $32, AX
	DECQ    CX
	JNZ     f8loop

done:
	FINISH
	MOVQ    AX, ret+72(FP)
	RET

// func e4m3ToF32F16C(dst, src []byte, acc *[32]byte, p *f8DecodeParams, nt bool) int
//
// F8_E4M3 only (E4M3DEC's table). Two blocks per iteration while two remain, with one check for both; the
// single-block loop takes the last block and the blocks around a special
// code.
TEXT ·e4m3ToF32F16C(SB), NOSPLIT, $0-80
	ARGS(nt+64, 5)              // blocks of 32 elements (32 bytes)
	MOVQ    p+56(FP), R8
	VPXOR   X11, X11, X11
	F8MAGPROLOG
	VMOVDQU e4m3tab<>+0(SB), Y8
	VMOVDQU e4m3tab<>+32(SB), Y12

e4m3pair:
	CMPQ    CX, $2
	JB      e4m3one
	VPAND   (SI), Y14, Y1
	VPAND   32(SI), Y14, Y3
	VPMAXUB Y1, Y3, Y6
	VPSUBUSB Y13, Y6, Y7
	VPTEST  Y7, Y7
	JNZ     e4m3one
	VPMAXUB Y6, Y15, Y15
	VPCMPGTB (SI), Y11, Y6
	VPCMPGTB 32(SI), Y11, Y7
	TESTQ   R10, R10
	JNZ     e4m3pairnt
	E4M3DEC(Y1, Y6, 0, VMOVUPS)
	E4M3DEC(Y3, Y7, 32, VMOVUPS)
	JMP     e4m3pairnext

e4m3pairnt:
	E4M3DEC(Y1, Y6, 0, VMOVNTPS)
	E4M3DEC(Y3, Y7, 32, VMOVNTPS)

e4m3pairnext:
	ADDQ    $64, SI
	ADDQ    $256, DI
	ADDQ    $64, AX
	SUBQ    $2, CX
	JMP     e4m3pair

e4m3one:
	TESTQ   CX, CX
	JZ      done
	F8MAGCHECK
	VPCMPGTB (SI), Y11, Y6
	TESTQ   R10, R10
	JNZ     e4m3nt
	E4M3DEC(Y1, Y6, 0, VMOVUPS)
	JMP     e4m3next

e4m3nt:
	E4M3DEC(Y1, Y6, 0, VMOVNTPS)

e4m3next:
	ADDQ    $32, SI
	ADDQ    $128, DI
	ADDQ    $32, AX
	DECQ    CX
	JMP     e4m3one

done:
	FINISH
	MOVQ    AX, ret+72(FP)
	RET

// func e4m3fnuzToF32F16C(dst, src []byte, acc *[32]byte, p *f8DecodeParams, nt bool) int
//
// F8_E4M3FNUZ only: E4M3DEC with e4m3fnuztab; the one special code is 0x80
// (NaN), the negative zero of the other layouts. Two blocks per iteration while two remain, with one check for both; the
// single-block loop takes the last block and the blocks around a special
// code.
TEXT ·e4m3fnuzToF32F16C(SB), NOSPLIT, $0-80
	ARGS(nt+64, 5)              // blocks of 32 elements (32 bytes)
	MOVQ    p+56(FP), R8
	VPXOR   X11, X11, X11
	VMOVDQU D_MAGMASK8(R8), Y14
	VMOVDQU D_CODESPECIAL8(R8), Y13
	VMOVDQU e4m3fnuztab<>+0(SB), Y8
	VMOVDQU e4m3tab<>+32(SB), Y12

e4m3fnuzpair:
	CMPQ    CX, $2
	JB      e4m3fnuzone
	VPCMPEQB (SI), Y13, Y6
	VPCMPEQB 32(SI), Y13, Y7
	VPOR    Y6, Y7, Y7
	VPTEST  Y7, Y7
	JNZ     e4m3fnuzone
	VPAND   (SI), Y14, Y1
	VPAND   32(SI), Y14, Y3
	VPMAXUB Y1, Y3, Y6
	VPMAXUB Y6, Y15, Y15
	VPCMPGTB (SI), Y11, Y6
	VPCMPGTB 32(SI), Y11, Y7
	TESTQ   R10, R10
	JNZ     e4m3fnuzpairnt
	E4M3DEC(Y1, Y6, 0, VMOVUPS)
	E4M3DEC(Y3, Y7, 32, VMOVUPS)
	JMP     e4m3fnuzpairnext

e4m3fnuzpairnt:
	E4M3DEC(Y1, Y6, 0, VMOVNTPS)
	E4M3DEC(Y3, Y7, 32, VMOVNTPS)

e4m3fnuzpairnext:
	ADDQ    $64, SI
	ADDQ    $256, DI
	ADDQ    $64, AX
	SUBQ    $2, CX
	JMP     e4m3fnuzpair

e4m3fnuzone:
	TESTQ   CX, CX
	JZ      done
	VPCMPEQB (SI), Y13, Y6
	VPTEST  Y6, Y6
	JNZ     done
	VPAND   (SI), Y14, Y1
	VPMAXUB Y1, Y15, Y15
	VPCMPGTB (SI), Y11, Y6
	TESTQ   R10, R10
	JNZ     e4m3fnuznt
	E4M3DEC(Y1, Y6, 0, VMOVUPS)
	JMP     e4m3fnuznext

e4m3fnuznt:
	E4M3DEC(Y1, Y6, 0, VMOVNTPS)

e4m3fnuznext:
	ADDQ    $32, SI
	ADDQ    $128, DI
	ADDQ    $32, AX
	DECQ    CX
	JMP     e4m3fnuzone

done:
	FINISH
	MOVQ    AX, ret+72(FP)
	RET

// func e5m2ToF32F16C(dst, src []byte, acc *[32]byte, p *f8DecodeParams, nt bool) int
//
// Two blocks per iteration while two remain, with one check for both; the
// single-block loop takes the last block and the blocks around a special
// code.
TEXT ·e5m2ToF32F16C(SB), NOSPLIT, $0-80
	ARGS(nt+64, 5)              // blocks of 32 elements (32 bytes)
	MOVQ    p+56(FP), R8
	VPXOR   X11, X11, X11
	F8MAGPROLOG

e5m2pair:
	CMPQ    CX, $2
	JB      e5m2one
	VPAND   (SI), Y14, Y1
	VPAND   32(SI), Y14, Y3
	VPMAXUB Y1, Y3, Y3
	VPSUBUSB Y13, Y3, Y2
	VPTEST  Y2, Y2
	JNZ     e5m2one
	VPMAXUB Y3, Y15, Y15
	TESTQ   R10, R10
	JNZ     e5m2pairnt
	E5M2HALF(0, VMOVUPS)
	E5M2HALF(16, VMOVUPS)
	E5M2HALF(32, VMOVUPS)
	E5M2HALF(48, VMOVUPS)
	JMP     e5m2pairnext

e5m2pairnt:
	E5M2HALF(0, VMOVNTPS)
	E5M2HALF(16, VMOVNTPS)
	E5M2HALF(32, VMOVNTPS)
	E5M2HALF(48, VMOVNTPS)

e5m2pairnext:
	ADDQ    $64, SI
	ADDQ    $256, DI
	ADDQ    $64, AX
	SUBQ    $2, CX
	JMP     e5m2pair

e5m2one:
	TESTQ   CX, CX
	JZ      done
	F8MAGCHECK
	TESTQ   R10, R10
	JNZ     e5m2nt
	E5M2HALF(0, VMOVUPS)
	E5M2HALF(16, VMOVUPS)
	JMP     e5m2next

e5m2nt:
	E5M2HALF(0, VMOVNTPS)
	E5M2HALF(16, VMOVNTPS)

e5m2next:
	ADDQ    $32, SI
	ADDQ    $128, DI
	ADDQ    $32, AX
	DECQ    CX
	JMP     e5m2one

done:
	FINISH
	MOVQ    AX, ret+72(FP)
	RET

// func bf16ToF32AVX2(dst, src []byte, acc *[32]byte, nt bool, k *[2]uint64, state *[64]byte, fold uint8) int
TEXT ·bf16ToF32AVX2(SB), NOSPLIT, $0-96
	ARGS(nt+56, 6)              // blocks of 32 elements (64 bytes)
	SUMARGS
	PROLOG16($0x7f7f7f7f)
	VPXOR   Y12, Y12, Y12
	TESTQ   CX, CX
	JZ      done

bf16sloop:
	// 2 KiB ahead: from memory, with all cores converting, the loads
	// otherwise wait for the hardware prefetcher (a load of 1 GiB: 1.12×
	// faster, and the fold costs 1.02× instead of 1.07×).
	PREFETCHT0 2048(SI)
	CHECK16
	FOLD64
	VPERMQ  $0xd8, (SI), Y4
	VPERMQ  $0xd8, 32(SI), Y5
	VPUNPCKLWD Y4, Y12, Y0
	VPUNPCKHWD Y4, Y12, Y1
	VPUNPCKLWD Y5, Y12, Y2
	VPUNPCKHWD Y5, Y12, Y3
	TESTQ   R10, R10
	JNZ     bf16snt
	STORE4(VMOVDQU)
	JMP     bf16snext

bf16snt:
	STORE4(VMOVNTDQ)

bf16snext:
	ADDQ    $64, SI
	ADDQ    $128, DI
	ADDQ    $32, AX
	DECQ    CX
	JNZ     bf16sloop

done:
	SUMSTORE
	FINISH
	MOVQ    AX, ret+88(FP)
	RET

// func f16ToF32AVX2(dst, src []byte, acc *[32]byte, nt bool, k *[2]uint64, state *[64]byte, fold uint8) int
TEXT ·f16ToF32AVX2(SB), NOSPLIT, $0-96
	ARGS(nt+56, 6)              // blocks of 32 elements (64 bytes)
	SUMARGS
	PROLOG16($0x7bff7bff)
	TESTQ   CX, CX
	JZ      done

f16sloop:
	PREFETCHT0 2048(SI) // as bf16sloop

	CHECK16
	FOLD64
	VCVTPH2PS (SI), Y0
	VCVTPH2PS 16(SI), Y1
	VCVTPH2PS 32(SI), Y2
	VCVTPH2PS 48(SI), Y3
	TESTQ   R10, R10
	JNZ     f16snt
	STORE4(VMOVUPS)
	JMP     f16snext

f16snt:
	STORE4(VMOVNTPS)

f16snext:
	ADDQ    $64, SI
	ADDQ    $128, DI
	ADDQ    $32, AX
	DECQ    CX
	JNZ     f16sloop

done:
	SUMSTORE
	FINISH
	MOVQ    AX, ret+88(FP)
	RET
