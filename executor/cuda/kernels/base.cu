// base.cu: the kernels every supported GPU runs (Turing, sm_75, and later).
// Compiled to PTX by gen.sh; the Go side (kernels.go) launches them by
// name. Every kernel walks its elements with a grid-stride loop, so any
// grid size is correct; the Go side sizes grids from the SM count.
#include "numerics.h"

#define GRID_STRIDE(j, n) \
  for (ck_i64 j = (ck_i64)blockIdx.x * blockDim.x + threadIdx.x; j < (n); j += (ck_i64)blockDim.x * gridDim.x)

// ck_dequant writes elements [e0, e0+n) of a quantized weight's logical
// tensor, rounded once to dtype to, into dst (indexed from the tensor's
// first element). data holds the codes of those elements only (it may be
// a staging chunk); the scales are whole tensors. Bit-exact with
// quant.Weight.Dequantize: see numerics.h.
extern "C" __global__ void ck_dequant(const ck_u8* data, const double* qtab, int fp4, ck_i64 c,
                                      const ck_u8* s, int skind, const double* stab, int svaries,
                                      ck_i64 br, ck_i64 bc, ck_i64 gridc,
                                      const ck_u8* g, int gkind, const double* gtab, int gmode,
                                      void* dst, int to, int sat, ck_i64 e0, ck_i64 n) {
  ck_dq d;
  d.data = data; d.qtab = qtab; d.fp4 = fp4; d.c = c;
  d.s = s; d.skind = skind; d.stab = stab; d.svaries = svaries;
  d.br = br; d.bc = bc; d.gridc = gridc;
  d.g = g; d.gkind = gkind; d.gtab = gtab; d.gmode = gmode;
  GRID_STRIDE(j, n) {
    ck_i64 i = e0 + j;
    ck_store(dst, to, i, ck_dequant_elem(&d, i, j, to, sat));
  }
}

// ck_convert converts elements [e0, e0+n) of a float tensor: src holds
// those elements only, in dtype sdt (CK_F32, CK_BF16, CK_F16, or 3 for an
// 8-bit float decoded through tab), dst is the whole output in dtype to.
// Bit-exact with dtype.Convert: every value goes through its exact float32
// value and is rounded once.
extern "C" __global__ void ck_convert(const void* src, int sdt, const double* tab,
                                      void* dst, int to, int sat, ck_i64 e0, ck_i64 n) {
  GRID_STRIDE(j, n) {
    ck_store(dst, to, e0 + j, ck_convert_elem(src, sdt, tab, to, sat, j));
  }
}

// ck_add: out = a + b in F32, rounded once to odt.
extern "C" __global__ void ck_add(const void* a, int adt, const void* b, int bdt, void* out, int odt, ck_i64 n) {
  GRID_STRIDE(i, n) {
    float x = ck_float(ck_load_bits(a, adt, i));
    float y = ck_float(ck_load_bits(b, bdt, i));
    ck_store(out, odt, i, ck_from_f32(ck_fbits(__fadd_rn(x, y)), odt, 0));
  }
}

// ck_gelu: 0.5·x·(1 + erf(x/√2)), computed in float64 from the F32 input
// and rounded once to dt (the CPU reference computes the same in float64).
extern "C" __global__ void ck_gelu(const void* x, int dt, void* out, ck_i64 n) {
  GRID_STRIDE(i, n) {
    ck_u32 f = ck_load_bits(x, dt, i);
    double v = (double)ck_float(f);
    double r = 0.5 * v * (1.0 + erf(v * 0.70710678118654752440));
    ck_u32 o = ((f & 0x7FFFFFFFu) > 0x7F800000u) ? ck_from_f32(f, dt, 0) : ck_encode(r, dt, 0);
    ck_store(out, dt, i, o);
  }
}

// ck_silu: x / (1 + exp(−x)), computed in float64 and rounded once to dt.
extern "C" __global__ void ck_silu(const void* x, int dt, void* out, ck_i64 n) {
  GRID_STRIDE(i, n) {
    ck_u32 f = ck_load_bits(x, dt, i);
    double v = (double)ck_float(f);
    double r = v / (1.0 + exp(-v));
    if (v == -INFINITY) r = -0.0;
    ck_u32 o = ((f & 0x7FFFFFFFu) > 0x7F800000u) ? ck_from_f32(f, dt, 0) : ck_encode(r, dt, 0);
    ck_store(out, dt, i, o);
  }
}

// ck_rmsnorm normalizes each of rows rows of d elements: one block per row
// (blockDim.x a power of two, at most 1024). The sum of squares is
// accumulated in F32; r = 1/sqrt(sum/d + eps) in F32; each output is
// (x·r)·w in F32 (w omitted when hasw is 0), rounded once to dt.
extern "C" __global__ void ck_rmsnorm(const void* x, int dt, const void* w, int wdt, int hasw,
                                      void* out, ck_i64 rows, ck_i64 d, float eps) {
  __shared__ float part[1024];
  for (ck_i64 row = blockIdx.x; row < rows; row += gridDim.x) {
    const ck_i64 base = row * d;
    float acc = 0.0f;
    for (ck_i64 k = threadIdx.x; k < d; k += blockDim.x) {
      float v = ck_float(ck_load_bits(x, dt, base + k));
      acc = __fadd_rn(acc, __fmul_rn(v, v));
    }
    part[threadIdx.x] = acc;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
      if (threadIdx.x < s) part[threadIdx.x] = __fadd_rn(part[threadIdx.x], part[threadIdx.x + s]);
      __syncthreads();
    }
    float r = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(part[0], (float)d), eps)));
    __syncthreads();
    for (ck_i64 k = threadIdx.x; k < d; k += blockDim.x) {
      float v = __fmul_rn(ck_float(ck_load_bits(x, dt, base + k)), r);
      if (hasw) v = __fmul_rn(v, ck_float(ck_load_bits(w, wdt, k)));
      ck_store(out, dt, base + k, ck_from_f32(ck_fbits(v), dt, 0));
    }
  }
}

// ck_count_nonfinite adds the number of NaN and of ±Inf elements of p
// (dtype dt) to counts[0] and counts[1].
extern "C" __global__ void ck_count_nonfinite(const void* p, int dt, ck_i64 n, unsigned long long* counts) {
  unsigned long long nan = 0, inf = 0;
  GRID_STRIDE(i, n) {
    ck_u32 a = ck_load_bits(p, dt, i) & 0x7FFFFFFFu;
    nan += a > 0x7F800000u;
    inf += a == 0x7F800000u;
  }
  for (int o = 16; o > 0; o >>= 1) {
    nan += __shfl_down_sync(0xFFFFFFFFu, nan, o);
    inf += __shfl_down_sync(0xFFFFFFFFu, inf, o);
  }
  if ((threadIdx.x & 31) == 0 && (nan | inf)) {
    atomicAdd(&counts[0], nan);
    atomicAdd(&counts[1], inf);
  }
}

// Tiles of ck_linear: a block of 16×16 threads computes a 64×64 tile of
// the output, each thread 4×4 outputs.
#define LT_M 64
#define LT_N 64
#define LT_K 16

// ck_linear computes y = x·Wᵀ + b with F32 accumulation: x is [m, k] in
// xdt, W is [n, k] (plain in wdt = CK_F32/BF16/F16, or wdt = 3: quantized,
// each element dequantized to F32 exactly as Dequantize(F32) does), b is
// [n] in bdt (hasb 0: none), y is [m, n] in odt. Each output is summed in
// increasing k with separate F32 multiplies and adds (no fused
// multiply-add), then the bias is added in F32 and the sum rounded once to
// odt: the order and the operations of the CPU reference.
extern "C" __global__ void __launch_bounds__(256) ck_linear(
    const void* x, int xdt, ck_i64 m, ck_i64 k,
    const void* w, int wdt, ck_i64 n,
    const ck_u8* qdata, const double* qtab, const ck_u8* s, int skind, const double* stab, int svaries,
    ck_i64 br, ck_i64 bc, ck_i64 gridc, const ck_u8* g, int gkind, const double* gtab, int gmode,
    const void* b, int bdt, int hasb, void* y, int odt) {
  __shared__ float xs[LT_K][LT_M + 1];
  __shared__ float ws[LT_K][LT_N + 1];
  ck_dq d;
  d.data = qdata; d.qtab = qtab; d.fp4 = 0; d.c = k;
  d.s = s; d.skind = skind; d.stab = stab; d.svaries = svaries;
  d.br = br; d.bc = bc; d.gridc = gridc;
  d.g = g; d.gkind = gkind; d.gtab = gtab; d.gmode = gmode;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const ck_i64 m0 = (ck_i64)blockIdx.y * LT_M, n0 = (ck_i64)blockIdx.x * LT_N;
  float acc[4][4];
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
  for (ck_i64 k0 = 0; k0 < k; k0 += LT_K) {
    // 256 threads load 64×16 elements of x and of W each: 4 apiece.
    for (int e = threadIdx.x; e < LT_M * LT_K; e += 256) {
      int r = e / LT_K, kk = e % LT_K;
      ck_i64 gm = m0 + r, gk = k0 + kk;
      xs[kk][r] = (gm < m && gk < k) ? ck_float(ck_load_bits(x, xdt, gm * k + gk)) : 0.0f;
      ck_i64 gn = n0 + r;
      float wv = 0.0f;
      if (gn < n && gk < k) {
        ck_i64 i = gn * k + gk;
        if (wdt == 3) {
          wv = ck_float(ck_dequant_elem(&d, i, i, CK_F32, 0));
        } else {
          wv = ck_float(ck_load_bits(w, wdt, i));
        }
      }
      ws[kk][r] = wv;
    }
    __syncthreads();
    const int kmax = (k - k0 < LT_K) ? (int)(k - k0) : LT_K;
    for (int kk = 0; kk < kmax; kk++) {
      float xv[4], wv[4];
      for (int i = 0; i < 4; i++) xv[i] = xs[kk][ty * 4 + i];
      for (int j = 0; j < 4; j++) wv[j] = ws[kk][tx * 4 + j];
      for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) acc[i][j] = __fadd_rn(acc[i][j], __fmul_rn(xv[i], wv[j]));
    }
    __syncthreads();
  }
  for (int i = 0; i < 4; i++) {
    ck_i64 gm = m0 + ty * 4 + i;
    if (gm >= m) continue;
    for (int j = 0; j < 4; j++) {
      ck_i64 gn = n0 + tx * 4 + j;
      if (gn >= n) continue;
      float v = acc[i][j];
      if (hasb) v = __fadd_rn(v, ck_float(ck_load_bits(b, bdt, gn)));
      ck_store(y, odt, gm * n + gn, ck_from_f32(ck_fbits(v), odt, 0));
    }
  }
}
