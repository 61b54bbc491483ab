package cuda

import (
	"errors"
	"io/fs"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/executor"
)

// TestSymbolsAsCudaH checks the entry-point table against the defines of
// CUDA 12.0's cuda.h: the sized and versioned ABI, never the CUDA 2.0
// symbol a plain dlsym of the name returns.
func TestSymbolsAsCudaH(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the driver is bound on Linux only")
	}
	want := map[string]string{ // cuda.h: #define API SYMBOL
		"cuDeviceTotalMem": "cuDeviceTotalMem_v2", "cuDevicePrimaryCtxRelease": "cuDevicePrimaryCtxRelease_v2",
		"cuMemGetInfo": "cuMemGetInfo_v2", "cuMemAlloc": "cuMemAlloc_v2", "cuMemFree": "cuMemFree_v2",
		"cuMemcpyHtoDAsync": "cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync": "cuMemcpyDtoHAsync_v2",
		"cuMemcpyDtoDAsync": "cuMemcpyDtoDAsync_v2", "cuStreamDestroy": "cuStreamDestroy_v2",
		"cuEventDestroy": "cuEventDestroy_v2",
	}
	for api, sym := range want {
		if symbols[api] != sym {
			t.Errorf("%s resolves to %q, cuda.h says %s", api, symbols[api], sym)
		}
	}
	for api, sym := range symbols {
		if _, ok := want[api]; !ok && sym != api {
			t.Errorf("%s resolves to %s; cuda.h defines no version for it", api, sym)
		}
	}
}

// TestOpenWithoutDriver runs where no libcuda.so.1 is installed (as on
// this project's CI): opening the driver fails with executor.ErrUnavailable, no panic.
func TestOpenWithoutDriver(t *testing.T) {
	d, err := openLibcuda()
	if err == nil {
		d.Close()
		t.Skip("a CUDA driver is installed here")
	}
	if !errors.Is(err, executor.ErrUnavailable) {
		t.Fatalf("error %v, want executor.ErrUnavailable", err)
	}
	if !strings.Contains(err.Error(), "cannot load libcuda.so.1") && runtime.GOOS == "linux" {
		t.Errorf("error %q does not name libcuda.so.1", err)
	}
}

func TestThreadRunsOnOneOSThread(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("gettid is Linux's")
	}
	th := newThread()
	defer th.close()
	var mu sync.Mutex
	tids := map[int]bool{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				th.do(func() error {
					runtime.Gosched()
					mu.Lock()
					tids[gettid()] = true
					mu.Unlock()
					return nil
				})
			}
		}()
	}
	wg.Wait()
	if len(tids) != 1 {
		t.Errorf("calls ran on %d OS threads", len(tids))
	}
}

func TestThreadPanicAndClose(t *testing.T) {
	th := newThread()
	err := th.do(func() error { panic("boom") })
	if err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("panic: %v", err)
	}
	if err := th.do(func() error { return nil }); err != nil {
		t.Errorf("after a panic: %v", err)
	}
	th.close()
	th.close()
	if err := th.do(func() error { return nil }); !errors.Is(err, executor.ErrClosed) {
		t.Errorf("after close: %v", err)
	}
}

func TestErrorMessage(t *testing.T) {
	e := &Error{Kind: executor.ErrDevice, Op: "load kernels", Call: "cuModuleLoadDataEx", Code: 218, Name: "CUDA_ERROR_INVALID_PTX",
		Msg: "the PTX module failed to load", Log: "ptxas fatal: bad\n"}
	want := "cuda: device: load kernels: cuModuleLoadDataEx returned CUDA_ERROR_INVALID_PTX (218): the PTX module failed to load\nJIT log:\nptxas fatal: bad"
	if e.Error() != want {
		t.Errorf("got %q\nwant %q", e.Error(), want)
	}
	if !errors.Is(e, executor.ErrDevice) || errors.Is(e, executor.ErrArgument) {
		t.Error("Is")
	}
	// A driver call's kind follows its result code; the shared conditions
	// match as for the executor's errors.
	for code, kind := range map[int]executor.ErrorKind{cudaErrorOutOfMemory: executor.ErrBudget, cudaErrorNoDevice: executor.ErrUnavailable,
		cudaErrorInvalidDevice: executor.ErrUnavailable, 700: executor.ErrDevice} {
		if e := driverError("cuX", code, "N"); e.Kind != kind || !errors.Is(e, kind) || !strings.Contains(e.Error(), "cuX returned N") {
			t.Errorf("code %d: %v, want %v", code, e, kind)
		}
	}
	if !errors.Is(driverError("cuMemAlloc_v2", cudaErrorOutOfMemory, "CUDA_ERROR_OUT_OF_MEMORY"), ckpt.ErrBudget) || !errors.Is(&Error{Kind: executor.ErrClosed}, fs.ErrClosed) {
		t.Error("shared conditions")
	}
}
