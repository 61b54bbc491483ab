// harness.cpp: runs the element functions of kernels/numerics.h on the
// host, the way the kernels of base.cu call them, for kernels_host_test.go.
// Input (stdin, little-endian): a mode and its int64 parameters, then
// length-prefixed arrays; output (stdout): the result's bytes.
#include <cstdio>
#include <cstdlib>
#include <vector>
#include "../kernels/numerics.h"

static std::vector<unsigned char> in;
static size_t pos = 0;

static long long i64() {
  if (pos + 8 > in.size()) { fprintf(stderr, "harness: short input\n"); exit(2); }
  long long v;
  memcpy(&v, &in[pos], 8);
  pos += 8;
  return v;
}

static const unsigned char* arr(long long* len) {
  *len = i64();
  if (*len < 0 || pos + (size_t)*len > in.size()) { fprintf(stderr, "harness: bad array\n"); exit(2); }
  const unsigned char* p = *len ? &in[pos] : nullptr;
  pos += (size_t)*len;
  return p;
}

static int width(int dt) { return dt == CK_F32 ? 4 : 2; }

int main() {
  unsigned char buf[1 << 16];
  size_t k;
  while ((k = fread(buf, 1, sizeof buf, stdin)) > 0) in.insert(in.end(), buf, buf + k);
  long long mode = i64();
  if (mode == 1) {  // dequant, as ck_dequant
    ck_dq d;
    long long n = i64();
    d.c = i64(); d.fp4 = (int)i64(); d.skind = (int)i64(); d.svaries = (int)i64();
    d.br = i64(); d.bc = i64(); d.gridc = i64(); d.gkind = (int)i64(); d.gmode = (int)i64();
    int to = (int)i64(), sat = (int)i64();
    long long e0 = i64(), len;
    d.data = arr(&len);
    d.qtab = (const double*)arr(&len);
    d.s = arr(&len);
    d.stab = (const double*)arr(&len);
    d.g = arr(&len);
    d.gtab = (const double*)arr(&len);
    std::vector<unsigned char> dst((size_t)(e0 + n) * width(to));
    for (long long j = 0; j < n; j++) {
      long long i = e0 + j;
      ck_store(dst.data(), to, i, ck_dequant_elem(&d, i, j, to, sat));
    }
    fwrite(dst.data() + e0 * width(to), 1, (size_t)n * width(to), stdout);
    return 0;
  }
  if (mode == 2) {  // convert, as ck_convert
    int sdt = (int)i64(), to = (int)i64(), sat = (int)i64();
    long long n = i64(), len;
    const unsigned char* src = arr(&len);
    const double* tab = (const double*)arr(&len);
    std::vector<unsigned char> dst((size_t)n * width(to));
    for (long long j = 0; j < n; j++) {
      ck_store(dst.data(), to, j, ck_convert_elem(src, sdt, tab, to, sat, j));
    }
    fwrite(dst.data(), 1, dst.size(), stdout);
    return 0;
  }
  if (mode == 3) {  // encode float64 values, as ck_encode
    int to = (int)i64(), sat = (int)i64();
    long long len;
    const unsigned char* src = arr(&len);
    long long n = len / 8;
    std::vector<unsigned char> dst((size_t)n * width(to));
    for (long long j = 0; j < n; j++) {
      double v;
      memcpy(&v, src + 8 * j, 8);
      ck_store(dst.data(), to, j, ck_encode(v, to, sat));
    }
    fwrite(dst.data(), 1, dst.size(), stdout);
    return 0;
  }
  fprintf(stderr, "harness: unknown mode %lld\n", mode);
  return 2;
}
