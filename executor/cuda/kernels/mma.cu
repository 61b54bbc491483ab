// mma.cu: Linear on tensor cores (mma.sync m16n8k16, BF16 or F16 inputs,
// F32 accumulation), for sm_80 and later. gen.sh compiles it three times:
// for sm_80 (FP8 weights decoded through a table in shared memory), and
// with CKPT_FP8_CVT for sm_89 and sm_90, where the FP8 → F16 conversion
// instruction (cvt.rn.f16x2.e4m3x2 / .e5m2x2) decodes two codes at once.
//
// y[m, n] = Σ_k x[m, k] · W[n, k] + b[n]. x is BF16 or F16 (T); W is T,
// or FP8 codes whose value q × scale is rounded to T in the tile loader
// (the scale of each element's block — per tensor, row, group or 128×128
// block — is applied there, tile by tile). Products are summed in F32 by
// the tensor cores; the bias is added in F32 and the sum rounded once to
// the output dtype.
//
// Built for the host (no __CUDA_ARCH__: the driver emulator the tests use,
// testdata/emu), the inline PTX gives way to the emulator's CK_HOST_*
// versions of the same instructions.
#include "numerics.h"

#define BM 128
#define BN 128
#define BK 32
#define PAD 8  // halves of padding per shared row (16 bytes): fewer bank conflicts
#define LDS (BK + PAD)

// T-typed conversions from float32, rounding to nearest even.
__device__ __forceinline__ ck_u16 to_half_bits(float v, int bf16) {
#ifndef __CUDA_ARCH__
  return CK_HOST_HALF_BITS(v, bf16);
#else
  ck_u16 r;
  if (bf16) {
    asm("{ .reg .b16 h; cvt.rn.bf16.f32 h, %1; mov.b16 %0, h; }" : "=h"(r) : "f"(v));
  } else {
    asm("{ .reg .b16 h; cvt.rn.f16.f32 h, %1; mov.b16 %0, h; }" : "=h"(r) : "f"(v));
  }
  return r;
#endif
}

__device__ __forceinline__ void mma16816(float* c, const ck_u32* a, const ck_u32* b, int bf16) {
#ifndef __CUDA_ARCH__
  CK_HOST_MMA16816(c, a, b, bf16);
#else
  if (bf16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
#endif
}

// load8 reads 8 halves of row r, columns c..c+7, of a [rows, cols] array
// of 16-bit elements (zeros outside), as one 16-byte load when aligned.
__device__ __forceinline__ uint4 load8(const ck_u16* p, ck_i64 rows, ck_i64 cols, ck_i64 r, ck_i64 c, int vec) {
  uint4 v = make_uint4(0, 0, 0, 0);
  if (r >= rows) return v;
  if (vec && c + 8 <= cols) {
    return *(const uint4*)(p + r * cols + c);
  }
  ck_u16 h[8];
  #pragma unroll
  for (int i = 0; i < 8; i++) h[i] = (c + i < cols) ? p[r * cols + c + i] : 0;
  v.x = h[0] | (ck_u32)h[1] << 16;
  v.y = h[2] | (ck_u32)h[3] << 16;
  v.z = h[4] | (ck_u32)h[5] << 16;
  v.w = h[6] | (ck_u32)h[7] << 16;
  return v;
}

// fp8_to_f32 decodes one FP8 code to its float32 value.
__device__ __forceinline__ float fp8_to_f32(ck_u32 code, const float* tab, int e5m2) {
#if defined(CKPT_FP8_CVT) && !defined(__CUDA_ARCH__)
  (void)tab;
  return CK_HOST_FP8_TO_F32(code, e5m2);
#elif defined(CKPT_FP8_CVT)
  ck_u32 h2;
  ck_u16 pair = (ck_u16)code;
  if (e5m2) {
    asm("cvt.rn.f16x2.e5m2x2 %0, %1;" : "=r"(h2) : "h"(pair));
  } else {
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(pair));
  }
  float f;
  asm("{ .reg .b16 lo, hi; mov.b32 {lo, hi}, %1; cvt.f32.f16 %0, lo; }" : "=f"(f) : "r"(h2));
  return f;
#else
  (void)e5m2;
  return tab[code];
#endif
}

// The FP8 weight's scales (see ck_dq in numerics.h): sc(n, k) is the
// product of the primary scale of element (n, k) and the per-tensor
// factor, rounded to float32.
struct wscale {
  const ck_u8* s; int skind; const double* stab; int svaries;
  ck_i64 br, bc, gridc;
  const ck_u8* g; int gkind; const double* gtab; int gmode;
};

__device__ __noinline__ float scale_at(const wscale& w, ck_i64 n, ck_i64 k) {
  double s1 = 1.0;
  if (w.s != 0) {
    ck_i64 si = w.svaries ? (n / w.br) * w.gridc + k / w.bc : 0;
    s1 = ck_scale(w.s, w.skind, w.stab, si);
  }
  if (w.gmode == CK_G_MUL) s1 = ck_mul(s1, ck_scale(w.g, w.gkind, w.gtab, 0));
  if (w.gmode == CK_G_DIV) s1 = ck_div(s1, ck_scale(w.g, w.gkind, w.gtab, 0));
  return (float)s1;
}

// load16q reads 16 FP8 codes of W row r from column c (zeros outside).
__device__ __forceinline__ uint4 load16q(const ck_u8* q, ck_i64 rows, ck_i64 cols, ck_i64 r, ck_i64 c, int vec) {
  uint4 v = make_uint4(0, 0, 0, 0);
  if (r >= rows) return v;
  if (vec && c + 16 <= cols) return *(const uint4*)(q + r * cols + c);
  ck_u32 u[4] = {0, 0, 0, 0};
#pragma unroll
  for (int i = 0; i < 16; i++) {
    if (c + i < cols) u[i / 4] |= (ck_u32)q[r * cols + c + i] << (8 * (i % 4));
  }
  v.x = u[0]; v.y = u[1]; v.z = u[2]; v.w = u[3];
  return v;
}

// store16q dequantizes the 16 codes v of W row r, columns c..c+15, with
// their scales, rounds them to T and writes them to dst (zeros outside W).
__device__ __noinline__ void store16q(ck_u16* dst, uint4 v, ck_i64 rows, ck_i64 cols, ck_i64 r, ck_i64 c,
                                      const float* tab, int e5m2, const wscale& w, int bf16) {
  // One scale for the 16 codes when they share a block (the usual case:
  // per tensor, per row, or blocks of a multiple of 16 columns).
  ck_i64 last = (c + 15 < cols) ? c + 15 : cols - 1;
  int one = !w.svaries || (c / w.bc == last / w.bc);
  float sc = (r < rows && c < cols) ? scale_at(w, r, c) : 0.0f;
#pragma unroll 1
  for (int i = 0; i < 16; i++) {
    if (r >= rows || c + i >= cols) {
      dst[i] = 0;
      continue;
    }
    ck_u32 word = (i < 8) ? (i < 4 ? v.x : v.y) : (i < 12 ? v.z : v.w);
    ck_u32 code = (word >> (8 * (i & 3))) & 0xFF;
    float s = one ? sc : scale_at(w, r, c + i);
    dst[i] = to_half_bits(__fmul_rn(fp8_to_f32(code, tab, e5m2), s), bf16);
  }
}

// store_out adds the bias to one output sum in F32 and rounds it once to
// odt (out of line: the epilogue calls it for each of 64 sums).
__device__ __noinline__ void store_out(void* y, int odt, ck_i64 i, float v, const void* b, int bdt, int hasb, ck_i64 gn) {
  if (hasb) v = __fadd_rn(v, ck_float(ck_load_bits(b, bdt, gn)));
  ck_store(y, odt, i, ck_from_f32(ck_fbits(v), odt, 0));
}

// linear_mma is the kernel body; bf16 selects BF16 (1) or F16 (0) inputs,
// wq an FP8 weight (1: E4M3, 2: E5M2) instead of a T weight.
__device__ __forceinline__ void linear_mma(const ck_u16* x, ck_i64 m, ck_i64 k, const void* w, ck_i64 n, int wq,
                                           const double* qtab, const wscale& ws,
                                           const void* b, int bdt, int hasb, void* y, int odt, int bf16) {
  __shared__ __align__(16) ck_u16 As[BM * LDS];
  __shared__ __align__(16) ck_u16 Bs[BN * LDS];
  __shared__ float tab[256];
  if (wq) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) tab[i] = (float)qtab[i];
    __syncthreads();
  }
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp >> 2, wn = warp & 3;  // 2 × 4 warps: 64 rows × 32 columns each
  const int gq = lane >> 2, tq = lane & 3;
  const ck_i64 m0 = (ck_i64)blockIdx.y * BM, n0 = (ck_i64)blockIdx.x * BN;
  const int xvec = (k % 8) == 0, wvec = wq ? (k % 16) == 0 : xvec;

  float acc[4][4][4];
  #pragma unroll
  for (int i = 0; i < 4; i++)
    #pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;

  uint4 ra[2], rb[2], rq;
  // Thread tid loads x rows (tid + 256v) / 4, columns ((tid + 256v) % 4)·8;
  // a T weight likewise; an FP8 weight row tid / 2, columns (tid % 2)·16.
  auto load = [&](ck_i64 k0) {
    #pragma unroll
    for (int v = 0; v < 2; v++) {
      int idx = tid + 256 * v;
      ra[v] = load8(x, m, k, m0 + idx / 4, k0 + (idx % 4) * 8, xvec);
      if (!wq) rb[v] = load8((const ck_u16*)w, n, k, n0 + idx / 4, k0 + (idx % 4) * 8, wvec);
    }
    if (wq) rq = load16q((const ck_u8*)w, n, k, n0 + tid / 2, k0 + (tid % 2) * 16, wvec);
  };
  auto store = [&](ck_i64 k0) {
    #pragma unroll
    for (int v = 0; v < 2; v++) {
      int idx = tid + 256 * v;
      *(uint4*)&As[(idx / 4) * LDS + (idx % 4) * 8] = ra[v];
      if (!wq) *(uint4*)&Bs[(idx / 4) * LDS + (idx % 4) * 8] = rb[v];
    }
    if (wq) store16q(&Bs[(tid / 2) * LDS + (tid % 2) * 16], rq, n, k, n0 + tid / 2, k0 + (tid % 2) * 16, tab, wq == 2, ws, bf16);
  };

  load(0);
  for (ck_i64 k0 = 0; k0 < k; k0 += BK) {
    store(k0);
    __syncthreads();
    if (k0 + BK < k) load(k0 + BK);  // the next tile's global loads overlap the math below
    #pragma unroll
    for (int kb = 0; kb < BK; kb += 16) {
      ck_u32 af[4][4], bfr[4][2];
#pragma unroll
      for (int i = 0; i < 4; i++) {
        const ck_u16* a = &As[(wm * 64 + i * 16 + gq) * LDS + kb + 2 * tq];
        af[i][0] = *(const ck_u32*)a;
        af[i][1] = *(const ck_u32*)(a + 8 * LDS);
        af[i][2] = *(const ck_u32*)(a + 8);
        af[i][3] = *(const ck_u32*)(a + 8 * LDS + 8);
      }
#pragma unroll
      for (int j = 0; j < 4; j++) {
        const ck_u16* bp = &Bs[(wn * 32 + j * 8 + gq) * LDS + kb + 2 * tq];
        bfr[j][0] = *(const ck_u32*)bp;
        bfr[j][1] = *(const ck_u32*)(bp + 8);
      }
#pragma unroll
      for (int i = 0; i < 4; i++)
  #pragma unroll
        for (int j = 0; j < 4; j++) mma16816(acc[i][j], af[i], bfr[j], bf16);
    }
    __syncthreads();
  }

  #pragma unroll
  for (int i = 0; i < 4; i++) {
    #pragma unroll
    for (int j = 0; j < 4; j++) {
#pragma unroll
      for (int e = 0; e < 4; e++) {
        ck_i64 gm = m0 + wm * 64 + i * 16 + gq + (e >= 2 ? 8 : 0);
        ck_i64 gn = n0 + wn * 32 + j * 8 + 2 * tq + (e & 1);
        if (gm >= m || gn >= n) continue;
        store_out(y, odt, gm * n + gn, acc[i][j][e], b, bdt, hasb, gn);
      }
    }
  }
}

#define MMA_PARAMS                                                                                  \
  const ck_u16 *x, ck_i64 m, ck_i64 k, const void *w, ck_i64 n, int wq, const double *qtab,         \
      const ck_u8 *s, int skind, const double *stab, int svaries, ck_i64 br, ck_i64 bc, ck_i64 gridc, \
      const ck_u8 *g, int gkind, const double *gtab, int gmode, const void *b, int bdt, int hasb,     \
      void *y, int odt

#define MMA_BODY(BF)                                                  \
  wscale ws;                                                          \
  ws.s = s; ws.skind = skind; ws.stab = stab; ws.svaries = svaries;   \
  ws.br = br; ws.bc = bc; ws.gridc = gridc;                           \
  ws.g = g; ws.gkind = gkind; ws.gtab = gtab; ws.gmode = gmode;       \
  linear_mma(x, m, k, w, n, wq, qtab, ws, b, bdt, hasb, y, odt, BF);

// ck_linear_mma_bf16 and ck_linear_mma_f16: blocks of 256 threads, a grid
// of ceil(n/128) × ceil(m/128) blocks.
extern "C" __global__ void __launch_bounds__(256) ck_linear_mma_bf16(MMA_PARAMS) { MMA_BODY(1) }
extern "C" __global__ void __launch_bounds__(256) ck_linear_mma_f16(MMA_PARAMS) { MMA_BODY(0) }
