//go:build (linux && (amd64 || arm64)) || (linux && cgo)

package cuda

import (
	"encoding/binary"
	"os"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"github.com/ckpt-go/ckpt/executor"
	"github.com/ebitengine/purego"
)

// libName is the driver library, found through the normal search path of
// the dynamic loader (ld.so.cache, LD_LIBRARY_PATH): the one the installed
// kernel driver ships. This package never looks in a CUDA toolkit's compat/
// folder.
const libName = "libcuda.so.1"

// symbols maps each entry point this package calls to the symbol that
// CUDA 12.0's cuda.h resolves it to (its #define cuMemAlloc cuMemAlloc_v2,
// ...). A plain dlsym("cuMemAlloc") would return the CUDA 2.0 entry point
// with 32-bit sizes. The names without a suffix have had one ABI since
// they appeared. A test checks the table against cuda.h's defines.
var symbols = map[string]string{
	"cuInit":                    "cuInit",
	"cuDriverGetVersion":        "cuDriverGetVersion",
	"cuGetErrorName":            "cuGetErrorName",
	"cuGetErrorString":          "cuGetErrorString",
	"cuDeviceGetCount":          "cuDeviceGetCount",
	"cuDeviceGet":               "cuDeviceGet",
	"cuDeviceGetName":           "cuDeviceGetName",
	"cuDeviceGetAttribute":      "cuDeviceGetAttribute",
	"cuDeviceTotalMem":          "cuDeviceTotalMem_v2",
	"cuDevicePrimaryCtxRetain":  "cuDevicePrimaryCtxRetain",
	"cuDevicePrimaryCtxRelease": "cuDevicePrimaryCtxRelease_v2",
	"cuCtxSetCurrent":           "cuCtxSetCurrent",
	"cuCtxSynchronize":          "cuCtxSynchronize",
	"cuMemGetInfo":              "cuMemGetInfo_v2",
	"cuMemAlloc":                "cuMemAlloc_v2",
	"cuMemFree":                 "cuMemFree_v2",
	"cuMemHostAlloc":            "cuMemHostAlloc",
	"cuMemFreeHost":             "cuMemFreeHost",
	"cuMemcpyHtoDAsync":         "cuMemcpyHtoDAsync_v2",
	"cuMemcpyDtoHAsync":         "cuMemcpyDtoHAsync_v2",
	"cuMemcpyDtoDAsync":         "cuMemcpyDtoDAsync_v2",
	"cuMemsetD8Async":           "cuMemsetD8Async",
	"cuStreamCreate":            "cuStreamCreate",
	"cuStreamDestroy":           "cuStreamDestroy_v2",
	"cuStreamSynchronize":       "cuStreamSynchronize",
	"cuStreamWaitEvent":         "cuStreamWaitEvent",
	"cuEventCreate":             "cuEventCreate",
	"cuEventRecord":             "cuEventRecord",
	"cuEventSynchronize":        "cuEventSynchronize",
	"cuEventElapsedTime":        "cuEventElapsedTime",
	"cuEventDestroy":            "cuEventDestroy_v2",
	"cuModuleLoadDataEx":        "cuModuleLoadDataEx",
	"cuModuleUnload":            "cuModuleUnload",
	"cuModuleGetFunction":       "cuModuleGetFunction",
	"cuLaunchKernel":            "cuLaunchKernel",
}

// Flags and options of the driver API.
const (
	cuMemhostallocPortable = 0x01
	cuStreamNonBlocking    = 0x01
	cuEventDefault         = 0x00

	cuJitInfoLogBuffer           = 3
	cuJitInfoLogBufferSizeBytes  = 4
	cuJitErrorLogBuffer          = 5
	cuJitErrorLogBufferSizeBytes = 6
	cuJitLogVerbose              = 12
	jitLogBytes                  = 16 << 10
	maxKernelArgs                = 64
	scratchBytes                 = 2*jitLogBytes + 4096 + 16*maxKernelArgs
	scratchParams                = 2*jitLogBytes + 4096
	rtldNow                      = 0x2
	rtldGlobal                   = 0x100
	maxErrorName                 = 256
)

// libcuda is the driver reached through purego. Its methods are not safe
// for concurrent use: the executor calls them on its driver thread.
type libcuda struct {
	path string // where libcuda.so.1 was found, from /proc/self/maps

	cuInit                   func(flags uint32) int32
	cuDriverGetVersion       func(v *int32) int32
	cuGetErrorName           func(code int32, s **byte) int32
	cuDeviceGetCount         func(n *int32) int32
	cuDeviceGet              func(d *int32, ordinal int32) int32
	cuDeviceGetName          func(name *byte, n int32, d int32) int32
	cuDeviceGetAttribute     func(v *int32, attr int32, d int32) int32
	cuDeviceTotalMem         func(n *uint64, d int32) int32
	cuDevicePrimaryCtxRetain func(c *uintptr, d int32) int32
	cuDevicePrimaryCtxRel    func(d int32) int32
	cuCtxSetCurrent          func(c uintptr) int32
	cuCtxSynchronize         func() int32
	cuMemGetInfo             func(free, total *uint64) int32
	cuMemAlloc               func(p *uint64, n uint64) int32
	cuMemFree                func(p uint64) int32
	cuMemHostAlloc           func(p *unsafe.Pointer, n uint64, flags uint32) int32
	cuMemFreeHost            func(p unsafe.Pointer) int32
	cuMemcpyHtoDAsync        func(dst uint64, src unsafe.Pointer, n uint64, s uintptr) int32
	cuMemcpyDtoHAsync        func(dst unsafe.Pointer, src uint64, n uint64, s uintptr) int32
	cuMemcpyDtoDAsync        func(dst, src uint64, n uint64, s uintptr) int32
	cuMemsetD8Async          func(dst uint64, v uint8, n uint64, s uintptr) int32
	cuStreamCreate           func(s *uintptr, flags uint32) int32
	cuStreamDestroy          func(s uintptr) int32
	cuStreamSynchronize      func(s uintptr) int32
	cuStreamWaitEvent        func(s, e uintptr, flags uint32) int32
	cuEventCreate            func(e *uintptr, flags uint32) int32
	cuEventRecord            func(e, s uintptr) int32
	cuEventSynchronize       func(e uintptr) int32
	cuEventElapsedTime       func(ms *float32, start, end uintptr) int32
	cuEventDestroy           func(e uintptr) int32
	cuModuleLoadDataEx       func(m *uintptr, image unsafe.Pointer, n uint32, opts unsafe.Pointer, vals unsafe.Pointer) int32
	cuModuleUnload           func(m uintptr) int32
	cuModuleGetFunction      func(f *uintptr, m uintptr, name *byte) int32
	cuLaunchKernel           func(f uintptr, gx, gy, gz, bx, by, bz, shared uint32, s uintptr, params, extra unsafe.Pointer) int32

	// scratch is page-locked memory for the JIT logs and the kernel
	// parameters, allocated at the first use (a context must be current).
	scratch hostMem
}

var (
	dlOnce sync.Once
	dlLib  uintptr
	dlErr  error
)

// openLibcuda loads libcuda.so.1 and resolves every entry point. It fails
// with executor.ErrUnavailable when the library is not found or lacks an
// entry point.
func openLibcuda() (driver, error) {
	dlOnce.Do(func() {
		dlLib, dlErr = purego.Dlopen(libName, rtldNow|rtldGlobal)
	})
	if dlErr != nil {
		return nil, &Error{Kind: executor.ErrUnavailable, Msg: "cannot load " + libName, Err: dlErr}
	}
	return bindLibcuda(dlLib, loadedPath(libName), libName)
}

// bindLibcuda resolves every entry point in the loaded library lib (name
// for the errors; path, where it was loaded from). The tests bind the
// driver emulator of testdata/emu through it.
func bindLibcuda(lib uintptr, path, name string) (*libcuda, error) {
	l := &libcuda{path: path}
	bind := []struct {
		api string
		fn  any
	}{
		{"cuInit", &l.cuInit}, {"cuDriverGetVersion", &l.cuDriverGetVersion},
		{"cuGetErrorName", &l.cuGetErrorName}, {"cuDeviceGetCount", &l.cuDeviceGetCount},
		{"cuDeviceGet", &l.cuDeviceGet}, {"cuDeviceGetName", &l.cuDeviceGetName},
		{"cuDeviceGetAttribute", &l.cuDeviceGetAttribute}, {"cuDeviceTotalMem", &l.cuDeviceTotalMem},
		{"cuDevicePrimaryCtxRetain", &l.cuDevicePrimaryCtxRetain}, {"cuDevicePrimaryCtxRelease", &l.cuDevicePrimaryCtxRel},
		{"cuCtxSetCurrent", &l.cuCtxSetCurrent}, {"cuCtxSynchronize", &l.cuCtxSynchronize},
		{"cuMemGetInfo", &l.cuMemGetInfo}, {"cuMemAlloc", &l.cuMemAlloc}, {"cuMemFree", &l.cuMemFree},
		{"cuMemHostAlloc", &l.cuMemHostAlloc}, {"cuMemFreeHost", &l.cuMemFreeHost},
		{"cuMemcpyHtoDAsync", &l.cuMemcpyHtoDAsync}, {"cuMemcpyDtoHAsync", &l.cuMemcpyDtoHAsync},
		{"cuMemcpyDtoDAsync", &l.cuMemcpyDtoDAsync}, {"cuMemsetD8Async", &l.cuMemsetD8Async},
		{"cuStreamCreate", &l.cuStreamCreate}, {"cuStreamDestroy", &l.cuStreamDestroy},
		{"cuStreamSynchronize", &l.cuStreamSynchronize}, {"cuStreamWaitEvent", &l.cuStreamWaitEvent},
		{"cuEventCreate", &l.cuEventCreate}, {"cuEventRecord", &l.cuEventRecord},
		{"cuEventSynchronize", &l.cuEventSynchronize}, {"cuEventElapsedTime", &l.cuEventElapsedTime},
		{"cuEventDestroy", &l.cuEventDestroy}, {"cuModuleLoadDataEx", &l.cuModuleLoadDataEx},
		{"cuModuleUnload", &l.cuModuleUnload}, {"cuModuleGetFunction", &l.cuModuleGetFunction},
		{"cuLaunchKernel", &l.cuLaunchKernel},
	}
	for _, b := range bind {
		sym := symbols[b.api]
		p, err := purego.Dlsym(lib, sym)
		if err != nil || p == 0 {
			return nil, &Error{Kind: executor.ErrUnavailable, Call: sym, Msg: name + " lacks this entry point (a driver older than CUDA 12.0?)", Err: err}
		}
		purego.RegisterFunc(b.fn, p)
	}
	return l, nil
}

// loadedPath returns the file the dynamic loader mapped for lib, read from
// /proc/self/maps ("" when not found).
func loadedPath(lib string) string {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if i := strings.IndexByte(line, '/'); i >= 0 && strings.Contains(line[i:], "/"+strings.TrimSuffix(lib, ".1")) {
			return line[i:]
		}
	}
	return ""
}

// location returns the file the library was loaded from.
func (l *libcuda) location() string { return l.path }

// check turns a CUresult into nil or a *Error naming the call and the
// driver's name for the code.
func (l *libcuda) check(call string, r int32) error {
	if r == cudaSuccess {
		return nil
	}
	return driverError(call, int(r), l.errorName(r))
}

// errorName returns cuGetErrorName's name for a code ("" when the driver
// does not know it).
func (l *libcuda) errorName(r int32) string {
	var p *byte
	if l.cuGetErrorName(r, &p) != cudaSuccess || p == nil {
		return ""
	}
	return cString(unsafe.Pointer(p), maxErrorName)
}

// cString reads a NUL-terminated C string of at most max bytes.
func cString(p unsafe.Pointer, max int) string {
	var b []byte
	for i := 0; i < max; i++ {
		c := *(*byte)(unsafe.Add(p, i))
		if c == 0 {
			break
		}
		b = append(b, c)
	}
	return string(b)
}

func (l *libcuda) Init() error { return l.check("cuInit", l.cuInit(0)) }

func (l *libcuda) DriverVersion() (int, error) {
	var v int32
	err := l.check("cuDriverGetVersion", l.cuDriverGetVersion(&v))
	return int(v), err
}

func (l *libcuda) DeviceCount() (int, error) {
	var n int32
	err := l.check("cuDeviceGetCount", l.cuDeviceGetCount(&n))
	return int(n), err
}

func (l *libcuda) DeviceGet(ordinal int) (cuDevice, error) {
	var d int32
	err := l.check("cuDeviceGet", l.cuDeviceGet(&d, int32(ordinal)))
	return cuDevice(d), err
}

func (l *libcuda) DeviceName(d cuDevice) (string, error) {
	var buf [256]byte
	if err := l.check("cuDeviceGetName", l.cuDeviceGetName(&buf[0], int32(len(buf)), int32(d))); err != nil {
		return "", err
	}
	return cString(unsafe.Pointer(&buf[0]), len(buf)), nil
}

func (l *libcuda) DeviceAttribute(attr int, d cuDevice) (int, error) {
	var v int32
	err := l.check("cuDeviceGetAttribute", l.cuDeviceGetAttribute(&v, int32(attr), int32(d)))
	return int(v), err
}

func (l *libcuda) DeviceTotalMem(d cuDevice) (int64, error) {
	var n uint64
	err := l.check("cuDeviceTotalMem_v2", l.cuDeviceTotalMem(&n, int32(d)))
	return int64(n), err
}

func (l *libcuda) PrimaryCtxRetain(d cuDevice) (cuContext, error) {
	var c uintptr
	err := l.check("cuDevicePrimaryCtxRetain", l.cuDevicePrimaryCtxRetain(&c, int32(d)))
	return cuContext(c), err
}

func (l *libcuda) PrimaryCtxRelease(d cuDevice) error {
	return l.check("cuDevicePrimaryCtxRelease_v2", l.cuDevicePrimaryCtxRel(int32(d)))
}

func (l *libcuda) CtxSetCurrent(c cuContext) error {
	return l.check("cuCtxSetCurrent", l.cuCtxSetCurrent(uintptr(c)))
}

func (l *libcuda) CtxSynchronize() error { return l.check("cuCtxSynchronize", l.cuCtxSynchronize()) }

func (l *libcuda) MemGetInfo() (free, total int64, err error) {
	var f, t uint64
	err = l.check("cuMemGetInfo_v2", l.cuMemGetInfo(&f, &t))
	return int64(f), int64(t), err
}

func (l *libcuda) MemAlloc(n int64) (devPtr, error) {
	var p uint64
	err := l.check("cuMemAlloc_v2", l.cuMemAlloc(&p, uint64(n)))
	return devPtr(p), err
}

func (l *libcuda) MemFree(p devPtr) error { return l.check("cuMemFree_v2", l.cuMemFree(uint64(p))) }

func (l *libcuda) MemHostAlloc(n int64) (hostMem, error) {
	var p unsafe.Pointer
	if err := l.check("cuMemHostAlloc", l.cuMemHostAlloc(&p, uint64(n), cuMemhostallocPortable)); err != nil {
		return hostMem{}, err
	}
	return hostMem{p: p, n: n}, nil
}

func (l *libcuda) MemFreeHost(h hostMem) error {
	return l.check("cuMemFreeHost", l.cuMemFreeHost(h.p))
}

// hostRange checks that [off, off+n) lies in h and returns its address.
func hostRange(call string, h hostMem, off, n int64) (unsafe.Pointer, error) {
	if h.p == nil || off < 0 || n < 0 || off > h.n || n > h.n-off {
		return nil, &Error{Kind: executor.ErrArgument, Call: call, Msg: "host range " + strconv.FormatInt(off, 10) + "+" +
			strconv.FormatInt(n, 10) + " outside a pinned buffer of " + strconv.FormatInt(h.n, 10) + " bytes"}
	}
	return unsafe.Add(h.p, off), nil
}

func (l *libcuda) MemcpyHtoDAsync(dst devPtr, src hostMem, off, n int64, s cuStream) error {
	p, err := hostRange("cuMemcpyHtoDAsync_v2", src, off, n)
	if err != nil {
		return err
	}
	return l.check("cuMemcpyHtoDAsync_v2", l.cuMemcpyHtoDAsync(uint64(dst), p, uint64(n), uintptr(s)))
}

func (l *libcuda) MemcpyDtoHAsync(dst hostMem, off int64, src devPtr, n int64, s cuStream) error {
	p, err := hostRange("cuMemcpyDtoHAsync_v2", dst, off, n)
	if err != nil {
		return err
	}
	return l.check("cuMemcpyDtoHAsync_v2", l.cuMemcpyDtoHAsync(p, uint64(src), uint64(n), uintptr(s)))
}

func (l *libcuda) MemcpyDtoDAsync(dst, src devPtr, n int64, s cuStream) error {
	return l.check("cuMemcpyDtoDAsync_v2", l.cuMemcpyDtoDAsync(uint64(dst), uint64(src), uint64(n), uintptr(s)))
}

func (l *libcuda) MemsetD8Async(dst devPtr, v byte, n int64, s cuStream) error {
	return l.check("cuMemsetD8Async", l.cuMemsetD8Async(uint64(dst), v, uint64(n), uintptr(s)))
}

func (l *libcuda) StreamCreate() (cuStream, error) {
	var s uintptr
	err := l.check("cuStreamCreate", l.cuStreamCreate(&s, cuStreamNonBlocking))
	return cuStream(s), err
}

func (l *libcuda) StreamDestroy(s cuStream) error {
	return l.check("cuStreamDestroy_v2", l.cuStreamDestroy(uintptr(s)))
}

func (l *libcuda) StreamSynchronize(s cuStream) error {
	return l.check("cuStreamSynchronize", l.cuStreamSynchronize(uintptr(s)))
}

func (l *libcuda) StreamWaitEvent(s cuStream, e cuEvent) error {
	return l.check("cuStreamWaitEvent", l.cuStreamWaitEvent(uintptr(s), uintptr(e), 0))
}

func (l *libcuda) EventCreate() (cuEvent, error) {
	var e uintptr
	err := l.check("cuEventCreate", l.cuEventCreate(&e, cuEventDefault))
	return cuEvent(e), err
}

func (l *libcuda) EventRecord(e cuEvent, s cuStream) error {
	return l.check("cuEventRecord", l.cuEventRecord(uintptr(e), uintptr(s)))
}

func (l *libcuda) EventSynchronize(e cuEvent) error {
	return l.check("cuEventSynchronize", l.cuEventSynchronize(uintptr(e)))
}

func (l *libcuda) EventElapsed(start, end cuEvent) (float32, error) {
	var ms float32
	err := l.check("cuEventElapsedTime", l.cuEventElapsedTime(&ms, uintptr(start), uintptr(end)))
	return ms, err
}

func (l *libcuda) EventDestroy(e cuEvent) error {
	return l.check("cuEventDestroy_v2", l.cuEventDestroy(uintptr(e)))
}

// ensureScratch allocates the page-locked scratch memory at first use.
func (l *libcuda) ensureScratch() error {
	if l.scratch.p != nil {
		return nil
	}
	h, err := l.MemHostAlloc(scratchBytes)
	if err != nil {
		return err
	}
	l.scratch = h
	return nil
}

func (l *libcuda) ModuleLoadData(image []byte) (cuModule, error) {
	if err := l.ensureScratch(); err != nil {
		return 0, err
	}
	// The image must end in a NUL byte; the JIT writes its logs into the
	// scratch memory and the log sizes back into the option values.
	img := make([]byte, len(image)+1)
	copy(img, image)
	sc := l.scratch.bytes()
	clear(sc[:2*jitLogBytes])
	errLog := unsafe.Pointer(&sc[0])
	infoLog := unsafe.Pointer(&sc[jitLogBytes])
	opts := sc[2*jitLogBytes : 2*jitLogBytes+5*4]
	vals := sc[2*jitLogBytes+32 : 2*jitLogBytes+32+5*8]
	for i, o := range []uint32{cuJitErrorLogBuffer, cuJitErrorLogBufferSizeBytes, cuJitInfoLogBuffer, cuJitInfoLogBufferSizeBytes, cuJitLogVerbose} {
		binary.LittleEndian.PutUint32(opts[4*i:], o)
	}
	for i, v := range []uint64{uint64(uintptr(errLog)), jitLogBytes, uint64(uintptr(infoLog)), jitLogBytes, 0} {
		binary.LittleEndian.PutUint64(vals[8*i:], v)
	}
	var m uintptr
	r := l.cuModuleLoadDataEx(&m, unsafe.Pointer(&img[0]), 5, unsafe.Pointer(&opts[0]), unsafe.Pointer(&vals[0]))
	if err := l.check("cuModuleLoadDataEx", r); err != nil {
		e := err.(*Error)
		e.Msg = "the PTX module failed to load"
		e.Log = cString(errLog, jitLogBytes)
		if info := cString(infoLog, jitLogBytes); info != "" {
			e.Log = strings.TrimRight(e.Log, "\n") + "\n" + info
		}
		return 0, e
	}
	return cuModule(m), nil
}

func (l *libcuda) ModuleUnload(m cuModule) error {
	return l.check("cuModuleUnload", l.cuModuleUnload(uintptr(m)))
}

func (l *libcuda) ModuleGetFunction(m cuModule, name string) (cuFunction, error) {
	b := append([]byte(name), 0)
	var f uintptr
	err := l.check("cuModuleGetFunction", l.cuModuleGetFunction(&f, uintptr(m), &b[0]))
	if err != nil {
		err.(*Error).Msg = "kernel " + strconv.Quote(name)
	}
	return cuFunction(f), err
}

func (l *libcuda) LaunchKernel(f cuFunction, grid, block [3]uint32, sharedBytes uint32, s cuStream, args []uint64) error {
	if len(args) > maxKernelArgs {
		return &Error{Kind: executor.ErrArgument, Call: "cuLaunchKernel", Msg: strconv.Itoa(len(args)) + " kernel parameters, at most " + strconv.Itoa(maxKernelArgs)}
	}
	if err := l.ensureScratch(); err != nil {
		return err
	}
	// The parameter values, then the array of their addresses, in pinned
	// memory: the driver copies the values before cuLaunchKernel returns.
	sc := l.scratch.bytes()[scratchParams:]
	base := uintptr(unsafe.Pointer(&sc[0]))
	ptrs := sc[8*maxKernelArgs:]
	for i, a := range args {
		binary.LittleEndian.PutUint64(sc[8*i:], a)
		binary.LittleEndian.PutUint64(ptrs[8*i:], uint64(base)+uint64(8*i))
	}
	// No stale pointer of an earlier launch stands in for a parameter
	// missing from args.
	clear(ptrs[8*len(args) : 8*maxKernelArgs])
	var params unsafe.Pointer
	if len(args) > 0 {
		params = unsafe.Pointer(&ptrs[0])
	}
	return l.check("cuLaunchKernel", l.cuLaunchKernel(uintptr(f), grid[0], grid[1], grid[2], block[0], block[1], block[2], sharedBytes, uintptr(s), params, nil))
}

func (l *libcuda) Close() error {
	if l.scratch.p == nil {
		return nil
	}
	err := l.MemFreeHost(l.scratch)
	l.scratch = hostMem{}
	return err
}
