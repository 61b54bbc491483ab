// Package cuda is ckpt's CUDA executor: it runs the ops of package
// executor on an NVIDIA GPU through the CUDA driver API, with no cgo and no
// CUDA toolkit at build time.
//
// # The driver
//
// libcuda.so.1 is loaded at run time with github.com/ebitengine/purego from
// the dynamic loader's normal search path (never from a CUDA toolkit's
// compat/ folder), so the package builds with CGO_ENABLED=0 and a program
// that imports it runs everywhere: without a driver or a device, New
// returns an error matching executor.ErrUnavailable that says which, and
// programs fall back to the CPU executor. Entry points are resolved as CUDA 12.0's cuda.h
// resolves them (cuMemAlloc_v2, cuMemcpyHtoDAsync_v2, ...: a plain
// dlsym("cuMemAlloc") is the CUDA 2.0 entry point with 32-bit sizes).
// Every driver call runs on one goroutine locked to one OS thread, on
// which the device's primary context is current (contexts are per OS
// thread, goroutines migrate); every result code is checked and turned
// into an *Error naming the call and the driver's name for the code
// (cuGetErrorName), whose Kind is the executor's condition (ErrDevice,
// ErrBudget for out of memory); a module that fails to load returns the
// JIT's error log. Asynchronous copies only ever read or write page-locked
// memory from cuMemHostAlloc, never Go memory. The binding sits behind a
// small interface (driver) so that everything above it is tested with a
// fake driver that counts allocations.
//
// # Kernels
//
// The kernels are CUDA C (kernels/*.cu, kernels/numerics.h) compiled to PTX
// by kernels/gen.sh (go generate; nvcc from PATH or from the PyPI wheels)
// and embedded; the generated PTX is committed, so building needs no nvcc.
// Each PTX file records the SHA-256 of its sources and nvcc flags, and a
// test fails when they have changed since (the PTX is stale).
// The baseline (kernels/base_sm75.ptx: dequantization, dtype conversion,
// elementwise ops, NaN/Inf counting, a tiled F32 Linear) targets sm_75 with
// PTX ISA 8.0, which CUDA 12.0 and later drivers load; the tensor-core
// Linear (mma.sync BF16/F16 with F32 accumulation) has variants for sm_80,
// and for sm_89 (ISA 8.1) and sm_90 (ISA 8.0) that decode FP8 weights with
// the hardware's conversion instructions. The variant is chosen at run time
// from the device's compute capability and the driver's version.
//
// The element arithmetic (numerics.h) is integer and IEEE float64 code that
// also compiles on the host; the package's tests run it there against
// packages dtype and quant: dequantization is bit-exact with
// quant.Weight.Dequantize for every FP8 code and scale layout (the exact
// product in float64, rounded once, NaN bits included) and conversions
// with dtype.Convert.
//
// # The driver emulator
//
// Without a GPU, the same GPU tests run on a CUDA driver emulator
// (testdata/emu): a shared library that the host C++ compiler builds from
// the kernel sources, with the inline PTX of mma.cu replaced by host
// versions of those instructions (the mma.sync fragment layouts of the PTX
// ISA, the FP8 and half conversions), which the executor binds through
// purego exactly as it binds libcuda.so.1. Each CUDA thread is a fiber,
// __syncthreads and the warp operations are barriers, and launches switch
// between schedules that keep warps in step or let one run ahead, so a
// missing barrier shows. It is stricter than a driver where that finds
// bugs sooner:
//   - allocations start as NaN bytes and end at a guard page: a kernel
//     reading or writing past one ends the test process with SIGSEGV, and
//     a misaligned vector load with SIGILL (run the test under gdb to see
//     where);
//   - asynchronous copies accept only cuMemHostAlloc memory, and calls need
//     the context current on the calling OS thread;
//   - module loads check the PTX header against the emulated device and
//     driver, and each entry's parameters against the kernel source;
//     launches are checked against .maxntid;
//   - copies and launches run as late as the stream semantics allow (at the
//     wait for them), so a staging buffer refilled before its copy was
//     waited for, or a missing wait between streams, changes the results.
//
// Emulated devices: sm_75, sm_80, sm_89 (also under a CUDA 12.0 driver,
// which must fall back to the sm_80 build) and sm_90. What the emulator
// cannot show is the real JIT, the real tensor cores and the speed; those
// need the GPU run below.
//
// # Running the GPU tests
//
// Tests that need a GPU skip with a message when no driver or device is
// found, and fail instead when CKPT_REQUIRE_GPU=1. To run them on a GPU
// machine of the same architecture, build the test binary here and copy it
// there:
//
//	go test -c -o cuda.test ./executor/cuda/
//	CKPT_REQUIRE_GPU=1 ./cuda.test -test.v
//
// TestPTXAssembles compiles the PTX with ptxas when one is given
// (CKPT_PTXAS=/path/to/ptxas, or ptxas on PATH).
package cuda
