//go:build (linux && (amd64 || arm64)) || (linux && cgo)

package cuda

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/executor"
)

// The GPU tests also run without a GPU, on a CUDA driver emulator
// (testdata/emu) that the host C++ compiler builds from the same kernel
// sources as the PTX: the executor binds it through purego exactly as it
// binds libcuda.so.1, so the binding, the driver thread, the kernel
// parameters, the launch geometry and the kernels' indexing and
// synchronization (mma.sync fragments included) are all exercised. What it
// cannot show is the real JIT, the real tensor cores and the speed: those
// need the GPU run (CKPT_REQUIRE_GPU=1). The tests skip when no C++
// compiler is found.

type emuDevice struct {
	name   string
	cc     int
	driver int
	// every runs the slow tests too (one device per build of the kernels).
	every bool
}

// The devices emulated: the baseline alone (Turing), each tensor-core
// build, and an sm_89 device under a CUDA 12.0 driver, which must fall
// back to the sm_80 build.
var emuDevices = []emuDevice{
	{"sm75", 75, 12000, true},
	{"sm80", 80, 12040, true},
	{"sm89", 89, 12040, true},
	{"sm89-driver12.0", 89, 12000, false},
	{"sm90", 90, 12080, false},
}

var (
	emuOnce sync.Once
	emuLib  uintptr
	emuErr  error
	emuSkip string

	emuConfigure func(cc, sms int32, total uint64, driver int32, name *byte)
	emuStats     func(dev, host, objects, threads *int64, retained *int32)
	emuLastError func(buf *byte, n int32)
)

// loadEmu builds the emulator and loads it (once per test binary).
func loadEmu(t *testing.T) uintptr {
	t.Helper()
	emuOnce.Do(func() {
		cxx, err := cxxCompiler()
		if err != nil {
			emuSkip = err.Error()
			return
		}
		machine, _ := exec.Command(cxx, "-dumpmachine").Output()
		want := map[string]string{"amd64": "x86_64", "arm64": "aarch64"}[runtime.GOARCH]
		if want == "" || !strings.HasPrefix(string(machine), want) {
			emuSkip = fmt.Sprintf("%s builds for %s, not %s", cxx, strings.TrimSpace(string(machine)), runtime.GOARCH)
			return
		}
		dir, err := os.MkdirTemp("", "ckpt-cuda-emu")
		if err != nil {
			emuErr = err
			return
		}
		defer os.RemoveAll(dir) // once loaded, the library stays mapped
		// Not as libcuda.so.1: dlopen("libcuda.so.1") would return it in this
		// process from then on, instead of the machine's driver.
		cmd := exec.Command("sh", filepath.Join("testdata", "emu", "build.sh"), dir, "libckpt_cudaemu.so")
		cmd.Env = append(os.Environ(), "CXX="+cxx)
		if out, err := cmd.CombinedOutput(); err != nil {
			emuErr = fmt.Errorf("testdata/emu/build.sh: %v\n%s", err, out)
			return
		}
		lib := filepath.Join(dir, "libckpt_cudaemu.so")
		if emuLib, emuErr = purego.Dlopen(lib, rtldNow); emuErr != nil {
			return
		}
		for _, b := range []struct {
			sym string
			fn  any
		}{{"ckemu_configure", &emuConfigure}, {"ckemu_stats", &emuStats}, {"ckemu_last_error", &emuLastError}} {
			p, err := purego.Dlsym(emuLib, b.sym)
			if err != nil {
				emuErr = err
				return
			}
			purego.RegisterFunc(b.fn, p)
		}
	})
	if emuSkip != "" {
		t.Skipf("driver emulator not built: %s", emuSkip)
	}
	if emuErr != nil {
		t.Fatalf("driver emulator: %v", emuErr)
	}
	return emuLib
}

func cString0(s string) *byte { b := append([]byte(s), 0); return &b[0] }

// emuLastErr returns why the emulator last refused a call.
func emuLastErr() string {
	buf := make([]byte, 512)
	emuLastError(&buf[0], int32(len(buf)))
	return cString(unsafe.Pointer(&buf[0]), len(buf))
}

// onEmu returns a newGPU that starts executors on the emulator configured
// as dev, and checks when each closes that it left nothing allocated on the
// device or pinned, released the primary context, and made every context
// call from one OS thread.
func onEmu(dev emuDevice, total uint64) newGPU {
	return func(t *testing.T, opts ...executor.Option) *Executor {
		t.Helper()
		lib := loadEmu(t)
		emuConfigure(int32(dev.cc), 2, total, int32(dev.driver), cString0("Emulated "+dev.name))
		d, err := bindLibcuda(lib, "testdata/emu", "libckpt_cudaemu.so")
		if err != nil {
			t.Fatal(err)
		}
		e, err := newExecutor(d, executor.Apply(opts...))
		if err != nil {
			t.Fatalf("%v (emulator: %s)", err, emuLastErr())
		}
		t.Cleanup(func() {
			if n, _ := e.Live(); n != 0 {
				t.Errorf("%d buffers leaked", n)
			}
			if err := e.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			var devs, hosts, objs, threads int64
			var retained int32
			emuStats(&devs, &hosts, &objs, &threads, &retained)
			if devs != 0 || hosts != 0 || objs != 0 || retained != 0 {
				t.Errorf("after Close the driver still holds %d device and %d pinned allocations, %d streams/events/modules, %d context retains", devs, hosts, objs, retained)
			}
			if threads != 1 {
				t.Errorf("context calls came from %d OS threads, want 1", threads)
			}
			if msg := emuLastErr(); msg != "" {
				t.Errorf("the emulator refused a call: %s", msg)
			}
		})
		return e
	}
}

func TestEmulatedGPU(t *testing.T) {
	for _, dev := range emuDevices {
		t.Run(dev.name, func(t *testing.T) {
			mk := onEmu(dev, 1<<30)
			t.Run("Modules", func(t *testing.T) {
				if e := mk(t); e.hasMMA != (dev.cc >= 80) {
					t.Errorf("tensor-core Linear loaded: %v, want %v", e.hasMMA, dev.cc >= 80)
				}
			})
			for _, c := range []struct {
				name string
				run  func(*testing.T, newGPU)
				slow bool
			}{
				{"DequantizeBitExact", testDequantizeBitExact, false},
				{"ConvertBitExact", testConvertBitExact, false},
				{"Linear", testLinear, false},
				{"LinearLayouts", testLinearLayouts, true},
				{"LinearShapes", testLinearShapes, true},
				{"Elementwise", testElementwise, false},
				{"CheckFinite", testCheckFinite, false},
				{"UploadModel", testUploadModel, false},
				{"UploadRing", testUploadRing, false},
			} {
				if c.slow && !dev.every {
					continue // the same kernel build as another device's
				}
				t.Run(c.name, func(t *testing.T) { c.run(t, mk) })
			}
		})
	}
}

// The emulated JIT refuses PTX the way the driver's does, and the error
// carries its log.
func TestEmulatedModuleErrors(t *testing.T) {
	lib := loadEmu(t)
	emuConfigure(80, 2, 1<<30, 12000, cString0("Emulated"))
	d, err := bindLibcuda(lib, "", "libckpt_cudaemu.so")
	if err != nil {
		t.Fatal(err)
	}
	th := newThread()
	defer th.close()
	err = th.do(func() error {
		if err := d.Init(); err != nil {
			return err
		}
		dev, _ := d.DeviceGet(0)
		c, err := d.PrimaryCtxRetain(dev)
		if err != nil {
			return err
		}
		defer d.PrimaryCtxRelease(dev)
		if err := d.CtxSetCurrent(c); err != nil {
			return err
		}
		defer d.Close()
		for _, tc := range []struct{ src, code, log string }{
			{ptxMMA90, "CUDA_ERROR_INVALID_PTX", "SM version specified by .target is higher"},
			{ptxMMA89, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "Unsupported .version 8.1"},
			{strings.Replace(ptxBase, ".param .u32 ck_add_param_1", ".param .u64 ck_add_param_1", 1), "CUDA_ERROR_INVALID_PTX", "differ from the kernel source"},
		} {
			_, err := d.ModuleLoadData([]byte(tc.src))
			var ce *Error
			if !errors.As(err, &ce) || ce.Kind != executor.ErrDevice || !strings.Contains(err.Error(), "the PTX module failed to load") || !strings.Contains(err.Error(), tc.code) || !strings.Contains(ce.Log, tc.log) {
				t.Errorf("load: %v (log %q), want %s with %q in the log", err, logOf(err), tc.code, tc.log)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func logOf(err error) string {
	var ce *Error
	if errors.As(err, &ce) {
		return ce.Log
	}
	return ""
}

// A model larger than the emulated device's memory is refused before any
// allocation, by the device memory plan.
func TestEmulatedDevicePlanRefuses(t *testing.T) {
	e := onEmu(emuDevices[1], 64<<20)(t)
	x, err := e.FromHost(ctx, make([]byte, 48<<20), dtype.F32, []int64{12 << 20}, "big")
	if err != nil {
		t.Fatal(err)
	}
	defer e.Free(x)
	if _, err := e.FromHost(ctx, make([]byte, 48<<20), dtype.F32, []int64{12 << 20}, "second"); err == nil {
		t.Fatal("a second 48 MiB buffer on a 64 MiB device: no error")
	} else if !errors.Is(err, executor.ErrBudget) || !strings.Contains(err.Error(), "OUT_OF_MEMORY") {
		t.Errorf("second buffer: %v, want ErrBudget, out of memory", err)
	}
}

// Each executor's driver thread ends when the executor closes. With purego
// v0.10.2, a call of more than six arguments (cuLaunchKernel) wrote a Go
// pointer above its own frame, over the return address the ending thread
// went back through: the process died at some Close. Twelve executors that
// launch and close in turn caught it almost surely.
func TestEmulatedStartStop(t *testing.T) {
	mk := onEmu(emuDevices[1], 1<<30)
	for i := range 12 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			e := mk(t)
			x, err := e.FromHost(ctx, make([]byte, 4096), dtype.F32, []int64{1024}, "x")
			if err != nil {
				t.Fatal(err)
			}
			y, err := e.Add(ctx, x, x)
			if err != nil {
				t.Fatal(err)
			}
			download(t, e, y)
			e.Free(x)
		})
	}
}

// New finds the driver the way programs do: libcuda.so.1 through the
// dynamic loader's search path. A child process with the emulator built as
// libcuda.so.1 on LD_LIBRARY_PATH (the loader reads it at start) must start
// the executor on it and run an op.
func TestEmulatedNewFromSearchPath(t *testing.T) {
	if os.Getenv("CKPT_EMU_CHILD") == "1" {
		e, err := New()
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		if info := e.Info(); info.Name != "ckpt emulated GPU" || !strings.HasSuffix(info.Driver, "/libcuda.so.1)") {
			t.Fatalf("started on %+v", info)
		}
		x, err := e.FromHost(ctx, dtype.Float32Bytes([]float32{1, 2}), dtype.F32, []int64{2}, "x")
		if err != nil {
			t.Fatal(err)
		}
		y, err := e.Add(ctx, x, x)
		if err != nil {
			t.Fatal(err)
		}
		e.Free(x)
		if got := download(t, e, y); !bytes.Equal(got, dtype.Float32Bytes([]float32{2, 4})) {
			t.Fatalf("1+1, 2+2 = % x", got)
		}
		return
	}
	loadEmu(t) // skips without a compiler
	cxx, _ := cxxCompiler()
	dir := t.TempDir()
	build := exec.Command("sh", filepath.Join("testdata", "emu", "build.sh"), dir)
	build.Env = append(os.Environ(), "CXX="+cxx)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build.sh: %v\n%s", err, out)
	}
	child := exec.Command(os.Args[0], "-test.run=^TestEmulatedNewFromSearchPath$", "-test.count=1")
	child.Env = append(os.Environ(), "CKPT_EMU_CHILD=1", "LD_LIBRARY_PATH="+dir, "CKPT_REQUIRE_GPU=")
	if out, err := child.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

// emuAllocs returns the device and pinned allocations the emulator holds.
func emuAllocs() (dev, host int64) {
	var objs, threads int64
	var retained int32
	emuStats(&dev, &host, &objs, &threads, &retained)
	return dev, host
}

// On the emulator as on the fake driver: a model that does not fit the
// device is refused before any allocation, and a cancelled upload leaves
// no allocation behind.
func TestEmulatedUploadRefusedAndCanceled(t *testing.T) {
	dir := writeRingModel(t)
	m, err := ckpt.Open(dir, ckpt.WithDType(ckpt.To(dtype.F32)))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	t.Run("does not fit", func(t *testing.T) {
		e := onEmu(emuDevices[1], 8<<20)(t)
		dev, host := emuAllocs()
		_, err := e.UploadModel(ctx, m)
		if !errors.Is(err, executor.ErrBudget) {
			t.Fatalf("%v, want ErrBudget", err)
		}
		if d, h := emuAllocs(); d != dev || h != host {
			t.Errorf("refused after allocating: %d device and %d pinned allocations, were %d and %d", d, h, dev, host)
		}
	})
	t.Run("canceled", func(t *testing.T) {
		e := onEmu(emuDevices[1], 1<<30)(t)
		dev, host := emuAllocs()
		cx, cancel := context.WithCancel(context.Background())
		defer cancel()
		_, err := e.UploadModel(cx, m, executor.WithReaders(1), executor.WithStaging(5<<20),
			executor.WithProgress(func(ckpt.Progress) { cancel() }))
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("%v, want context.Canceled", err)
		}
		if d, h := emuAllocs(); d != dev || h != host {
			t.Errorf("after the cancelled upload: %d device and %d pinned allocations, were %d and %d", d, h, dev, host)
		}
	})
}
