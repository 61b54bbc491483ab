package cuda

import "unsafe"

// Handles of the driver API, as the driver returns them.
type (
	// devPtr is a CUdeviceptr: a device address.
	devPtr uint64
	// cuDevice is a CUdevice ordinal handle.
	cuDevice int32
	// cuContext, cuStream, cuEvent, cuModule and cuFunction are the
	// driver's opaque handles.
	cuContext  uintptr
	cuStream   uintptr
	cuEvent    uintptr
	cuModule   uintptr
	cuFunction uintptr
)

// hostMem is page-locked host memory from cuMemHostAlloc: the only host
// memory this package hands to an asynchronous copy. It is not Go heap
// memory, so the garbage collector neither moves nor frees it.
type hostMem struct {
	p unsafe.Pointer
	n int64
}

// bytes returns the memory as a byte slice (valid until it is freed).
func (h hostMem) bytes() []byte {
	if h.p == nil || h.n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(h.p), h.n)
}

// Device attributes (CUdevice_attribute) this package reads.
const (
	attrMultiprocessorCount = 16
	attrComputeCapMajor     = 75
	attrComputeCapMinor     = 76
	attrUnifiedAddressing   = 41
)

// driver is the part of the CUDA driver API that the executor uses: one Go
// method per entry point, with the driver's semantics. libcuda implements
// it through purego; the tests use a fake that counts allocations. The
// executor calls every method on its one locked driver thread (see
// thread.go), with the device's primary context current there.
//
// Every error is a *Error naming the entry point and the driver's name for
// the result code (see driverError for its kind; a module that fails to
// load carries the JIT log).
type driver interface {
	// Init is cuInit(0).
	Init() error
	// DriverVersion is cuDriverGetVersion (e.g. 12040 for 12.4).
	DriverVersion() (int, error)
	// DeviceCount is cuDeviceGetCount.
	DeviceCount() (int, error)
	// DeviceGet is cuDeviceGet.
	DeviceGet(ordinal int) (cuDevice, error)
	// DeviceName is cuDeviceGetName.
	DeviceName(d cuDevice) (string, error)
	// DeviceAttribute is cuDeviceGetAttribute.
	DeviceAttribute(attr int, d cuDevice) (int, error)
	// DeviceTotalMem is cuDeviceTotalMem_v2.
	DeviceTotalMem(d cuDevice) (int64, error)
	// PrimaryCtxRetain is cuDevicePrimaryCtxRetain.
	PrimaryCtxRetain(d cuDevice) (cuContext, error)
	// PrimaryCtxRelease is cuDevicePrimaryCtxRelease_v2.
	PrimaryCtxRelease(d cuDevice) error
	// CtxSetCurrent is cuCtxSetCurrent.
	CtxSetCurrent(c cuContext) error
	// CtxSynchronize is cuCtxSynchronize.
	CtxSynchronize() error
	// MemGetInfo is cuMemGetInfo_v2.
	MemGetInfo() (free, total int64, err error)
	// MemAlloc is cuMemAlloc_v2.
	MemAlloc(n int64) (devPtr, error)
	// MemFree is cuMemFree_v2.
	MemFree(p devPtr) error
	// MemHostAlloc is cuMemHostAlloc (portable, not write-combined).
	MemHostAlloc(n int64) (hostMem, error)
	// MemFreeHost is cuMemFreeHost.
	MemFreeHost(h hostMem) error
	// MemcpyHtoDAsync is cuMemcpyHtoDAsync_v2 from src.bytes()[off:off+n].
	MemcpyHtoDAsync(dst devPtr, src hostMem, off, n int64, s cuStream) error
	// MemcpyDtoHAsync is cuMemcpyDtoHAsync_v2 into dst.bytes()[off:off+n].
	MemcpyDtoHAsync(dst hostMem, off int64, src devPtr, n int64, s cuStream) error
	// MemcpyDtoDAsync is cuMemcpyDtoDAsync_v2.
	MemcpyDtoDAsync(dst, src devPtr, n int64, s cuStream) error
	// MemsetD8Async is cuMemsetD8Async.
	MemsetD8Async(dst devPtr, v byte, n int64, s cuStream) error
	// StreamCreate is cuStreamCreate with CU_STREAM_NON_BLOCKING.
	StreamCreate() (cuStream, error)
	// StreamDestroy is cuStreamDestroy_v2.
	StreamDestroy(s cuStream) error
	// StreamSynchronize is cuStreamSynchronize.
	StreamSynchronize(s cuStream) error
	// StreamWaitEvent is cuStreamWaitEvent.
	StreamWaitEvent(s cuStream, e cuEvent) error
	// EventCreate is cuEventCreate (timing enabled).
	EventCreate() (cuEvent, error)
	// EventRecord is cuEventRecord.
	EventRecord(e cuEvent, s cuStream) error
	// EventSynchronize is cuEventSynchronize.
	EventSynchronize(e cuEvent) error
	// EventElapsed is cuEventElapsedTime, in milliseconds.
	EventElapsed(start, end cuEvent) (float32, error)
	// EventDestroy is cuEventDestroy_v2.
	EventDestroy(e cuEvent) error
	// ModuleLoadData is cuModuleLoadDataEx with the JIT's error and info
	// log buffers; on failure the error carries the error log.
	ModuleLoadData(image []byte) (cuModule, error)
	// ModuleUnload is cuModuleUnload.
	ModuleUnload(m cuModule) error
	// ModuleGetFunction is cuModuleGetFunction.
	ModuleGetFunction(m cuModule, name string) (cuFunction, error)
	// LaunchKernel is cuLaunchKernel. Each of args is one kernel
	// parameter of 4 or 8 bytes, passed as its little-endian 64-bit value
	// (a 4-byte parameter is read from the low half).
	LaunchKernel(f cuFunction, grid, block [3]uint32, sharedBytes uint32, s cuStream, args []uint64) error
	// Close releases what the binding itself holds (not the context).
	Close() error
}
