// numerics.h: the element arithmetic of ckpt's CUDA kernels, written so that
// the same code compiles as CUDA device code (nvcc) and as host C++ (the Go
// tests build it with the host compiler and compare it, value by value,
// with packages dtype and quant: kernels_host_test.go). Everything here is
// integer and IEEE float64/float32 arithmetic with one rounding per
// operation, so host and device compute the same bits.
#ifndef CKPT_NUMERICS_H
#define CKPT_NUMERICS_H

#ifdef __CUDACC__
#define CK_FN static __device__ __forceinline__
#else
#include <stdint.h>
#include <string.h>
#define CK_FN static inline
#endif

typedef unsigned long long ck_u64;
typedef unsigned int ck_u32;
typedef unsigned short ck_u16;
typedef unsigned char ck_u8;
typedef long long ck_i64;

// Output dtypes of the kernels (the Go side passes these numbers).
#define CK_F32 0
#define CK_BF16 1
#define CK_F16 2

// Scale encodings: how a scale tensor's element is decoded.
#define CK_S_NONE 0  // no scale: 1
#define CK_S_F32 1
#define CK_S_BF16 2
#define CK_S_F16 3
#define CK_S_TAB 4   // an 8-bit code looked up in a 256-entry float64 table

// How the per-tensor factor combines.
#define CK_G_NONE 0
#define CK_G_MUL 1
#define CK_G_DIV 2

CK_FN ck_u64 ck_bits(double x) {
#ifdef __CUDACC__
  return (ck_u64)__double_as_longlong(x);
#else
  ck_u64 u; memcpy(&u, &x, 8); return u;
#endif
}
CK_FN double ck_double(ck_u64 u) {
#ifdef __CUDACC__
  return __longlong_as_double((long long)u);
#else
  double x; memcpy(&x, &u, 8); return x;
#endif
}
CK_FN ck_u32 ck_fbits(float x) {
#ifdef __CUDACC__
  return (ck_u32)__float_as_uint(x);
#else
  ck_u32 u; memcpy(&u, &x, 4); return u;
#endif
}
CK_FN float ck_float(ck_u32 u) {
#ifdef __CUDACC__
  return __uint_as_float(u);
#else
  float x; memcpy(&x, &u, 4); return x;
#endif
}

CK_FN int ck_isnan64(ck_u64 x) { return (x & 0x7FFFFFFFFFFFFFFFull) > 0x7FF0000000000000ull; }

// The float64 arithmetic of the CPU reference (Go on amd64, SSE2): an
// operation with a NaN operand returns the first NaN operand, quieted, with
// its sign and payload; an invalid operation (0 × Inf, Inf/Inf, 0/0)
// returns the x86 default NaN 0xFFF8000000000000. The device's own NaN
// results would be canonical instead, so NaNs are made here.
#define CK_QUIET64 0x0008000000000000ull
#define CK_DEFAULT_NAN64 0xFFF8000000000000ull

CK_FN double ck_mul(double a, double b) {
  ck_u64 x = ck_bits(a), y = ck_bits(b);
  if (ck_isnan64(x)) return ck_double(x | CK_QUIET64);
  if (ck_isnan64(y)) return ck_double(y | CK_QUIET64);
#ifdef __CUDACC__
  double r = __dmul_rn(a, b);
#else
  double r = a * b;
#endif
  if (ck_isnan64(ck_bits(r))) return ck_double(CK_DEFAULT_NAN64);
  return r;
}

CK_FN double ck_div(double a, double b) {
  ck_u64 x = ck_bits(a), y = ck_bits(b);
  if (ck_isnan64(x)) return ck_double(x | CK_QUIET64);
  if (ck_isnan64(y)) return ck_double(y | CK_QUIET64);
#ifdef __CUDACC__
  double r = __ddiv_rn(a, b);
#else
  double r = a / b;
#endif
  if (ck_isnan64(ck_bits(r))) return ck_double(CK_DEFAULT_NAN64);
  return r;
}

// ck_round rounds the float64 bits x once, to nearest with ties to even,
// into a binary format with e exponent bits and m mantissa bits (IEEE
// layout, exponent all ones for Inf and NaN): F32 (8, 23), BF16 (8, 7),
// F16 (5, 10). Values beyond the largest finite value become ±Inf, or ±max
// when sat is set (and so does ±Inf). NaNs are encoded by the caller.
CK_FN ck_u32 ck_round(ck_u64 x, int e, int m, int sat) {
  ck_u32 sign = (ck_u32)(x >> 63) << (e + m);
  ck_u64 a = x & 0x7FFFFFFFFFFFFFFFull;
  int bias = (1 << (e - 1)) - 1;
  ck_u32 infc = ((1u << e) - 1) << m;
  ck_u32 maxc = infc - 1;
  if (a >= 0x7FF0000000000000ull) {  // Inf (NaN is the caller's)
    return sign | (sat ? maxc : infc);
  }
  int ex = (int)(a >> 52);           // biased float64 exponent, 0 for zero and subnormals
  ck_u64 mant = a & 0x000FFFFFFFFFFFFFull;
  if (ex == 0) {
    // float64 subnormals (and zero) are far below the smallest subnormal
    // of every target: they round to zero.
    return sign;
  }
  mant |= 1ull << 52;                // the significand, 53 bits
  int te = ex - 1023 + bias;         // the target's biased exponent
  int shift;                         // bits dropped from the 53-bit significand
  if (te >= 1) {
    shift = 52 - m;
  } else {
    shift = 52 - m + (1 - te);       // subnormal: fewer mantissa bits remain
    te = 0;
  }
  ck_u64 q;
  if (shift >= 64) {
    q = 0;
    // mant < 2^53 <= 2^(shift-1) is below half of the last place: rounds to 0
  } else {
    ck_u64 half = 1ull << (shift - 1);
    ck_u64 rest = mant & ((1ull << shift) - 1);
    q = mant >> shift;
    if (rest > half || (rest == half && (q & 1))) q++;
  }
  // Assemble: for normals, q holds the implicit bit at position m; adding
  // the exponent field lets a carry out of the mantissa bump the exponent.
  ck_u64 code;
  if (te >= 1) {
    code = ((ck_u64)(te - 1) << m) + q;  // q includes 1 << m
  } else {
    code = q;                          // a carry into 1 << m makes it the smallest normal
  }
  if (code >= infc) return sign | (sat ? maxc : infc);
  return sign | (ck_u32)code;
}

// ck_encode rounds the float64 value v once to dtype to and returns its
// bits, with the NaN encodings of package dtype (from a float64 source):
// F32 keeps the sign and the top payload bits and sets the quiet bit; BF16
// is 0x7FC0|sign; F16 keeps the sign and the top 10 payload bits, forced
// nonzero, without setting the quiet bit.
CK_FN ck_u32 ck_encode(double v, int to, int sat) {
  ck_u64 x = ck_bits(v);
  if (ck_isnan64(x)) {
    ck_u32 s = (ck_u32)(x >> 63);
    ck_u64 pay = x & 0x000FFFFFFFFFFFFFull;
    switch (to) {
    case CK_F32:
      return (s << 31) | 0x7FC00000u | (ck_u32)(pay >> 29);
    case CK_BF16:
      return (s << 15) | 0x7FC0u;
    default: {
      ck_u32 p = (ck_u32)(pay >> 42);
      if (p == 0) p = 1;
      return (s << 15) | 0x7C00u | p;
    }
    }
  }
  switch (to) {
  case CK_F32:
    return ck_round(x, 8, 23, sat);
  case CK_BF16:
    return ck_round(x, 8, 7, sat);
  default:
    return ck_round(x, 5, 10, sat);
  }
}

// ck_widen_f32 is Go's float64(float32 bits): exact, a NaN quieted with its
// sign and payload kept.
CK_FN double ck_widen_f32(ck_u32 f) {
  ck_u64 s = (ck_u64)(f >> 31) << 63;
  ck_u32 a = f & 0x7FFFFFFFu;
  if (a > 0x7F800000u) {
    return ck_double(s | 0x7FF8000000000000ull | ((ck_u64)(a & 0x7FFFFFu) << 29));
  }
  if (a == 0x7F800000u) return ck_double(s | 0x7FF0000000000000ull);
  if (a >= 0x00800000u) {
    return ck_double(s | ((ck_u64)((a >> 23) - 127 + 1023) << 52) | ((ck_u64)(a & 0x7FFFFFu) << 29));
  }
  // zero or subnormal: a × 2^-149, exact in float64
  return ck_double(s | ck_bits((double)a * ck_double(0x36A0000000000000ull)));
}

// ck_f16_scale is quant's f16(): the value of binary16 bits as float64; a
// NaN becomes Go's math.NaN() (0x7FF8000000000001) with the code's sign.
CK_FN double ck_f16_scale(ck_u16 h) {
  int e = (h >> 10) & 0x1F;
  double m = (double)(h & 0x3FF);
  double v;
  if (e == 0) {
    v = m * 5.9604644775390625e-08;  // 2^-24
  } else if (e == 0x1F) {
    v = (h & 0x3FF) ? ck_double(0x7FF8000000000001ull) : ck_double(0x7FF0000000000000ull);
  } else {
    // (m + 1024) × 2^(e-25), exact
    ck_u64 bits = ((ck_u64)(e - 15 + 1023) << 52) | ((ck_u64)(h & 0x3FF) << 42);
    v = ck_double(bits);
  }
  if (h & 0x8000) v = ck_double(ck_bits(v) ^ 0x8000000000000000ull);
  return v;
}

// ck_scale decodes element i of a scale tensor.
CK_FN double ck_scale(const ck_u8* s, int kind, const double* tab, ck_i64 i) {
  switch (kind) {
  case CK_S_F32: {
    ck_u32 f = (ck_u32)s[4 * i] | (ck_u32)s[4 * i + 1] << 8 | (ck_u32)s[4 * i + 2] << 16 | (ck_u32)s[4 * i + 3] << 24;
    return ck_widen_f32(f);
  }
  case CK_S_BF16: {
    ck_u32 b = (ck_u32)s[2 * i] | (ck_u32)s[2 * i + 1] << 8;
    return ck_widen_f32(b << 16);
  }
  case CK_S_F16:
    return ck_f16_scale((ck_u16)(s[2 * i] | s[2 * i + 1] << 8));
  case CK_S_TAB:
    return tab[s[i]];
  }
  return 1.0;
}

// ck_dq holds one Dequantize: the codes, their values, the scales. It
// mirrors package quant's kernel: at most one scale varying over the
// tensor's [R, C] view in blocks of br × bc (grid row length gridc), or a
// per-tensor one, and at most one per-tensor factor that multiplies or
// divides.
typedef struct {
  const ck_u8* data;  // FP8 codes, or F4 codes two per byte (element 2j in the low nibble)
  const double* qtab; // the value of every code (256 for FP8, 16 for F4)
  int fp4;
  ck_i64 c;           // columns (the last dimension)
  const ck_u8* s;     // the primary scale (NULL: 1)
  int skind;
  const double* stab;
  int svaries;
  ck_i64 br, bc, gridc;
  const ck_u8* g;     // the per-tensor factor (NULL: none)
  int gkind;
  const double* gtab;
  int gmode;
} ck_dq;

// ck_dq_value returns element i's exact value (a correctly rounded
// quotient for a dividing layout), as quant.Weight.Dequantize computes it
// before its single rounding.
//
// i is the element's index in the tensor (for its scale); j its index in
// d->data, which may hold a chunk of the tensor (j = i - the chunk's first
// element, an even number for F4).
// ck_dq_scale returns the primary scale of element i (1 without one).
CK_FN double ck_dq_scale(const ck_dq* d, ck_i64 i) {
  if (d->s == 0) return 1.0;
  ck_i64 si = 0;
  if (d->svaries) {
    ck_i64 row = i / d->c, col = i - row * d->c;
    si = (row / d->br) * d->gridc + col / d->bc;
  }
  return ck_scale(d->s, d->skind, d->stab, si);
}

CK_FN double ck_dq_value(const ck_dq* d, ck_i64 i, ck_i64 j) {
  ck_u32 code;
  if (d->fp4) {
    ck_u8 b = d->data[j >> 1];
    code = (j & 1) ? (b >> 4) : (b & 15);
  } else {
    code = d->data[j];
  }
  double q = d->qtab[code];
  double s1 = ck_dq_scale(d, i);
  if (d->gmode == CK_G_DIV) {
    double g = ck_scale(d->g, d->gkind, d->gtab, 0);
    return ck_div(ck_mul(q, s1), g);
  }
  double g = 1.0;
  if (d->gmode == CK_G_MUL) g = ck_scale(d->g, d->gkind, d->gtab, 0);
  return ck_mul(q, ck_mul(s1, g));
}

// ck_round_normal rounds the float64 bits x once, to nearest with ties to
// even, into a binary format with e exponent bits and m mantissa bits, when
// the result is a normal number of that format: it stores the bits in *out
// and returns 1. Otherwise (zero, subnormal, overflow, Inf, NaN) it returns
// 0 and the caller takes ck_round's general path. A few integer operations
// and no branch on the value: the sum below carries a rounded-up mantissa
// into the exponent by itself.
CK_FN int ck_round_normal(ck_u64 x, int e, int m, ck_u32* out) {
  ck_u64 a = x & 0x7FFFFFFFFFFFFFFFull;
  int drop = 52 - m;
  ck_u64 r = (a + ((1ull << (drop - 1)) - 1) + ((a >> drop) & 1)) >> drop;
  int te = (int)(r >> m) - 1023 + (1 << (e - 1)) - 1;  // the target's biased exponent
  if (a >= 0x7FF0000000000000ull || te < 1 || te > (1 << e) - 2) return 0;
  *out = ((ck_u32)(x >> 63) << (e + m)) | ((ck_u32)te << m) | ((ck_u32)r & ((1u << m) - 1));
  return 1;
}

// ck_dequant_elem returns element i of a dequantized weight in dtype to:
// ck_encode(ck_dq_value(d, i, j), to, sat), bit for bit. The common case
// takes a short path: an FP8 code times one scale is exact in float64 (at
// most 4 + 24 significant bits), so when no per-tensor factor follows and
// the product is a normal number of the target, ck_round_normal rounds it
// once, as ck_encode would; zeros keep their sign. Everything else (FP4,
// a factor, NaN, Inf, zero or subnormal or overflowing results, where the
// NaN encodings and saturation apply) takes the general path.
CK_FN ck_u32 ck_dequant_elem(const ck_dq* d, ck_i64 i, ck_i64 j, int to, int sat) {
  if (!d->fp4 && d->gmode == CK_G_NONE) {
    ck_u64 x = ck_bits(d->qtab[d->data[j]] * ck_dq_scale(d, i));
    ck_u32 out;
    int e = to == CK_F16 ? 5 : 8, m = to == CK_F32 ? 23 : (to == CK_BF16 ? 7 : 10);
    if ((x & 0x7FFFFFFFFFFFFFFFull) == 0) return (ck_u32)(x >> 63) << (e + m);
    if (ck_round_normal(x, e, m, &out)) return out;
  }
  return ck_encode(ck_dq_value(d, i, j), to, sat);
}

// ck_load_f32 widens element i of an F32, BF16 or F16 array to float32
// bits, exactly (NaN payloads kept bit for bit, as numpy widens).
CK_FN ck_u32 ck_load_bits(const void* p, int dt, ck_i64 i) {
  switch (dt) {
  case CK_F32:
    return ((const ck_u32*)p)[i];
  case CK_BF16:
    return (ck_u32)((const ck_u16*)p)[i] << 16;
  }
  ck_u16 h = ((const ck_u16*)p)[i];
  ck_u32 s = (ck_u32)(h & 0x8000) << 16;
  ck_u32 e = (h >> 10) & 0x1F, m = h & 0x3FF;
  if (e == 0x1F) return s | 0x7F800000u | (m << 13);
  if (e != 0) return s | ((e - 15 + 127) << 23) | (m << 13);
  if (m == 0) return s;
  // subnormal: m × 2^-24, normalize
  int sh = 0;
  while (!(m & 0x400)) { m <<= 1; sh++; }
  return s | ((ck_u32)(127 - 15 - sh + 1) << 23) | ((m & 0x3FF) << 13);
}

// ck_from_f32 rounds float32 bits once to dt, with package dtype's NaN
// encodings from a float32 source (BF16 0x7FC0|sign; F16 the sign and the
// top 10 payload bits, forced nonzero).
CK_FN ck_u32 ck_from_f32(ck_u32 f, int dt, int sat) {
  if (dt == CK_F32) {
    if (sat && (f & 0x7FFFFFFFu) == 0x7F800000u) return (f & 0x80000000u) | 0x7F7FFFFFu;
    return f;
  }
  ck_u32 ex = (f >> 23) & 0xFF;
  if (ex != 0 && ex != 0xFF) {
    // A normal float32 widens to float64 by moving bits; when it rounds to
    // a normal number of dt, ck_round_normal is the whole conversion.
    ck_u64 x = ((ck_u64)(f >> 31) << 63) | ((ck_u64)(ex - 127 + 1023) << 52) | ((ck_u64)(f & 0x7FFFFFu) << 29);
    ck_u32 out;
    if (ck_round_normal(x, dt == CK_F16 ? 5 : 8, dt == CK_BF16 ? 7 : 10, &out)) return out;
  }
  if ((f & 0x7FFFFFFFu) > 0x7F800000u) {
    ck_u32 s = f >> 31;
    if (dt == CK_BF16) return (s << 15) | 0x7FC0u;
    ck_u32 p = (f & 0x7FFFFFu) >> 13;
    if (p == 0) p = 1;
    return (s << 15) | 0x7C00u | p;
  }
  return ck_encode(ck_widen_f32(f), dt, sat);
}

// ck_convert_elem converts element j of src (dtype sdt: CK_F32, CK_BF16,
// CK_F16, or 3 for an 8-bit float decoded through tab) to dtype to, as
// dtype.Convert does: through the exact float32 value, rounded once.
CK_FN ck_u32 ck_convert_elem(const void* src, int sdt, const double* tab, int to, int sat, ck_i64 j) {
  ck_u32 f;
  if (sdt == 3) {
    double v = tab[((const ck_u8*)src)[j]];
    if (!ck_round_normal(ck_bits(v), 8, 23, &f)) f = ck_encode(v, CK_F32, 0);
  } else {
    f = ck_load_bits(src, sdt, j);
  }
  if (sdt == to) {
    // A copy: the bits unchanged (NaN payloads too), but for ±Inf with
    // saturation.
    ck_u32 o = (to == CK_F32) ? ((const ck_u32*)src)[j] : ((const ck_u16*)src)[j];
    if (sat && (f & 0x7FFFFFFFu) == 0x7F800000u) o = ck_from_f32(f, to, 1);
    return o;
  }
  if (sdt == CK_BF16 && to == CK_F16 && (f & 0x7FFFFFFFu) > 0x7F800000u) {
    return ((f >> 16) & 0x8000u) | 0x7E00u;  // ml_dtypes: the canonical F16 NaN
  }
  return ck_from_f32(f, to, sat);
}

// ck_store writes the code c of dtype dt as element i of p.
CK_FN void ck_store(void* p, int dt, ck_i64 i, ck_u32 c) {
  if (dt == CK_F32) {
    ((ck_u32*)p)[i] = c;
  } else {
    ((ck_u16*)p)[i] = (ck_u16)c;
  }
}

#endif
