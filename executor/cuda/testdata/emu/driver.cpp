// driver.cpp: a CUDA driver (the entry points package executor/cuda binds
// from libcuda.so.1) that runs the kernels on the host, so that the whole
// executor — the purego binding, the locked driver thread, the kernel
// parameters, the launch geometry and the kernels themselves — is tested
// without a GPU (emu_linux_test.go).
//
// It is stricter than a real driver where that finds bugs sooner:
//   - device allocations end at a guard page (an access past the end
//     faults) and start filled with 0xFF bytes (NaN in every float type), so
//     a kernel reading memory it never wrote shows;
//   - asynchronous copies accept only page-locked memory from cuMemHostAlloc
//     (the executor must never hand Go memory to one);
//   - every call that needs a context fails with CUDA_ERROR_INVALID_CONTEXT
//     on a thread where none is current, as the real driver does;
//   - a module's kernels are matched with the host build by name and by the
//     sizes of their parameters in the PTX (a stale PTX file fails to load),
//     and a launch is checked against the PTX's .maxntid;
//   - the PTX header is checked the way the JIT would: a .target newer than
//     the device or a .version newer than the driver fails with the JIT's
//     message in the error log.
// Copies, memsets and launches run as late as the stream semantics allow
// (see queues below; the grids on a thread of the emulator's own); events
// record host time when they run.
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "emu.h"
#include "fiber.h"

#define API extern "C" __attribute__((visibility("default")))

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_INVALID_PTX = 218,
  CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_NOT_READY = 600,
  CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701,
  CUDA_ERROR_LAUNCH_FAILED = 719,
};

namespace {

int env_int(const char* name, int def) {
  const char* v = getenv(name);
  return v && *v ? atoi(v) : def;
}

// The emulated device: from the environment (build.sh), then as
// ckemu_configure sets it.
struct Config {
  int cc = env_int("CKPT_EMU_CC", 89), sms = 4, driver = 12040;
  unsigned long long total = (unsigned long long)env_int("CKPT_EMU_MEM_MIB", 2048) << 20;
  std::string name = "ckpt emulated GPU";
} cfg;

std::mutex mu;
bool inited;
int retains;               // of the primary context
const uintptr_t kCtx = 0xC0FFEE00;
thread_local uintptr_t current;  // the context current on this thread
std::set<long> threads;    // OS threads that made calls needing a context

struct DevAlloc {
  void* map;
  size_t maplen;
  unsigned long long n;
};
std::map<CUdeviceptr, DevAlloc> dev;  // by start address
unsigned long long used;

struct HostAlloc {
  void* map;
  size_t n;
};
std::map<uintptr_t, HostAlloc> host;

// Streams run late: each operation is queued on its stream and runs only
// when something waits for it (cuStreamSynchronize, cuEventSynchronize, a
// cuStreamWaitEvent on another stream that runs, cuCtxSynchronize, and the
// calls that synchronize implicitly: frees, unloads, destroys). A real
// device may run an operation at any moment between the call and the wait;
// running it as late as allowed shows a host buffer reused, or a result
// read, before its copy was waited for, and a missing wait between streams.
std::map<uintptr_t, std::deque<std::function<void()>>> queues;  // by stream; 0 is the legacy stream
struct Event {
  double ms = -1;                  // host time when its last record ran
  uintptr_t stream = 0;            // where it was last recorded
  unsigned long long recorded = 0, done = 0;  // records queued, records run
};
std::map<uintptr_t, Event> events;
CUresult sticky = CUDA_SUCCESS;  // an asynchronous failure, as the driver reports it at the next wait
uintptr_t next_handle = 0x1000;

struct Entry {
  const ckemu::Kernel* k;
  std::vector<size_t> ptx_sizes;
  unsigned maxntid;  // 0: none declared
};
struct Module {
  std::map<std::string, Entry> entries;
};
std::map<uintptr_t, Module> modules;
std::map<uintptr_t, const Entry*> functions;  // function handle → entry
std::string last_error;

size_t page() { return (size_t)sysconf(_SC_PAGESIZE); }

CUresult ctx_call() {
  if (!inited) return CUDA_ERROR_NOT_INITIALIZED;
  if (current == 0 || retains == 0) return CUDA_ERROR_INVALID_CONTEXT;
  threads.insert(syscall(SYS_gettid));
  return CUDA_SUCCESS;
}

// dev_call checks what a call about device d needs.
CUresult dev_call(int d) {
  if (!inited) return CUDA_ERROR_NOT_INITIALIZED;
  return d == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

CUresult bad(CUresult r, const std::string& why) {
  last_error = why;
  return r;
}

// devrange checks that [p, p+n) lies in one device allocation.
bool devrange(CUdeviceptr p, unsigned long long n) {
  auto it = dev.upper_bound(p);
  if (it == dev.begin()) return false;
  --it;
  return p >= it->first && p + n <= it->first + it->second.n;
}

// pinned checks that [p, p+n) lies in one cuMemHostAlloc allocation.
bool pinned(const void* p, unsigned long long n) {
  uintptr_t a = (uintptr_t)p;
  auto it = host.upper_bound(a);
  if (it == host.begin()) return false;
  --it;
  return a >= it->first && a + n <= it->first + it->second.n;
}

bool stream_ok(uintptr_t s) { return s == 0 || queues.count(s) != 0; }

// run_front runs the oldest queued operation of stream s.
void run_front(uintptr_t s) {
  auto& q = queues[s];
  if (q.empty()) return;
  std::function<void()> op = std::move(q.front());
  q.pop_front();
  op();
}

void flush(uintptr_t s) {
  while (!queues[s].empty()) run_front(s);
}

void flush_all() {
  for (bool any = true; any;) {
    any = false;
    for (auto& q : queues) {
      if (!q.second.empty()) {
        flush(q.first);
        any = true;
      }
    }
  }
}

// until_done runs stream st until record number target of event e has run.
void until_done(uintptr_t e, uintptr_t st, unsigned long long target) {
  while (events.count(e) && events[e].done < target && !queues[st].empty()) run_front(st);
}

void enqueue(uintptr_t s, std::function<void()> op) { queues[s].push_back(std::move(op)); }

CUresult wait_result() { return sticky; }

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

const char* names[][2] = {
    {"0", "CUDA_SUCCESS"},
    {"1", "CUDA_ERROR_INVALID_VALUE"},
    {"2", "CUDA_ERROR_OUT_OF_MEMORY"},
    {"3", "CUDA_ERROR_NOT_INITIALIZED"},
    {"100", "CUDA_ERROR_NO_DEVICE"},
    {"101", "CUDA_ERROR_INVALID_DEVICE"},
    {"201", "CUDA_ERROR_INVALID_CONTEXT"},
    {"218", "CUDA_ERROR_INVALID_PTX"},
    {"222", "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"},
    {"400", "CUDA_ERROR_INVALID_HANDLE"},
    {"500", "CUDA_ERROR_NOT_FOUND"},
    {"600", "CUDA_ERROR_NOT_READY"},
    {"701", "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"},
    {"719", "CUDA_ERROR_LAUNCH_FAILED"},
};

// driver_isa is the newest PTX ISA (major·10+minor) the emulated driver
// compiles, as executor/cuda's driverISA assumes.
int driver_isa() {
  int major = cfg.driver / 1000, minor = cfg.driver % 1000 / 10;
  if (major > 12) return 90;
  if (major < 12) return 0;
  return 80 + (minor < 5 ? minor : 5);
}

// ptx_type_size is the size of a .param type.
size_t ptx_type_size(const std::string& t) {
  if (t == ".u64" || t == ".s64" || t == ".b64" || t == ".f64") return 8;
  if (t == ".u32" || t == ".s32" || t == ".b32" || t == ".f32") return 4;
  if (t == ".u16" || t == ".s16" || t == ".b16" || t == ".f16") return 2;
  if (t == ".u8" || t == ".s8" || t == ".b8") return 1;
  return 0;
}

std::vector<std::string> words(const std::string& line) {
  std::vector<std::string> w;
  std::string cur;
  for (char c : line) {
    if (c == ' ' || c == '\t' || c == ',' || c == '\r') {
      if (!cur.empty()) w.push_back(cur), cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) w.push_back(cur);
  return w;
}

void write_log(char* buf, size_t cap, void** slot, const std::string& s) {
  if (!buf || cap == 0) return;
  size_t n = s.size() < cap - 1 ? s.size() : cap - 1;
  memcpy(buf, s.data(), n);
  buf[n] = 0;
  if (slot) *slot = (void*)(uintptr_t)(n + 1);
}

// The grids run on a thread of the emulator's own, not on the caller's: the
// fibers switch stacks, and the caller is a Go runtime thread.
struct Job {
  const ckemu::Kernel* k;
  void** params;
  ckemu::dim3 grid, block;
  std::string why;
  bool pending = false, done = false;
};
// Never destroyed: at exit (a C program's, or the race detector's), the
// destructor of a condition variable the worker waits on would wait for
// it forever.
std::mutex& job_mu = *new std::mutex;
std::condition_variable& job_cv = *new std::condition_variable;
Job job;
bool worker_started;

void worker() {
  for (;;) {
    std::unique_lock<std::mutex> l(job_mu);
    job_cv.wait(l, [] { return job.pending; });
    job.pending = false;
    l.unlock();
    std::string why = ckemu::run_grid(job.k, job.params, job.grid, job.block);
    l.lock();
    job.why = why;
    job.done = true;
    job_cv.notify_all();
  }
}

std::string run_on_worker(const ckemu::Kernel* k, void** params, ckemu::dim3 grid, ckemu::dim3 block) {
  std::unique_lock<std::mutex> l(job_mu);
  if (!worker_started) {
    std::thread(worker).detach();
    worker_started = true;
  }
  job.k = k;
  job.params = params;
  job.grid = grid;
  job.block = block;
  job.done = false;
  job.pending = true;
  job_cv.notify_all();
  job_cv.wait(l, [] { return job.done; });
  return job.why;
}

}  // namespace

// ---- configuration and statistics, for the tests ----

API void ckemu_configure(int cc, int sms, unsigned long long total, int driver, const char* name) {
  std::lock_guard<std::mutex> l(mu);
  cfg.cc = cc;
  cfg.sms = sms;
  cfg.total = total;
  cfg.driver = driver;
  cfg.name = name ? name : "ckpt emulated GPU";
  threads.clear();
  last_error.clear();
  sticky = CUDA_SUCCESS;
}

// ckemu_stats reports what is still allocated and how many OS threads made
// context calls since ckemu_configure.
API void ckemu_stats(long long* devAllocs, long long* hostAllocs, long long* objects, long long* nthreads, int* retained) {
  std::lock_guard<std::mutex> l(mu);
  *devAllocs = (long long)dev.size();
  *hostAllocs = (long long)host.size();
  *objects = (long long)(queues.size() - queues.count(0) + events.size() + modules.size());
  *nthreads = (long long)threads.size();
  *retained = retains;
}

// ckemu_last_error copies why the emulator last refused a call.
API void ckemu_last_error(char* buf, int cap) {
  std::lock_guard<std::mutex> l(mu);
  write_log(buf, (size_t)cap, nullptr, last_error);
}

// ---- the driver API ----

API CUresult cuInit(unsigned flags) {
  std::lock_guard<std::mutex> l(mu);
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  inited = true;
  return CUDA_SUCCESS;
}

API CUresult cuDriverGetVersion(int* v) {
  if (!v) return CUDA_ERROR_INVALID_VALUE;
  *v = cfg.driver;
  return CUDA_SUCCESS;
}

API CUresult cuGetErrorName(CUresult r, const char** s) {
  for (auto& n : names) {
    if (atoi(n[0]) == r) {
      *s = n[1];
      return CUDA_SUCCESS;
    }
  }
  *s = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuGetErrorString(CUresult r, const char** s) { return cuGetErrorName(r, s); }

API CUresult cuDeviceGetCount(int* n) {
  std::lock_guard<std::mutex> l(mu);
  if (!inited) return CUDA_ERROR_NOT_INITIALIZED;
  *n = 1;
  return CUDA_SUCCESS;
}

API CUresult cuDeviceGet(int* d, int ordinal) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = dev_call(ordinal)) return r;
  *d = 0;
  return CUDA_SUCCESS;
}

API CUresult cuDeviceGetName(char* buf, int len, int d) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = dev_call(d)) return r;
  if (!buf || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  write_log(buf, (size_t)len, nullptr, cfg.name);
  return CUDA_SUCCESS;
}

API CUresult cuDeviceGetAttribute(int* v, int attr, int d) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = dev_call(d)) return r;
  switch (attr) {
    case 16: *v = cfg.sms; break;              // multiprocessor count
    case 75: *v = cfg.cc / 10; break;          // compute capability major
    case 76: *v = cfg.cc % 10; break;          // minor
    case 41: *v = 1; break;                    // unified addressing
    default: return CUDA_ERROR_INVALID_VALUE;  // not emulated: the tests should know
  }
  return CUDA_SUCCESS;
}

API CUresult cuDeviceTotalMem_v2(size_t* n, int d) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = dev_call(d)) return r;
  *n = cfg.total;
  return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxRetain(uintptr_t* c, int d) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = dev_call(d)) return r;
  retains++;
  *c = kCtx;
  return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxRelease_v2(int d) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = dev_call(d)) return r;
  if (retains == 0) return CUDA_ERROR_INVALID_CONTEXT;
  retains--;
  // When the last retain goes, the real driver destroys the context and
  // everything in it; the emulator keeps the allocations so that
  // ckemu_stats can report what the executor leaked.
  return CUDA_SUCCESS;
}

API CUresult cuCtxSetCurrent(uintptr_t c) {
  std::lock_guard<std::mutex> l(mu);
  if (!inited) return CUDA_ERROR_NOT_INITIALIZED;
  if (c != 0 && (c != kCtx || retains == 0)) return CUDA_ERROR_INVALID_CONTEXT;
  current = c;
  return CUDA_SUCCESS;
}

API CUresult cuCtxSynchronize() {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ctx_call()) return r;
  flush_all();
  return wait_result();
}

API CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ctx_call()) return r;
  *free = cfg.total - used;
  *total = cfg.total;
  return CUDA_SUCCESS;
}

API CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t n) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ctx_call()) return r;
  if (n == 0) return CUDA_ERROR_INVALID_VALUE;
  unsigned long long rounded = (n + 255) & ~255ull;
  if (rounded > cfg.total - used) return CUDA_ERROR_OUT_OF_MEMORY;
  size_t pg = page();
  size_t body = (rounded + pg - 1) / pg * pg;
  size_t maplen = body + pg;
  void* m = mmap(nullptr, maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  mprotect((char*)m + body, pg, PROT_NONE);  // the guard page
  char* start = (char*)m + body - rounded;   // 256-aligned, ends at the guard
  memset(start, 0xFF, rounded);
  CUdeviceptr d = (CUdeviceptr)(uintptr_t)start;
  dev[d] = DevAlloc{m, maplen, rounded};
  used += rounded;
  *p = d;
  return CUDA_SUCCESS;
}

API CUresult cuMemFree_v2(CUdeviceptr p) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ctx_call()) return r;
  flush_all();  // cuMemFree waits for the device
  auto it = dev.find(p);
  if (it == dev.end()) return bad(CUDA_ERROR_INVALID_VALUE, "cuMemFree of an address cuMemAlloc did not return");
  used -= it->second.n;
  munmap(it->second.map, it->second.maplen);
  dev.erase(it);
  return CUDA_SUCCESS;
}

API CUresult cuMemHostAlloc(void** p, size_t n, unsigned flags) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ctx_call()) return r;
  if (n == 0) return CUDA_ERROR_INVALID_VALUE;
  (void)flags;
  void* m = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  memset(m, 0xFF, n);
  host[(uintptr_t)m] = HostAlloc{m, n};
  *p = m;
  return CUDA_SUCCESS;
}

API CUresult cuMemFreeHost(void* p) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ctx_call()) return r;
  flush_all();  // so does cuMemFreeHost
  auto it = host.find((uintptr_t)p);
  if (it == host.end()) return bad(CUDA_ERROR_INVALID_VALUE, "cuMemFreeHost of memory cuMemHostAlloc did not return");
  munmap(it->second.map, it->second.n);
  host.erase(it);
  return CUDA_SUCCESS;
}

API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, uintptr_t s) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ctx_call()) return r;
  if (!stream_ok(s)) return CUDA_ERROR_INVALID_HANDLE;
  if (!devrange(dst, n)) return bad(CUDA_ERROR_INVALID_VALUE, "cuMemcpyHtoDAsync: destination outside a device allocation");
  if (!pinned(src, n)) return bad(CUDA_ERROR_INVALID_VALUE, "cuMemcpyHtoDAsync: source is not page-locked memory from cuMemHostAlloc");
  enqueue(s, [=] { memcpy((void*)(uintptr_t)dst, src, n); });
  return CUDA_SUCCESS;
}

API CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, uintptr_t s) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ctx_call()) return r;
  if (!stream_ok(s)) return CUDA_ERROR_INVALID_HANDLE;
  if (!devrange(src, n)) return bad(CUDA_ERROR_INVALID_VALUE, "cuMemcpyDtoHAsync: source outside a device allocation");
  if (!pinned(dst, n)) return bad(CUDA_ERROR_INVALID_VALUE, "cuMemcpyDtoHAsync: destination is not page-locked memory from cuMemHostAlloc");
  enqueue(s, [=] { memcpy(dst, (const void*)(uintptr_t)src, n); });
  return CUDA_SUCCESS;
}

API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, uintptr_t s) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ctx_call()) return r;
  if (!stream_ok(s)) return CUDA_ERROR_INVALID_HANDLE;
  if (!devrange(dst, n) || !devrange(src, n)) return bad(CUDA_ERROR_INVALID_VALUE, "cuMemcpyDtoDAsync: a range outside a device allocation");
  enqueue(s, [=] { memmove((void*)(uintptr_t)dst, (const void*)(uintptr_t)src, n); });
  return CUDA_SUCCESS;
}

API CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, uintptr_t s) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ctx_call()) return r;
  if (!stream_ok(s)) return CUDA_ERROR_INVALID_HANDLE;
  if (!devrange(dst, n)) return bad(CUDA_ERROR_INVALID_VALUE, "cuMemsetD8Async: outside a device allocation");
  enqueue(s, [=] { memset((void*)(uintptr_t)dst, v, n); });
  return CUDA_SUCCESS;
}

API CUresult cuStreamCreate(uintptr_t* s, unsigned flags) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ctx_call()) return r;
  if (flags > 1) return CUDA_ERROR_INVALID_VALUE;
  *s = next_handle++;
  queues[*s];
  return CUDA_SUCCESS;
}

API CUresult cuStreamDestroy_v2(uintptr_t s) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ctx_call()) return r;
  if (s == 0 || !queues.count(s)) return CUDA_ERROR_INVALID_HANDLE;
  flush(s);  // its work completes first
  queues.erase(s);
  return CUDA_SUCCESS;
}

API CUresult cuStreamSynchronize(uintptr_t s) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ctx_call()) return r;
  if (!stream_ok(s)) return CUDA_ERROR_INVALID_HANDLE;
  flush(s);
  return wait_result();
}

API CUresult cuStreamWaitEvent(uintptr_t s, uintptr_t e, unsigned flags) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ctx_call()) return r;
  if (!stream_ok(s) || !events.count(e)) return CUDA_ERROR_INVALID_HANDLE;
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  // Later work on s waits for the event's most recent record at this call.
  Event& ev = events[e];
  uintptr_t st = ev.stream;
  unsigned long long target = ev.recorded;
  enqueue(s, [=] { until_done(e, st, target); });
  return CUDA_SUCCESS;
}

API CUresult cuEventCreate(uintptr_t* e, unsigned flags) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ctx_call()) return r;
  (void)flags;
  *e = next_handle++;
  events[*e] = Event{};
  return CUDA_SUCCESS;
}

API CUresult cuEventRecord(uintptr_t e, uintptr_t s) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ctx_call()) return r;
  if (!events.count(e) || !stream_ok(s)) return CUDA_ERROR_INVALID_HANDLE;
  Event& ev = events[e];
  ev.stream = s;
  unsigned long long n = ++ev.recorded;
  enqueue(s, [=] {
    auto it = events.find(e);
    if (it == events.end()) return;
    it->second.ms = now_ms();
    if (it->second.done < n) it->second.done = n;
  });
  return CUDA_SUCCESS;
}

API CUresult cuEventSynchronize(uintptr_t e) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ctx_call()) return r;
  if (!events.count(e)) return CUDA_ERROR_INVALID_HANDLE;
  Event ev = events[e];
  until_done(e, ev.stream, ev.recorded);
  return wait_result();
}

API CUresult cuEventElapsedTime(float* ms, uintptr_t a, uintptr_t b) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ctx_call()) return r;
  if (!events.count(a) || !events.count(b)) return CUDA_ERROR_INVALID_HANDLE;
  const Event &ea = events[a], &eb = events[b];
  if (ea.recorded == 0 || eb.recorded == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (ea.done < ea.recorded || eb.done < eb.recorded) return CUDA_ERROR_NOT_READY;
  *ms = (float)(eb.ms - ea.ms);
  return CUDA_SUCCESS;
}

API CUresult cuEventDestroy_v2(uintptr_t e) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ctx_call()) return r;
  if (!events.erase(e)) return CUDA_ERROR_INVALID_HANDLE;
  return CUDA_SUCCESS;
}

API CUresult cuModuleLoadDataEx(uintptr_t* m, const void* image, unsigned nopts, int* opts, void** vals) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ctx_call()) return r;
  char *errlog = nullptr, *infolog = nullptr;
  size_t errcap = 0, infocap = 0;
  void **errslot = nullptr, **infoslot = nullptr;
  for (unsigned i = 0; i < nopts; i++) {
    switch (opts[i]) {
      case 3: infolog = (char*)vals[i]; break;
      case 4: infocap = (size_t)(uintptr_t)vals[i]; infoslot = &vals[i]; break;
      case 5: errlog = (char*)vals[i]; break;
      case 6: errcap = (size_t)(uintptr_t)vals[i]; errslot = &vals[i]; break;
      case 12: break;  // log verbose
      default: return CUDA_ERROR_INVALID_VALUE;
    }
  }
  std::string ptx((const char*)image);
  // Header: .version and .target.
  int isa = -1, target = -1;
  std::vector<std::string> lines;
  {
    size_t p = 0;
    while (p <= ptx.size()) {
      size_t q = ptx.find('\n', p);
      if (q == std::string::npos) q = ptx.size();
      lines.push_back(ptx.substr(p, q - p));
      p = q + 1;
    }
  }
  for (auto& line : lines) {
    auto w = words(line);
    if (w.size() >= 2 && w[0] == ".version" && isa < 0) {
      int a = 0, b = 0;
      sscanf(w[1].c_str(), "%d.%d", &a, &b);
      isa = a * 10 + b;
    }
    if (w.size() >= 2 && w[0] == ".target" && target < 0) sscanf(w[1].c_str(), "sm_%d", &target);
  }
  if (isa < 0 || target < 0) {
    write_log(errlog, errcap, errslot, "ptxas fatal   : Missing .version or .target directive");
    return CUDA_ERROR_INVALID_PTX;
  }
  if (isa > driver_isa()) {
    char msg[160];
    snprintf(msg, sizeof msg, "ptxas application ptx input, line 1; fatal   : Unsupported .version %d.%d; current version is '%d.%d'",
             isa / 10, isa % 10, driver_isa() / 10, driver_isa() % 10);
    write_log(errlog, errcap, errslot, msg);
    return CUDA_ERROR_UNSUPPORTED_PTX_VERSION;
  }
  if (target > cfg.cc) {
    write_log(errlog, errcap, errslot, "ptxas fatal   : SM version specified by .target is higher than default SM version assumed");
    return CUDA_ERROR_INVALID_PTX;
  }
  // The host build that stands for this PTX: base.cu, or mma.cu for sm_80
  // (table) or sm_89+ (conversion instruction).
  const ckemu::Kernel* table = ckemu::base_kernels;
  if (target >= 89) {
    table = ckemu::mma89_kernels;
  } else if (target >= 80) {
    table = ckemu::mma80_kernels;
  }
  Module mod;
  for (size_t i = 0; i < lines.size(); i++) {
    auto w = words(lines[i]);
    if (w.size() < 3 || w[0] != ".visible" || w[1] != ".entry") continue;
    std::string name = w[2].substr(0, w[2].find('('));
    Entry e{nullptr, {}, 0};
    size_t j = i + 1;
    for (; j < lines.size(); j++) {
      auto pw = words(lines[j]);
      if (pw.empty()) continue;
      if (pw[0] == ")") break;
      if (pw[0] != ".param") continue;
      size_t sz = 0;
      for (auto& t : pw) {
        if ((sz = ptx_type_size(t)) != 0) break;
      }
      e.ptx_sizes.push_back(sz);
    }
    for (j++; j < lines.size(); j++) {
      auto pw = words(lines[j]);
      if (pw.empty()) continue;
      if (pw[0] == ".maxntid") e.maxntid = (unsigned)atoi(pw[1].c_str()) * (pw.size() > 2 ? atoi(pw[2].c_str()) : 1) * (pw.size() > 3 ? atoi(pw[3].c_str()) : 1);
      if (pw[0] == "{") break;
    }
    for (const ckemu::Kernel* k = table; k->name; k++) {
      if (name == k->name) e.k = k;
    }
    if (!e.k) {
      write_log(errlog, errcap, errslot, "ckpt emulator: the PTX entry " + name + " has no host build in testdata/emu");
      return CUDA_ERROR_INVALID_PTX;
    }
    bool same = (int)e.ptx_sizes.size() == e.k->nparams;
    for (int p = 0; same && p < e.k->nparams; p++) same = e.ptx_sizes[p] == e.k->sizes[p];
    if (!same) {
      write_log(errlog, errcap, errslot, "ckpt emulator: the parameters of " + name +
                                             " in the PTX differ from the kernel source (run kernels/gen.sh)");
      return CUDA_ERROR_INVALID_PTX;
    }
    mod.entries[name] = e;
  }
  write_log(infolog, infocap, infoslot, "ckpt emulator: " + std::to_string(mod.entries.size()) + " entries");
  uintptr_t h = next_handle++;
  modules[h] = mod;
  *m = h;
  return CUDA_SUCCESS;
}

API CUresult cuModuleUnload(uintptr_t m) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ctx_call()) return r;
  auto it = modules.find(m);
  if (it == modules.end()) return CUDA_ERROR_INVALID_HANDLE;
  flush_all();  // its kernels finish first
  for (auto f = functions.begin(); f != functions.end();) {
    bool mine = false;
    for (auto& e : it->second.entries) mine = mine || f->second == &e.second;
    f = mine ? functions.erase(f) : std::next(f);
  }
  modules.erase(it);
  return CUDA_SUCCESS;
}

API CUresult cuModuleGetFunction(uintptr_t* f, uintptr_t m, const char* name) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ctx_call()) return r;
  auto it = modules.find(m);
  if (it == modules.end()) return CUDA_ERROR_INVALID_HANDLE;
  auto e = it->second.entries.find(name);
  if (e == it->second.entries.end()) return CUDA_ERROR_NOT_FOUND;
  uintptr_t h = next_handle++;
  functions[h] = &e->second;
  *f = h;
  return CUDA_SUCCESS;
}

API CUresult cuLaunchKernel(uintptr_t f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                            unsigned shared, uintptr_t s, void** params, void** extra) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ctx_call()) return r;
  auto it = functions.find(f);
  if (it == functions.end()) return CUDA_ERROR_INVALID_HANDLE;
  if (!stream_ok(s)) return CUDA_ERROR_INVALID_HANDLE;
  const Entry& e = *it->second;
  unsigned long long threads_per_block = (unsigned long long)bx * by * bz;
  if (gx == 0 || gy == 0 || gz == 0 || threads_per_block == 0 || gx > 0x7FFFFFFFu || gy > 65535 || gz > 65535 ||
      bx > 1024 || by > 1024 || bz > 64 || extra != nullptr || shared > 48 * 1024) {
    return bad(CUDA_ERROR_INVALID_VALUE, std::string("cuLaunchKernel ") + e.k->name + ": bad launch configuration");
  }
  if (threads_per_block > 1024 || (e.maxntid && threads_per_block > e.maxntid)) {
    return bad(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, std::string("cuLaunchKernel ") + e.k->name + ": more threads than .maxntid");
  }
  // The driver copies each parameter's bytes, as many as the PTX declares,
  // before the call returns.
  std::vector<unsigned long long> vals(e.ptx_sizes.size(), 0);
  for (size_t i = 0; i < e.ptx_sizes.size(); i++) {
    if (!params || !params[i]) {
      return bad(CUDA_ERROR_INVALID_VALUE, std::string("cuLaunchKernel ") + e.k->name + ": parameter " + std::to_string(i) + " missing");
    }
    memcpy(&vals[i], params[i], e.ptx_sizes[i]);
  }
  const ckemu::Kernel* k = e.k;
  enqueue(s, [=]() mutable {
    std::vector<void*> ptrs(vals.size());
    for (size_t i = 0; i < vals.size(); i++) ptrs[i] = &vals[i];
    std::string why = run_on_worker(k, ptrs.data(), ckemu::dim3{gx, gy, gz}, ckemu::dim3{bx, by, bz});
    if (!why.empty() && sticky == CUDA_SUCCESS) {
      sticky = CUDA_ERROR_LAUNCH_FAILED;
      last_error = std::string(k->name) + ": " + why;
    }
  });
  return CUDA_SUCCESS;
}
