// emu.h: just enough CUDA for the host C++ compiler to build the kernels of
// ../../kernels (base.cu, mma.cu) unchanged, for the driver emulator in
// driver.cpp (see emu_linux_test.go).
//
// Each CUDA thread of a block runs as a fiber (ucontext) on the thread that
// called cuLaunchKernel; __syncthreads and the warp-collective operations
// (__shfl_down_sync, mma.sync) are barriers between fibers. Blocks run one
// after another, so __shared__ variables are plain statics.
#ifndef CKPT_EMU_H
#define CKPT_EMU_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

namespace ckemu {

struct dim3 {
  unsigned x, y, z;
};

// The launch in progress: the grid, the block's shape and index.
extern dim3 grid_dim, block_dim, block_idx;

// thread_idx returns the index of the running fiber's CUDA thread.
const dim3& thread_idx();

// syncthreads is __syncthreads(): every thread of the block waits here.
void syncthreads();

// shfl_down is __shfl_down_sync over the full warp.
unsigned long long shfl_down(unsigned mask, unsigned long long v, unsigned delta);

// mma16816 is mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.f32 with
// the fragments the PTX ISA specifies (d = c here).
void mma16816(float* c, const uint32_t* a, const uint32_t* b, int bf16);

// half_bits is cvt.rn.{bf16,f16}.f32: rounded to nearest even, Inf on
// overflow, the canonical NaN 0x7FFF for a NaN.
uint16_t half_bits(float v, int bf16);

// fp8x2_to_f16x2 is cvt.rn.f16x2.{e4m3x2,e5m2x2}: the low byte becomes the
// low half.
uint32_t fp8x2_to_f16x2(uint16_t pair, int e5m2);

// f16_to_f32 is cvt.f32.f16 (exact).
float f16_to_f32(uint16_t h);

// Kernel is one host-compiled kernel: its name, the sizes of its
// parameters, and a trampoline that calls it with parameter values read
// from p[i].
struct Kernel {
  const char* name;
  int nparams;
  const size_t* sizes;
  void (*call)(void* fn, void** p);
  void* fn;
};

template <typename T>
struct strip {
  typedef T type;
};

template <size_t... I>
struct seq {};
template <size_t N, size_t... I>
struct make_seq : make_seq<N - 1, N - 1, I...> {};
template <size_t... I>
struct make_seq<0, I...> {
  typedef seq<I...> type;
};

template <typename... A, size_t... I>
static void invoke(void (*k)(A...), void** p, seq<I...>) {
  k(*reinterpret_cast<A*>(p[I])...);
}

template <typename... A>
static void trampoline(void* fn, void** p) {
  invoke(reinterpret_cast<void (*)(A...)>(fn), p, typename make_seq<sizeof...(A)>::type());
}

template <typename... A>
static Kernel kernel(const char* name, void (*k)(A...)) {
  static const size_t sizes[sizeof...(A) + 1] = {sizeof(A)..., 0};
  Kernel r = {name, (int)sizeof...(A), sizes, &trampoline<A...>, reinterpret_cast<void*>(k)};
  return r;
}

// Kernel tables of the translation units (a null name ends each).
extern const Kernel base_kernels[];
extern const Kernel mma80_kernels[];
extern const Kernel mma89_kernels[];

}  // namespace ckemu

// The CUDA C++ the kernels use.
#define __global__
#define __device__ static
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(n)
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ static
#define threadIdx (ckemu::thread_idx())
#define blockIdx (ckemu::block_idx)
#define blockDim (ckemu::block_dim)
#define gridDim (ckemu::grid_dim)
#define __syncthreads() ckemu::syncthreads()
#define __shfl_down_sync(mask, v, d) ckemu::shfl_down((mask), (v), (d))

struct __attribute__((aligned(16))) uint4 {
  unsigned x, y, z, w;
};
static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) {
  uint4 r = {x, y, z, w};
  return r;
}

// One fiber runs at a time: a plain add is atomic.
static inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  unsigned long long old = *p;
  *p = old + v;
  return old;
}

// The correctly rounded single operations (the tests build with
// -ffp-contract=off, so nothing is fused).
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fsqrt_rn(float a) { return sqrtf(a); }

// The inline-PTX primitives of mma.cu, on the host.
#define CK_HOST_MMA16816(c, a, b, bf16) ckemu::mma16816((c), (a), (b), (bf16))
#define CK_HOST_HALF_BITS(v, bf16) ckemu::half_bits((v), (bf16))
#define CK_HOST_FP8_TO_F32(code, e5m2) ckemu::f16_to_f32((uint16_t)ckemu::fp8x2_to_f16x2((uint16_t)(code), (e5m2)))

#endif
