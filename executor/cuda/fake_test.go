package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/executor"
)

// fakeDriver is a driver for tests: device memory is Go memory (copies
// move real bytes), allocations are counted, any call can be made to fail,
// and a few kernels (ck_convert for F32/BF16/F16 sources, ck_add,
// ck_count_nonfinite) are emulated with packages dtype; other launches are
// recorded only.
type fakeDriver struct {
	mu       sync.Mutex
	devices  int
	name     string
	cc       [2]int
	version  int
	total    int64
	freeMem  int64
	next     devPtr
	dev      map[devPtr][]byte
	host     map[unsafe.Pointer][]byte
	retained int
	modules  []string // .target of each module loaded
	launches []fakeLaunch
	fail     map[string]int // entry point → fail its nth call from now (1: the next)
	calls    map[string]int
	jitLog   string
	tids     map[int]bool
	closed   bool
}

type fakeLaunch struct {
	kernel string
	grid   [3]uint32
	args   []uint64
}

var kernelOf = map[cuFunction]string{}

func newFake() *fakeDriver {
	return &fakeDriver{devices: 1, name: "Fake GPU", cc: [2]int{8, 9}, version: 12040, total: 8 << 30, freeMem: 6 << 30,
		next: 0x100000, dev: map[devPtr][]byte{}, host: map[unsafe.Pointer][]byte{}, fail: map[string]int{},
		calls: map[string]int{}, tids: map[int]bool{}}
}

// call records a call of an entry point and returns its injected failure.
func (f *fakeDriver) call(name string) error {
	if runtime.GOOS == "linux" {
		f.tids[gettid()] = true
	}
	f.calls[name]++
	if n, ok := f.fail[name]; ok {
		if n <= 1 {
			delete(f.fail, name)
			code := 999
			if name == "MemAlloc" || name == "MemHostAlloc" {
				code = cudaErrorOutOfMemory
			}
			return driverError(name, code, fakeErrName(code))
		}
		f.fail[name] = n - 1
	}
	return nil
}

func fakeErrName(code int) string {
	switch code {
	case cudaErrorOutOfMemory:
		return "CUDA_ERROR_OUT_OF_MEMORY"
	case cudaErrorInvalidPTX:
		return "CUDA_ERROR_INVALID_PTX"
	}
	return "CUDA_ERROR_UNKNOWN"
}

// liveDevice and liveHost count the allocations not freed.
func (f *fakeDriver) liveDevice() int { f.mu.Lock(); defer f.mu.Unlock(); return len(f.dev) }
func (f *fakeDriver) liveHost() int   { f.mu.Lock(); defer f.mu.Unlock(); return len(f.host) }

func (f *fakeDriver) lock(name string) (func(), error) {
	f.mu.Lock()
	return f.mu.Unlock, f.call(name)
}

func (f *fakeDriver) Init() error { u, err := f.lock("Init"); defer u(); return err }
func (f *fakeDriver) DriverVersion() (int, error) {
	u, err := f.lock("DriverVersion")
	defer u()
	return f.version, err
}
func (f *fakeDriver) DeviceCount() (int, error) {
	u, err := f.lock("DeviceCount")
	defer u()
	return f.devices, err
}
func (f *fakeDriver) DeviceGet(o int) (cuDevice, error) {
	u, err := f.lock("DeviceGet")
	defer u()
	return cuDevice(o), err
}
func (f *fakeDriver) DeviceName(cuDevice) (string, error) {
	u, err := f.lock("DeviceName")
	defer u()
	return f.name, err
}
func (f *fakeDriver) DeviceAttribute(a int, _ cuDevice) (int, error) {
	u, err := f.lock("DeviceAttribute")
	defer u()
	switch a {
	case attrComputeCapMajor:
		return f.cc[0], err
	case attrComputeCapMinor:
		return f.cc[1], err
	case attrMultiprocessorCount:
		return 4, err
	}
	return 0, err
}
func (f *fakeDriver) DeviceTotalMem(cuDevice) (int64, error) {
	u, err := f.lock("DeviceTotalMem")
	defer u()
	return f.total, err
}
func (f *fakeDriver) PrimaryCtxRetain(cuDevice) (cuContext, error) {
	u, err := f.lock("PrimaryCtxRetain")
	defer u()
	if err == nil {
		f.retained++
	}
	return 1, err
}
func (f *fakeDriver) PrimaryCtxRelease(cuDevice) error {
	u, err := f.lock("PrimaryCtxRelease")
	defer u()
	f.retained--
	return err
}
func (f *fakeDriver) CtxSetCurrent(cuContext) error {
	u, err := f.lock("CtxSetCurrent")
	defer u()
	return err
}
func (f *fakeDriver) CtxSynchronize() error {
	u, err := f.lock("CtxSynchronize")
	defer u()
	return err
}
func (f *fakeDriver) MemGetInfo() (int64, int64, error) {
	u, err := f.lock("MemGetInfo")
	defer u()
	return f.freeMem, f.total, err
}
func (f *fakeDriver) MemAlloc(n int64) (devPtr, error) {
	u, err := f.lock("MemAlloc")
	defer u()
	if err != nil {
		return 0, err
	}
	p := f.next
	f.dev[p] = make([]byte, n)
	f.next += devPtr((n + 4095) &^ 4095)
	return p, nil
}
func (f *fakeDriver) MemFree(p devPtr) error {
	u, err := f.lock("MemFree")
	defer u()
	if _, ok := f.dev[p]; !ok {
		return &Error{Kind: executor.ErrDevice, Call: "MemFree", Code: 1, Name: "CUDA_ERROR_INVALID_VALUE", Msg: fmt.Sprintf("%#x not allocated", p)}
	}
	delete(f.dev, p)
	return err
}
func (f *fakeDriver) MemHostAlloc(n int64) (hostMem, error) {
	u, err := f.lock("MemHostAlloc")
	defer u()
	if err != nil {
		return hostMem{}, err
	}
	b := make([]byte, n)
	p := unsafe.Pointer(&b[0])
	f.host[p] = b
	return hostMem{p: p, n: n}, nil
}
func (f *fakeDriver) MemFreeHost(h hostMem) error {
	u, err := f.lock("MemFreeHost")
	defer u()
	if _, ok := f.host[h.p]; !ok {
		return &Error{Kind: executor.ErrDevice, Call: "MemFreeHost", Code: 1, Name: "CUDA_ERROR_INVALID_VALUE"}
	}
	delete(f.host, h.p)
	return err
}

// mem returns the device bytes [p, p+n), which must lie in one allocation.
func (f *fakeDriver) mem(p devPtr, n int64) ([]byte, error) {
	for base, b := range f.dev {
		if p >= base && int64(p-base)+n <= int64(len(b)) {
			return b[p-base : int64(p-base)+n], nil
		}
	}
	return nil, &Error{Kind: executor.ErrDevice, Call: "memory", Code: 700, Name: "CUDA_ERROR_ILLEGAL_ADDRESS", Msg: fmt.Sprintf("%#x+%d", p, n)}
}

// pinned checks that h is memory of MemHostAlloc: the fake refuses any
// other host memory in an asynchronous copy.
func (f *fakeDriver) pinned(h hostMem, off, n int64) ([]byte, error) {
	b, ok := f.host[h.p]
	if !ok || off < 0 || off+n > int64(len(b)) {
		return nil, &Error{Kind: executor.ErrDevice, Call: "async copy", Code: 1, Name: "CUDA_ERROR_INVALID_VALUE", Msg: "host memory not from MemHostAlloc"}
	}
	return b[off : off+n], nil
}

func (f *fakeDriver) MemcpyHtoDAsync(dst devPtr, src hostMem, off, n int64, _ cuStream) error {
	u, err := f.lock("MemcpyHtoDAsync")
	defer u()
	if err != nil {
		return err
	}
	s, err := f.pinned(src, off, n)
	if err != nil {
		return err
	}
	d, err := f.mem(dst, n)
	if err != nil {
		return err
	}
	copy(d, s)
	return nil
}
func (f *fakeDriver) MemcpyDtoHAsync(dst hostMem, off int64, src devPtr, n int64, _ cuStream) error {
	u, err := f.lock("MemcpyDtoHAsync")
	defer u()
	if err != nil {
		return err
	}
	d, err := f.pinned(dst, off, n)
	if err != nil {
		return err
	}
	s, err := f.mem(src, n)
	if err != nil {
		return err
	}
	copy(d, s)
	return nil
}
func (f *fakeDriver) MemcpyDtoDAsync(dst, src devPtr, n int64, _ cuStream) error {
	u, err := f.lock("MemcpyDtoDAsync")
	defer u()
	if err != nil {
		return err
	}
	s, err1 := f.mem(src, n)
	d, err2 := f.mem(dst, n)
	if err1 != nil || err2 != nil {
		return fmt.Errorf("%v %v", err1, err2)
	}
	copy(d, s)
	return nil
}
func (f *fakeDriver) MemsetD8Async(dst devPtr, v byte, n int64, _ cuStream) error {
	u, err := f.lock("MemsetD8Async")
	defer u()
	if err != nil {
		return err
	}
	d, err := f.mem(dst, n)
	for i := range d {
		d[i] = v
	}
	return err
}
func (f *fakeDriver) StreamCreate() (cuStream, error) {
	u, err := f.lock("StreamCreate")
	defer u()
	return 7, err
}
func (f *fakeDriver) StreamDestroy(cuStream) error {
	u, err := f.lock("StreamDestroy")
	defer u()
	return err
}
func (f *fakeDriver) StreamSynchronize(cuStream) error {
	u, err := f.lock("StreamSynchronize")
	defer u()
	return err
}
func (f *fakeDriver) StreamWaitEvent(cuStream, cuEvent) error {
	u, err := f.lock("StreamWaitEvent")
	defer u()
	return err
}
func (f *fakeDriver) EventCreate() (cuEvent, error) {
	u, err := f.lock("EventCreate")
	defer u()
	return 9, err
}
func (f *fakeDriver) EventRecord(cuEvent, cuStream) error {
	u, err := f.lock("EventRecord")
	defer u()
	return err
}
func (f *fakeDriver) EventSynchronize(cuEvent) error {
	u, err := f.lock("EventSynchronize")
	defer u()
	return err
}
func (f *fakeDriver) EventElapsed(cuEvent, cuEvent) (float32, error) {
	u, err := f.lock("EventElapsed")
	defer u()
	return 1, err
}
func (f *fakeDriver) EventDestroy(cuEvent) error {
	u, err := f.lock("EventDestroy")
	defer u()
	return err
}
func (f *fakeDriver) ModuleLoadData(image []byte) (cuModule, error) {
	u, err := f.lock("ModuleLoadData")
	defer u()
	if err != nil {
		e := err.(*Error)
		e.Kind, e.Code, e.Name, e.Msg, e.Log = executor.ErrDevice, cudaErrorInvalidPTX, fakeErrName(cudaErrorInvalidPTX), "the PTX module failed to load", f.jitLog
		return 0, e
	}
	_, target, perr := ptxHeader(string(image))
	if perr != nil {
		return 0, &Error{Kind: executor.ErrDevice, Call: "ModuleLoadData", Code: cudaErrorInvalidPTX, Msg: "the PTX module failed to load", Log: perr.Error()}
	}
	f.modules = append(f.modules, target)
	return cuModule(len(f.modules)), nil
}
func (f *fakeDriver) ModuleUnload(cuModule) error {
	u, err := f.lock("ModuleUnload")
	defer u()
	return err
}
func (f *fakeDriver) ModuleGetFunction(m cuModule, name string) (cuFunction, error) {
	u, err := f.lock("ModuleGetFunction")
	defer u()
	fn := cuFunction(len(kernelOf) + 1)
	for k, v := range kernelOf {
		if v == name {
			fn = k
		}
	}
	kernelOf[fn] = name
	return fn, err
}
func (f *fakeDriver) Close() error { f.closed = true; return nil }

var codeDType = map[uint64]dtype.DType{ckF32: dtype.F32, ckBF16: dtype.BF16, ckF16: dtype.F16}

func (f *fakeDriver) LaunchKernel(fn cuFunction, grid, block [3]uint32, _ uint32, _ cuStream, args []uint64) error {
	u, err := f.lock("LaunchKernel")
	defer u()
	if err != nil {
		return err
	}
	name := kernelOf[fn]
	f.launches = append(f.launches, fakeLaunch{kernel: name, grid: grid, args: append([]uint64(nil), args...)})
	bytesOf := func(p uint64, dt dtype.DType, n int64) ([]byte, error) { return f.mem(devPtr(p), n*int64(dt.Bits())/8) }
	switch name {
	case kConvert: // src, sdt, tab, dst, to, sat, e0, n
		from, ok := codeDType[args[1]]
		if !ok {
			return nil
		}
		to := codeDType[args[4]]
		n, e0 := int64(args[7]), int64(args[6])
		src, err := bytesOf(args[0], from, n)
		if err != nil {
			return err
		}
		dst, err := f.mem(devPtr(args[3])+devPtr(e0*int64(to.Bits())/8), n*int64(to.Bits())/8)
		if err != nil {
			return err
		}
		_, err = dtype.Convert(dst, to, src, from, dtype.Options{Saturate: args[5] != 0})
		return err
	case kAdd: // a, adt, b, bdt, out, odt, n
		n := int64(args[6])
		var vals [2][]float32
		for i := range 2 {
			dt := codeDType[args[2*i+1]]
			b, err := bytesOf(args[2*i], dt, n)
			if err != nil {
				return err
			}
			vals[i] = make([]float32, n)
			dtype.DecodeFloat32(vals[i], b, dt)
		}
		for i := range vals[0] {
			vals[0][i] += vals[1][i]
		}
		dt := codeDType[args[5]]
		out, err := bytesOf(args[4], dt, n)
		if err != nil {
			return err
		}
		_, err = dtype.EncodeFloat32(out, dt, vals[0], dtype.Options{})
		return err
	case kNonFinite: // p, dt, n, counts
		dt, n := codeDType[args[1]], int64(args[2])
		b, err := bytesOf(args[0], dt, n)
		if err != nil {
			return err
		}
		v := make([]float32, n)
		dtype.DecodeFloat32(v, b, dt)
		c, err := f.mem(devPtr(args[3]), 16)
		if err != nil {
			return err
		}
		nan, inf := binary.LittleEndian.Uint64(c), binary.LittleEndian.Uint64(c[8:])
		for _, x := range v {
			switch {
			case x != x:
				nan++
			case math.IsInf(float64(x), 0):
				inf++
			}
		}
		binary.LittleEndian.PutUint64(c, nan)
		binary.LittleEndian.PutUint64(c[8:], inf)
	}
	return nil
}

// launched returns the names of the kernels launched.
func (f *fakeDriver) launched() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var s []string
	for _, l := range f.launches {
		s = append(s, l.kernel)
	}
	return strings.Join(s, " ")
}
