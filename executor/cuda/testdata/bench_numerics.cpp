// bench_numerics.cpp: times numerics.h's short paths against the general
// ones they stand in for, in the same run, on the host (BENCHMARKS.md, CUDA
// section):
//   c++ -O2 -ffp-contract=off -o /tmp/bench_numerics executor/cuda/testdata/bench_numerics.cpp && /tmp/bench_numerics
// FP8 → BF16 dequantization with a per-tensor F32 scale (ck_dequant_elem
// against ck_encode(ck_dq_value)), and F32 → BF16 (ck_from_f32 against
// ck_encode(ck_widen_f32)), 16 M elements each, three rounds.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "../kernels/numerics.h"

static double ns_per(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b, long long n) {
  return std::chrono::duration<double, std::nano>(b - a).count() / n;
}

int main() {
  const long long n = 1 << 24;
  std::vector<unsigned char> codes(n);
  for (long long i = 0; i < n; i++) codes[i] = (unsigned char)((i * 37 + 11) & 0x77);
  double qtab[256];
  for (int c = 0; c < 256; c++) {  // E4M3
    int e = (c >> 3) & 15, m = c & 7;
    double v = e ? ldexp(1 + m / 8.0, e - 7) : ldexp(m / 8.0, -6);
    qtab[c] = (c & 0x80) ? -v : v;
  }
  float sc = 0.0123f;
  ck_dq d;
  memset(&d, 0, sizeof d);
  d.data = codes.data();
  d.qtab = qtab;
  d.c = 4096;
  d.s = (const ck_u8*)&sc;
  d.skind = CK_S_F32;
  d.gmode = CK_G_NONE;
  std::vector<ck_u32> f32(n);
  for (long long i = 0; i < n; i++) {
    float v = (float)((i * 2654435761u) % 100000) * 0.001f - 50.f;
    memcpy(&f32[i], &v, 4);
  }
  std::vector<unsigned short> out(n);
  for (int round = 0; round < 3; round++) {
    auto t0 = std::chrono::steady_clock::now();
    for (long long i = 0; i < n; i++) out[i] = (unsigned short)ck_encode(ck_dq_value(&d, i, i), CK_BF16, 0);
    auto t1 = std::chrono::steady_clock::now();
    for (long long i = 0; i < n; i++) out[i] = (unsigned short)ck_dequant_elem(&d, i, i, CK_BF16, 0);
    auto t2 = std::chrono::steady_clock::now();
    for (long long i = 0; i < n; i++) out[i] = (unsigned short)ck_encode(ck_widen_f32(f32[i]), CK_BF16, 0);
    auto t3 = std::chrono::steady_clock::now();
    for (long long i = 0; i < n; i++) out[i] = (unsigned short)ck_from_f32(f32[i], CK_BF16, 0);
    auto t4 = std::chrono::steady_clock::now();
    printf("FP8→BF16 dequant: general %.2f, short path %.2f ns/element; F32→BF16: general %.2f, short path %.2f ns/element\n",
           ns_per(t0, t1, n), ns_per(t1, t2, n), ns_per(t2, t3, n), ns_per(t3, t4, n));
  }
}
