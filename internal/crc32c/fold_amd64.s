//go:build amd64 && !purego

#include "go_asm.h"
#include "textflag.h"

// Folding CRC-32 kernels (see fold_amd64.go for the constants in foldK
// and why each one is x^(d±32) mod P). All three take the CRC register
// (the complement of the CRC so far), a slice whose length is a multiple
// of 16 and the polynomial's constants (foldK, foldKIEEE), and return a
// 128-bit remainder congruent to the slice, modulo P, with the register
// folded in: the CRC register of its 16 bytes from a zero start is the
// register after the slice (reduceCastagnoli, polynomial.reduce).
//
// The idea: the CRC register after a message M is M·x^32 mod P once the
// register before it is xored into M's first four bytes. Any 128-bit A
// with A ≡ M (mod P) therefore gives the same register as M, and it is
// the CRC register of A's 16 bytes from a zero start (for CRC-32C, two
// crc32 instructions). The loops keep such remainders of the bytes read so far,
// one per 16-byte lane, and fold each one forward onto the bytes one round
// ahead: A = H·x^64 + L becomes H·K_H ⊕ L·K_L ⊕ next block, which is ≡
// A·x^d ⊕ next block (mod P).

// func foldAVX512(reg uint32, p []byte, k *[14]uint64) (lo, hi uint64)
// len(p) is a multiple of 16 and at least 64.
TEXT ·foldAVX512(SB), NOSPLIT, $0-56
	MOVL reg+0(FP), AX
	MOVQ p_base+8(FP), SI
	MOVQ p_len+16(FP), CX
	MOVQ k+32(FP), DX

	// Z0: the first 64 bytes, four 128-bit lanes, with the register xored
	// into the first four bytes (VMOVD zeroes the rest of Z4).
	VMOVD  AX, X4
	VPXORQ 0(SI), Z4, Z0
	CMPQ   CX, $256
	JB     short

	// Z1..Z3: the next 192 bytes; four accumulators, sixteen lanes.
	VMOVDQU64 64(SI), Z1
	VMOVDQU64 128(SI), Z2
	VMOVDQU64 192(SI), Z3
	ADDQ      $256, SI
	SUBQ      $256, CX

	// Main loop, 256 bytes per round: every lane moves forward 2048 bits
	// onto the lane 256 bytes ahead. Z4 holds the d = 2048 pair in each
	// of its four lanes.
	VBROADCASTI32X4 (const_k2048*16)(DX), Z4
	CMPQ            CX, $256
	JB              fold4

	PCALIGN $32
loop256:
	PREFETCHT0 2048(SI)                // 2 KiB ahead: from L3 or memory the
	PREFETCHT0 2112(SI)                // hardware prefetchers alone leave the
	PREFETCHT0 2176(SI)                // loop waiting (BenchmarkUpdate, medians
	PREFETCHT0 2240(SI)                // of 4: 4 MiB +8%, 64 MiB +20%)
	VPCLMULQDQ $0x00, Z4, Z0, Z5       // H·x^(2048+32)
	VPCLMULQDQ $0x11, Z4, Z0, Z0       // L·x^(2048-32)
	VPCLMULQDQ $0x00, Z4, Z1, Z6
	VPCLMULQDQ $0x11, Z4, Z1, Z1
	VPCLMULQDQ $0x00, Z4, Z2, Z7
	VPCLMULQDQ $0x11, Z4, Z2, Z2
	VPCLMULQDQ $0x00, Z4, Z3, Z8
	VPCLMULQDQ $0x11, Z4, Z3, Z3
	VPTERNLOGQ $0x96, 0(SI), Z5, Z0    // Z0 = Z0 ⊕ Z5 ⊕ next 64 bytes (0x96: a⊕b⊕c)
	VPTERNLOGQ $0x96, 64(SI), Z6, Z1
	VPTERNLOGQ $0x96, 128(SI), Z7, Z2
	VPTERNLOGQ $0x96, 192(SI), Z8, Z3
	ADDQ       $256, SI
	SUBQ       $256, CX
	CMPQ       CX, $256
	JAE        loop256

fold4:
	// Four accumulators into one: Z0 moves 512 bits onto Z1, the sum onto
	// Z2, then onto Z3. Z4 now holds the d = 512 pair.
	VBROADCASTI32X4 (const_k512*16)(DX), Z4
	VPCLMULQDQ      $0x00, Z4, Z0, Z5
	VPCLMULQDQ      $0x11, Z4, Z0, Z0
	VPTERNLOGQ      $0x96, Z1, Z5, Z0
	VPCLMULQDQ      $0x00, Z4, Z0, Z5
	VPCLMULQDQ      $0x11, Z4, Z0, Z0
	VPTERNLOGQ      $0x96, Z2, Z5, Z0
	VPCLMULQDQ      $0x00, Z4, Z0, Z5
	VPCLMULQDQ      $0x11, Z4, Z0, Z0
	VPTERNLOGQ      $0x96, Z3, Z5, Z0
	JMP             tail64

short:
	// Under 256 bytes: Z0 alone, 64 bytes per round from here.
	ADDQ            $64, SI
	SUBQ            $64, CX
	VBROADCASTI32X4 (const_k512*16)(DX), Z4

tail64:
	// Whole 64-byte rounds left: the same 512-bit step onto each.
	CMPQ CX, $64
	JB   lanes

loop64:
	VPCLMULQDQ $0x00, Z4, Z0, Z5
	VPCLMULQDQ $0x11, Z4, Z0, Z0
	VPTERNLOGQ $0x96, 0(SI), Z5, Z0
	ADDQ       $64, SI
	SUBQ       $64, CX
	CMPQ       CX, $64
	JAE        loop64

lanes:
	// Four lanes into one: lanes 0, 1, 2 move 384, 256, 128 bits onto
	// lane 3, each with its own pair (the 64 bytes at k384: the pairs for
	// 384, 256, 128 and a zero pair, which clears lane 3 of the products).
	VMOVDQU64     (const_k384*16)(DX), Z4
	VPCLMULQDQ    $0x00, Z4, Z0, Z5
	VPCLMULQDQ    $0x11, Z4, Z0, Z6
	VEXTRACTI32X4 $3, Z0, X7           // lane 3, which stays
	VPXORQ        Z6, Z5, Z5           // lanes 0..2 moved, lane 3 zero
	VEXTRACTI64X4 $1, Z5, Y6
	VPXOR         Y6, Y5, Y5           // lanes 0⊕2, 1⊕3
	VEXTRACTI128  $1, Y5, X6
	VPXOR         X6, X5, X5           // 0⊕1⊕2⊕3
	VPXOR         X7, X5, X0           // and lane 3 itself

	// Whole 16-byte blocks left: one 128-bit step onto each.
	VMOVDQU (const_k128*16)(DX), X4
	CMPQ    CX, $16
	JB      reduce

loop16:
	VPCLMULQDQ $0x00, X4, X0, X5
	VPCLMULQDQ $0x11, X4, X0, X0
	VPXOR      X5, X0, X0
	VPXOR      (SI), X0, X0
	ADDQ       $16, SI
	SUBQ       $16, CX
	CMPQ       CX, $16
	JAE        loop16

reduce:
	// The remainder in X0: everything folded into it.
	VMOVQ   X0, AX
	VPEXTRQ $1, X0, BX
	VZEROUPPER
	MOVQ    AX, lo+40(FP)
	MOVQ    BX, hi+48(FP)
	RET

// func foldSSE(reg uint32, p []byte, k *[14]uint64) (lo, hi uint64)
// len(p) is a multiple of 16 and at least 64.
TEXT ·foldSSE(SB), NOSPLIT, $0-56
	MOVL reg+0(FP), AX
	MOVQ p_base+8(FP), SI
	MOVQ p_len+16(FP), CX
	MOVQ k+32(FP), DX

	// X0..X3: the first 64 bytes; the register goes into the first four
	// bytes (MOVQ zeroes the rest of X4).
	MOVOU 0(SI), X0
	MOVOU 16(SI), X1
	MOVOU 32(SI), X2
	MOVOU 48(SI), X3
	MOVQ  AX, X4
	PXOR  X4, X0
	ADDQ  $64, SI
	SUBQ  $64, CX

	// Main loop, 64 bytes per round: each accumulator moves forward 512
	// bits onto the block 64 bytes ahead (X4: the d = 512 pair).
	MOVOU (const_k512*16)(DX), X4
	CMPQ  CX, $64
	JB    fold4

	PCALIGN $32
loop64:
	PREFETCHT0 2048(SI)                // 2 KiB ahead (see foldAVX512)
	MOVO      X0, X5
	MOVO      X1, X6
	MOVO      X2, X7
	MOVO      X3, X8
	PCLMULQDQ $0x00, X4, X0            // H·x^(512+32)
	PCLMULQDQ $0x11, X4, X5            // L·x^(512-32)
	PCLMULQDQ $0x00, X4, X1
	PCLMULQDQ $0x11, X4, X6
	PCLMULQDQ $0x00, X4, X2
	PCLMULQDQ $0x11, X4, X7
	PCLMULQDQ $0x00, X4, X3
	PCLMULQDQ $0x11, X4, X8
	MOVOU     0(SI), X9
	MOVOU     16(SI), X10
	MOVOU     32(SI), X11
	MOVOU     48(SI), X12
	PXOR      X5, X0
	PXOR      X6, X1
	PXOR      X7, X2
	PXOR      X8, X3
	PXOR      X9, X0
	PXOR      X10, X1
	PXOR      X11, X2
	PXOR      X12, X3
	ADDQ      $64, SI
	SUBQ      $64, CX
	CMPQ      CX, $64
	JAE       loop64

fold4:
	// Four accumulators into one, 128 bits at a time: X0 onto X1, the sum
	// onto X2, then onto X3 (X4: the d = 128 pair).
	MOVOU     (const_k128*16)(DX), X4
	MOVO      X0, X5
	PCLMULQDQ $0x00, X4, X0
	PCLMULQDQ $0x11, X4, X5
	PXOR      X5, X0
	PXOR      X1, X0
	MOVO      X0, X5
	PCLMULQDQ $0x00, X4, X0
	PCLMULQDQ $0x11, X4, X5
	PXOR      X5, X0
	PXOR      X2, X0
	MOVO      X0, X5
	PCLMULQDQ $0x00, X4, X0
	PCLMULQDQ $0x11, X4, X5
	PXOR      X5, X0
	PXOR      X3, X0

	// Whole 16-byte blocks left: one 128-bit step onto each.
	CMPQ CX, $16
	JB   reduce

loop16:
	MOVO      X0, X5
	PCLMULQDQ $0x00, X4, X0
	PCLMULQDQ $0x11, X4, X5
	MOVOU     (SI), X6
	PXOR      X5, X0
	PXOR      X6, X0
	ADDQ      $16, SI
	SUBQ      $16, CX
	CMPQ      CX, $16
	JAE       loop16

reduce:
	// The remainder in X0 (see above).
	MOVQ   X0, AX
	PEXTRQ $1, X0, BX
	MOVQ   AX, lo+40(FP)
	MOVQ   BX, hi+48(FP)
	RET

// func foldAVX2(reg uint32, p []byte, k *[14]uint64) (lo, hi uint64)
// len(p) is a multiple of 16 and at least 64. The same folds as foldAVX512
// on 256-bit registers (two lanes each), all VEX-encoded: for CPUs with
// VPCLMULQDQ but no AVX-512.
TEXT ·foldAVX2(SB), NOSPLIT, $0-56
	MOVL reg+0(FP), AX
	MOVQ p_base+8(FP), SI
	MOVQ p_len+16(FP), CX
	MOVQ k+32(FP), DX

	// Y0: the first 32 bytes, with the register xored into the first four
	// bytes (VMOVD zeroes the rest of Y4).
	VMOVD AX, X4
	VPXOR 0(SI), Y4, Y0
	CMPQ  CX, $128
	JB    short

	// Y1..Y3: the next 96 bytes; four accumulators, eight lanes.
	VMOVDQU 32(SI), Y1
	VMOVDQU 64(SI), Y2
	VMOVDQU 96(SI), Y3
	ADDQ    $128, SI
	SUBQ    $128, CX

	// Main loop, 128 bytes per round: every lane moves forward 1024 bits
	// onto the lane 128 bytes ahead (Y4: the d = 1024 pair in both lanes).
	VBROADCASTI128 (const_k1024*16)(DX), Y4
	CMPQ           CX, $128
	JB             fold4

	PCALIGN $32
loop128:
	PREFETCHT0 2048(SI)                // 2 KiB ahead (see foldAVX512)
	PREFETCHT0 2112(SI)
	VPCLMULQDQ $0x00, Y4, Y0, Y5       // H·x^(1024+32)
	VPCLMULQDQ $0x11, Y4, Y0, Y0       // L·x^(1024-32)
	VPCLMULQDQ $0x00, Y4, Y1, Y6
	VPCLMULQDQ $0x11, Y4, Y1, Y1
	VPCLMULQDQ $0x00, Y4, Y2, Y7
	VPCLMULQDQ $0x11, Y4, Y2, Y2
	VPCLMULQDQ $0x00, Y4, Y3, Y8
	VPCLMULQDQ $0x11, Y4, Y3, Y3
	VPXOR      Y5, Y0, Y0
	VPXOR      Y6, Y1, Y1
	VPXOR      Y7, Y2, Y2
	VPXOR      Y8, Y3, Y3
	VPXOR      0(SI), Y0, Y0           // and the next 128 bytes
	VPXOR      32(SI), Y1, Y1
	VPXOR      64(SI), Y2, Y2
	VPXOR      96(SI), Y3, Y3
	ADDQ       $128, SI
	SUBQ       $128, CX
	CMPQ       CX, $128
	JAE        loop128

fold4:
	// Four accumulators into one: Y0 moves 256 bits onto Y1, the sum onto
	// Y2, then onto Y3. Y4 now holds the d = 256 pair.
	VBROADCASTI128 (const_k256*16)(DX), Y4
	VPCLMULQDQ     $0x00, Y4, Y0, Y5
	VPCLMULQDQ     $0x11, Y4, Y0, Y0
	VPXOR          Y5, Y0, Y0
	VPXOR          Y1, Y0, Y0
	VPCLMULQDQ     $0x00, Y4, Y0, Y5
	VPCLMULQDQ     $0x11, Y4, Y0, Y0
	VPXOR          Y5, Y0, Y0
	VPXOR          Y2, Y0, Y0
	VPCLMULQDQ     $0x00, Y4, Y0, Y5
	VPCLMULQDQ     $0x11, Y4, Y0, Y0
	VPXOR          Y5, Y0, Y0
	VPXOR          Y3, Y0, Y0
	JMP            tail32

short:
	// Under 128 bytes: Y0 alone, 32 bytes per round from here.
	ADDQ           $32, SI
	SUBQ           $32, CX
	VBROADCASTI128 (const_k256*16)(DX), Y4

tail32:
	// Whole 32-byte rounds left: the same 256-bit step onto each.
	CMPQ CX, $32
	JB   lanes

loop32:
	VPCLMULQDQ $0x00, Y4, Y0, Y5
	VPCLMULQDQ $0x11, Y4, Y0, Y0
	VPXOR      Y5, Y0, Y0
	VPXOR      (SI), Y0, Y0
	ADDQ       $32, SI
	SUBQ       $32, CX
	CMPQ       CX, $32
	JAE        loop32

lanes:
	// Two lanes into one: lane 0 moves 128 bits onto lane 1 (X4: the
	// d = 128 pair).
	VMOVDQU      (const_k128*16)(DX), X4
	VEXTRACTI128 $1, Y0, X1
	VPCLMULQDQ   $0x00, X4, X0, X5
	VPCLMULQDQ   $0x11, X4, X0, X0
	VPXOR        X5, X0, X0
	VPXOR        X1, X0, X0

	// At most one 16-byte block is left: one 128-bit step onto it.
	CMPQ       CX, $16
	JB         reduce
	VPCLMULQDQ $0x00, X4, X0, X5
	VPCLMULQDQ $0x11, X4, X0, X0
	VPXOR      X5, X0, X0
	VPXOR      (SI), X0, X0

reduce:
	// The remainder in X0 (see above).
	VMOVQ   X0, AX
	VPEXTRQ $1, X0, BX
	VZEROUPPER
	MOVQ    AX, lo+40(FP)
	MOVQ    BX, hi+48(FP)
	RET

// func reduceCastagnoli(lo, hi uint64) uint32
// The CRC-32C register of the 16 bytes lo, hi (little-endian) from a zero
// start: two crc32 instructions.
TEXT ·reduceCastagnoli(SB), NOSPLIT, $0-20
	MOVQ   lo+0(FP), AX
	MOVQ   hi+8(FP), BX
	XORL   DX, DX
	CRC32Q AX, DX
	CRC32Q BX, DX
	MOVL   DX, ret+16(FP)
	RET
