//go:build amd64 && !purego

#include "textflag.h"

// AVX (no AVX2, no FMA) vector loops of package fpkern, four float64 lanes
// at a time: see toOddGo and measureGo for what they compute.

DATA absMask<>+0(SB)/8, $0x7fffffffffffffff
GLOBL absMask<>(SB), RODATA|NOPTR, $8
DATA maxF64<>+0(SB)/8, $0x7fefffffffffffff
GLOBL maxF64<>(SB), RODATA|NOPTR, $8

// func toOddAVX(dst, x []float32, s, r float64) int
TEXT ·toOddAVX(SB), NOSPLIT, $0-72
	MOVQ         dst_base+0(FP), DI
	MOVQ         x_base+24(FP), SI
	MOVQ         x_len+32(FP), CX
	SHRQ         $2, CX
	XORQ         AX, AX
	VBROADCASTSD s+48(FP), Y14
	VBROADCASTSD r+56(FP), Y13
	VXORPD       Y15, Y15, Y15

oddLoop:
	TESTQ        CX, CX
	JZ           oddDone
	VCVTPS2PD    (SI)(AX*4), Y0   // x
	VMULPD       Y13, Y0, Y1      // x × (1/s)
	VCVTPD2PSY   Y1, X2           // f, rounded to nearest even
	VCVTPS2PD    X2, Y3           // f as float64
	VMULPD       Y14, Y3, Y4      // f × s, exact
	VSUBPD       Y0, Y4, Y4       // d = f × s − x, exact
	VMULPD       Y3, Y4, Y5
	VCMPPD       $0x1e, Y15, Y5, Y5 // d × f > 0: f beyond the quotient
	VMULPD       Y4, Y4, Y6
	VCMPPD       $0x1e, Y15, Y6, Y6 // d × d > 0: inexact
	VEXTRACTF128 $1, Y5, X7
	VSHUFPS      $0x88, X7, X5, X5  // the four 64-bit masks as 32-bit ones
	VEXTRACTF128 $1, Y6, X8
	VSHUFPS      $0x88, X8, X6, X6
	VPADDD       X5, X2, X2       // bits − 1 where f is beyond
	VPSRLD       $31, X6, X6
	VPOR         X6, X2, X2       // the last bit set where inexact
	VMOVUPS      X2, (DI)(AX*4)
	ADDQ         $4, AX
	DECQ         CX
	JMP          oddLoop

oddDone:
	VZEROUPPER
	MOVQ AX, ret+64(FP)
	RET

// func measureAVX(x, y []float32, s float64, st *measureState) int
TEXT ·measureAVX(SB), NOSPLIT, $0-72
	MOVQ         x_base+0(FP), SI
	MOVQ         x_len+8(FP), CX
	MOVQ         y_base+24(FP), DI
	MOVQ         st+56(FP), DX
	SHRQ         $2, CX
	XORQ         AX, AX
	VBROADCASTSD s+48(FP), Y14
	VMOVUPD      0(DX), Y10       // Σ e²
	VMOVUPD      32(DX), Y11      // Σ x²
	VMOVUPD      64(DX), Y12      // max e
	VBROADCASTSD 96(DX), Y13      // the largest relative error
	VBROADCASTSD absMask<>(SB), Y15
	VBROADCASTSD maxF64<>(SB), Y9

measLoop:
	TESTQ      CX, CX
	JZ         measDone
	VCVTPS2PD  (SI)(AX*4), Y0     // x
	VCVTPS2PD  (DI)(AX*4), Y1
	VMULPD     Y14, Y1, Y1        // d = y × s, exact
	VANDPD     Y15, Y0, Y2        // |x|
	VANDPD     Y15, Y1, Y3        // |d|
	VCMPPD     $0x12, Y9, Y2, Y4  // |x| <= max: finite
	VCMPPD     $0x12, Y9, Y3, Y5
	VANDPD     Y5, Y4, Y4
	VMOVMSKPD  Y4, BX
	CMPQ       BX, $15
	JNE        measDone           // a NaN or infinite value: the caller's
	VSUBPD     Y1, Y0, Y6
	VANDPD     Y15, Y6, Y6        // e = |x − d|
	VMULPD     Y13, Y2, Y7
	VCMPPD     $0x1e, Y7, Y6, Y8  // e > largest relative error × |x|
	VMOVMSKPD  Y8, BX
	TESTQ      BX, BX
	JNZ        measDone           // a new largest relative error: the caller's
	VMULPD     Y6, Y6, Y7
	VADDPD     Y7, Y10, Y10
	VMULPD     Y0, Y0, Y7
	VADDPD     Y7, Y11, Y11
	VMAXPD     Y6, Y12, Y12
	ADDQ       $4, AX
	DECQ       CX
	JMP        measLoop

measDone:
	VMOVUPD Y10, 0(DX)
	VMOVUPD Y11, 32(DX)
	VMOVUPD Y12, 64(DX)
	VZEROUPPER
	MOVQ    AX, ret+64(FP)
	RET

DATA absMask32<>+0(SB)/4, $0x7fffffff
GLOBL absMask32<>(SB), RODATA|NOPTR, $4
DATA maxF32<>+0(SB)/4, $0x7f7fffff
GLOBL maxF32<>(SB), RODATA|NOPTR, $4

// func absMaxAVX(x []float32) (float32, int)
TEXT ·absMaxAVX(SB), NOSPLIT, $0-40
	MOVQ         x_base+0(FP), SI
	MOVQ         x_len+8(FP), CX
	SHRQ         $3, CX
	XORQ         AX, AX
	VBROADCASTSS absMask32<>(SB), Y15
	VBROADCASTSS maxF32<>(SB), Y14
	VXORPS       Y0, Y0, Y0

maxLoop:
	TESTQ   CX, CX
	JZ      maxDone
	VANDPS  (SI)(AX*4), Y15, Y1    // |x|
	VCMPPS  $0x12, Y14, Y1, Y2     // |x| <= max: finite (false for NaN)
	VANDPS  Y2, Y1, Y1
	VMAXPS  Y1, Y0, Y0
	ADDQ    $8, AX
	DECQ    CX
	JMP     maxLoop

maxDone:
	VEXTRACTF128 $1, Y0, X1
	VMAXPS       X1, X0, X0
	VPERMILPS    $0x4e, X0, X1
	VMAXPS       X1, X0, X0
	VPERMILPS    $0xb1, X0, X1
	VMAXPS       X1, X0, X0
	VZEROUPPER
	MOVSS        X0, ret+24(FP)
	MOVQ         AX, ret1+32(FP)
	RET
