// fiber.cpp: runs a kernel's grid on the host. Each CUDA thread of a block
// is a fiber on the calling thread (switched by a few instructions of
// assembly on x86-64, by ucontext elsewhere); blocks run one after another,
// and successive launches switch between three schedules of the threads
// (see run_grid). Barriers (__syncthreads, and the warp-wide ones behind
// __shfl_down_sync and mma.sync) park a fiber until every thread of the
// block or warp has arrived; a launch in which the live fibers all wait on
// barriers that can never fill (a __syncthreads some threads skip) ends
// with an error instead of hanging.
#include <sys/mman.h>
#include <ucontext.h>

#include <cstdio>
#include <string>

#include "emu.h"
#include "fiber.h"
#include "../../kernels/numerics.h"

namespace ckemu {

dim3 grid_dim, block_dim, block_idx;

namespace {

const int kMaxThreads = 1024;
const size_t kStack = 128 << 10;

struct Barrier {
  int arrived;
  unsigned gen;
};

struct Fiber {
#if defined(__x86_64__) && !defined(CKEMU_UCONTEXT)
  void* sp;  // the saved stack pointer (see ckemu_switch)
#else
  ucontext_t uc;
#endif
  dim3 tid;
  int warp, lane;
  int phase;  // of the warp-collective operations: which exchange buffer
  bool done;
  Barrier* waiting;  // the barrier this fiber is parked on
  unsigned wait_gen;
};

Fiber fibers[kMaxThreads];
char* stacks[kMaxThreads];
Fiber* cur;
int nthreads;
Barrier block_bar;
Barrier warp_bar[kMaxThreads / 32];
int warp_size[kMaxThreads / 32];  // threads in each warp (the last may be partial)

// Per-warp exchange slots for the collective operations, two sets used in
// turn: a lane writes set p again only after the next operation's barrier,
// which every lane reaches only after it has read set p.
struct Slots {
  unsigned long long v[2][32];
  uint32_t a[2][32][4], b[2][32][2];
};
Slots slots[kMaxThreads / 32];
bool released;  // a barrier let its waiters go since the scheduler looked

unsigned long long launches;
const Kernel* run_kernel;
void** run_params;
std::string failure;  // why the launch failed ("" while it runs)

void fail(const std::string& why) {
  if (failure.empty()) failure = why;
}

void entry();

#if defined(__x86_64__) && !defined(CKEMU_UCONTEXT)
// ckemu_switch(save, to) saves the callee-saved registers, MXCSR and the
// x87 control word on the current stack, stores the stack pointer in
// *save, and resumes the context whose stack pointer is to. No system
// call: ucontext's swapcontext also sets the signal mask, which cost more
// than the kernels.
extern "C" void ckemu_switch(void** save, void* to);
asm(R"(
	.text
	.p2align 4
	.type ckemu_switch, @function
ckemu_switch:
	pushq %rbp
	pushq %rbx
	pushq %r12
	pushq %r13
	pushq %r14
	pushq %r15
	subq $8, %rsp
	stmxcsr (%rsp)
	fnstcw 4(%rsp)
	movq %rsp, (%rdi)
	movq %rsi, %rsp
	ldmxcsr (%rsp)
	fldcw 4(%rsp)
	addq $8, %rsp
	popq %r15
	popq %r14
	popq %r13
	popq %r12
	popq %rbx
	popq %rbp
	ret
	.size ckemu_switch, .-ckemu_switch
)");

void* sched_sp;

extern "C" void ckemu_fiber_start() {
  entry();
  cur->done = true;
  ckemu_switch(&cur->sp, sched_sp);
  __builtin_unreachable();
}

// start prepares f to run entry on stack: a frame that ckemu_switch
// returns from into ckemu_fiber_start, with the stack aligned as at a call.
void start(Fiber& f, char* stack) {
  uintptr_t top = ((uintptr_t)stack + kStack) & ~(uintptr_t)15;
  uint64_t* p = (uint64_t*)top;
  *--p = 0;                                 // ckemu_fiber_start's return address: none
  *--p = (uint64_t)(uintptr_t)&ckemu_fiber_start;
  for (int i = 0; i < 6; i++) *--p = 0;     // rbp, rbx, r12-r15
  uint32_t csr[2];
  __asm__ volatile("stmxcsr %0" : "=m"(csr[0]));
  __asm__ volatile("fnstcw %0" : "=m"(*(uint16_t*)&csr[1]));
  --p;
  memcpy(p, csr, 8);
  f.sp = p;
}
void resume(Fiber& f) { ckemu_switch(&sched_sp, f.sp); }
void yield(Fiber& f) { ckemu_switch(&f.sp, sched_sp); }
#else
ucontext_t sched;
void start(Fiber& f, char* stack) {
  getcontext(&f.uc);
  f.uc.uc_stack.ss_sp = stack;
  f.uc.uc_stack.ss_size = kStack;
  f.uc.uc_link = &sched;
  makecontext(&f.uc, [] {
    entry();
    cur->done = true;
  }, 0);
}
void resume(Fiber& f) { swapcontext(&sched, &f.uc); }
void yield(Fiber& f) { swapcontext(&f.uc, &sched); }
#endif

// wait parks the running fiber on b until expected fibers have arrived.
void wait(Barrier* b, int expected) {
  unsigned gen = b->gen;
  if (++b->arrived == expected) {
    b->arrived = 0;
    b->gen++;
    released = true;
    return;
  }
  Fiber* f = cur;
  f->waiting = b;
  f->wait_gen = gen;
  yield(*f);
  f->waiting = nullptr;
}

void warp_wait() { wait(&warp_bar[cur->warp], warp_size[cur->warp]); }

void entry() { run_kernel->call(run_kernel->fn, run_params); }

// operand widens one BF16 or F16 element to float (exact).
double operand(uint16_t h, int bf16) {
  if (bf16) return ck_float((uint32_t)h << 16);
  return f16_to_f32(h);
}

}  // namespace

const dim3& thread_idx() { return cur->tid; }

void syncthreads() { wait(&block_bar, nthreads); }

unsigned long long shfl_down(unsigned mask, unsigned long long v, unsigned delta) {
  Slots& s = slots[cur->warp];
  if (mask != 0xFFFFFFFFu || warp_size[cur->warp] != 32) {
    fail("__shfl_down_sync: the emulator supports only full warps with the full mask");
  }
  int p = cur->phase;
  cur->phase ^= 1;
  s.v[p][cur->lane] = v;
  warp_wait();
  unsigned src = cur->lane + delta;
  return src < 32 ? s.v[p][src] : v;
}

// The fragments of mma.m16n8k16 with .bf16/.f16 inputs, as the PTX ISA
// defines them (groupID = lane>>2, threadID_in_group = lane%4):
//   A (16×16, row): a0..a7 in four .b32 registers, two per register, the
//     lower-numbered in the low half; row groupID for a0,a1,a4,a5 and
//     groupID+8 for the others; column threadID_in_group·2 + (i&1), +8
//     for a4..a7.
//   B (16×8, col): b0..b3 in two registers; row (k) threadID_in_group·2 +
//     (i&1), +8 for b2,b3; column groupID.
//   C, D (16×8, f32): c0..c3; row groupID for c0,c1, groupID+8 for c2,c3;
//     column threadID_in_group·2 + (i&1).
void mma16816(float* c, const uint32_t* a, const uint32_t* b, int bf16) {
  Slots& s = slots[cur->warp];
  if (warp_size[cur->warp] != 32) fail("mma.sync with a partial warp");
  int lane = cur->lane, p = cur->phase;
  cur->phase ^= 1;
  memcpy(s.a[p][lane], a, sizeof s.a[p][lane]);
  memcpy(s.b[p][lane], b, sizeof s.b[p][lane]);
  warp_wait();
  auto A = [&](int row, int k) -> double {
    int i = (k & 1) | ((row >= 8) ? 2 : 0) | ((k >= 8) ? 4 : 0);  // a_i
    int holder = (row & 7) * 4 + (k & 7) / 2;
    uint32_t reg = s.a[p][holder][i / 2];
    return operand((uint16_t)(i & 1 ? reg >> 16 : reg), bf16);
  };
  auto B = [&](int k, int col) -> double {
    int i = (k & 1) | ((k >= 8) ? 2 : 0);  // b_i
    int holder = col * 4 + (k & 7) / 2;
    uint32_t reg = s.b[p][holder][i / 2];
    return operand((uint16_t)(i & 1 ? reg >> 16 : reg), bf16);
  };
  float d[4];
  for (int e = 0; e < 4; e++) {
    int row = lane / 4 + (e >= 2 ? 8 : 0), col = (lane % 4) * 2 + (e & 1);
    double sum = c[e];
    for (int k = 0; k < 16; k++) sum += A(row, k) * B(k, col);
    d[e] = (float)sum;
  }
  memcpy(c, d, sizeof d);
}

uint16_t half_bits(float v, int bf16) {
  uint32_t f = ck_fbits(v);
  if ((f & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FFF;
  return (uint16_t)ck_round(ck_bits((double)v), bf16 ? 8 : 5, bf16 ? 7 : 10, 0);
}

// fp8_to_f16 decodes one FP8 code to binary16 bits (exact: every E4M3 and
// E5M2 value is a binary16 value); a NaN code gives the canonical NaN.
static uint16_t fp8_to_f16(uint8_t c, int e5m2) {
  uint16_t sign = (uint16_t)(c & 0x80) << 8;
  if (e5m2) {
    if ((c & 0x7F) > 0x7C) return 0x7FFF;
    return (uint16_t)c << 8;
  }
  int e = (c >> 3) & 15, m = c & 7;
  if (e == 15 && m == 7) return 0x7FFF;
  if (e == 0) {
    if (m == 0) return sign;
    // m × 2^-9: normalize into binary16 (exponent bias 15)
    int sh = 0;
    while (!(m & 8)) {
      m <<= 1;
      sh++;
    }
    int he = -6 - sh + 15;  // value = 1.xxx × 2^(-6-sh)
    return sign | (uint16_t)(he << 10) | (uint16_t)((m & 7) << 7);
  }
  return sign | (uint16_t)((e - 7 + 15) << 10) | (uint16_t)(m << 7);
}

uint32_t fp8x2_to_f16x2(uint16_t pair, int e5m2) {
  return (uint32_t)fp8_to_f16((uint8_t)pair, e5m2) | (uint32_t)fp8_to_f16((uint8_t)(pair >> 8), e5m2) << 16;
}

float f16_to_f32(uint16_t h) { return ck_float(ck_load_bits(&h, CK_F16, 0)); }

std::string run_grid(const Kernel* k, void** params, dim3 grid, dim3 block) {
  int n = (int)(block.x * block.y * block.z);
  if (n <= 0 || n > kMaxThreads) return "bad block size";
  for (int i = 0; i < n; i++) {
    if (!stacks[i]) {
      void* p = mmap(nullptr, kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) return "cannot map a fiber stack";
      stacks[i] = (char*)p;
    }
  }
  int policy = (int)(launches++ % 3);  // 0 round robin, 1 greedy lowest, 2 greedy highest
  run_kernel = k;
  run_params = params;
  failure.clear();
  grid_dim = grid;
  block_dim = block;
  nthreads = n;
  for (int w = 0; w * 32 < n; w++) warp_size[w] = (n - w * 32 < 32) ? n - w * 32 : 32;
  for (unsigned bz = 0; bz < grid.z; bz++) {
    for (unsigned by = 0; by < grid.y; by++) {
      for (unsigned bx = 0; bx < grid.x; bx++) {
        block_idx = dim3{bx, by, bz};
        block_bar = Barrier{0, 0};
        for (int w = 0; w * 32 < n; w++) warp_bar[w] = Barrier{0, 0};
        for (int i = 0; i < n; i++) {
          Fiber& f = fibers[i];
          f.tid = dim3{(unsigned)i % block.x, (unsigned)i / block.x % block.y, (unsigned)i / (block.x * block.y)};
          f.warp = i / 32;
          f.lane = i % 32;
          f.phase = 0;
          f.done = false;
          f.waiting = nullptr;
          start(f, stacks[i]);
        }
        int live = n, from = 0;
        while (live > 0) {
          bool ran = false;
          // Fibers a greedy scan passed over stay parked until a barrier
          // releases: until then the scan goes on from where it stopped.
          if (released) from = 0;
          released = false;
          for (int j = policy == 0 ? 0 : from; j < n; j++) {
            // Round robin keeps the threads in step; the greedy orders run
            // the lowest (or highest) runnable thread again and again, so
            // that its warp gets as far ahead of the others as the
            // barriers allow, and a missing __syncthreads shows.
            int i = policy == 2 ? n - 1 - j : j;
            Fiber& f = fibers[i];
            if (f.done || (f.waiting && f.waiting->gen == f.wait_gen)) continue;
            cur = &f;
            ran = true;
            resume(f);
            if (f.done) live--;
            if (policy != 0) {
              from = j;
              break;
            }
          }
          if (!ran) {
            char msg[160];
            snprintf(msg, sizeof msg, "block (%u,%u,%u): %d threads wait on barriers that the other threads never reach", bx, by, bz, live);
            return msg;
          }
        }
        if (!failure.empty()) return failure;
      }
    }
  }
  cur = nullptr;
  return "";
}

}  // namespace ckemu
